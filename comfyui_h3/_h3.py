"""The one place the pack imports h3cy.

ComfyUI installs nothing for a custom node, so the pack must load without h3cy: the nodes
still register (a saved workflow opens) and each one raises :class:`H3cyMissing` with the
install command when it runs; one warning is logged at start-up.
"""
import logging
import sys

log = logging.getLogger("comfyui_h3")

INSTALL_HINT = (
    "The ComfyUI-h3cy nodes need the h3cy package in ComfyUI's own Python environment. "
    f"Install it with:  {sys.executable} -m pip install h3cy   (or, from a source checkout: "
    f"{sys.executable} -m pip install /path/to/h3cy), then restart ComfyUI.")

try:
    import h3cy
    IMPORT_ERROR = None
except ImportError as e:          # noqa: F841 - kept for the message
    h3cy = None
    IMPORT_ERROR = e


class H3cyMissing(RuntimeError):
    """h3cy is not importable in ComfyUI's Python."""


def require():
    """The h3cy module, or H3cyMissing with the install command."""
    if h3cy is None:
        raise H3cyMissing(f"{INSTALL_HINT} (import failed: {IMPORT_ERROR})")
    return h3cy


def warn_if_missing():
    if h3cy is None:
        log.warning("[comfyui_h3] %s (import failed: %s)", INSTALL_HINT, IMPORT_ERROR)
