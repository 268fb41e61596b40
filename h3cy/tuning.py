"""``h3cy selfcheck``: time each weights mode's GEMM at the DiT's shapes on this CPU and
store the result, which ``weights="auto"`` then follows (:mod:`h3cy.ops.measurement`).

>>> rec = h3cy.selfcheck()                  # doctest: +SKIP   (~15-30 s on 2 cores)
>>> rec["fastest"], rec["seconds"]          # doctest: +SKIP
('int8', {'fp32': 2.1, 'bf16': 2.4, 'int8': 1.6, 'int4': 1.5})

The linears are built as the DiT builds them (:func:`h3cy.weights.linears.make_linear`
over bf16 checkpoint bits: bf16 and fp32 attached in place, int8/int4 converted, the FFN
down-projection with its activation groups), so the times are the model's own GEMMs'.
"""
import datetime
import time

import numpy as np

from . import _config
from . import ops
from .ops import measurement

__all__ = ["selfcheck", "BLOCK_SHAPES"]

# One DiT block's linears: name -> (N, K, act_group of the int modes).  The FFN's up
# projection is the fused [gate; value] pair.
BLOCK_SHAPES = {
    "qkv": (7168, 5376, None),
    "attn_out": (5376, 7168, None),
    "ffn_up": (28672, 5376, None),
    "ffn_down": (5376, 14336, 1024),
}
DEFAULT_ROWS = 256
# columns timed per shape: a wider weight is timed on this many of its rows and its time
# scaled by N / TIMED_N (the kernels' rate does not depend on N once every thread has many
# panels; this keeps selfcheck's peak memory and time down: ffn_up is timed as qkv's shape)
TIMED_N = 7168


def _weight_bits(N, K, rng):
    """(N, K) bf16 bits of a random weight (a 64-row block repeated: the kernels' speed does
    not depend on the values, and drawing 100 M normals would take longer than timing)."""
    block = (rng.standard_normal((min(N, 64), K), dtype=np.float32) * 0.02).astype(np.float32)
    w = np.tile(block, (-(-N // block.shape[0]), 1))[:N]
    return np.ascontiguousarray((w.view(np.uint32) >> 16).astype(np.uint16))


def best_time(fn, runs):
    """The shortest of ``runs`` calls of ``fn``, in seconds (cli and bench/ time with it too)."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def selfcheck(threads=None, isa=None, rows=DEFAULT_ROWS, shapes=None, runs=2, save=True, root=None,
              progress=None):
    """Time the GEMMs of one DiT block in fp32, bf16, int8 and int4 on this CPU, and store
    the result for ``weights="auto"``.

    Parameters
    ----------
    threads : int, optional — default :func:`h3cy.get_num_threads` (what a model uses)
    isa : str, optional — kernel path (default ``H3CY_ISA`` or the best available)
    rows : int — activation rows (tokens) of each GEMM (default 256)
    shapes : {name: (N, K) or (N, K, act_group)}, optional — the weights to time (default
        :data:`BLOCK_SHAPES`; small ones make a quick test)
    runs : int — runs per mode and shape, modes interleaved; the fastest counts
    save : bool — write the measurement file (:func:`h3cy.ops.measurement.measurement_path`)
    root : folder for the file instead of h3cy's cache folder
    progress : callable(str), optional — one line per step (the CLI prints them)

    Returns
    -------
    dict — the record stored (:mod:`h3cy.ops.measurement`), with ``path`` when saved
    """
    from .weights.linears import make_linear
    from .ops.bf16 import round_bf16
    say = progress or (lambda line: None)
    isa = ops.resolve_isa(isa)
    n = _config.check_threads(_config.get_num_threads() if threads is None else threads)
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        from .errors import H3ValueError
        raise H3ValueError(f"rows must be a positive int, got {rows!r}")
    pool = ops.ThreadPool(n)
    shapes = BLOCK_SHAPES if shapes is None else {k: (tuple(v) + (None,))[:3] for k, v in shapes.items()}
    modes = measurement.MEASURED_MODES
    rng = np.random.default_rng(0)
    secs = {m: 0.0 for m in modes}
    flop = 0.0
    timed = {}          # (N, K, act_group) -> {mode: seconds}: equal timed shapes are timed once
    t_start = time.perf_counter()
    for i, (name, (N, K, act_group)) in enumerate(shapes.items()):
        Nt = min(N, TIMED_N)
        flop += 2.0 * rows * N * K
        if (Nt, K, act_group) not in timed:
            say(f"[{i + 1}/{len(shapes)}] {name} {N}x{K}: timing {'/'.join(modes)} at {rows} rows"
                + (f" (on {Nt} of its {N} rows)" if Nt < N else "") + " ...")
            w = _weight_bits(Nt, K, rng)
            x = rng.standard_normal((rows, K), dtype=np.float32)
            xb = round_bf16(x)            # the bf16 mode's inputs are bf16 values (bf16_inputs)
            out = np.empty((rows, Nt), np.float32)
            lins = {m: make_linear(w, ops.Compute(m, isa, pool),
                                   act_group=act_group if m in ("int8", "int4") else None)[0]
                    for m in modes}
            best = {m: float("inf") for m in modes}
            for _ in range(max(1, int(runs))):      # modes interleaved: a burst of load hits all
                for m in modes:
                    xm = xb if m == "bf16" else x
                    best[m] = min(best[m], best_time(lambda: lins[m](xm, out=out), 1))
            del lins, w
            timed[(Nt, K, act_group)] = best
        else:
            say(f"[{i + 1}/{len(shapes)}] {name} {N}x{K}: as {Nt}x{K}, timed above")
        best = timed[(Nt, K, act_group)]
        for m in modes:
            secs[m] += best[m] * N / Nt
        say("      " + "  ".join(f"{m} {2.0 * rows * Nt * K / best[m] / 1e9:6.1f}" for m in modes) + "  GOP/s")
    fastest = min(measurement.AUTO_CANDIDATES, key=lambda m: secs[m])
    rec = dict(measurement.measurement_key(isa))
    rec.update(threads=n, rows=int(rows), features=list(ops.cpu_features()),
               shapes={k: list(v[:2]) for k, v in shapes.items()},
               seconds={m: float(secs[m]) for m in modes},
               gop_s={m: float(flop / secs[m] / 1e9) for m in modes},
               fastest=fastest, measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               wall_s=round(time.perf_counter() - t_start, 2))
    if save:
        rec["path"] = measurement.save_measurement(rec, root)
    return rec
