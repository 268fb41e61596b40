"""What ``weights="auto"`` runs for the transformer and the text encoder of a given
checkpoint on this CPU (:func:`auto_weights`).

- Tensors stored quantised run as stored: a single file with int8(-convrot) linears runs
  int8, an NVFP4 text encoder too (int8 being the mode whose activations the NVFP4 GEMM
  quantises alike: its linears run on the NVFP4 GEMM over the file's codes).
- A float checkpoint runs the faster of bf16 and int8 by the stored GEMM measurement of
  this CPU (``h3cy selfcheck``), or the static rule's mode without one
  (:mod:`h3cy.ops.measurement`), among the modes whose resident size fits 80% of the
  memory available; int4 only when neither fits.  A streamed load keeps only a few blocks
  resident, so memory does not narrow its choice.

Only headers are read; no kernel is timed.
"""
import logging
import os

from .. import ops
from .._memory import available_memory
from ..errors import CheckpointError
from ..ops import measurement
from ..ops._base import AUTO_WEIGHTS
from .files import report_once
from .model_folder import component_sizes, resident_bytes

log = logging.getLogger("h3cy")

__all__ = ["auto_weights", "auto_choice", "stored_quantised", "component_need"]

# the text encoder reads hidden_states[50] (its layers 0..49)
_TE_OUTPUT_LAYER = 50


def stored_quantised(path):
    """True when ``path`` is a single file holding quantised linears (headers only)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        return False
    from .single_file import detect
    return detect(path).quantised


def component_need(component, path=None, sizes=None, output_layer=_TE_OUTPUT_LAYER):
    """``{mode: resident bytes}`` of ``component`` ("transformer" or "text_encoder") for
    bf16, int8 and int4, from ``sizes`` (:func:`h3cy.weights.model_folder.tensor_sizes`)
    or the headers of ``path``."""
    if sizes is None:
        sizes = component_sizes(os.fspath(path), component, output_layer)
    return {m: resident_bytes(sizes, component, m) for m in ("bf16", "int8", "int4")}


def auto_choice(component, path, isa, streaming=False, sizes=None, room=None,
                output_layer=_TE_OUTPUT_LAYER):
    """The :class:`h3cy.ops.measurement.Choice` for ``component`` at ``path`` on ``isa``
    (``room``: bytes available, default the process's; ``sizes`` as for
    :func:`component_need`)."""
    try:
        quantised = stored_quantised(path)
        need = None if streaming is True else component_need(component, path, sizes, output_layer)
    except (CheckpointError, OSError, ValueError):
        # an unreadable checkpoint: the loader reports it, naming the file, when it opens it
        quantised, need = False, None
    if quantised:
        return measurement.Choice(AUTO_WEIGHTS, "stored",
                                  "the file's linears are stored quantised and run as stored")
    return measurement.choose_weights(isa, need, available_memory() if room is None else room)


def auto_weights(component, path, isa=None, streaming=False, sizes=None, room=None,
                 output_layer=_TE_OUTPUT_LAYER):
    """The weights mode ``weights="auto"`` runs for ``component`` at ``path`` (see the module
    docstring); says why once per process (log, info level)."""
    isa = ops.resolve_isa(isa)
    choice = auto_choice(component, path, isa, streaming, sizes, room, output_layer)
    report_once(os.fspath(path), f"weights='auto' -> {choice.mode} for the {component.replace('_', ' ')} "
                                 f"({choice.reason})")
    return choice.mode
