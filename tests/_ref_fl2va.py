"""diffusers 0.42.1's own fl2va denoising (``MiniMaxH3FL2VACoreDenoiseStep``: layout,
condition noise, generated-row noise, timestep plan, loop, unpacking) on a torch transformer,
the reference the conditioned-denoise tests compare to.

The request's generator is seeded with ``seed``; the reference draws the condition noise
from it (one draw per condition, in order) before anything else, and the video and audio
noise are passed in, so :func:`condition_noise` reproduces exactly what it drew.
"""
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Fl2vaReference:
    video: np.ndarray          # (C, T, h, w) the generated video latents
    audio: np.ndarray          # (2, Ca, A)
    condition_rows: np.ndarray  # (Nc, 4C) the held condition rows it packed
    plan: list                 # per step: (timestep (U,) float32, timestep_indices (S,) int64)
    forwards: list             # per transformer call: (timestep, timestep_indices, video rows)


def condition_noise(latents, seed):
    """The noise the reference draws for these condition latents from its generator."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn((1,) + tuple(z.shape), generator=gen, dtype=torch.float32)[0].numpy()
            for z in latents]


def run(model, prompt_embeds, text_tags, anchors, latents, video, audio, seed, steps, width, height,
        frames):
    """The fl2va core denoise with ``steps`` evaluations (num_inference_steps = steps + 1).

    anchors : tuple of "first" / "last", one per condition latent ((C, 1, h, w) numpy)."""
    from diffusers import MiniMaxH3Scheduler
    from diffusers.modular_pipelines.minimax_h3.modular_blocks_minimax_h3 import (
        MiniMaxH3FL2VACoreDenoiseStep)
    pipe = MiniMaxH3FL2VACoreDenoiseStep().init_pipeline()
    pipe.update_components(transformer=model, scheduler=MiniMaxH3Scheduler(shift=12.0),
                           audio_scheduler=MiniMaxH3Scheduler(shift=3.0))
    forwards = []

    def record(module, args, kwargs):
        forwards.append((kwargs["timestep"].numpy().copy(), kwargs["timestep_indices"].numpy().copy(),
                         kwargs["hidden_states"][0].numpy().copy()))
    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        out = pipe(prompt_embeds=torch.from_numpy(prompt_embeds)[None],
                   text_token_tags=torch.as_tensor(np.asarray(text_tags), dtype=torch.long),
                   height=height, width=width, num_frames=frames, keyframe_anchors=tuple(anchors),
                   condition_latents=[torch.from_numpy(z)[None] for z in latents],
                   latents=torch.from_numpy(video)[None], audio_latents=torch.from_numpy(audio),
                   generator=torch.Generator().manual_seed(seed), num_inference_steps=steps + 1,
                   output=["latents", "audio_latents", "condition_rows", "row_timestep_plan"])
    finally:
        handle.remove()
    plan = [(t.numpy(), i.numpy()) for t, i in out["row_timestep_plan"]]
    return Fl2vaReference(out["latents"][0].numpy(), out["audio_latents"].numpy(),
                          out["condition_rows"].numpy(), plan, forwards)
