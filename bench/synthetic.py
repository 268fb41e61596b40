"""A weight source of random tensors with the real MiniMax-H3 names and shapes, for
benchmarks and memory measurements without the 66 GB checkpoint.  Same interface as the
checkpoint readers: ``config``, ``get(name)``, ``qkv(prefix)``, ``ffn_up(prefix)``."""
import zlib

import numpy as np

from h3cy.ops.bf16 import f32_to_bf16_bits

FULL_CONFIG = dict(num_attention_heads=56, attention_head_dim=128, hidden_size=5376, num_layers=50,
                   num_refiner_layers=2, ffn_dim=14336, in_channels=24, audio_in_channels=32,
                   patch_size=[1, 2, 2], text_dim=5120, freq_dim=256, time_embed_hidden_dim=5376,
                   time_embed_dim=2688, rope_freq_dim=16, rope_theta=10000.0, norm_eps=1e-5,
                   qk_norm_eps=1e-5, final_norm_eps=1e-5)

_FP32 = ("proj_in.", "audio_proj_in.", "time_embedder.", "proj_out.", "audio_proj_out.")


class SyntheticSource:
    """Random weights (std ``scale``; norm weights ~1) under the diffusers names."""

    def __init__(self, config=None, seed=0, scale=0.02, shared=False, **overrides):
        """shared=True: every tensor of one shape (and kind) is the same random draw, so a
        50-block model's weights are generated in seconds (memory per block is unchanged:
        each linear still converts and holds its own copy)."""
        self.config = dict(FULL_CONFIG if config is None else config)
        self.config.update(overrides)
        self.seed = seed
        self.scale = scale
        self.shared = shared
        self._memo = {}

    def _shape(self, name):
        c = self.config
        H, inner, F = c["hidden_size"], c["num_attention_heads"] * c["attention_head_dim"], c["ffn_dim"]
        pv = c["in_channels"] * int(np.prod(c["patch_size"]))
        tail = name.split(".")[-2:]
        if name.endswith("norm_q.weight") or name.endswith("norm_k.weight"):
            return (c["attention_head_dim"],)
        if tail[0] in ("norm1", "norm2", "final_norm") or name == "norm_out.norm.weight":
            return (H,)
        table = {
            "proj_in.weight": (H, pv), "proj_in.bias": (H,),
            "audio_proj_in.weight": (H, c["audio_in_channels"]), "audio_proj_in.bias": (H,),
            "context_embedder.weight": (H, c["text_dim"]), "context_embedder.bias": (H,),
            "time_embedder.linear_1.weight": (c["time_embed_hidden_dim"], c["freq_dim"]),
            "time_embedder.linear_1.bias": (c["time_embed_hidden_dim"],),
            "time_embedder.linear_2.weight": (c["time_embed_dim"], c["time_embed_hidden_dim"]),
            "time_embedder.linear_2.bias": (c["time_embed_dim"],),
            "norm_out.linear.weight": (2 * H, c["time_embed_dim"]), "norm_out.linear.bias": (2 * H,),
            "proj_out.weight": (pv, H), "proj_out.bias": (pv,),
            "audio_proj_out.weight": (c["audio_in_channels"], H), "audio_proj_out.bias": (c["audio_in_channels"],),
        }
        if name in table:
            return table[name]
        if name.endswith("attn.to_out.0.weight"):
            return (H, inner)
        if name.endswith("ff.net.2.weight"):
            return (H, F)
        if name.endswith("adaln_proj.linear.weight"):
            return (18 * H, c["time_embed_dim"])
        if name.endswith("adaln_proj.linear.bias"):
            return (18 * H,)
        raise KeyError(name)

    def _rand(self, name, shape):
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])  # stable across processes
        is_norm = "norm" in name.split(".")[-2] and name.endswith("weight") and len(shape) == 1
        x = rng.standard_normal(shape, dtype=np.float32)
        x = (1.0 + 0.1 * x) if is_norm else x * np.float32(self.scale)
        return x.astype(np.float32)

    def _out(self, name, x):
        if name.startswith(_FP32):
            return x
        return f32_to_bf16_bits(x)

    def _tensor(self, name, shape):
        if not self.shared:
            return self._out(name, self._rand(name, shape))
        kind = (shape, name.startswith(_FP32), name.split(".")[-2] + name.split(".")[-1])
        if kind not in self._memo:
            self._memo[kind] = self._out(name, self._rand(name, shape))
        return self._memo[kind]

    def get(self, name):
        return self._tensor(name, self._shape(name))

    def qkv(self, prefix):
        c = self.config
        inner = c["num_attention_heads"] * c["attention_head_dim"]
        return self._tensor(prefix + "attn.qkv", (3 * inner, c["hidden_size"])), "stacked"

    def ffn_up(self, prefix):
        c = self.config
        return self._tensor(prefix + "ff.up", (2 * c["ffn_dim"], c["hidden_size"]))
