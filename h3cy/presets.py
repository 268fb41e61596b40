"""Named generation settings: ``Pipeline.generate(preset="turbo8")``.

Each preset fills the keywords the caller did not give (explicit keywords win).  Sources:

- ``quality``: the released schedule as diffusers' ``MiniMaxH3Scheduler`` runs it
  (20 denoiser evaluations, Euler, shifts 12/3).
- ``turbo8``: lightx2v's "8-step 768p V1.0 LoRA released" announcement
  (huggingface.co/lightx2v/Minimax-h3-Turbo, discussion 48): steps 8, video shift 6, audio
  shift 3, Euler, scheduler "simple", strength 1.0.
- ``turbo4``: lightx2v's "Recommended inference settings for FL2V Turbo 4-step v1.1 (768p)"
  (same repository, discussion 42): shift_video 6, shift_audio 3, steps 4, Euler.  Their
  544p LoRAs were trained at shifts 12/3 (ModelTC/MiniMax-H3-Turbo README, model table);
  larryvrh/MiniMax-H3-Turbo-Lora's author recommends 6/3, Euler, "simple" for every turbo
  LoRA (discussion 39).  ComfyUI's "simple" scheduler on ComfyUI's shifted sigmas is the
  shifted grid h3cy's ``Schedule.shifted`` builds, and ``steps`` counts evaluations in both.

A turbo preset expects a turbo LoRA (``h3cy.load(loras=...)``) or a distilled transformer;
on a pipeline without any LoRA it warns once.
"""
from dataclasses import dataclass

__all__ = ["Preset", "PRESETS", "get"]


@dataclass(frozen=True)
class Preset:
    name: str
    steps: int
    sampler: str
    shift_video: float
    shift_audio: float
    lora_strength: float = 1.0    # the LoRA makers' strength (informational: LoRAs keep theirs)
    turbo: bool = False
    source: str = ""


PRESETS = {
    "quality": Preset("quality", 20, "euler", 12.0, 3.0,
                      source="diffusers MiniMaxH3Scheduler defaults"),
    "turbo8": Preset("turbo8", 8, "euler", 6.0, 3.0, turbo=True,
                     source="lightx2v/Minimax-h3-Turbo discussion 48 (8-step 768p V1.0)"),
    "turbo4": Preset("turbo4", 4, "euler", 6.0, 3.0, turbo=True,
                     source="lightx2v/Minimax-h3-Turbo discussion 42 (4-step v1.1 768p)"),
}


def get(name):
    """The preset of that name (ValueError listing the names otherwise)."""
    from .errors import H3ValueError
    if name not in PRESETS:
        raise H3ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
