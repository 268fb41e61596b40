/* avx512_port_mix.c — does the GGUF AVX-512 VNNI kernel's per-segment float fold cost the
 * dot products time on this CPU?  The measured side of the Q8_0 / int8 bound in docs/gguf.md
 * ("2 cores with AVX-512 VNNI").
 *
 *   gcc -O2 -mavx512f -mavx512vnni bench/avx512_port_mix.c -o /tmp/avx512_port_mix && /tmp/avx512_port_mix
 *
 * Each line times (best of 7, in the process's CPU time) a block of 8 independent vpdpbusd zmm (8
 * accumulators, as one row's 32-input segment of Q8_0 in csrc/gguf_avx512.c) with other ops
 * interleaved in inline asm, and prints its time per dot relative to the dots alone.  h3cy's int8
 * kernel is dots only (one scale per row and column, applied once per K block), so a mix's
 * ratio r caps a kernel that issues that mix per segment at 1/r of int8's speed (if the dots
 * run at the same rate in both).  The Q8_0 mix is the kernel's per-row segment: the offset's
 * start value (a broadcast of -off * asum), then convert, multiply by the segment's scales,
 * fma by d; "per-row act scale" drops the multiply (one scale per row for the whole K, as
 * the int8 mode quantises). */
#include <stdint.h>
#include <stdio.h>

#define CLOB "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm16", "xmm17", "xmm18", \
             "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "memory"
/* sources zmm30, zmm31 are never written; dot accumulators zmm0..7; other results zmm16..23 */
#define DOT(r) "vpdpbusd %%zmm30,%%zmm31,%%zmm" #r "\n\t"
#define DOTB(r) "vpdpbusd (%0)%{1to16%},%%zmm31,%%zmm" #r "\n\t"
/* the compiled kernel's form: a vpbroadcastd load into a register, then the dot (gcc does
 * not fold the broadcast into vpdpbusd's memory operand) */
#define DOTS(r) "vpbroadcastd (%0),%%zmm23\n\t" "vpdpbusd %%zmm23,%%zmm31,%%zmm" #r "\n\t"
#define CVT(r) "vcvtdq2ps %%zmm30,%%zmm" #r "\n\t"
#define MUL(r) "vmulps %%zmm30,%%zmm31,%%zmm" #r "\n\t"
#define FMA(r) "vfmadd231ps %%zmm30,%%zmm31,%%zmm" #r "\n\t"
#define BC(r) "vpbroadcastd (%0),%%zmm" #r "\n\t"
#define MULLD(r) "vpmulld %%zmm30,%%zmm31,%%zmm" #r "\n\t"
#define ADDD(r) "vpaddd %%zmm30,%%zmm31,%%zmm" #r "\n\t"
#define WSSD(r) "vpdpwssd %%zmm30,%%zmm31,%%zmm" #r "\n\t"
#define D8(D) D(0) D(1) D(2) D(3) D(4) D(5) D(6) D(7)

static int32_t buf[16] __attribute__((aligned(64)));
#include "port_mix.h"
static double base;

#define MIX(name, ndots, body)                                                                  \
    do {                                                                                 \
        double best;                                                                     \
        PORT_MIX_TIME(best, 7, body);                                                   \
        best /= (ndots);                                                                 \
        if (base == 0) base = best;                                                      \
        printf("%-56s %6.3f ns/dot  x%.2f  (caps a kernel at %.2f of dots-only)\n", name, \
               best * 1e9, best / base, base / best);                                    \
    } while (0)

int main(void) {
    MIX("8 vpdpbusd", 8, D8(DOT));
    MIX("8 vpdpbusd, broadcast operand", 8, D8(DOTB));
    MIX("8 (vpbroadcastd m32, vpdpbusd)", 8, D8(DOTS));
    MIX("8 (vpbroadcastd m32, vpdpbusd) + bcast + cvt + mul + fma", 8, D8(DOTS) BC(19) CVT(16) MUL(17) FMA(18));
    MIX("8 vpdpbusd + cvt", 8, D8(DOTB) CVT(16));
    MIX("8 vpdpbusd + cvt + fma (per-row act scale)", 8, D8(DOTB) CVT(16) FMA(17));
    MIX("8 vpdpbusd + cvt + mul + fma (Q8_0 fold)", 8, D8(DOTB) CVT(16) MUL(17) FMA(18));
    MIX("8 vpdpbusd + bcast + cvt + mul + fma (Q8_0 kernel)", 8, D8(DOTB) BC(19) CVT(16) MUL(17) FMA(18));
    MIX("8 vpdpbusd + 4 fma", 8, D8(DOTB) FMA(16) FMA(17) FMA(18) FMA(19));
    MIX("4 vpdpbusd + bcast + cvt + mul + fma (Q6_K-like, seg 16)", 4,
        DOTB(0) DOTB(1) DOTB(2) DOTB(3) BC(19) CVT(16) MUL(17) FMA(18));
    /* Q4_K against int4 (session 27): what each must issue per row, 16 columns and 256 inputs
     * (a Q4_K super-block; two int4 groups of 128), nothing else */
    MIX("int4 g128: 64 vpdpbusd + 2 (cvt + fma)", 64, D8(DOTB) D8(DOTB) D8(DOTB) D8(DOTB) D8(DOTB) D8(DOTB) D8(DOTB)
        D8(DOTB) CVT(16) FMA(17) CVT(18) FMA(19));
    MIX("Q4_K now: 64 vpdpbusd + 8 (cvt + fma + fma) + fma", 64, D8(DOTB) CVT(16) FMA(17) FMA(18) D8(DOTB) CVT(16)
        FMA(17) FMA(18) D8(DOTB) CVT(16) FMA(17) FMA(18) D8(DOTB) CVT(16) FMA(17) FMA(18) D8(DOTB) CVT(16) FMA(17)
        FMA(18) D8(DOTB) CVT(16) FMA(17) FMA(18) D8(DOTB) CVT(16) FMA(17) FMA(18) D8(DOTB) CVT(16) FMA(17) FMA(18)
        FMA(19));
    MIX("Q4_K floor: 64 vpdpbusd + 8 (mulld + addd) + 4 wssd + 2 (cvt + fma) + fma", 64, D8(DOTB) MULLD(16) ADDD(17)
        D8(DOTB) MULLD(16) ADDD(17) WSSD(18) D8(DOTB) MULLD(16) ADDD(17) D8(DOTB) MULLD(16) ADDD(17) WSSD(18) D8(DOTB)
        MULLD(16) ADDD(17) D8(DOTB) MULLD(16) ADDD(17) WSSD(18) D8(DOTB) MULLD(16) ADDD(17) D8(DOTB) MULLD(16)
        ADDD(17) WSSD(18) CVT(19) FMA(20) CVT(21) FMA(22) FMA(20));
    MIX("the same, one activation scale a row (no d fma)", 64, D8(DOTB) MULLD(16) ADDD(17)
        D8(DOTB) MULLD(16) ADDD(17) WSSD(18) D8(DOTB) MULLD(16) ADDD(17) D8(DOTB) MULLD(16) ADDD(17) WSSD(18) D8(DOTB)
        MULLD(16) ADDD(17) D8(DOTB) MULLD(16) ADDD(17) WSSD(18) D8(DOTB) MULLD(16) ADDD(17) D8(DOTB) MULLD(16)
        ADDD(17) WSSD(18) CVT(19) FMA(20) CVT(21) FMA(22));
    return 0;
}
