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

``build(root, vision=True)`` gives the model a vision tower h3cy reads (tests/test_vision_tower.py):
the released geometry's patch 16, temporal patch 2 and merge 2 (so the released processor
config applies as is), 3 blocks of hidden 32 with 2 heads of 16, a 4x4 learned position grid
(bilinearly resampled to every image's patch grid), deepstack mergers after blocks 0 and 2
(added after LM layers 0 and 1), out_hidden 64 = the text stack's hidden size.
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
VISION_TOWER_CONFIG = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                           patch_size=16, temporal_patch_size=2, spatial_merge_size=2,
                           num_position_embeddings=16, deepstack_visual_indexes=[0, 2],
                           hidden_act="gelu_pytorch_tanh")


def make_config(vision=False):
    from transformers import Qwen3VLConfig
    vc = VISION_TOWER_CONFIG if vision else VISION_CONFIG
    return Qwen3VLConfig(text_config=dict(TEXT_CONFIG), vision_config=dict(vc),
                         image_token_id=151655, video_token_id=151656,
                         vision_start_token_id=151652, vision_end_token_id=151653,
                         tie_word_embeddings=False)


def build(root, seed=0, vision=False):
    """Save the model under root/text_encoder (bf16) and the tokenizer under root/tokenizer;
    returns root/text_encoder.  vision: the tower h3cy reads (VISION_TOWER_CONFIG)."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(make_config(vision))
    # random norm weights (the default init is all ones, which would hide a missing multiply)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") and "language_model" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            if "language_model.layers" in name and name.endswith("proj.weight"):
                p.mul_(2.5)   # larger than the 0.02 init so every layer moves the stream
            if vision and name.startswith("model.visual."):
                # the tower's outputs must move the text stream as much as the embeddings do,
                # and every norm weight and bias must matter (the init is ones and zeros)
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif name.endswith("bias"):
                    p.copy_(0.1 * torch.randn_like(p))
                elif "pos_embed" in name:
                    p.copy_(0.5 * torch.randn_like(p))
                else:
                    p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5 if p.ndim == 2
                            else torch.randn_like(p) / p[0].numel() ** 0.5)
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


PROCESSOR_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "h3cy", "data", "processor", "preprocessor_config.json")


def reference_processor():
    """transformers' Pillow-backed Qwen3-VL image processor (the one it uses without
    torchvision) built from the shipped config."""
    import json
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    with open(PROCESSOR_CONFIG) as f:
        cfg = json.load(f)
    return Qwen2VLImageProcessorPil(**{k: v for k, v in cfg.items()
                                       if k not in ("processor_class", "image_processor_type")})


def reference_presentation(tokenizer_dir, prompt, images):
    """diffusers 0.42.1's fl2va text step (MiniMaxH3FL2VATextEncoderStep), with transformers'
    tokenizer and Pillow processor: (token_ids, tags, vision_inputs, mm_token_type_ids)."""
    import torch
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    proc = reference_processor()
    vision = proc(images=list(images), return_tensors="pt") if images else None
    ids, tags = [], []
    for i in range(len(images)):
        n = int(vision["image_grid_thw"][i].prod()) // proc.merge_size ** 2
        label = tok(f"<Picture {i + 1}>: ", add_special_tokens=False)["input_ids"]
        block = ([tok.convert_tokens_to_ids("<|vision_start|>")] + [tok.convert_tokens_to_ids("<|image_pad|>")] * n
                 + [tok.convert_tokens_to_ids("<|vision_end|>")])
        ids += label + block
        tags += [1] * len(label) + [0] * len(block)
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    ids += p
    tags += [1] * len(p)
    image_pad = tok.convert_tokens_to_ids("<|image_pad|>")
    mm = torch.tensor([[1 if t == image_pad else 0 for t in ids]], dtype=torch.long)
    vin = {} if vision is None else {"pixel_values": vision["pixel_values"], "image_grid_thw": vision["image_grid_thw"]}
    return ids, tags, vin, mm


def reference_hidden_images(te, tokenizer_dir, prompt, images, dtype="float32", layer=50):
    """transformers' hidden_states[layer] of the fl2va presentation of prompt + images
    -> (float32 [L, hidden], tags, token ids)."""
    import torch
    ids, tags, vin, mm = reference_presentation(tokenizer_dir, prompt, images)
    model = _load(te, dtype)
    x = torch.tensor([ids], dtype=torch.long)
    kw = {k: (v.to(model.dtype) if k.startswith("pixel_") else v) for k, v in vin.items()}
    with torch.no_grad():
        out = model.model(input_ids=x, attention_mask=torch.ones_like(x), mm_token_type_ids=mm,
                          use_cache=False, output_hidden_states=True, **kw)
    return out.hidden_states[layer][0].float().numpy(), tags, ids


def reference_vision(te, images, dtype="float32"):
    """transformers' vision tower on the Pillow processor's pixels: (merged [N, out_hidden],
    [deepstack features], pixel_values, image_grid_thw) as float32 numpy."""
    import torch
    proc = reference_processor()
    vision = proc(images=list(images), return_tensors="pt")
    model = _load(te, dtype)
    with torch.no_grad():
        out = model.model.visual(vision["pixel_values"].to(model.dtype), grid_thw=vision["image_grid_thw"])
    return (out.pooler_output.float().numpy(), [d.float().numpy() for d in out.deepstack_features],
            vision["pixel_values"].numpy(), vision["image_grid_thw"].numpy())
