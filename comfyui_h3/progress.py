"""h3cy's ``on_progress(done, total, phase)`` -> one ComfyUI progress bar, and cancel.

The bar spans the phases a node runs (encode, denoise, decode_audio, decode_video), each an
equal share; within a phase it moves per block.  Cancel needs no watcher thread:

- ``ProgressBar.update_absolute`` calls ComfyUI's progress hook, which raises
  ``InterruptProcessingException`` once the user pressed cancel; the callback also calls
  ``throw_exception_if_processing_interrupted()`` itself (a bar without a hook, e.g. in a
  script).  h3cy lets a callback's exception out unchanged.
- h3cy checks its ``cancel`` token after every block, while ``on_progress`` is throttled to
  ~20 calls a second; :class:`InterruptToken` answers that check from
  ``processing_interrupted()``, so the stop comes within one block.  h3cy then raises
  ``h3cy.Cancelled``, which :func:`run_interruptible` turns into ComfyUI's interrupt.
"""
import os

import comfy.model_management
import comfy.utils

from . import _h3

SHARE = 1000          # bar units per phase


def _token_base():
    h3cy = _h3.h3cy
    return h3cy.CancelToken if h3cy is not None else object


class InterruptToken(_token_base()):
    """An h3cy.CancelToken that reads ComfyUI's interrupt flag (without clearing it)."""

    def __init__(self):
        pass

    @property
    def cancelled(self):
        return comfy.model_management.processing_interrupted()

    def cancel(self):
        comfy.model_management.interrupt_current_processing(True)

    def reset(self):
        pass


class PhaseProgress:
    """``on_progress`` for h3cy: maps (done, total, phase) onto one ComfyUI ProgressBar."""

    def __init__(self, phases):
        self.phases = list(phases)
        self.bar = comfy.utils.ProgressBar(SHARE * len(self.phases))
        self.calls = 0

    def __call__(self, done, total, phase):
        self.calls += 1
        i = self.phases.index(phase) if phase in self.phases else len(self.phases) - 1
        frac = min(1.0, max(0.0, done / total)) if total else 1.0
        self.bar.update_absolute(int(SHARE * i + SHARE * frac), SHARE * len(self.phases))
        comfy.model_management.throw_exception_if_processing_interrupted()


def run_interruptible(fn, *args, **kwargs):
    """Call an h3cy phase; an h3cy.Cancelled caused by ComfyUI's interrupt becomes ComfyUI's
    own InterruptProcessingException (and clears the flag, as ComfyUI does)."""
    h3cy = _h3.require()
    try:
        return fn(*args, **kwargs)
    except h3cy.Cancelled:
        comfy.model_management.throw_exception_if_processing_interrupted()
        raise
    except MemoryError as e:
        raise MemoryError(f"{e} -- h3cy ran out of memory: in 'H3 Model Loader' pick weights int4 (about half "
                          "of int8's memory) or streaming 'on', or generate a smaller size") from e


def preview_settings():
    """ComfyUI's ``--preview-method`` / ``--preview-size`` (``comfy.cli_args.args``, as
    ``latent_preview.get_previewer`` reads them): ``(method, largest side)`` with method
    "latent2rgb" or "taesd", or None when previews are off (``--preview-method none``,
    ComfyUI's default; "auto" means latent2rgb, as there).  Outside ComfyUI (no
    ``comfy.cli_args``) latent2rgb at ComfyUI's default 512."""
    try:
        from comfy.cli_args import LatentPreviewMethod, args
    except ImportError:
        return "latent2rgb", 512
    if args.preview_method == LatentPreviewMethod.NoPreviews:
        return None
    method = "taesd" if args.preview_method == LatentPreviewMethod.TAESD else "latent2rgb"
    return method, int(args.preview_size)


_TAE = {}


def tae_decoder():
    """The taeh3 decoder of the first ``taeh3*.safetensors`` in ComfyUI's ``vae_approx``
    folder (ComfyUI picks its TAESD file by that name prefix too), kept per path; None (with
    a warning, as ComfyUI) when there is none.  Decodes without upscaling (2x the latent's
    size, one frame per latent frame): the cheap preview TAEHV offers."""
    import logging

    import folder_paths
    names = [n for n in folder_paths.get_filename_list("vae_approx")
             if os.path.basename(n).startswith("taeh3") and n.endswith(".safetensors")]
    path = folder_paths.get_full_path("vae_approx", names[0]) if names else None
    if path is None:
        logging.warning("[comfyui_h3] TAESD previews enabled, but no models/vae_approx/taeh3*.safetensors: "
                        "showing latent2rgb previews")
        return None
    if path not in _TAE:
        from h3cy.taeh3 import TAEH3Decoder
        _TAE.clear()
        _TAE[path] = TAEH3Decoder.from_file(path, space_upscale=False, time_upscale=False)
    return _TAE[path]


class StepPreview:
    """``on_step`` for h3cy: the step's clean estimate as ComfyUI's sampler previews send
    it -- ``ProgressBar.update_absolute(value, total, ("JPEG", PIL.Image, max_size))`` on
    the node's bar, which ComfyUI's progress hook hands to the UI.  The image is h3cy's
    linear latent->RGB preview (ComfyUI's published MiniMax-H3 factors) of every latent
    frame as a contact sheet, or with ``tae`` (``--preview-method taesd`` and a taeh3 file)
    the taeh3 decode of the first latent frame; enlarged (nearest) to use the preview
    size."""

    def __init__(self, progress, max_size, tae=None):
        self.progress = progress
        self.max_size = int(max_size)
        self.tae = tae
        self.sent = 0

    def __call__(self, state):
        from PIL import Image
        _h3.require()
        from h3cy.preview import preview_image
        # the TAE decodes the first latent frame only (its cost grows with every frame)
        sheet = preview_image(state.video_x0, "sheet" if self.tae is None else "first", tae=self.tae)
        scale = max(1, min(8, self.max_size // max(sheet.shape[:2])))
        if scale > 1:
            sheet = sheet.repeat(scale, axis=0).repeat(scale, axis=1)
        bar = self.progress.bar
        bar.update_absolute(bar.current, bar.total, ("JPEG", Image.fromarray(sheet), self.max_size))
        self.sent += 1
        comfy.model_management.throw_exception_if_processing_interrupted()


def step_preview(progress):
    """The ``on_step`` hook sending previews to ``progress``'s bar, or None when ComfyUI's
    previews are off."""
    settings = preview_settings()
    if settings is None:
        return None
    method, size = settings
    return StepPreview(progress, size, tae_decoder() if method == "taesd" else None)
