"""H3 Text Encode, H3 Sampler and H3 Generate: h3cy's pipeline phases as nodes."""
import numpy as np

from . import _h3
from .convert import audio_from_result, image_from_frames, keyframe_from_image, latent_from_result
from .progress import InterruptToken, PhaseProgress, run_interruptible, step_preview

DECODE_PHASES = ("decode_audio", "decode_video")


def _expect_model(model):
    from .nodes_load import H3Model
    if not isinstance(model, H3Model):
        raise TypeError(f"expected an H3_MODEL from 'H3 Model Loader', got {type(model).__name__}")
    return model


def _length(frames, seconds):
    """``seconds`` > 0 wins over ``frames`` (the sampler widgets carry both)."""
    return {"seconds": float(seconds)} if seconds and seconds > 0 else {"frames": int(frames)}


class H3Conditioning:
    """What flows along an ``H3_CONDITIONING`` link: the prompt and its text states
    ``[L, text_dim]`` float32 (read-only; each sampler run copies what it needs); with
    keyframes also the rows' ``tags``, the ``keyframes`` on the ``canvas`` (width, height)
    and their ``anchors`` ("first" / "last")."""

    def __init__(self, prompt, embeds, model_key, tags=None, keyframes=(), anchors=(), canvas=None):
        self.prompt = prompt
        self.embeds = embeds
        self.model_key = model_key
        self.tags, self.keyframes, self.anchors, self.canvas = tags, tuple(keyframes), tuple(anchors), canvas

    def __repr__(self):
        return f"<H3_CONDITIONING {self.embeds.shape} {self.prompt[:40]!r}>"


def encode(model, prompt, first_frame=None, last_frame=None):
    h3cy = _h3.require()
    model = _expect_model(model)
    first, last = keyframe_from_image(first_frame, "first_frame"), keyframe_from_image(last_frame, "last_frame")
    if first is None and last is None:
        prog = PhaseProgress(["encode"])
        with model.lock:
            pipe = model.pipeline()
            embeds = run_interruptible(pipe.encode, prompt, on_progress=prog, cancel=InterruptToken())
        embeds = np.array(embeds, dtype=np.float32, copy=True)
        embeds.setflags(write=False)
        return (H3Conditioning(prompt, embeds, model.key),)
    # keyframes: put on the canvas of the first one's aspect ratio (the reference's resize
    # step) here, so the text encoder and the sampler's video encoder see the same pixels
    frames, anchors, canvas = h3cy.prepare_keyframes(first, last)
    prog = PhaseProgress(["vision", "encode"])
    with model.lock:
        pipe = model.pipeline()
        embeds, tags = run_interruptible(pipe.encode, prompt, on_progress=prog, cancel=InterruptToken(),
                                         images=frames, return_tags=True)
    embeds = np.array(embeds, dtype=np.float32, copy=True)
    embeds.setflags(write=False)
    tags = np.array(tags, dtype=np.int64, copy=True)
    tags.setflags(write=False)
    return (H3Conditioning(prompt, embeds, model.key, tags=tags, keyframes=frames, anchors=anchors, canvas=canvas),)


SAMPLERS = ["euler", "res_multistep"]
PRESETS = ["none", "quality", "turbo8", "turbo4"]


def _sampler_kwargs(width, height, frames, seconds, steps, seed, reuse, layers, sampler="euler", preset="none"):
    """h3cy.generate's keywords.  A preset other than "none" sets the steps, the sampler and
    the shifts (h3cy.presets), in place of the steps and sampler widgets."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
    kw = dict(width=int(width), height=int(height), seed=int(seed), reuse=int(reuse),
              layers=int(layers) if layers else None, **_length(frames, seconds))
    if preset == "none":
        kw.update(steps=int(steps), sampler=sampler)
    else:
        kw.update(preset=preset)
    return kw


def sample(model, conditioning, width, height, frames, seconds, steps, seed, reuse=1, layers=0, sampler="euler",
           preset="none"):
    _h3.require()
    model = _expect_model(model)
    if not isinstance(conditioning, H3Conditioning):
        raise TypeError("H3 Sampler needs the H3_CONDITIONING of an 'H3 Text Encode' node")
    kw = _sampler_kwargs(width, height, frames, seconds, steps, seed, reuse, layers, sampler, preset)
    phases = ["denoise"]
    if conditioning.keyframes:
        # the keyframes were put on their canvas when the prompt was encoded: it overrides
        # the width and height widgets (the text encoder saw those very pixels)
        kw["width"], kw["height"] = conditioning.canvas
        kw["text_tags"] = np.array(conditioning.tags, np.int64, copy=True)
        for anchor, frame in zip(conditioning.anchors, conditioning.keyframes):
            kw[anchor + "_frame"] = frame
        phases = ["encode_video", "denoise"]
    prog = PhaseProgress(phases)
    with model.lock:
        pipe = model.pipeline()
        res = run_interruptible(
            pipe.generate, prompt_embeds=np.array(conditioning.embeds, np.float32, copy=True),
            output="latent", on_progress=prog, on_step=step_preview(prog), cancel=InterruptToken(), **kw)
    return (latent_from_result(res.video_latent, res.audio_latent, res.geometry),)


def _outputs(res):
    return image_from_frames(res.frames), audio_from_result(res.audio_for_video(), res.sample_rate)


def generate(model, prompt, width, height, frames, seconds, steps, seed, reuse=1, layers=0, sampler="euler",
             preset="none", first_frame=None, last_frame=None):
    _h3.require()
    model = _expect_model(model)
    first, last = keyframe_from_image(first_frame, "first_frame"), keyframe_from_image(last_frame, "last_frame")
    keyed = first is not None or last is not None
    # with keyframes, the width and height widgets are the canvas they are fitted onto
    phases = ["vision", "encode", "encode_video"] if keyed else ["encode"]
    prog = PhaseProgress([*phases, "denoise", *DECODE_PHASES])
    with model.lock:
        pipe = model.pipeline()
        res = run_interruptible(pipe.generate, prompt, output="video", on_progress=prog,
                                on_step=step_preview(prog), cancel=InterruptToken(), first_frame=first,
                                last_frame=last,
                                **_sampler_kwargs(width, height, frames, seconds, steps, seed, reuse, layers,
                                                  sampler, preset))
    return _outputs(res)
