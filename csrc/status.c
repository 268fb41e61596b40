/* status.c — error messages and aligned allocation. */
#include "h3_internal.h"

#include <stdio.h>
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

h3_status h3_fail(h3_err *err, h3_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void *h3_alloc(size_t bytes) {
    if (bytes == 0) bytes = 64;
    if (bytes > ((size_t)1 << 46)) return NULL; /* refuse absurd sizes (overflowed math) */
    size_t b = (bytes + 63u) & ~(size_t)63u;
    return aligned_alloc(64, b);
}

void *h3_alloc_large(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= ((size_t)4 << 20) && bytes <= ((size_t)1 << 46)) {
        void *p = NULL;
        const size_t huge = (size_t)2 << 20;
        if (posix_memalign(&p, huge, bytes)) return NULL;
        /* whole huge pages only: a partial last one would be materialised whole */
        madvise(p, bytes & ~(huge - 1), MADV_HUGEPAGE); /* advisory: failure only costs speed */
        return p;
    }
#endif
    return h3_alloc(bytes);
}

void h3_free(void *p) { free(p); }

h3_status h3_workspace(void **ws, size_t *ws_bytes, size_t need, void **own, const char *who, h3_err *err) {
    *own = NULL;
    if (*ws) {
        if (*ws_bytes < need || ((uintptr_t)*ws & 63))
            return h3_fail(err, H3_EINVAL, "%s: workspace must be 64-byte aligned and >= %zu bytes (got %zu)", who,
                           need, *ws_bytes);
        return H3_OK;
    }
    *own = *ws = h3_alloc(need);
    if (!*ws) return h3_fail(err, H3_ENOMEM, "%s: cannot allocate %zu bytes of workspace", who, need);
    *ws_bytes = need;
    return H3_OK;
}
