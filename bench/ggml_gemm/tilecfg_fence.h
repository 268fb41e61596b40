/* tilecfg_fence.h -- force-included (-include) into the ggml build by build.sh.
 *
 * GCC 12's _tile_loadconfig (amxtileintrin.h) is an asm whose memory operand is the first 8 bytes
 * of the 64-byte tile configuration, so at -O3 GCC drops the stores of rows[] and colsb[] as dead
 * and LDTILECFG loads every tile as 0 x 0: ggml's AMX kernels (ggml_tile_config_init in
 * src/ggml-cpu/amx/mmq.cpp) then die with SIGILL on their first tile load (seen with Debian's
 * GCC 12.2 on a 2-core Xeon with AMX, session 32; h3cy's csrc/amx_tiles.h had the same defect).
 * This macro puts an empty asm that reads the whole struct before the call; the macro's own use
 * of the name calls the intrinsic (a macro does not expand inside itself).  Where the compiler's
 * header is right it changes nothing: the stores are there either way. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define _tile_loadconfig(c)                                                  \
    ({                                                                       \
        __asm__ volatile("" ::"m"(*(const char(*)[64])(const void *)(c))); \
        _tile_loadconfig(c);                                                 \
    })
#endif
