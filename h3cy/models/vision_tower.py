"""h3cy.models.vision_tower — the Qwen3-VL vision tower of MiniMax-H3's prompt encoder (the
``model.visual.*`` tensors of ``text_encoder/``, 595M parameters at release size): a
keyframe's patches -> its vision-token embeddings and the deepstack features that the text
stack adds after its first layers.  Op order (transformers 5.17 ``Qwen3VLVisionModel``):

1. patch embedding: each patch row ``[3 * temporal_patch * patch^2]`` times the Conv3d
   kernel (stride = kernel, so one GEMM) plus its bias;
2. plus the learned ``sqrt(P) x sqrt(P)`` position grid resampled bilinearly
   (align_corners) to the image's patch grid (:func:`pos_interp`);
3. ``depth`` blocks: LayerNorm, q/k/v (+bias), 2-D RoPE (row angles on the first half of
   each head's rotated pairs, column angles on the second), attention within each image,
   proj (+bias) + residual; LayerNorm, fc1 (+bias), GELU (tanh), fc2 (+bias) + residual;
4. after the blocks listed in ``deepstack_visual_indexes``, a deepstack merger (LayerNorm
   over 4 merged patches, fc1, exact GELU, fc2); after the last block the final merger
   (LayerNorm per patch, then the same).

The arithmetic runs in C (``csrc/models/qwen_vision.c``, one call per block or merger);
here are the checks, the index tables and the weights.  Weights modes as the text encoder
(:mod:`h3cy.models.text_encoder`); in bf16 every activation is rounded where
transformers' bf16 model rounds it.
"""
import os

import numpy as np

from .. import _kernels
from ..errors import CheckpointError, H3ValueError
from ..ops.bf16 import bf16_bits_to_f32, round_bf16
from ..weights.files import TensorFiles, find_weights, load_json
from .._progress import Ticker
from .mrope import rope_inv_freq

PREFIX = "model.visual."
EPS = 1e-6                 # every LayerNorm of the tower (transformers hard-codes it)


def _err(path, msg):
    return CheckpointError(f"{path}: {msg}")


class VisionConfig:
    """The fields of ``config.json``'s ``vision_config`` (and the vision token ids) used."""

    def __init__(self, d, path):
        vc = d.get("vision_config") if isinstance(d, dict) else None
        if not isinstance(vc, dict):
            raise _err(path, "config.json has no vision_config object (this text encoder has no vision tower)")

        def need(name, default=None):
            v = vc.get(name, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _err(path, f"vision_config.{name} must be a positive int, got {v!r}")
            return v

        self.depth = need("depth", 27)
        self.hidden_size = need("hidden_size", 1152)
        self.intermediate_size = need("intermediate_size", 4304)
        self.num_heads = need("num_heads", 16)
        self.in_channels = need("in_channels", 3)
        self.patch_size = need("patch_size", 16)
        self.temporal_patch_size = need("temporal_patch_size", 2)
        self.spatial_merge_size = need("spatial_merge_size", 2)
        self.out_hidden_size = need("out_hidden_size", 3584)
        self.num_position_embeddings = need("num_position_embeddings", 2304)
        self.deepstack_visual_indexes = list(vc.get("deepstack_visual_indexes", (8, 16, 24)))
        if vc.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            raise _err(path, f"vision_config.hidden_act {vc.get('hidden_act')!r} is not supported (gelu_pytorch_tanh)")
        rp = vc.get("rope_parameters") or {}
        self.rope_theta = float(rp.get("rope_theta", 10000.0))
        C, H = self.hidden_size, self.num_heads
        side = int(round(self.num_position_embeddings ** 0.5))
        if C % H or (C // H) % 4 or C // H > 256 or side * side != self.num_position_embeddings or self.in_channels != 3:
            raise _err(path, f"unsupported vision geometry: hidden {C}, heads {H} (head_dim a multiple of 4, "
                             f"<= 256), {self.num_position_embeddings} position embeddings (a square), "
                             f"{self.in_channels} input channels (3)")
        self.grid_side = side
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.depth
               for i in self.deepstack_visual_indexes):
            raise _err(path, f"vision_config.deepstack_visual_indexes {self.deepstack_visual_indexes} "
                             f"must be block indices < depth {self.depth}")
        self.image_token_id = int(d.get("image_token_id", 151655))
        self.vision_start_token_id = int(d.get("vision_start_token_id", 151652))
        self.vision_end_token_id = int(d.get("vision_end_token_id", 151653))

    @property
    def head_dim(self):
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self):
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2


def patch_coords(grids, merge):
    """(row, col) of every patch of every image, in the processor's merge-block order."""
    rows, cols = [], []
    for t, h, w in grids:
        within = np.tile(np.arange(h * w, dtype=np.int64), t)
        bw = w // merge
        in_col, in_row = within % merge, (within // merge) % merge
        block_col, block_row = (within // (merge * merge)) % bw, within // (merge * merge * bw)
        rows.append(block_row * merge + in_row)
        cols.append(block_col * merge + in_col)
    return np.concatenate(rows), np.concatenate(cols)


def _axis_taps(index, size, side):
    """Bilinear (align_corners) taps and weights into a ``side``-long axis for target positions
    ``index`` of an axis ``size`` long, in float32 as transformers computes them."""
    src = (index.astype(np.float32) * np.float32(side - 1)) / np.maximum(size - 1, 1).astype(np.float32)
    floor = np.floor(src)
    offsets = np.arange(2, dtype=np.float32)
    taps = np.clip(floor.astype(np.int64)[:, None] + np.arange(2), 0, side - 1)
    dist = np.abs((src[:, None] - floor[:, None]) - offsets)
    return taps, np.maximum(np.float32(1) - dist, np.float32(0)).astype(np.float32)


def pos_interp(grids, side, merge):
    """``(idx [N, 4] int64, w [N, 4] float32)``: each patch's four taps into the flattened
    ``side x side`` position table and their weights (transformers'
    get_vision_interpolation_indices_and_weights, bilinear, align_corners)."""
    row, col = patch_coords(grids, merge)
    heights = np.concatenate([np.full(t * h * w, h, np.int64) for t, h, w in grids])
    widths = np.concatenate([np.full(t * h * w, w, np.int64) for t, h, w in grids])
    ht, hw = _axis_taps(row, heights, side)
    wt, ww = _axis_taps(col, widths, side)
    idx = (ht[:, :, None] * side + wt[:, None, :]).reshape(-1, 4)
    w = (hw[:, :, None] * ww[:, None, :]).reshape(-1, 4).astype(np.float32)
    return np.ascontiguousarray(idx), np.ascontiguousarray(w)


def vision_rope(grids, merge, head_dim, theta):
    """cos, sin [N, head_dim/2] of the 2-D RoPE: angles row * f for the first quarter of each
    head's channels' frequencies, col * f for the second (f = theta^(-k / (head_dim/2)))."""
    inv = rope_inv_freq(head_dim // 2, theta)
    row, col = patch_coords(grids, merge)
    ang = np.concatenate([row.astype(np.float32)[:, None] * inv[None, :],
                          col.astype(np.float32)[:, None] * inv[None, :]], axis=1).astype(np.float32)
    return np.ascontiguousarray(np.cos(ang), np.float32), np.ascontiguousarray(np.sin(ang), np.float32)


class VisionTower:
    """The tower's weights in a text encoder's weights mode; :meth:`forward` runs it."""

    @classmethod
    def load(cls, encoder):
        """The vision tower of ``encoder`` (an :class:`h3cy.TextEncoder` read from a folder)."""
        folder = encoder.path
        if os.path.isfile(folder):
            raise _err(folder, "a single-file text encoder carries no vision tower; images need the "
                               "text_encoder/ folder of the release")
        cfg_path = os.path.join(folder, "config.json")
        config = VisionConfig(load_json(cfg_path, "config"), cfg_path)
        if config.out_hidden_size != encoder.config.hidden_size:
            raise _err(cfg_path, f"vision_config.out_hidden_size {config.out_hidden_size} is not the text "
                                 f"hidden size {encoder.config.hidden_size}")
        index, paths = find_weights(folder, ("model.safetensors", "model.safetensors.index.json"))
        files = TensorFiles(paths, index[0] if index else None, lazy=index is not None)
        try:
            return cls(files, config, encoder, folder)
        finally:
            files.close()

    def __init__(self, files, config, encoder, folder):
        self.config = c = config
        self.round_bf16 = encoder.round_bf16
        self._pool = encoder._pool
        self.num_blocks = c.depth
        C, F, K, U = c.hidden_size, c.intermediate_size, c.patch_dim, c.spatial_merge_size ** 2
        missing = [n for n in (PREFIX + "patch_embed.proj.weight", PREFIX + "merger.linear_fc1.weight")
                   if not files.has(n)]
        if missing:
            raise _err(folder, f"no vision tower tensors ({missing[0]} is missing)")

        def get(name, shape):
            return files.get(PREFIX + name, shape)

        def vec(name, n):
            v = _f32(get(name, (n,)))
            return round_bf16(v) if self.round_bf16 else np.ascontiguousarray(v)

        def lin(name, n, k, rows=None):
            w = get(name + ".weight", (n, k) if rows is None else (rows[2], k))
            b = _f32(get(name + ".bias", (n,) if rows is None else (rows[2],)))
            if rows is not None:
                w, b = w[rows[0]:rows[1]], b[rows[0]:rows[1]]
            b = round_bf16(b) if self.round_bf16 else np.ascontiguousarray(b)
            return encoder._linear(np.ascontiguousarray(w), name=None, bias=np.ascontiguousarray(b))

        pw = get("patch_embed.proj.weight", (C, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size))
        pb = _f32(get("patch_embed.proj.bias", (C,)))
        self.patch_embed = encoder._linear(np.ascontiguousarray(pw.reshape(C, K)), name=None,
                                           bias=round_bf16(pb) if self.round_bf16 else np.ascontiguousarray(pb))
        self.pos_table = self._table(get, c)
        self.blocks = []
        self._linears = [self.patch_embed]
        for i in range(c.depth):
            p = f"blocks.{i}."
            q, k, v = (lin(p + "attn.qkv", C, C, rows=(j * C, (j + 1) * C, 3 * C)) for j in range(3))
            proj, fc1, fc2 = lin(p + "attn.proj", C, C), lin(p + "mlp.linear_fc1", F, C), lin(p + "mlp.linear_fc2", C, F)
            norms = [vec(p + n, C) for n in ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")]
            self._linears += [q, k, v, proj, fc1, fc2]
            self.blocks.append(_kernels.QwenVisionBlockCore(q.core, k.core, v.core, proj.core, fc1.core, fc2.core,
                                                            *norms, c.num_heads, self._pool))

        def merger(p, postshuffle):
            fc1, fc2 = lin(p + "linear_fc1", U * C, U * C), lin(p + "linear_fc2", c.out_hidden_size, U * C)
            n = U * C if postshuffle else C
            self._linears += [fc1, fc2]
            return _kernels.QwenVisionMergerCore(fc1.core, fc2.core, vec(p + "norm.weight", n),
                                                 vec(p + "norm.bias", n), C, U, int(postshuffle), self._pool)

        self.merger = merger("merger.", False)
        self.deepstack = [merger(f"deepstack_merger_list.{j}.", True) for j in range(len(c.deepstack_visual_indexes))]
        self._ws = None

    def _table(self, get, c):
        t = _f32(get("pos_embed.weight", (c.num_position_embeddings, c.hidden_size)))
        return round_bf16(t) if self.round_bf16 else np.ascontiguousarray(t)

    def _workspace(self, need):
        if self._ws is None or self._ws.nbytes < need:
            self._ws = None
            self._ws = np.empty(need, np.uint8)
        return self._ws

    def forward(self, pixel_values, grids, on_progress=None, cancel=None):
        """``(embeds [N/4, out_hidden], [deepstack features [N/4, out_hidden], ...])`` of the
        processor's patches ``pixel_values`` [N, patch_dim] (every image's, in order) and their
        ``grids`` [(t, h, w), ...].  on_progress(done, total, "vision") after blocks (throttled,
        always after the last); cancel is checked before each block."""
        c = self.config
        x = np.ascontiguousarray(pixel_values, np.float32)
        grids = [tuple(int(v) for v in g) for g in grids]
        N = sum(t * h * w for t, h, w in grids)
        U = c.spatial_merge_size ** 2
        if x.ndim != 2 or x.shape != (N, c.patch_dim):
            raise H3ValueError(f"pixel_values must be ({N}, {c.patch_dim}) for grids {grids}, got {x.shape}")
        if any(h % c.spatial_merge_size or w % c.spatial_merge_size or t < 1 for t, h, w in grids):
            raise H3ValueError(f"every grid's h and w must be multiples of {c.spatial_merge_size}, got {grids}")
        ticker = Ticker(self.num_blocks, "vision", on_progress, cancel, what="vision tower")
        ticker.check()
        R = int(self.round_bf16)
        if R:
            x = round_bf16(x.copy())
        h = self.patch_embed(x)
        if R:
            round_bf16(h, out=h)
        idx, w = pos_interp(grids, c.grid_side, c.spatial_merge_size)
        _kernels.qvis_pos_add(h, self.pos_table, idx, w, R)
        cos, sin = vision_rope(grids, c.spatial_merge_size, c.head_dim, c.rope_theta)
        seg = np.concatenate([[0], np.cumsum([h_ * w_ for t, h_, w_ in grids for _ in range(t)])]).astype(np.int64)
        deep = []
        for i, blk in enumerate(self.blocks):
            blk.forward(h, seg, cos, sin, EPS, R, self._workspace(blk.workspace_bytes(N)))
            if i in c.deepstack_visual_indexes:
                m = self.deepstack[c.deepstack_visual_indexes.index(i)]
                out = np.empty((N // U, c.out_hidden_size), np.float32)
                m.forward(h, out, EPS, R, self._workspace(m.workspace_bytes(N)))
                deep.append(out)
            ticker.tick()
        out = np.empty((N // U, c.out_hidden_size), np.float32)
        self.merger.forward(h, out, EPS, R, self._workspace(self.merger.workspace_bytes(N)))
        return out, deep


def _f32(a):
    """A stored float tensor (BF16 as uint16 bits) as float32."""
    return bf16_bits_to_f32(a) if a.dtype == np.uint16 else np.ascontiguousarray(a, dtype=np.float32)
