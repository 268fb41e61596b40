"""h3cy — MiniMax-H3 (text to video with stereo audio) on the CPU.

C kernels (csrc/) do the arithmetic, typed Cython (pyx/) drives them without the GIL,
and this package is the numpy API.  No torch at run time.
"""
from ._config import get_num_threads, set_num_threads
from .errors import Cancelled, CheckpointError, H3Error, UnsupportedCPUError
from . import ops
from .model import DiT

__version__ = "0.1.0"

__all__ = [
    "Cancelled", "CheckpointError", "H3Error", "UnsupportedCPUError",
    "get_num_threads", "set_num_threads", "ops", "DiT", "__version__",
]

# checkpoint reading (issue 3): open a transformer folder in either layout, tensors under diffusers names
from .checkpoint import TransformerCheckpoint, TransformerConfig, open_transformer  # noqa: E402

__all__ += ["TransformerCheckpoint", "TransformerConfig", "open_transformer"]

# sampling (issue 4): geometry, layout, schedules, the denoising loop and its hooks
from .layout import Geometry, Layout  # noqa: E402
from .schedule import Schedule  # noqa: E402
from .sampler import STOP, CancelToken, StepState, denoise, initial_noise  # noqa: E402
from .errors import Busy  # noqa: E402
from . import audio_schedule  # noqa: E402

__all__ += ["Geometry", "Layout", "Schedule", "STOP", "CancelToken", "StepState", "denoise",
            "initial_noise", "Busy", "audio_schedule"]

# prompt encoding (issue 5): the tokenizer
from .tokenizer import Tokenizer  # noqa: E402

__all__ += ["Tokenizer"]

# prompt encoding (issue 5): the Qwen3-VL text stack (hidden_states[50]) and the prompt cache
from .text_encoder import TextEncoder  # noqa: E402
from .prompt_cache import encode_prompt  # noqa: E402

__all__ += ["TextEncoder", "encode_prompt"]

# the pipeline (issue 6): prompt -> MP4
from .pipeline import Pipeline, load  # noqa: E402
from .result import Result  # noqa: E402

__all__ += ["Pipeline", "load", "Result"]

# video decoding (issue 6): the video VAE's ViT decoder, frames to uint8
from .video_vae import VideoDecoder, to_uint8  # noqa: E402

__all__ += ["VideoDecoder", "to_uint8"]

# audio VAE decoder (issue 6): BigVGAN latents -> stereo waveform
from .audio_vae import AudioDecoder  # noqa: E402

__all__ += ["AudioDecoder"]
