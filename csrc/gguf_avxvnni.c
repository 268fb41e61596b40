/* gguf_avxvnni.c — the GGUF micro-kernel for AVX-VNNI (VEX vpdpbusd on 256-bit registers:
 * Alder Lake and later clients, Sapphire Rapids): the body of gguf_avx2.inc with the four
 * products of u and a added straight into int32, every type alike. */
#include "gguf_impl.h"

#include <immintrin.h>

#define H3_DPBUSD(acc, u, a) _mm256_dpbusd_avx_epi32((acc), (u), (a))
#define UKR_NAME gguf_ukr_avxvnni
#include "gguf_avx2.inc"
