/* avx2_port_mix.c — which 256-bit ops slow vpmaddubsw down on this CPU: the cost model behind
 * the AVX2 GGUF micro-kernel's bound (docs/gguf.md, "2-core AMD EPYC 7001").
 *
 *   gcc -O2 -mavx2 -mfma bench/avx2_port_mix.c -o /tmp/avx2_port_mix && /tmp/avx2_port_mix
 *
 * Each line times, in the process's CPU time (the 2-core box is shared: wall time is noise
 * there), a block of 8 independent vpmaddubsw ymm with other ops interleaved in inline asm,
 * and prints cycles per block at the clock that makes 8 vpmaddubsw alone take 16 cycles
 * (Zen 1: one ymm vpmaddubsw per 2 cycles, pipe FP0).  A mix at ~16 costs the multiplies
 * nothing; more means the added ops take FP0's time, or the FP front end's (Zen 1 issues
 * about 4 FP macro-ops a cycle, a ymm op being 2 of them).  Measured on the 2-core EPYC
 * (docs/gguf.md): adds, logic, shuffles, FMAs, conversions, shifts (FP2) and loads are free
 * beside the multiplies; vpmaddwd is not (FP0 too); 8 multiplies + 8 adds + 16 logic ops +
 * 8 broadcasts (80 macro-ops) take ~21.7 cycles, the front end's limit. */
#include <stdint.h>
#include <stdio.h>

#define CLOB "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
             "xmm12", "xmm13", "xmm14", "xmm15", "memory"
/* sources ymm14, ymm15 are never written; results go to ymm0..13 */
#define MB(r) "vpmaddubsw %%ymm14,%%ymm15,%%ymm" #r "\n\t"
#define ADDW(r) "vpaddw %%ymm14,%%ymm15,%%ymm" #r "\n\t"
#define AND(r) "vpand %%ymm14,%%ymm15,%%ymm" #r "\n\t"
#define SLL(r) "vpslld $16,%%ymm15,%%ymm" #r "\n\t"
#define MWD(r) "vpmaddwd %%ymm14,%%ymm15,%%ymm" #r "\n\t"
#define FMA(r) "vfmadd231ps %%ymm14,%%ymm15,%%ymm" #r "\n\t"
#define CVT(r) "vcvtdq2ps %%ymm15,%%ymm" #r "\n\t"
#define BC(r) "vpbroadcastd (%0),%%ymm" #r "\n\t"
#define LD(r) "vmovdqu (%0),%%ymm" #r "\n\t"
/* t = maddubs; acc += t: the kernel's dependent int16 accumulation */
#define DEP(t, acc) MB(t) "vpaddw %%ymm" #t ",%%ymm" #acc ",%%ymm" #acc "\n\t"
#define X8(a, b) a(0) b(8) a(1) b(9) a(2) b(10) a(3) b(11) a(4) b(8) a(5) b(9) a(6) b(10) a(7) b(11)
#define NOP(r)
#define ANDBC(r) AND(12) AND(13) BC(12)

static int32_t buf[16] __attribute__((aligned(64)));
#include "port_mix.h"
static double unit; /* seconds per cycle, from the first line */

#define MIX(name, body)                                                                  \
    do {                                                                                 \
        double best;                                                                     \
        PORT_MIX_TIME(best, 3, body);                                                   \
        if (unit == 0) unit = best / 16;                                                 \
        printf("%-44s %6.1f cycles (%.2f ns)\n", name, best / unit, best * 1e9);         \
    } while (0)

int main(void) {
    MIX("8 maddubs (defines the cycle: 16)", X8(MB, NOP));
    MIX("8 maddubs + 8 vpaddw", X8(MB, ADDW));
    MIX("8 maddubs + 8 vpand", X8(MB, AND));
    MIX("8 maddubs + 8 vpslld", X8(MB, SLL));
    MIX("8 maddubs + 8 vfmadd231ps", X8(MB, FMA));
    MIX("8 maddubs + 8 vcvtdq2ps", X8(MB, CVT));
    MIX("8 maddubs + 8 vpbroadcastd m32", X8(MB, BC));
    MIX("8 maddubs + 8 vmovdqu m256", X8(MB, LD));
    MIX("8 maddubs + 4 vpmaddwd", X8(MB, NOP) MWD(8) MWD(9) MWD(10) MWD(11));
    MIX("8 maddubs, each added into 4 int16 chains", DEP(0, 8) DEP(1, 9) DEP(2, 10) DEP(3, 11) DEP(4, 8)
        DEP(5, 9) DEP(6, 10) DEP(7, 11));
    MIX("24 vpand alone (4 pipes: 2 ymm a cycle)", X8(AND, NOP) X8(NOP, AND) X8(AND, NOP));
    MIX("8 maddubs + 8 vpaddw + 16 vpand + 8 bcast", X8(MB, ADDW) X8(NOP, ANDBC));
    return 0;
}
