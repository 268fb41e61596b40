"""How much memory this process may use, and how much it has used (Linux; portable fallbacks)."""
import os
import resource
import sys


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _meminfo_available():
    txt = _read("/proc/meminfo")
    if txt:
        for line in txt.splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room():
    """Bytes the cgroup still allows (limit - usage), or None without a limit."""
    for limit_p, usage_p in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                             ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                              "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        lim = _read(limit_p)
        if lim is None or lim == "max":
            continue
        try:
            lim = int(lim)
        except ValueError:
            continue
        if lim >= 1 << 60:          # cgroup v1's "unlimited"
            continue
        use = _read(usage_p)
        try:
            use = int(use) if use is not None else 0
        except ValueError:
            use = 0
        return max(0, lim - use)
    return None


def available_memory():
    """The smaller of MemAvailable and the cgroup's remaining room, in bytes (None if unknown)."""
    vals = [v for v in (_meminfo_available(), _cgroup_room()) if v is not None]
    return min(vals) if vals else None


def peak_rss():
    """Peak resident set size of this process so far, in bytes."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


def fmt_bytes(n):
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
