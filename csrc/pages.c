/* pages.c — page advice on mapped weight ranges (see h3_pages_advise in h3_loop.h). */
#include "h3_loop.h"

#include <stdint.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define H3_HAVE_MADVISE 1
#endif

void h3_pages_advise(const void *p, size_t n, int advice) {
#ifdef H3_HAVE_MADVISE
    if (!p || !n) return;
    long page = sysconf(_SC_PAGESIZE);   /* a cheap call, once per range per block */
    if (page <= 0) page = 4096;
    const uintptr_t ps = (uintptr_t)page;
    const uintptr_t start = (uintptr_t)p & ~(ps - 1);
    const uintptr_t end = ((uintptr_t)p + n + ps - 1) & ~(ps - 1);
    int a;
    if (advice == H3_PAGES_WILLNEED) a = MADV_WILLNEED;
    else if (advice == H3_PAGES_DONTNEED) a = MADV_DONTNEED;
    else return;
    (void)madvise((void *)start, (size_t)(end - start), a);
#else
    (void)p; (void)n; (void)advice;
#endif
}
