"""A whole tiny MiniMax-H3 in both folder layouts, from the components' own tiny builders:

  diffusers/   model_index.json, transformer/ (diffusers fp32), text_encoder/, tokenizer/,
               vae/, audio_vae/
  release/FL2VA/  model_index.json, transformer/ (original names, released bf16 mix),
               text_encoder/, tokenizer/, video_vae/ (source/), audio_vae/

Components are symlinked from the builders' folders.  ``dit`` keeps the TinyDit (whose
``diffusers_fp32`` and ``diffusers_bf16`` folders are the references for the two layouts),
``audio_model`` the diffusers audio VAE, ``vae`` the TinyVae.
"""
import json
import os
from dataclasses import dataclass

import _tiny_audio_vae
import _tiny_text_encoder
import _tiny_vae


@dataclass
class TinyPipeline:
    diffusers: str
    release: str
    dit: object
    vae: object
    audio_model: object


def _link(src, dst):
    os.symlink(os.path.abspath(src), dst, target_is_directory=True)


def build(dit, root):
    """Both layouts under ``root`` around the TinyDit ``dit`` (config "p")."""
    vae = _tiny_vae.build(os.path.join(root, "parts", "vae"))
    amodel, afolders = _tiny_audio_vae.build("a", os.path.join(root, "parts", "audio_vae"))
    te = _tiny_text_encoder.build(os.path.join(root, "parts", "te"))
    tok = os.path.join(os.path.dirname(te), "tokenizer")
    dif = os.path.join(root, "diffusers")
    os.makedirs(dif)
    for name, src in (("transformer", dit.diffusers_fp32), ("text_encoder", te), ("tokenizer", tok),
                      ("vae", vae.diffusers), ("audio_vae", afolders["diffusers"])):
        _link(src, os.path.join(dif, name))
    with open(os.path.join(dif, "model_index.json"), "w") as f:
        json.dump({"_class_name": "MiniMaxH3ModularPipeline", "vae": ["diffusers", "AutoencoderKLMiniMaxH3"],
                   "audio_vae": ["diffusers", "AutoencoderKLMiniMaxH3Audio"]}, f)
    rel = os.path.join(root, "release")
    fl = os.path.join(rel, "FL2VA")
    os.makedirs(fl)
    for name, src in (("transformer", dit.original), ("text_encoder", te), ("tokenizer", tok),
                      ("video_vae", vae.original), ("audio_vae", afolders["release"])):
        _link(src, os.path.join(fl, name))
    with open(os.path.join(fl, "model_index.json"), "w") as f:
        json.dump({"_class_name": "MiniMaxH3Pipeline", "video_vae": ["diffusers", "MiniMaxH3VideoVAE"]}, f)
    return TinyPipeline(dif, rel, dit, vae, amodel)
