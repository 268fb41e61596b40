"""A tiny random Qwen3-VL (``Qwen3VLForConditionalGeneration``) saved with save_pretrained, in
the release layout of MiniMax-H3's prompt encoder:

  root/text_encoder/   config.json + model.safetensors (bf16, as released)
  root/tokenizer/      the released tokenizer files (shipped in h3cy/data/tokenizer)

Text stack: 51 decoder layers (so hidden_states[50] is a layer output, not the final
norm), hidden 64, 8 query heads and 2 KV heads of 16 (four query heads per KV head),
intermediate 96, rope_theta 5e6 with the released interleaved MRoPE sections scaled to
head_dim 16 ([24, 20, 20] * 8/64 -> [3, 3, 2]).  The vocabulary is the real one (151 936
rows; 19 MB in bf16) so that ids from the real tokenizer are valid.  The vision tower is
as small as the config allows; nothing of it is read.
"""
import os
import shutil

import numpy as np

from h3cy.models.tokenizer import DEFAULT_FOLDER as TOKENIZER_SRC
NUM_LAYERS = 51
TEXT_CONFIG = dict(
    vocab_size=151936, hidden_size=64, intermediate_size=96, num_hidden_layers=NUM_LAYERS,
    num_attention_heads=8, num_key_value_heads=2, head_dim=16, hidden_act="silu",
    max_position_embeddings=4096, rms_norm_eps=1e-6, attention_bias=False,
    rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                     "mrope_section": [3, 3, 2], "mrope_interleaved": True},
)
VISION_CONFIG = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=64,
                     patch_size=4, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16,
                     deepstack_visual_indexes=[0])


def make_config():
    from transformers import Qwen3VLConfig
    return Qwen3VLConfig(text_config=dict(TEXT_CONFIG), vision_config=dict(VISION_CONFIG),
                         image_token_id=151655, video_token_id=151656,
                         vision_start_token_id=151652, vision_end_token_id=151653,
                         tie_word_embeddings=False)


def build(root, seed=0):
    """Save the model under root/text_encoder (bf16) and the tokenizer under root/tokenizer;
    returns root/text_encoder."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(make_config())
    # random norm weights (the default init is all ones, which would hide a missing multiply)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") and "language_model" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            if "language_model.layers" in name and name.endswith("proj.weight"):
                p.mul_(2.5)   # larger than the 0.02 init so every layer moves the stream
    te = os.path.join(root, "text_encoder")
    model.to(torch.bfloat16).save_pretrained(te)
    shutil.copytree(TOKENIZER_SRC, os.path.join(root, "tokenizer"))
    return te


def reference_hidden(te, ids, dtype="float32", layer=50):
    """transformers' hidden_states[layer] for input ids (1-D) -> float32 numpy [L, hidden]."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration
    model = _load(te, dtype)
    x = torch.tensor([list(ids)], dtype=torch.long)
    with torch.no_grad():
        out = model.model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False,
                          output_hidden_states=True)
    return out.hidden_states[layer][0].float().numpy()


_models = {}


def _load(te, dtype):
    import torch
    from transformers import Qwen3VLForConditionalGeneration
    key = (te, dtype)
    if key not in _models:
        _models[key] = Qwen3VLForConditionalGeneration.from_pretrained(
            te, dtype=getattr(torch, dtype)).eval()
    return _models[key]
