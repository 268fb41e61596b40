/* status.c — error messages and aligned allocation. */
#include "h3_internal.h"

#include <stdio.h>
#include <stdlib.h>

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

void h3_free(void *p) { free(p); }
