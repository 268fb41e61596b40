"""A tiny MiniMax-H3 with random weights, in the official release layout, for ``h3cy demo``.

It has the real architecture at toy sizes (a 2-block transformer, a 50-layer text stack of
width 32, a 1-block ViT video decoder, a small BigVGAN audio decoder) and a tokenizer of its
own, trained by ``tokenizers`` on the short text below, so no third-party vocabulary ships
with h3cy.  The weights are random: the demo shows the plumbing (prompt -> text states ->
denoising -> decoders -> MP4), not the model's quality.

The model is built once, deterministically (fixed seeds), into
``$H3CY_CACHE_DIR/demo-model-v2`` (default ``~/.cache/h3cy/demo-model-v2``); a finished build
is marked by a stamp file, so an interrupted build is redone.

The *trained* demo model, when the package carries it (``h3cy/data/demo-model/FL2VA``, made by
``training/train_demo.py``; docs/demo.md), takes the random one's place in ``h3cy demo`` and
``-m demo``: the same architecture at toy size, trained on synthetic shapes -- a coloured
circle, square or triangle moving on a plain background with a panned high or low tone --
so prompts in its small vocabulary (``SHAPES_VOCABULARY``) come out as asked.
``-m demo-random`` always means the random model.
"""
import json
import os
import shutil

import numpy as np

from .ops import bf16 as _bf16
from .weights.st_write import save_file, save_sharded

DEMO_VERSION = 2
DEMO_PROMPT = "A red fox walks through fresh snow in a pine forest, soft footsteps and wind."

# the trained demo model (package data; absent until training/train_demo.py's export is copied in)
TRAINED_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "demo-model")
TRAINED_NOTE = ("a toy model trained on synthetic shapes: a coloured circle, square or triangle moving on a "
                "plain background, with a high or low tone; it knows nothing else")
SHAPES_PROMPT = "a red circle moves to the right, a high tone"
# what the trained model was taught (training/shapes_dataset.py; tests/test_demo_adherence.py checks
# that the two agree)
SHAPES_VOCABULARY = {
    "colours": ("red", "yellow", "green", "cyan", "blue", "magenta"),
    "shapes": ("circle", "square", "triangle"),
    "motions": ("moves to the left", "moves to the right", "moves up", "moves down", "stays still"),
    "sounds": ("a high tone", "a low tone"),
}
# generation settings it was trained for (its model_index.json may override them)
SHAPES_SETTINGS = {"width": 128, "height": 128, "frames": 22, "steps": 16, "shift_video": 3.0, "shift_audio": 3.0}


def vocabulary_text():
    """The trained demo's vocabulary as a few lines (for --help)."""
    v = SHAPES_VOCABULARY
    return ("prompts: 'a <colour> <shape> <motion>, a <high|low> tone', e.g. "
            f"{SHAPES_PROMPT!r}; colours: {', '.join(v['colours'])}; shapes: {', '.join(v['shapes'])}; "
            f"motions: {'; '.join(v['motions'])}; sounds: {'; '.join(v['sounds'])}")


def trained_model(folder=None):
    """The trained demo model's root (holding ``FL2VA/``), or None when the package has none."""
    root = TRAINED_FOLDER if folder is None else os.fspath(folder)
    return root if os.path.isfile(os.path.join(root, "FL2VA", "model_index.json")) else None


def trained_settings(root):
    """Generation settings of a trained demo model: SHAPES_SETTINGS updated from its
    model_index.json (``_minimax_h3.clip`` / ``.sampling``, as the training script wrote them)."""
    out = dict(SHAPES_SETTINGS)
    try:
        with open(os.path.join(root, "FL2VA", "model_index.json"), encoding="utf-8") as f:
            meta = json.load(f).get("_minimax_h3", {})
    except (OSError, ValueError):
        return out
    clip, samp = meta.get("clip", {}), meta.get("sampling", {})
    for k in ("width", "height", "frames"):
        if isinstance(clip.get(k), int):
            out[k] = clip[k]
    for k in ("steps", "shift_video", "shift_audio"):
        if isinstance(samp.get(k), (int, float)):
            out[k] = samp[k]
    return out

# the tokenizer's training text (written for h3cy; any plain English prose would do)
_CORPUS = """
A red fox walks through fresh snow in a pine forest. Medium tracking shot, natural winter light,
realistic fur, soft footsteps and wind. The camera follows a cyclist down a rainy city street at
night; neon signs reflect in puddles and tires hiss on the wet road. Waves roll onto a sandy beach
at sunrise while gulls call overhead and a distant boat horn sounds. A chef chops onions in a busy
kitchen, pans sizzle, plates clatter and someone laughs. Close-up of a violin player in a quiet
hall; the bow moves slowly and the note rings out. Children run across a green field chasing a
kite in the wind. An old train crosses a stone bridge over a river valley, steam rising into the
cold morning air. Rain falls on a tin roof; thunder rolls far away. A woman says hello and smiles
at the camera. Music plays softly in the background: piano, drums, a warm bass line.
"""


def _cache_root(cache_dir=None):
    from . import _config
    return os.fspath(cache_dir) if cache_dir is not None else _config.cache_root()


def _rand(rng, shape, fan_in, gain=1.0):
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(gain / np.sqrt(fan_in))).astype(np.float32)


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)


# ---------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDITIONAL_SPECIAL = ["<|im_start|>", "<|im_end|>", "<d>", "</d>"]


def build_tokenizer(folder, vocab_size=600):
    """Train a byte-level BPE (Qwen2's pre-tokenizer) on the built-in text and save it the
    way the release does: vocab.json + merges.txt + tokenizer_config.json."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from .models.tokenizer import QWEN2_SPLIT_PATTERN
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([line for line in _CORPUS.splitlines() if line.strip()], trainer=trainer)
    os.makedirs(folder, exist_ok=True)
    tok.model.save(folder)                      # vocab.json + merges.txt
    n = tok.get_vocab_size()
    added = {str(n + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True} for i, t in enumerate(SPECIAL_TOKENS)}
    _write_json(os.path.join(folder, "tokenizer_config.json"), {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
        "additional_special_tokens": ADDITIONAL_SPECIAL, "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 262144, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})
    return n + len(SPECIAL_TOKENS) + 2          # + <d>, </d>


# ---------------------------------------------------------------------------------------------
# transformer (release layout: original names, fused per-head interleaved QKV, fc1 = [gate; value])
# ---------------------------------------------------------------------------------------------
DIT_CONFIG = {
    "_class_name": "MiniMaxH3DiTModel", "hidden_size": 64, "num_layers": 2, "token_refiner_num_layers": 1,
    "num_attention_heads": 4, "attention_head_dim": 16, "ffn_hidden_size": 128, "latents_dim": 24,
    "audio_latents_dim": 32, "patch_size": [1, 2, 2], "text_dim": 32, "timestep_input_dim": 32,
    "time_embed_hidden_size": 64, "time_embed_dim": 32, "adaln_out_features": 6 * 3 * 64,
    "final_adaln_out_features": 128, "rope_inv_freq_len": 2, "norm_eps": 1e-05, "qk_norm_eps": 1e-05,
    "final_norm_eps": 1e-05,
}


def build_transformer(folder, rng):
    from .weights.transformer import TransformerConfig, expected_tensors, fp32_in_release
    os.makedirs(folder, exist_ok=True)
    cfg = TransformerConfig.from_dict(DIT_CONFIG)
    arrays, bf16 = {}, set()
    for dname, oname, shape, role in expected_tensors(cfg):
        if oname in arrays:
            continue                              # the fused QKV appears three times
        if role is not None and role[0] == "qkv":
            shape = (3 * cfg.inner_dim, cfg.hidden_size)
        if dname.endswith("norm1.weight") or dname.endswith("norm2.weight") or "norm_" in dname \
                or dname.endswith("final_norm.weight") or dname == "norm_out.norm.weight":
            a = np.ones(shape, np.float32)
        elif len(shape) == 1:
            a = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)
        else:
            gain = 0.3 if "adaln" in dname or "norm_out.linear" in dname else 1.0
            a = _rand(rng, shape, shape[1], gain)
        if fp32_in_release(dname):
            arrays[oname] = a
        else:
            arrays[oname] = _bf16.f32_to_bf16_bits(a)
            bf16.add(oname)
    save_sharded(folder, arrays, 2, stem="model", bf16=bf16)
    _write_json(os.path.join(folder, "config.json"), DIT_CONFIG)


# ---------------------------------------------------------------------------------------------
# text encoder (Qwen3-VL naming as transformers saves it; only what hidden_states[50] reads)
# ---------------------------------------------------------------------------------------------
TE_LAYERS = 50


def te_config(vocab):
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "text_config": {
            "attention_bias": False, "dtype": "bfloat16", "head_dim": 8, "hidden_act": "silu",
            "hidden_size": DIT_CONFIG["text_dim"], "intermediate_size": 64, "model_type": "qwen3_vl_text",
            "num_attention_heads": 4, "num_hidden_layers": TE_LAYERS, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06, "rope_theta": 5000000,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": [2, 1, 1], "rope_type": "default"},
            "vocab_size": vocab, "tie_word_embeddings": False},
        "tie_word_embeddings": False,
    }


def build_text_encoder(folder, rng, vocab):
    os.makedirs(folder, exist_ok=True)
    cfg = te_config(vocab)
    t = cfg["text_config"]
    H, I, D = t["hidden_size"], t["intermediate_size"], t["head_dim"]
    Hq, Hk = t["num_attention_heads"], t["num_key_value_heads"]
    p = "model.language_model."
    arrays = {p + "embed_tokens.weight": rng.standard_normal((vocab, H), dtype=np.float32)}
    for layer in range(TE_LAYERS):
        q = f"{p}layers.{layer}."
        arrays.update({
            q + "input_layernorm.weight": np.ones(H, np.float32),
            q + "self_attn.q_proj.weight": _rand(rng, (Hq * D, H), H),
            q + "self_attn.k_proj.weight": _rand(rng, (Hk * D, H), H),
            q + "self_attn.v_proj.weight": _rand(rng, (Hk * D, H), H),
            q + "self_attn.o_proj.weight": _rand(rng, (H, Hq * D), Hq * D, 0.5),
            q + "self_attn.q_norm.weight": np.ones(D, np.float32),
            q + "self_attn.k_norm.weight": np.ones(D, np.float32),
            q + "post_attention_layernorm.weight": np.ones(H, np.float32),
            q + "mlp.gate_proj.weight": _rand(rng, (I, H), H),
            q + "mlp.up_proj.weight": _rand(rng, (I, H), H),
            q + "mlp.down_proj.weight": _rand(rng, (H, I), I, 0.5),
        })
    arrays[p + "norm.weight"] = np.ones(H, np.float32)
    bits = {k: _bf16.f32_to_bf16_bits(v) for k, v in arrays.items()}
    save_sharded(folder, bits, 2, stem="model", bf16=set(bits))
    _write_json(os.path.join(folder, "config.json"), cfg)


# ---------------------------------------------------------------------------------------------
# video VAE decoder (release layout: config.json + source/config.json + source/model.safetensors)
# ---------------------------------------------------------------------------------------------
VAE_DIM, VAE_HEADS, VAE_LAYERS = 32, 2, 1


def build_video_vae(folder, rng):
    src = os.path.join(folder, "source")
    os.makedirs(src, exist_ok=True)
    H, C, F = VAE_DIM, 24, 4 * VAE_DIM
    arrays = {
        "post_quant_conv.weight": _rand(rng, (C, C), C).reshape(C, C, 1, 1, 1),
        "post_quant_conv.bias": np.zeros(C, np.float32),
        "decoder.x_embedder.weight": _rand(rng, (H, C), C),
        "decoder.x_embedder.bias": np.zeros(H, np.float32),
        "decoder.register_tokens": rng.standard_normal((1, 4, H), dtype=np.float32),
        "decoder.mask_token": np.zeros((1, 1, H), np.float32),
    }
    for b in range(VAE_LAYERS):
        q = f"decoder.transformer_blocks.{b}."
        arrays.update({
            q + "norm1.weight": np.ones(H, np.float32), q + "norm2.weight": np.ones(H, np.float32),
            q + "attn.to_qkv.weight": _rand(rng, (3 * H, H), H), q + "attn.to_qkv.bias": np.zeros(3 * H, np.float32),
            q + "attn.to_out.weight": _rand(rng, (H, H), H), q + "attn.to_out.bias": np.zeros(H, np.float32),
            q + "ff.w1.weight": _rand(rng, (2 * F, H), H), q + "ff.w1.bias": np.zeros(2 * F, np.float32),
            q + "ff.w2.weight": _rand(rng, (H, F), F), q + "ff.w2.bias": np.zeros(H, np.float32),
            q + "scale1": np.full(H, 0.5, np.float32), q + "scale2": np.full(H, 0.5, np.float32),
        })
    arrays.update({
        "decoder.norm_out.weight": np.ones(H, np.float32), "decoder.norm_out.bias": np.zeros(H, np.float32),
        "decoder.proj_out.weight": _rand(rng, (3 * 4 * 16 * 16, H), H, 0.5),
        "decoder.proj_out.bias": np.zeros(3 * 4 * 16 * 16, np.float32),
    })
    save_file(os.path.join(src, "model.safetensors"), arrays)
    _write_json(os.path.join(src, "config.json"), {
        "z_channels": 24, "out_ch": 3, "space_down": [2, 2, 2, 2, 1, 1], "time_down": [1, 2, 2, 1, 1, 1],
        "vit_decoder_kwargs": {"num_layers": VAE_LAYERS, "heads": VAE_HEADS, "dim_head": H // VAE_HEADS,
                               "rope_theta": 100.0, "rope_dim_ratio": 0.75, "norm_type": "rms_norm",
                               "qk_norm_type": "rms_norm", "qk_norm_affine": False,
                               "ffn_activation_fn": "silu", "ffn_use_gated": True}})
    _write_json(os.path.join(folder, "config.json"), {
        "_class_name": "MiniMaxH3VideoVAE", "source_path": "source", "source_safetensors_path": "model.safetensors",
        "vae_clip_length": 17, "vae_token_drop": 3, "vae_tile_size": 256, "vae_tile_overlap_min": 64,
        "latent_channels": 24, "latents_mean": [0.0] * 24, "latents_std": [1.0] * 24})


# ---------------------------------------------------------------------------------------------
# audio VAE decoder (release layout: config.json + model.safetensors; weight-normed convs)
# ---------------------------------------------------------------------------------------------
AUDIO_DIM, AUDIO_LATENT_DIM = 128, 64
AUDIO_RATES, AUDIO_KERNELS = (5, 5, 2, 2, 2, 2, 2), (9, 9, 4, 4, 4, 4, 4)
AUDIO_RES_KERNELS = (3, 7, 11)


def _kaiser_sinc_filter():
    """The 12-tap anti-aliasing filter (spec §6.3): Kaiser-windowed sinc, cutoff 0.25."""
    a = 2.285 * 5 * np.pi * 1.2 + 7.95
    beta = 0.1102 * (a - 8.7)
    t = np.arange(12) - 5.5
    f = 2 * 0.25 * np.kaiser(12, beta) * np.sinc(2 * 0.25 * t)
    return (f / f.sum()).astype(np.float32).reshape(1, 1, 12)


def _wn_conv(arrays, rng, name, shape, bias=True, gain=1.0):
    """A weight-normed conv: weight_v random, weight_g = |v| per output row (so W = v)."""
    v = _rand(rng, shape, int(np.prod(shape[1:])), gain)
    arrays[name + ".weight_v"] = v
    arrays[name + ".weight_g"] = np.linalg.norm(v.reshape(shape[0], -1), axis=1).astype(np.float32).reshape(-1, 1, 1)
    if bias:
        out_ch = shape[1] if ".ups." in name else shape[0]
        arrays[name + ".bias"] = np.zeros(out_ch, np.float32)


def _snake(arrays, name, C, filt):
    arrays[name + ".act.alpha"] = np.zeros(C, np.float32)
    arrays[name + ".act.beta"] = np.zeros(C, np.float32)
    arrays[name + ".upsample.filter"] = filt
    arrays[name + ".downsample.lowpass.filter"] = filt


def build_audio_vae(folder, rng):
    os.makedirs(folder, exist_ok=True)
    filt = _kaiser_sinc_filter()
    D, C0 = AUDIO_LATENT_DIM, AUDIO_DIM
    arrays = {"dec_in_proj.weight": _rand(rng, (D, 32, 1), 32), "dec_in_proj.bias": np.zeros(D, np.float32)}
    _wn_conv(arrays, rng, "decoder.conv_pre", (C0, D, 7))
    c = C0
    for i, (r, k) in enumerate(zip(AUDIO_RATES, AUDIO_KERNELS)):
        _wn_conv(arrays, rng, f"decoder.ups.{i}.0", (c, c // 2, k))
        c //= 2
        for j, rk in enumerate(AUDIO_RES_KERNELS):
            rb = f"decoder.resblocks.{3 * i + j}"
            for m in range(3):
                _wn_conv(arrays, rng, f"{rb}.convs1.{m}", (c, c, rk), gain=0.5)
                _wn_conv(arrays, rng, f"{rb}.convs2.{m}", (c, c, rk), gain=0.5)
            for a in range(6):
                _snake(arrays, f"{rb}.activations.{a}", c, filt)
    _snake(arrays, "decoder.activation_post", c, filt)
    _wn_conv(arrays, rng, "decoder.conv_post", (1, c, 7), bias=False, gain=0.05)  # quiet noise
    save_file(os.path.join(folder, "model.safetensors"), arrays)
    _write_json(os.path.join(folder, "config.json"), {
        "_class_name": "MiniMaxH3AudioVAE", "output_channel": 2, "sample_rate": 32000,
        "source_safetensors_path": "model.safetensors", "latent_channels": 32,
        "latents_mean": [0.0] * 32, "latents_std": [1.0] * 32})


# ---------------------------------------------------------------------------------------------
def build_demo_model(cache_dir=None, force=False):
    """Build (once) and return the path of the demo model's repository root."""
    root = os.path.join(_cache_root(cache_dir), f"demo-model-v{DEMO_VERSION}")
    stamp = os.path.join(root, ".complete")
    if os.path.exists(stamp) and not force:
        return root
    tmp = root + f".building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    fl = os.path.join(tmp, "FL2VA")
    os.makedirs(fl)
    rng = np.random.default_rng(20261129)
    vocab = build_tokenizer(os.path.join(fl, "tokenizer"))
    build_text_encoder(os.path.join(fl, "text_encoder"), rng, vocab)
    build_transformer(os.path.join(fl, "transformer"), rng)
    build_video_vae(os.path.join(fl, "video_vae"), rng)
    build_audio_vae(os.path.join(fl, "audio_vae"), rng)
    _write_json(os.path.join(fl, "model_index.json"), {
        "_class_name": "MiniMaxH3Pipeline", "text_encoder": ["transformers", "MiniMaxH3Qwen3VLHFEncoder"],
        "tokenizer": ["transformers", "Qwen2TokenizerFast"], "video_vae": ["diffusers", "MiniMaxH3VideoVAE"],
        "audio_vae": ["diffusers", "MiniMaxH3AudioVAE"], "transformer": ["diffusers", "MiniMaxH3DiTModel"],
        "_minimax_h3": {"h3cy_demo": True, "note": "random weights, for plumbing demos only"}})
    with open(os.path.join(tmp, "README.txt"), "w") as f:
        f.write("h3cy demo model: MiniMax-H3's architecture at toy sizes with RANDOM weights.\n"
                "It exercises the pipeline; it cannot make meaningful video or audio.\n")
    with open(os.path.join(tmp, ".complete"), "w") as f:
        f.write(str(DEMO_VERSION))
    if os.path.exists(root):
        shutil.rmtree(root)
    os.replace(tmp, root)
    return root


def resolve_model(model, cache_dir=None):
    """``model`` as ``h3cy.load`` takes it, with ``"demo"`` standing for the demo model -- the
    trained one when the package carries it, else the random one (built here on first use) --
    and ``"demo-random"`` for the random one; a file or folder of that name wins.  Several
    processes on one machine (Ray actors) may ask at once: the build runs under a lock."""
    if model not in ("demo", "demo-random") or os.path.exists(model):
        return model
    if model == "demo" and trained_model() is not None:
        return trained_model()
    import fcntl
    root = _cache_root(cache_dir)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, f"demo-model-v{DEMO_VERSION}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build_demo_model(cache_dir)
