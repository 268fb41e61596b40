"""h3cy.ops — the C kernels, callable on numpy arrays.

Every op runs on an instruction-set path: ``isa=None`` takes the process default
(``H3CY_ISA`` if set, else the best the CPU supports); a name forces that path and raises
:class:`~h3cy.UnsupportedCPUError` if the CPU lacks it.  Each object reports the path it
runs in ``.isa``.  Inputs must be C-contiguous arrays of the stated dtype: h3cy never
copies a large activation behind your back, so a wrong dtype or a strided view raises
``ValueError`` (an :class:`~h3cy.errors.H3ValueError`) naming the argument.

>>> import numpy as np, h3cy
>>> w = np.random.default_rng(0).standard_normal((64, 48), dtype=np.float32)
>>> lin = h3cy.ops.Linear(w, weights="fp32")
>>> y = lin(np.ones((3, 48), np.float32))          # y = x @ w.T, shape (3, 64)

Modules: ``_base`` (ISA, thread-pool and weights-mode resolution: Compute, Linear), ``measurement``
(the stored GEMM measurement and the static rule behind weights="auto"), ``attention``,
``elem`` (norms, RoPE, activations, conversions), ``bf16`` (bf16 rounding in numpy).
"""
from . import attention as _attention_module, elem as _elem_module, measurement  # noqa: F401
from ._base import (ATTENTION_MODES, WEIGHT_MODES, Compute, Linear, ThreadPool, active_isa, attention_bf16,
                    available_isas, cpu_features, drop_batch, isa_supported, neon_extensions, resolve_isa,
                    resolve_weights)
from .attention import *  # noqa: F401,F403
from .elem import *  # noqa: F401,F403

__all__ = (["active_isa", "available_isas", "isa_supported", "cpu_features", "neon_extensions", "resolve_isa", "ThreadPool", "Compute",
            "Linear", "WEIGHT_MODES", "ATTENTION_MODES", "attention_bf16", "drop_batch",
            "resolve_weights"]
           + _attention_module.__all__ + _elem_module.__all__)
