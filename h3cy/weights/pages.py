"""Page residency of memory-mapped weights: tell the kernel which weight pages will be
needed soon (prefetch) and which are done with (drop them from this process's resident
set; the page cache keeps them while memory allows, so a re-read is cheap)."""
import mmap

import numpy as np

PAGE = mmap.PAGESIZE


def mmap_of(arr):
    b = arr
    while b is not None:
        if isinstance(b, mmap.mmap):
            return b
        b = getattr(b, "base", None) if not isinstance(b, memoryview) else b.obj
    return None


def _range(arr, mm):
    base = np.frombuffer(mm, np.uint8).ctypes.data
    start = arr.ctypes.data - base
    end = start + arr.nbytes
    start -= start % PAGE
    return start, end - start


def advise(arrays, option):
    """madvise each mmap-backed array's pages (others are ignored)."""
    for a in arrays:
        if a is None or not isinstance(a, np.ndarray) or a.nbytes == 0:
            continue
        mm = mmap_of(a)
        if mm is None:
            continue
        start, length = _range(a, mm)
        try:
            mm.madvise(option, start, length)
        except (OSError, ValueError):
            pass


def prefetch(arrays):
    advise(arrays, mmap.MADV_WILLNEED)


def release(arrays):
    advise(arrays, mmap.MADV_DONTNEED)


def stream(executor, build, n):
    """Parts ``build(0) .. build(n-1)`` in order, each built on ``executor`` one ahead of its
    use (its pages prefetched by ``build``) and its pages released once the caller is done
    with it.  When the caller stops part-way (cancel, a callback's error), the part in
    flight is waited for and released too, so nothing is left mapped in."""
    fut = executor.submit(build, 0) if n else None
    try:
        for i in range(n):
            part = fut.result()
            fut = executor.submit(build, i + 1) if i + 1 < n else None
            try:
                yield part
            finally:
                release(part.storage())
                del part
    finally:
        if fut is not None:
            try:
                release(fut.result().storage())
            except BaseException:
                pass
