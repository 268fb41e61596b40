/* gguf_avx2.c — the GGUF micro-kernel for AVX2 (+FMA): vpmaddubsw, no VNNI (the body and
 * its exactness argument: gguf_avx2.inc).  Also run on AVX-512 machines without VNNI. */
#include "gguf_impl.h"

#define UKR_NAME gguf_ukr_avx2
#include "gguf_avx2.inc"
