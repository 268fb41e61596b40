"""Process-wide defaults.  Environment variables are read here, once, at import.

H3CY_ISA      default kernel path: ref | avx2 | avxvnni | avx512 | amx | neon (default: the best the
              CPU supports).  Every op and model also takes ``isa=`` to override it.
H3CY_ISA_MAX  hide the paths above this one: ref < avx2 (or neon) < avxvnni < avx512 < amx.  With
              H3CY_ISA_MAX=avx2 an AVX-512 machine behaves as an AVX2-only one would
              (available_isas, the default path, warnings, the tests' skips); naming a
              hidden path raises UnsupportedCPUError.  For testing the common CPUs' paths.
H3CY_THREADS  default thread count for objects created with ``threads=None``.
H3CY_DIT_PYTHON=1  run DiT blocks op by op from Python instead of the C block driver
              (same arithmetic; for A/B diagnosis).
H3CY_LOOP_PYTHON=1 run h3cy.denoise's step loop in Python around DiT.forward instead of
              the Cython loop (same bits; for A/B diagnosis and benchmarks).
H3CY_ATTENTION   default attention products of models made with attention=None: auto |
              fp32 | bf16 (see h3cy.ops.attention_bf16; fp32 for A/B of the int modes).
H3CY_CONV_IM2COL=1 audio VAE convolutions build their im2col rows before each GEMM instead
              of letting the GEMM read them in place (same bits; for A/B).
H3CY_NEON_EXT  which of the 'neon' path's ARMv8.6 extensions its GEMMs may use where the
              CPU has them: all (default) | none | i8mm | bf16 | i8mm,bf16.  i8mm: SMMLA
              int8/int4 kernels (same bits as without); bf16: BFMMLA for bf16 weights with
              bf16-valued inputs.  For A/B on ARM; passed to the C library with each linear
              it makes (h3_linear_opts.ext_off); Linear.extensions says what one uses.
H3CY_GGUF_TILES  which kernel GGUF-stored layers run on the 'amx' path (same bits on all):
              auto (default: the AMX tile kernels -- csrc/gguf_amx.c, gguf_kq_amx.c,
              gguf_q8d_amx.c -- for the types with one scale per 32 values -- Q8_0, Q4_0/1,
              Q5_0/1, Q4_K, Q5_K -- and the AVX-512 VNNI
              kernel for those with 16 -- Q6_K, Q3_K, Q2_K -- and the IQ4s, as measured
              fastest on the 16-core SPR, sessions 26 and 28) | 1 (tiles for every type) | 0 (VNNI for every
              type; the pre-session-26 default).  For A/B.  The int8/int4 layers are on
              AMX either way.  Read at each GGUF linear h3cy.weights makes
              (h3cy.weights.linears.gguf_isa).
H3CY_GGUF_KQ, H3CY_GGUF_GROUP, H3CY_GGUF_Q8D, H3CY_GGUF_PF  the GGUF GEMM's A/B switches,
              passed to each GGUF linear made (h3_linear_set_gguf_opts,
              h3_linear_set_gguf_prefetch): Q4_K/Q5_K's tile order on amx, column panels per
              pass, Q8_0 read in place on the tiles, the next K block's weights prefetched;
              see gguf_kq, gguf_group, gguf_q8d and gguf_pf below.
H3CY_NVFP4_ROUTE  the product NVFP4 linears (ComfyUI text encoder files) compute: auto
              (default: on the amx path the bf16 route, AMX bf16 tiles on bf16-rounded
              activations; elsewhere int8) | int8 (activations int8 per 32: on amx the
              AVX-512 VNNI kernels, for A/B) | bf16.  auto:N takes the bf16 route on amx only
              for calls of at least N rows.  Passed to each NVFP4 linear made
              (h3_linear_nvfp4_route; h3cy._kernels.linear_nvfp4_route).
H3CY_HUGEPAGES=0 keep converted weights and large GEMM workspaces in ordinary 4 KB pages
              instead of transparent huge pages (same bits; for A/B).  Passed to the C
              library with each linear it makes (h3_linear_opts.small_pages).
"""
import numbers
import os

_ENV_ISA = os.environ.get("H3CY_ISA", "").strip().lower() or None
_ENV_ISA_MAX = os.environ.get("H3CY_ISA_MAX", "").strip().lower() or None
_ENV_THREADS = os.environ.get("H3CY_THREADS", "").strip() or None

_ENV_DIT_PYTHON = os.environ.get("H3CY_DIT_PYTHON", "").strip() == "1"

_ENV_LOOP_PYTHON = os.environ.get("H3CY_LOOP_PYTHON", "").strip() == "1"

_ENV_CONV_IM2COL = os.environ.get("H3CY_CONV_IM2COL", "").strip() == "1"

_ENV_ATTENTION = os.environ.get("H3CY_ATTENTION", "").strip().lower() or None

_ENV_GGUF_TILES = os.environ.get("H3CY_GGUF_TILES", "").strip().lower()
# passed to each GGUF linear (h3_linear_set_gguf_opts, by _kernels.linear_attach_gguf)
_ENV_GGUF_KQ = os.environ.get("H3CY_GGUF_KQ", "").strip()
_ENV_GGUF_GROUP = os.environ.get("H3CY_GGUF_GROUP", "").strip()
_ENV_GGUF_Q8D = os.environ.get("H3CY_GGUF_Q8D", "").strip()
_ENV_GGUF_PF = os.environ.get("H3CY_GGUF_PF", "").strip()

_ENV_HUGEPAGES = os.environ.get("H3CY_HUGEPAGES", "") != "0"

_ENV_NVFP4_ROUTE = os.environ.get("H3CY_NVFP4_ROUTE", "").strip().lower() or None

_ENV_NEON_EXT = os.environ.get("H3CY_NEON_EXT", "").strip().lower() or None
NEON_EXTENSIONS = ("i8mm", "bf16")

_state = {"threads": None}


def loop_python():
    """H3CY_LOOP_PYTHON=1: denoise runs its Python step loop (A/B reference of the Cython
    loop).  Read at each call of denoise from this module's variable (tests patch it)."""
    return _ENV_LOOP_PYTHON


def conv_im2col():
    """H3CY_CONV_IM2COL=1: audio convolutions take the im2col route (A/B reference)."""
    return _ENV_CONV_IM2COL


def huge_pages():
    """False with H3CY_HUGEPAGES=0: the kernels keep converted weights and their large
    workspaces in 4 KB pages (A/B of transparent huge pages; same bits).  Read by
    h3cy._kernels at each linear it makes, from this module's variable."""
    return _ENV_HUGEPAGES


def gguf_tiles():
    """H3CY_GGUF_TILES as "auto" (unset or "auto"), "on" ("1") or "off" ("0"): on the 'amx'
    path, which GGUF layers run the AMX tile kernel (h3cy.weights.linears.gguf_isa); another
    value is a ValueError naming the variable.  Read at each GGUF linear made, from this
    module's variable (tests patch it)."""
    v = _ENV_GGUF_TILES
    if v in ("", "auto"):
        return "auto"
    if v in ("0", "1"):
        return "on" if v == "1" else "off"
    from .errors import H3ValueError
    raise H3ValueError(f"H3CY_GGUF_TILES={v!r}: expected auto, 1 (tiles for every type) or 0 (none)")


def gguf_kq():
    """H3CY_GGUF_KQ as 2 (unset or "2": Q4_K / Q5_K on the 'amx' path in their integer
    super-block order, csrc/gguf_kq_amx.c, ~2e-7 from ref; a linear whose parts are all Q4_K /
    Q5_K with its activations in the kernel's 32-row tile layout), 1 (that order with the
    activations' rows in place: the same bits as 2, for A/B), 3 (the tile layout on every path,
    its scalar kernel off AMX: for testing it on any machine) or 0 (the common order, ref's
    bits); another value is a ValueError naming the variable.  Read at each GGUF linear made."""
    if _ENV_GGUF_KQ in ("", "0", "1", "2", "3"):
        return int(_ENV_GGUF_KQ or "2")
    from .errors import H3ValueError
    raise H3ValueError(f"H3CY_GGUF_KQ={_ENV_GGUF_KQ!r}: expected 2 (the K-quant tile order, tile layout), "
                       "1 (rows in place), 3 (the tile layout on every path) or 0")


def gguf_q8d():
    """H3CY_GGUF_Q8D as 1 (unset or "1": a GGUF linear whose parts are all Q8_0 runs on the
    'amx' path with the file's blocks read in place as the tiles' A operand, csrc/gguf_q8d_amx.c),
    0 (the per-segment tile kernel over decoded panels; the same bits, for A/B) or 2 (that route
    on every path, its scalar kernel off AMX: for testing it on any machine); another value is a
    ValueError naming the variable.  Read at each GGUF linear made."""
    if _ENV_GGUF_Q8D in ("", "0", "1", "2"):
        return 1 if not _ENV_GGUF_Q8D else int(_ENV_GGUF_Q8D)
    from .errors import H3ValueError
    raise H3ValueError(f"H3CY_GGUF_Q8D={_ENV_GGUF_Q8D!r}: expected 1 (Q8_0 blocks in place on the amx tiles), "
                       "0 (never) or 2 (on every path)")


def gguf_pf():
    """H3CY_GGUF_PF as 1 (unset or "1": off the 'amx' path, each K block's kernel call of a
    GGUF linear first prefetches the panel's next K block of weights; on 'amx' the hardware
    prefetchers kept up), 2 (on every path) or 0 (on none; the same bits, for A/B); another
    value is a ValueError naming the variable.  Read at each GGUF linear made."""
    if _ENV_GGUF_PF in ("", "0", "1", "2"):
        return 1 if not _ENV_GGUF_PF else int(_ENV_GGUF_PF)
    from .errors import H3ValueError
    raise H3ValueError(f"H3CY_GGUF_PF={_ENV_GGUF_PF!r}: expected 1 (prefetch the next K block's weights off "
                       "the amx path), 2 (on every path) or 0 (never)")


def gguf_group():
    """H3CY_GGUF_GROUP as the GGUF GEMM's column panels per pass over the K blocks, 1..16, or
    0 when unset (the path's default: 4 on 'amx', else 1; the same bits any way, for A/B);
    another value is a ValueError naming the variable.  Read at each GGUF linear made."""
    v = _ENV_GGUF_GROUP
    if not v:
        return 0
    if v.isdigit() and 1 <= int(v) <= 16:
        return int(v)
    from .errors import H3ValueError
    raise H3ValueError(f"H3CY_GGUF_GROUP={v!r}: expected a panel count 1..16")


def neon_extensions():
    """The neon extensions H3CY_NEON_EXT allows (all of NEON_EXTENSIONS when unset or
    "all"; none for "none"); a name outside them is a ValueError naming the variable.
    Read by h3cy._kernels at each linear it makes, from this module's variable."""
    v = _ENV_NEON_EXT
    if v is None or v == "all":
        return NEON_EXTENSIONS
    if v == "none":
        return ()
    names = tuple(n.strip() for n in v.replace("+", ",").split(",") if n.strip())
    bad = [n for n in names if n not in NEON_EXTENSIONS]
    if bad or not names:
        from .errors import H3ValueError
        raise H3ValueError(f"H3CY_NEON_EXT={v!r}: expected all, none or a comma list of "
                           f"{', '.join(NEON_EXTENSIONS)}")
    return tuple(n for n in NEON_EXTENSIONS if n in names)


def nvfp4_route(value=None):
    """(route, min_rows) for NVFP4 linears from H3CY_NVFP4_ROUTE (or ``value``): "auto",
    "int8", "bf16" or "auto:N" (N rows at least for the bf16 route on amx; plain "auto"
    leaves the library's default, min_rows None)."""
    v = (value if value is not None else _ENV_NVFP4_ROUTE) or "auto"
    route, _, rows = v.partition(":")
    if route not in ("auto", "int8", "bf16") or (rows and (route != "auto" or not rows.isdigit())):
        from .errors import H3ValueError
        raise H3ValueError(f"H3CY_NVFP4_ROUTE={v!r}: expected auto, auto:N (rows), int8 or bf16")
    return route, int(rows) if rows else None


def dit_python_blocks():
    """H3CY_DIT_PYTHON=1: run transformer blocks op by op from Python (A/B reference)."""
    return _ENV_DIT_PYTHON


def env_attention():
    """The attention mode named by H3CY_ATTENTION at import, or None (checked by
    h3cy.ops.attention_bf16)."""
    return _ENV_ATTENTION


def env_isa():
    """The ISA named by H3CY_ISA at import, or None."""
    return _ENV_ISA


def env_isa_max():
    """The ISA named by H3CY_ISA_MAX at import, or None (checked by h3cy.ops)."""
    return _ENV_ISA_MAX


def _cgroup_cpu_limit():
    """CPUs allowed by a cgroup v2/v1 quota, or None when unlimited/unknown."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
            if quota != "max":
                return max(1, int(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
            quota = int(f.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
            period = int(f.read())
        if quota > 0 and period > 0:
            return max(1, quota // period)
    except (OSError, ValueError):
        pass
    return None


def _physical_cores_in_mask():
    """Physical cores among the CPUs this process may run on (SMT siblings count once)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
    cores = set()
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/core_id") as f:
                core = f.read().strip()
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/physical_package_id") as f:
                pkg = f.read().strip()
            cores.add((pkg, core))
        except OSError:
            cores.add(("cpu", c))
    return max(1, len(cores))


def default_threads():
    """Physical cores available to this process (affinity mask and cgroup quota)."""
    n = _physical_cores_in_mask()
    lim = _cgroup_cpu_limit()
    if lim is not None:
        n = min(n, lim)
    return max(1, n)


def get_num_threads():
    if _state["threads"] is not None:
        return _state["threads"]
    if _ENV_THREADS is not None:
        try:
            n = int(_ENV_THREADS)
        except ValueError:
            raise ValueError(f"H3CY_THREADS must be a positive integer, got {_ENV_THREADS!r}")
        if n < 1:
            raise ValueError(f"H3CY_THREADS must be >= 1, got {n}")
        return n
    return default_threads()


def check_threads(n):
    """The one check of a thread count (set_num_threads, ops objects, models): a positive
    int, else H3ValueError (a ValueError) naming the value."""
    from .errors import H3ValueError
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise H3ValueError(f"threads must be a positive int, got {n!r}")
    return int(n)


def set_num_threads(n):
    """Set the default thread count for objects created with ``threads=None``
    (``None`` restores the automatic default)."""
    _state["threads"] = None if n is None else check_threads(n)


# The root of h3cy's on-disk caches (prompt encodings go under <root>/prompts).
# H3CY_CACHE_DIR, else ~/.cache/h3cy (where the weight cache also falls back).
_ENV_CACHE_DIR = os.environ.get("H3CY_CACHE_DIR", "").strip() or None


def cache_root():
    """H3CY_CACHE_DIR (read at import) or ~/.cache/h3cy."""
    return _ENV_CACHE_DIR or os.path.join(os.path.expanduser("~"), ".cache", "h3cy")
