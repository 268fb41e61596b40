"""Stand-in for ComfyUI 0.3.64 comfy_api/latest/__init__.py: ComfyExtension and io only
(see tests/comfy_stubs/README.md)."""
from abc import ABC, abstractmethod

from ._io import _IO as io  # noqa: F401


class ComfyExtension(ABC):
    async def on_load(self) -> None:
        """Called when an extension is loaded."""

    @abstractmethod
    async def get_node_list(self) -> list:
        """Returns a list of nodes that this extension provides."""


__all__ = ["ComfyExtension", "io"]
