"""The release's configuration files, shipped in the package (h3cy/data/configs/SOURCE.md):
what a single file's tensor shapes cannot tell."""
import os

from .files import load_json

FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "configs")
COMPONENTS = ("transformer", "text_encoder", "video_vae", "audio_vae")


def released_config(component):
    """The released ``config.json`` of ``component`` as a dict (a fresh copy)."""
    if component not in COMPONENTS:
        raise ValueError(f"component must be one of {COMPONENTS}, got {component!r}")
    return load_json(os.path.join(FOLDER, component + ".json"), f"the released {component} config")
