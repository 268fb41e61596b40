"""ISA, thread-pool and weights-mode resolution, and Linear (see h3cy.ops)."""
from dataclasses import dataclass

import numpy as np

from .. import _config
from .. import _kernels
from ..errors import H3ValueError, UnsupportedCPUError

__all__ = ["active_isa", "available_isas", "isa_supported", "cpu_features", "neon_extensions", "resolve_isa", "ThreadPool", "Compute",
           "Linear", "WEIGHT_MODES", "ATTENTION_MODES", "attention_bf16"]

WEIGHT_MODES = ("fp32", "bf16", "fp16", "int8", "int4")
ATTENTION_MODES = ("auto", "fp32", "bf16")
ThreadPool = _kernels.ThreadPool
cpu_features = _kernels.cpu_features


def neon_extensions():
    """The neon path's extensions its linears use on this machine: those the CPU has
    (``_kernels.cpu_extensions``) that ``H3CY_NEON_EXT`` allows, e.g. ``("i8mm", "bf16")``
    on a Graviton 3; ``()`` on x86."""
    allowed = _config.neon_extensions()
    return tuple(n for n in _kernels.cpu_extensions() if n in allowed)


# Each path's rank for H3CY_ISA_MAX (ref < avx2 | neon < avxvnni < avx512 < amx), and the
# order in which the default is picked (the C library's h3_isa_best order).
_ISA_RANK = {"ref": 0, "avx2": 1, "neon": 1, "avxvnni": 2, "avx512": 3, "amx": 4}
_BEST_FIRST = ("amx", "avx512", "avxvnni", "avx2", "neon", "ref")


def _isa_cap():
    """The rank H3CY_ISA_MAX allows, or None; an unknown name is a clear error."""
    cap = _config.env_isa_max()
    if cap is None:
        return None
    if cap not in _ISA_RANK:
        raise H3ValueError(f"H3CY_ISA_MAX={cap!r} is not an ISA path; expected one of "
                           f"{', '.join(_kernels.ISA_NAMES)}")
    return _ISA_RANK[cap]


def _hidden(name):
    cap = _isa_cap()
    return cap is not None and _ISA_RANK.get(name, 0) > cap


def isa_supported(name):
    """True if this machine can run the named path (and H3CY_ISA_MAX does not hide it)."""
    return _kernels.isa_supported(name) and not _hidden(name)


def available_isas():
    """The ISA paths this machine can run, slowest first (``ref`` is always there);
    ``H3CY_ISA_MAX`` hides the paths above the one it names."""
    return sorted((name for name in _kernels.ISA_NAMES if isa_supported(name)), key=lambda n: _ISA_RANK.get(n, 0))


def _best_isa():
    if _isa_cap() is None:
        return _kernels.isa_best()
    return next(n for n in _BEST_FIRST if isa_supported(n))


# What weights="auto" stands for where nothing more is known (resolve_weights and
# Compute.resolve called without a checkpoint): int8, the static rule's mode on every path
# (h3cy.ops.measurement.STATIC_RULE).  The transformer's and the text encoder's loaders
# resolve "auto" before that, from the checkpoint (tensors stored quantised run as stored),
# the stored GEMM measurement of this CPU and the memory available: h3cy.weights.auto.
# The decoders pass auto="fp32": their float files run as released (int8 costs visible
# quality there).
AUTO_WEIGHTS = "int8"


def resolve_weights(weights, modes=WEIGHT_MODES, auto=AUTO_WEIGHTS):
    """The weights mode to run: ``weights`` itself, or for "auto" ``auto`` (the
    component's mode for float files; H3ValueError for anything not in ``modes`` or
    "auto")."""
    if weights == "auto":
        return auto if auto in modes else modes[0]
    if weights not in modes:
        raise H3ValueError(f"weights must be one of {modes} or 'auto', got {weights!r}")
    return weights


def resolve_isa(isa=None):
    """Name of the path to run: ``isa`` if given, else ``H3CY_ISA``, else the best.
    Raises UnsupportedCPUError if the CPU cannot run it (or ``H3CY_ISA_MAX`` hides it),
    ValueError if unknown."""
    name = isa if isa is not None else (_config.env_isa() or _best_isa())
    if not isinstance(name, str):
        raise H3ValueError(f"isa must be a string, got {type(name).__name__}")
    name = name.lower()
    _kernels.isa_check(name)
    if _hidden(name):
        raise UnsupportedCPUError(f"ISA path {name!r} is hidden by H3CY_ISA_MAX="
                                  f"{_config.env_isa_max()}")
    return name


def attention_bf16(attention, weights):
    """Whether a model in ``weights`` mode multiplies its attention's q, k, v (and softmax
    numerators) as bf16 pairs, given ``attention`` (None: ``H3CY_ATTENTION``, else "auto").

    - bf16 weights: always (the reference's bf16 attention; "fp32" does not apply).
    - "auto": int8 and int4 too (quantised modes trade precision for speed: on AMX this
      halves the attention's time; its rounding, ~1e-3 relative, is far inside their
      3e-2 / 8e-2 tolerance), float32 for fp32 and fp16.
    - "fp32" / "bf16": float32 / bf16 products for the other modes.
    The bf16 products run only where the CPU multiplies bf16 natively (AMX tiles,
    AVX512-BF16) and for non-causal attention with head_dim a multiple of 32 up to 256;
    elsewhere the float32 kernels run whatever this says.
    """
    mode = attention if attention is not None else (_config.env_attention() or "auto")
    if not isinstance(mode, str) or mode.lower() not in ATTENTION_MODES:
        raise H3ValueError(f"attention must be one of {ATTENTION_MODES} or None, got {mode!r}")
    mode = mode.lower()
    if weights == "bf16":
        return True
    if mode == "auto":
        return weights in ("int8", "int4")
    return mode == "bf16"


def active_isa():
    """The path ops and models use when created with ``isa=None``."""
    return resolve_isa(None)


_pools = {}


def pool_for(threads):
    """The pool an ops object runs on: ``threads`` itself when it is a ThreadPool (a
    model's own, passed down to its layers), else a pool shared per thread count by the
    ops objects that users make directly (models own theirs: see Compute)."""
    if isinstance(threads, ThreadPool):
        return threads
    n = _config.check_threads(_config.get_num_threads() if threads is None else threads)
    if n not in _pools:
        _pools[n] = _kernels.ThreadPool(n)
    return _pools[n]


@dataclass(frozen=True)
class Compute:
    """What a model computes with, resolved once when it loads and handed to every layer:
    the weights mode, the kernel path and the model's own thread pool.

    Build with :meth:`resolve`; nothing below the model parses these settings again."""
    weights: str
    isa: str
    pool: ThreadPool

    @property
    def threads(self):
        return self.pool.threads

    @classmethod
    def resolve(cls, weights, isa=None, threads=None, modes=WEIGHT_MODES, auto=AUTO_WEIGHTS):
        """Check ``weights`` against ``modes`` ("auto" stands for ``auto``; H3ValueError
        otherwise), pick the path (``isa``, else
        ``H3CY_ISA``, else the best: UnsupportedCPUError if the CPU lacks it) and make a
        pool of ``threads`` (default :func:`h3cy.get_num_threads`; H3ValueError if bad)."""
        weights = resolve_weights(weights, modes, auto)
        if isinstance(threads, ThreadPool):
            pool = threads
        else:
            pool = ThreadPool(_config.check_threads(_config.get_num_threads() if threads is None
                                                    else threads))
        return cls(weights, resolve_isa(isa), pool)


def need_array(arr, name, dtype, ndim=None, shape=None):
    """Check an input array without copying it; raise H3ValueError naming the problem."""
    if not isinstance(arr, np.ndarray):
        raise H3ValueError(f"{name} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype != np.dtype(dtype):
        raise H3ValueError(f"{name} must be {np.dtype(dtype).name}, got {arr.dtype.name}")
    if ndim is not None and arr.ndim != ndim:
        raise H3ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if shape is not None:
        for i, (want, got) in enumerate(zip(shape, arr.shape)):
            if want is not None and want != got:
                raise H3ValueError(f"{name} has shape {arr.shape}, expected "
                                   f"({', '.join('?' if s is None else str(s) for s in shape)})")
    if not arr.flags.c_contiguous:
        raise H3ValueError(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    return arr


def drop_batch(x, name, shape):
    """``x`` as an array of the rank of ``shape`` (a string like "(rows, channels)" giving
    its dimensions): a leading batch dimension is accepted when it is 1 and dropped."""
    x = np.asarray(x)
    ndim = shape.count(",") + 1
    if x.ndim == ndim + 1:
        if x.shape[0] != 1:
            raise H3ValueError(f"{name}: batch size must be 1, got shape {x.shape}")
        x = x[0]
    if x.ndim != ndim:
        raise H3ValueError(f"{name} must have shape {shape} or (1, {shape[1:]}, got {x.shape}")
    return x


def out_array(out, name, shape):
    if out is None:
        return np.empty(shape, dtype=np.float32)
    need_array(out, name, np.float32, len(shape), shape)
    if not out.flags.writeable:
        raise H3ValueError(f"{name} is read-only")
    return out


_warned = set()


def _warn_if_portable(weights, isa):
    """Say once per process, when int8/int4 run kernels without VNNI / dot-product
    instructions, what runs on this CPU and what the stored GEMM measurement (or, without
    one, the static rule) chooses (:func:`h3cy.ops.measurement.portable_note`).  A warning
    unless the measurement shows the running mode is the faster one; then an info line."""
    if _warned:
        return
    from . import measurement
    note = measurement.portable_note(weights, isa, set(cpu_features()))
    if note is None:
        return
    _warned.add("portable")
    is_warning, text = note
    if is_warning:
        import warnings
        warnings.warn(text, RuntimeWarning, stacklevel=3)
    else:
        import logging
        logging.getLogger("h3cy").info("%s", text)


class Linear:
    """``y[M, N] = x[M, K] @ W[N, K].T (+ bias)`` with W stored in a chosen mode.

    Parameters
    ----------
    weight : ndarray of shape (N, K)
        float32, or the raw bits of bf16 as uint16 with ``weight_dtype="bf16"``.
    bias : ndarray of shape (N,), float32, optional
    weights : {"fp32", "bf16", "fp16", "int8", "int4"}, default "int8"
        How W is stored and multiplied.  Activations are float32 in every mode.
        ``int8``: symmetric, one scale per output channel; ``int4``: symmetric, one scale
        per ``group_size`` input channels.  For both, x is quantised to int8 per row on
        the fly, with one scale per ``act_group`` input channels (default: whole row).
    group_size : {32, 64, 128}, optional (int4 only; default 64)
    act_group : int, optional
        Input channels per activation scale (multiple of 8; for int4 a multiple of
        group_size).  Finer scales tame outlier channels (the FFN down-projection).
    pair : bool, default False
        W's rows are ``[gate; value]`` halves; enables :meth:`swiglu`.
    bf16_inputs : bool, default False
        bf16 weights only: promise that every x is bf16-representable (already rounded),
        which lets CPUs with AVX512-BF16 multiply bf16 pairs (VDPBF16PS, ~2x the widening
        FMA kernel on Zen 4).  Products stay exact; the summation order differs.
    rot_group : int, optional (int8 only)
        Quantise ``W H`` and rotate each x row by ``H`` before quantising it, ``H`` the
        block Hadamard of :func:`h3cy.ops.hadamard` with this group (a power of 4 dividing
        K): the int8-convrot recipe applied to a float weight.  ``x W^T = (x H)(W H)^T``.
    isa, threads : see the module docstring.

    :meth:`from_int8` makes one over int8 weights quantised elsewhere (int8-convrot files).
    """

    def __init__(self, weight, bias=None, weights="int8", group_size=None, act_group=None,
                 isa=None, weight_dtype="fp32", threads=None, pair=False, bf16_inputs=False,
                 rot_group=None):
        if weights not in WEIGHT_MODES:
            raise H3ValueError(f"weights must be one of {WEIGHT_MODES}, got {weights!r}")
        if weight_dtype in ("fp32", "float32"):
            need_array(weight, "weight", np.float32, 2)
            src = 0
        elif weight_dtype == "bf16":
            need_array(weight, "weight", np.uint16, 2)
            src = 1
        else:
            raise H3ValueError(f"weight_dtype must be 'fp32' or 'bf16', got {weight_dtype!r}")
        N, K = weight.shape
        if bias is not None:
            need_array(bias, "bias", np.float32, 1, (N,))
        if group_size is not None and weights != "int4":
            raise H3ValueError("group_size applies to weights='int4' only")
        if act_group is not None and weights not in ("int8", "int4"):
            raise H3ValueError("act_group applies to weights='int8' or 'int4' only")
        if rot_group is not None and weights != "int8":
            raise H3ValueError("rot_group applies to weights='int8' only")
        self.isa = resolve_isa(isa)
        self.weights = weights
        self.group_size = (group_size or 64) if weights == "int4" else None
        self.act_group = act_group
        self.N, self.K = N, K
        self.pair = bool(pair)
        self._pool = pool_for(threads)
        _warn_if_portable(weights, self.isa)
        self._c = _kernels.LinearCore(weight, src, bias, weights, group_size or 0,
                                      act_group or 0, int(self.pair), self.isa, self._pool,
                                      int(bool(bf16_inputs)), int(rot_group or 0))

    @classmethod
    def from_int8(cls, q, scales, bias=None, rot_group=None, act_group=None, pair=False, isa=None,
                  threads=None):
        """An int8 Linear over weights quantised elsewhere: ``W = q * scales[:, None]``,
        packed once (``q`` is not kept).

        Parameters
        ----------
        q : ndarray of shape (N, K), int8 (-128 is read as -127)
        scales : ndarray of shape (N,), float32 (one per output row)
        rot_group : int, optional — ``q`` holds ``W H`` (int8-convrot, see ``rot_group``
            above): x is rotated by ``H`` before it is quantised
        bias, act_group, pair, isa, threads : as for the constructor
        """
        need_array(q, "q", np.int8, 2)
        N = q.shape[0]
        need_array(scales, "scales", np.float32, 1, (N,))
        if bias is not None:
            need_array(bias, "bias", np.float32, 1, (N,))
        name, pool = resolve_isa(isa), pool_for(threads)
        _warn_if_portable("int8", name)
        core = _kernels.linear_create_q8(q, scales, bias, name, pool, int(bool(pair)), int(rot_group or 0),
                                         int(act_group or 0))
        return cls.from_core(core, "int8", pool, act_group=act_group)

    @classmethod
    def from_core(cls, core, weights, pool, group_size=None, act_group=None):
        """A Linear over an existing ``LinearCore`` (storage attached in place: a weight-cache
        file, mapped bf16 checkpoint rows), running on ``pool``."""
        self = cls.__new__(cls)
        self._c, self._pool = core, pool
        self.isa, self.weights = core.isa, weights
        self.N, self.K, self.pair = core.N, core.K, bool(core.pair)
        self.group_size, self.act_group = group_size, act_group
        return self

    @property
    def threads(self):
        return self._pool.threads

    @property
    def core(self):
        """The C linear (``h3cy._kernels.LinearCore``) that C drivers such as the denoising
        loop call directly; it keeps its weights alive."""
        return self._c

    @property
    def weight_bytes(self):
        """Bytes held for the converted weight and its scales."""
        return self._c.weight_bytes

    @property
    def extensions(self):
        """The optional CPU extensions this linear's kernels use, beyond its ``isa``: on
        ``neon``, ``"i8mm"`` (SMMLA, int8/int4 weights; same bits as without) and
        ``"bf16"`` (BFMMLA, bf16 weights with ``bf16_inputs``), where the CPU has them and
        ``H3CY_NEON_EXT`` allows them; ``()`` on every other path."""
        return self._c.extensions

    @property
    def activation_dtype(self):
        """"float32", or "bfloat16" where the kernel rounds x to bf16 before multiplying
        (AMX's bf16 tiles, as torch's bf16 linear does)."""
        return "bfloat16" if self._c.bf16_activations else "float32"

    def dequantized(self):
        """The float32 weight the GEMM effectively multiplies by, shape (N, K)."""
        return self._c.dequantized()

    def _x(self, x):
        need_array(x, "x", np.float32, 2, (None, self.K))
        return x

    def __call__(self, x, out=None):
        """x: (M, K) float32 -> (M, N) float32."""
        x = self._x(x)
        out = out_array(out, "out", (x.shape[0], self.N))
        self._c.forward(x, out, 0)
        return out

    def swiglu(self, x, out=None):
        """``silu(x @ Wg.T + bg) * (x @ Wv.T + bv)`` for ``W = [Wg; Wv]`` (needs pair=True):
        x (M, K) -> (M, N // 2)."""
        if not self.pair:
            raise H3ValueError("swiglu() needs a Linear created with pair=True")
        x = self._x(x)
        out = out_array(out, "out", (x.shape[0], self.N // 2))
        self._c.forward(x, out, 1)
        return out

    def residual(self, x, resid, gate=None, gate_row=None, out=None):
        """``out = resid + gate[gate_row] * (x @ W.T + b)`` (gate optional; out may be resid).

        resid: (M, N); gate: (G, N) table of per-row gates; gate_row: (M,) int32 indices
        into it (default row m -> gate row m, which then needs G >= M)."""
        x = self._x(x)
        M = x.shape[0]
        need_array(resid, "resid", np.float32, 2, (M, self.N))
        if gate is not None:
            need_array(gate, "gate", np.float32, 2, (None, self.N))
        if gate_row is not None:
            if gate is None:
                raise H3ValueError("gate_row given without gate")
            need_array(gate_row, "gate_row", np.int32, 1, (M,))
        out = out_array(out, "out", (M, self.N))
        self._c.forward(x, out, 2, resid, gate, gate_row)
        return out

    def __repr__(self):
        return (f"Linear(N={self.N}, K={self.K}, weights={self.weights!r}, isa={self.isa!r}, "
                f"threads={self.threads})")
