"""A tiny MiniMax-H3 with random weights, in the official release layout, for ``h3cy demo``.

It has the real architecture at toy sizes (a 2-block transformer, a 50-layer text stack of
width 32, a 1-block ViT video decoder, a small BigVGAN audio decoder) and a tokenizer of its
own, trained by ``tokenizers`` on the short text below, so no third-party vocabulary ships
with h3cy.  The weights are random: the demo shows the plumbing (prompt -> text states ->
denoising -> decoders -> MP4), not the model's quality.

The model is built once, deterministically (fixed seeds), into
``$H3CY_CACHE_DIR/demo-model-v1`` (default ``~/.cache/h3cy/demo-model-v1``); a finished build
is marked by a stamp file, so an interrupted build is redone.
"""
import json
import os
import shutil

import numpy as np

from . import _bf16
from ._st_write import save_file, save_sharded

DEMO_VERSION = 1
DEMO_PROMPT = "A red fox walks through fresh snow in a pine forest, soft footsteps and wind."

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
    if cache_dir is not None:
        return os.fspath(cache_dir)
    base = os.environ.get("H3CY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "h3cy")
    return base


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
    from .tokenizer import _QWEN2_PATTERN
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN2_PATTERN), behavior="isolated", invert=False),
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
    from .checkpoint import TransformerConfig, expected_tensors, fp32_in_release
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
