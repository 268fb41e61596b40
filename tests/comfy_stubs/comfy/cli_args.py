"""Stand-in for ComfyUI 0.3.64 comfy/cli_args.py: the preview settings only
(``LatentPreviewMethod`` with its four values, ``args.preview_method`` default
``NoPreviews``, ``args.preview_size`` default 512, as ComfyUI's parser sets them)."""
import enum
import types


class LatentPreviewMethod(enum.Enum):
    NoPreviews = "none"
    Auto = "auto"
    Latent2RGB = "latent2rgb"
    TAESD = "taesd"


args = types.SimpleNamespace(preview_method=LatentPreviewMethod.NoPreviews, preview_size=512)
