"""H3 Decode: h3cy latents -> IMAGE frames and AUDIO for ComfyUI's video/audio nodes."""
from . import _h3
from .convert import latents_from_latent
from .nodes_sample import DECODE_PHASES, _expect_model, _outputs
from .progress import InterruptToken, PhaseProgress, run_interruptible


def decode(model, latent):
    _h3.require()
    model = _expect_model(model)
    video, audio, geo = latents_from_latent(latent)
    prog = PhaseProgress(DECODE_PHASES)
    with model.lock:
        pipe = model.pipeline()
        res = run_interruptible(pipe.decode, video, audio, on_progress=prog, cancel=InterruptToken(),
                                fps=int(geo.get("fps", 24)))
    return _outputs(res)
