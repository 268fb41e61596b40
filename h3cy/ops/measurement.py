"""The weights mode that ``weights="auto"`` runs for float checkpoints: the stored GEMM
measurement of this CPU (``h3cy selfcheck``), else a static rule per ISA path.

Nothing here times a kernel: loading only reads the small JSON file that
:func:`h3cy.selfcheck` wrote.  The file lives in h3cy's cache folder
(``$H3CY_CACHE_DIR``, else ``~/.cache/h3cy``)::

    <cache>/selfcheck/gemm-<isa>-<sha256(cpu model)[:12]>.json

and holds ``{"format", "h3cy", "kernels", "cpu", "isa", "ext", "threads", "rows", "shapes",
"seconds": {mode: s}, "gop_s": {mode: rate}, "fastest", "measured_at"}``: ``seconds`` is
the time of one DiT block's linears at ``rows`` rows in each mode.  A file is used only
when its format, h3cy version, kernel build, CPU model string, ISA path and (on neon) the
extensions in use all equal this process's; anything else (missing, unreadable, bad JSON, wrong keys, another CPU or build)
falls back to the static rule, with at most one warning per process.

The choice for a float checkpoint: the faster of bf16 and int8 by the measurement (int8
by the static rule) among those whose resident size fits the memory available, int4 only
when neither fits.  Tensors stored quantised run as stored whatever this says (the
loaders decide that before asking: :mod:`h3cy.weights.auto`).
"""
import hashlib
import json
import logging
import math
import os
import platform
import warnings

from .. import _config
from .. import _kernels
from .._version import __version__

log = logging.getLogger("h3cy")

__all__ = ["FORMAT_VERSION", "cpu_model", "measurement_key", "measurement_path", "load_measurement",
           "save_measurement", "static_choice", "choose_weights", "STATIC_RULE", "Choice"]

FORMAT_VERSION = 1
# the modes selfcheck times; "auto" chooses among the middle two, int4 being the fallback
MEASURED_MODES = ("fp32", "bf16", "int8", "int4")
AUTO_CANDIDATES = ("bf16", "int8")
# the share of the available memory a resident component may take (as the pipeline's
# streaming="auto" rule: h3cy.pipeline.AUTO_STREAM_FRACTION)
FIT_FRACTION = 0.8

# The static rule: what "auto" runs without a stored measurement, per ISA path, and why.
# It is int8 on every path h3cy has: int8 takes half of bf16's memory and bandwidth, and on
# each path its products are at least as dense as bf16's:
STATIC_RULE = {
    "amx": ("int8", "AMX int8 tiles (TDPBSSD) multiply at twice the bf16 tiles' rate"),
    "avx512": ("int8", "VNNI (vpdpbusd) does 4 int8 products per 32-bit lane to bf16's 2 "
                       "(VDPBF16PS); without VNNI the vpmaddubsw kernels still beat bf16 widened "
                       "to fp32 FMAs"),
    "avxvnni": ("int8", "AVX-VNNI (vpdpbusd on ymm) does 4 int8 products per lane; AVX2 has no "
                        "bf16 product, bf16 is widened to fp32 FMAs"),
    "avx2": ("int8", "AVX2 has no bf16 product (bf16 is widened to fp32 FMAs); measured on a "
                     "2-core Zen 3, a full-size block ran 8.9 s in int8, 13.3 s in bf16"),
    "neon": ("int8", "SMMLA (i8mm) does 32 int8 products per instruction to BFMMLA's 16 bf16, SDOT "
                     "16 to a widening FMA's 4 (SMULL kernels without SDOT still beat widened bf16)"),
    "ref": ("int8", "the portable scalar path: neither mode is fast, int8 takes half the memory"),
}
_STATIC_DEFAULT = ("int8", "the default for paths without a rule of their own")

_state = {"warned": set(), "cpu": None, "kernels": None}


def cpu_model():
    """This CPU's model string (``/proc/cpuinfo``'s "model name"; on ARM Linux the
    implementer and part numbers; on macOS the brand string; else :func:`platform.processor`
    or the machine name).  The measurement is stored and looked up under it."""
    if _state["cpu"] is None:
        _state["cpu"] = _read_cpu_model()
    return _state["cpu"]


def _read_cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        text = ""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    if fields.get("model name"):
        return " ".join(fields["model name"].split())
    if fields.get("CPU implementer") and fields.get("CPU part"):
        return (f"ARM implementer {fields['CPU implementer']} part {fields['CPU part']}"
                f" variant {fields.get('CPU variant', '?')}")
    if platform.system() == "Darwin":
        import subprocess
        try:
            r = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                               timeout=5)
            if r.returncode == 0 and r.stdout.strip():
                return r.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _kernels_build():
    """A hash of the compiled kernels (the extension file): a measurement made with other
    kernels, after an upgrade or a rebuild, does not describe these."""
    if _state["kernels"] is None:
        h = hashlib.sha256()
        try:
            with open(_kernels.__file__, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except (OSError, AttributeError, TypeError):
            h.update(b"unknown")
        _state["kernels"] = h.hexdigest()[:16]
    return _state["kernels"]


def measurement_key(isa):
    """What a stored measurement must match to be used here: format, h3cy version, kernel
    build, CPU model string, ISA path and, on neon, the extensions its kernels use
    (H3CY_NEON_EXT switches SMMLA/BFMMLA off: other kernels, another measurement)."""
    # h3cy.ops.neon_extensions(), computed here: _base imports this module
    ext = [n for n in _kernels.cpu_extensions() if n in _config.neon_extensions()] if isa == "neon" else []
    return {"format": FORMAT_VERSION, "h3cy": __version__, "kernels": _kernels_build(), "cpu": cpu_model(),
            "isa": isa, "ext": ext}


def measurement_path(isa, root=None):
    """``<root>/selfcheck/gemm-<isa>-<hash of the CPU model>.json`` (``root``: h3cy's
    cache folder, ``$H3CY_CACHE_DIR`` or ``~/.cache/h3cy``)."""
    root = _config.cache_root() if root is None else os.fspath(root)
    cpu = hashlib.sha256(cpu_model().encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return os.path.join(root, "selfcheck", f"gemm-{isa}-{cpu}.json")


def _warn_once(path, why):
    if path in _state["warned"]:
        log.debug("h3cy: %s: %s", path, why)
        return
    _state["warned"].add(path)
    warnings.warn(f"h3cy: the stored GEMM measurement {path} is not used ({why}); weights='auto' "
                  "follows the static rule (`h3cy selfcheck` measures again)", RuntimeWarning, stacklevel=3)


def _check(rec, key):
    """None if ``rec`` is a usable measurement for ``key``, else why not."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    for k, want in key.items():
        if k not in rec:
            return f"no {k!r}"
        if rec[k] != want:
            return f"{k} is {rec[k]!r}, this process has {want!r}"
    secs = rec.get("seconds")
    if not isinstance(secs, dict):
        return "no 'seconds' table"
    for m in AUTO_CANDIDATES:
        v = secs.get(m)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            return f"seconds[{m!r}] is {v!r}, not a positive number"
    return None


def load_measurement(isa, root=None):
    """The stored measurement for this CPU and ``isa`` (a dict, see the module docstring),
    or None: no file (silently), or one that is unreadable or describes another CPU, ISA
    path, h3cy version or kernel build (one RuntimeWarning per file and process)."""
    path = measurement_path(isa, root)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1 << 20)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        _warn_once(path, f"unreadable: {e}")
        return None
    try:
        rec = json.loads(text)
    except ValueError as e:
        _warn_once(path, f"not valid JSON: {e}")
        return None
    why = _check(rec, measurement_key(isa))
    if why is not None:
        _warn_once(path, why)
        return None
    rec["path"] = path
    return rec


def save_measurement(rec, root=None):
    """Write ``rec`` (selfcheck's result, with :func:`measurement_key` fields) atomically to
    :func:`measurement_path`; returns the path."""
    path = measurement_path(rec["isa"], root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({k: v for k, v in rec.items() if k != "path"}, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def static_choice(isa):
    """``(mode, reason)`` of the static rule for ``isa`` (:data:`STATIC_RULE`)."""
    return STATIC_RULE.get(isa, _STATIC_DEFAULT)


class Choice:
    """What ``weights="auto"`` runs: ``mode``, ``source`` ("measured", "static" or
    "stored": tensors stored quantised) and ``reason`` (one line)."""

    __slots__ = ("mode", "source", "reason")

    def __init__(self, mode, source, reason):
        self.mode, self.source, self.reason = mode, source, reason

    def __repr__(self):
        return f"Choice({self.mode!r}, {self.source!r}, {self.reason!r})"


def ranking(isa, root=None):
    """``(modes fastest first, measurement or None, reason)`` among bf16 and int8."""
    rec = load_measurement(isa, root)
    if rec is None:
        mode, why = static_choice(isa)
        return [mode], None, f"static rule for {isa}: {why}"
    secs = rec["seconds"]
    order = sorted(AUTO_CANDIDATES, key=lambda m: secs[m])
    fast, slow = order
    return order, rec, (f"measured on this CPU ({isa}): {fast} {secs[slow] / secs[fast]:.2f}x "
                        f"{slow}'s speed ({rec['path']})")


def choose_weights(isa, need=None, room=None, root=None):
    """The :class:`Choice` for a float checkpoint on ``isa``.

    need : {mode: resident bytes} (bf16, int8 and int4), or None when memory does not
        constrain the choice (a streamed load)
    room : bytes available (None: unknown, everything fits)

    The fastest of bf16 and int8 (measured; the static rule's mode without a measurement)
    whose resident size fits ``FIT_FRACTION`` of ``room``; int4 when none does."""
    order, rec, why = ranking(isa, root)
    source = "static" if rec is None else "measured"

    def fits(m):
        return need is None or room is None or need[m] <= FIT_FRACTION * room
    for i, mode in enumerate(order):
        if fits(mode):
            if i:
                why += f"; {', '.join(order[:i])} does not fit the memory available"
            return Choice(mode, source, why)
    return Choice("int4", source, f"neither {' nor '.join(order)} fits the memory available ({why})")


def portable_facts(weights, isa, feats):
    """The slow kernels ``weights`` runs on ``isa`` given the CPU features, or None: int8/int4
    without VNNI or the dot-product instructions run exact but slower kernels."""
    if weights not in ("int8", "int4"):
        return None
    if isa == "avx512" and "avx512_vnni" not in feats:
        return "the AVX-512 path without VNNI (vpmaddubsw kernels)"
    if isa == "avx2":
        return "the AVX2 path without VNNI (vpmaddubsw kernels)"
    if isa == "neon" and "asimddp" not in feats:
        return "the NEON path without the dot-product extension (SMULL kernels)"
    return None


def portable_note(weights, isa, feats):
    """``(is_warning, text)`` about ``weights`` on ``isa``, or None when its kernels are the
    fast ones.  States what runs on this CPU and what the measurement (or the static rule)
    says; bf16 is called faster only when the stored measurement says so."""
    slow = portable_facts(weights, isa, feats)
    if slow is None:
        return None
    head = f"h3cy: {weights} weights run {slow} on this CPU ({cpu_model()}): exact, slower than VNNI kernels"
    rec = load_measurement(isa)
    if rec is None:
        mode, _ = static_choice(isa)
        return True, (f"{head}; no GEMM measurement is stored for this CPU, so weights='auto' runs "
                      f"{mode} by the static rule for {isa} (`h3cy selfcheck` measures bf16 and int8 here)")
    secs = rec["seconds"]
    mine = secs.get(weights)
    if isinstance(mine, (int, float)) and mine > 0 and secs["bf16"] < mine:
        return True, (f"{head}; the stored measurement has bf16 {mine / secs['bf16']:.2f}x faster than "
                      f"{weights} here (weights='auto' runs bf16 where it fits the memory)")
    return False, f"{head}; the stored measurement has {weights} faster than bf16 here"
