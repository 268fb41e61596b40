"""h3cy — MiniMax-H3 (text to video with stereo audio) on the CPU.

C kernels (csrc/) do the arithmetic, typed Cython (pyx/) drives them without the GIL,
and this package is the numpy API.  No torch at run time.

Subpackages, lowest first (each imports only those before it):

- ``h3cy.ops``       the kernels on numpy arrays: ISA and thread-pool choice, Linear,
                     attention, norms and other row ops;
- ``h3cy.weights``   safetensors files, checkpoint layouts, model folders, weight caches;
- ``h3cy.models``    the transformer, the text encoder and tokenizer, the two decoders;
- ``h3cy.sampling``  geometry, packed layout, schedules and the denoising loop;
- then ``pipeline`` (load / generate), ``keyframes`` (fl2va keyframes on the canvas and
  their conditioning latents), ``media`` (MP4, WAV), ``cli`` and ``demo``.

``docs/architecture.md`` follows one call from ``h3cy.load`` down to a C kernel.
"""
from ._config import cache_root as cache_dir, get_num_threads, set_num_threads
from .errors import Busy, Cancelled, CheckpointError, H3Error, UnsupportedCPUError
from . import ops
from .weights.model_folder import ModelFolder, find_model
from .weights.transformer import TransformerCheckpoint, TransformerConfig, open_transformer
from .models.dit import DiT
from .models.tokenizer import Tokenizer
from .models.text_encoder import TextEncoder
from .models.prompt_cache import encode_prompt
from .models.video_vae import VideoDecoder, to_uint8
from .models.video_encoder import VideoEncoder
from .models.audio_vae import AudioDecoder
from .sampling.layout import Geometry, Layout
from .sampling.schedule import Schedule
from .sampling.sampler import STOP, CancelToken, StepState, denoise, initial_noise
from .sampling import audio_schedule
from .pipeline import Pipeline, load
from . import keyframes
from .keyframes import encode_image, prepare_keyframes
from .result import Result
from .tuning import selfcheck

from ._version import __version__

__all__ = [
    # errors and process settings
    "Busy", "Cancelled", "CheckpointError", "H3Error", "UnsupportedCPUError",
    "get_num_threads", "set_num_threads", "cache_dir", "ops", "__version__", "selfcheck",
    # weights
    "ModelFolder", "find_model", "TransformerCheckpoint", "TransformerConfig", "open_transformer",
    # models
    "DiT", "Tokenizer", "TextEncoder", "encode_prompt", "VideoDecoder", "VideoEncoder", "to_uint8", "AudioDecoder",
    # sampling
    "Geometry", "Layout", "Schedule", "STOP", "CancelToken", "StepState", "denoise", "initial_noise",
    "audio_schedule",
    # the pipeline
    "Pipeline", "load", "Result",
    # image conditioning (fl2va keyframes)
    "keyframes", "encode_image", "prepare_keyframes",
]
