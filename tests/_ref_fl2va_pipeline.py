"""diffusers 0.42.1's whole modular pipeline (``MiniMaxH3Blocks``, workflow ``fl2va``: resize,
text step, keyframe VAE encode, fl2va core denoise, video decode; the audio decode left out)
on tiny torch components, the
reference tests/test_fl2va_pipeline.py compares h3cy's ``pipe.generate(first_frame=,
last_frame=)`` to.

Every random draw is the test's: the video and audio noise are passed as ``latents`` /
``audio_latents``; the condition noise comes from the request's generator (seeded ``seed``,
one draw per keyframe before anything else: ``_ref_fl2va.condition_noise`` reproduces it);
the posterior of every keyframe is sampled from a fresh ``torch.Generator`` seeded 42
(``posterior_noise`` reproduces that draw).  The intermediate values are read from the
pipeline's state by name (``output=[...]``) and the transformer's inputs with a forward
pre-hook.

Without torchvision (not installed here) transformers has no Qwen3-VL *video* processor, and
``Qwen3VLProcessor`` refuses to be built without one; the fl2va text step reads only the
processor's image half (``processor.image_processor``, its ``merge_size``) and
``create_mm_token_type_ids``.  So the processor is assembled with the video half left out
and the Pillow image processor (``Qwen2VLImageProcessorPil``, what transformers picks
without torchvision) from the shipped config: the reference takes the Pillow path.
"""
from dataclasses import dataclass

import numpy as np
import torch

STATE = ["keyframes", "keyframe_anchors", "height", "width", "prompt_embeds", "text_token_tags",
         "condition_latents", "condition_rows", "row_timestep_plan", "latents", "audio_latents", "videos"]


@dataclass
class Fl2vaPipelineReference:
    keyframes: list            # uint8 (H, W, 3) per keyframe, on the canvas
    anchors: tuple
    prompt_embeds: np.ndarray  # (L, text_dim) float32
    tags: np.ndarray           # (L,) int64
    condition_latents: list    # (C, 1, h, w) float32 per keyframe
    condition_rows: np.ndarray
    plan: list                 # per step: (timestep (U,) float32, timestep_indices (S,) int64)
    forwards: list             # per transformer call: (timestep, timestep_indices)
    video: np.ndarray          # (C, T, h, w) final latents
    audio: np.ndarray          # (2, Ca, A)
    frames: np.ndarray         # (F, H, W, 3) uint8


def posterior_noise(shape):
    """The posterior draw of ``encode_vae_condition``: ``randn`` of the latent's shape under a
    fresh generator seeded 42 (``DiagonalGaussianDistribution.sample`` -> ``randn_tensor``)."""
    from diffusers.utils.torch_utils import randn_tensor
    return randn_tensor((1,) + tuple(shape), generator=torch.Generator().manual_seed(42),
                        dtype=torch.float32)[0].numpy()


def processor(tokenizer):
    """A ``Qwen3VLProcessor`` with the Pillow image processor and no video processor (see above)."""
    from transformers import Qwen3VLProcessor
    from transformers.processing_utils import ProcessorMixin
    import _tiny_text_encoder
    check = ProcessorMixin.check_argument_for_proper_class

    def allow_no_video(self, name, arg):
        return None if (name == "video_processor" and arg is None) else check(self, name, arg)
    ProcessorMixin.check_argument_for_proper_class = allow_no_video
    try:
        return Qwen3VLProcessor(image_processor=_tiny_text_encoder.reference_processor(), tokenizer=tokenizer,
                                video_processor=None)
    finally:
        ProcessorMixin.check_argument_for_proper_class = check


def load(folder):
    """The reference pipeline on a diffusers-layout folder (tests/_tiny_pipeline.py), fp32."""
    from diffusers import (AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio, MiniMaxH3Scheduler,
                           MiniMaxH3Transformer3DModel)
    from diffusers.modular_pipelines.minimax_h3.modular_blocks_minimax_h3 import MiniMaxH3Blocks
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration
    tok = AutoTokenizer.from_pretrained(f"{folder}/tokenizer")
    blocks = MiniMaxH3Blocks()
    # the audio decode is left out: the audio VAE has its own reference tests, and on the
    # tiny model it is the slowest block of the reference (~9 s of ~20 on a loaded 2-core box)
    blocks.sub_blocks["decode"].sub_blocks.pop("audio")
    pipe = blocks.init_pipeline()
    pipe.update_components(
        transformer=MiniMaxH3Transformer3DModel.from_pretrained(f"{folder}/transformer").eval(),
        text_encoder=Qwen3VLForConditionalGeneration.from_pretrained(f"{folder}/text_encoder",
                                                                     dtype=torch.float32).eval(),
        tokenizer=tok, processor=processor(tok),
        vae=AutoencoderKLMiniMaxH3.from_pretrained(f"{folder}/vae").eval(),
        audio_vae=AutoencoderKLMiniMaxH3Audio.from_pretrained(f"{folder}/audio_vae").eval(),
        scheduler=MiniMaxH3Scheduler(shift=12.0), audio_scheduler=MiniMaxH3Scheduler(shift=3.0))
    return pipe


def run(pipe, prompt, first, last, video, audio, seed, steps, width, height, frames):
    """The whole fl2va request: ``first`` / ``last`` PIL images (either may be None),
    ``video`` (C, T, h, w) / ``audio`` (2, Ca, A) noise, ``steps`` transformer evaluations."""
    forwards = []

    def record(module, args, kwargs):
        forwards.append((kwargs["timestep"].numpy().copy(), kwargs["timestep_indices"].numpy().copy()))
    handle = pipe.transformer.register_forward_pre_hook(record, with_kwargs=True)
    try:
        out = pipe(prompt=prompt, image=first, last_image=last, width=width, height=height, num_frames=frames,
                   latents=torch.from_numpy(video)[None], audio_latents=torch.from_numpy(audio),
                   generator=torch.Generator().manual_seed(seed), num_inference_steps=steps + 1,
                   output_type="np", output=STATE)
    finally:
        handle.remove()
    assert (out["width"], out["height"]) == (width, height)
    # output_type="np": floats in [0, 1]; to uint8 as diffusers' numpy_to_pil does
    frames_u8 = np.rint(np.asarray(out["videos"][0]) * 255).astype(np.uint8)
    return Fl2vaPipelineReference(
        keyframes=[np.array(k) for k in out["keyframes"]], anchors=tuple(out["keyframe_anchors"]),
        prompt_embeds=out["prompt_embeds"][0].float().numpy(), tags=out["text_token_tags"].numpy(),
        condition_latents=[z[0].numpy() for z in out["condition_latents"]],
        condition_rows=out["condition_rows"].numpy(),
        plan=[(t.numpy(), i.numpy()) for t, i in out["row_timestep_plan"]], forwards=forwards,
        video=out["latents"][0].numpy(), audio=out["audio_latents"].numpy(), frames=frames_u8)
