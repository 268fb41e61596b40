/* cpu.c — run-time CPU feature detection and the ISA names.
 *
 * Detection runs once (pthread_once): CPUID for what the core implements, XGETBV for
 * what the OS saves on context switch (an AVX-512 CPU under an OS that does not enable
 * the ZMM state must not run AVX-512 code), and on Linux the AMX tile-data permission
 * via arch_prctl(ARCH_REQ_XCOMP_PERM) — refused permission means no AMX path.  On
 * AArch64 Linux, HWCAP (asimd, asimddp) and HWCAP2 (i8mm, bf16): the extensions the
 * 'neon' path's tables may use (gemm_weights.c picks them per linear; elsewhere they are
 * reported absent, so those tables are never chosen). */
#include "h3_internal.h"

#include <pthread.h>
#include <string.h>

#if H3_X86
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif
#if H3_ARM64 && defined(__linux__)
#include <sys/auxv.h>
#endif

enum {
    F_AVX, F_FMA, F_F16C, F_AVX2, F_AVX512F, F_AVX512DQ, F_AVX512BW, F_AVX512VL,
    F_AVX512VNNI, F_AVX512BF16, F_AMXTILE, F_AMXBF16, F_AMXINT8, F_OS_AVX, F_OS_AVX512,
    F_OS_AMX, F_AMX_PERM, F_NEON, F_NEON_DOTPROD, F_NEON_I8MM, F_NEON_BF16, F_AVXVNNI, F_COUNT
};
static const char *feature_names[F_COUNT] = {
    "avx", "fma", "f16c", "avx2", "avx512f", "avx512dq", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "os_avx", "os_avx512",
    "os_amx", "amx_permission", "neon", "asimddp", "i8mm", "bf16", "avx_vnni"};

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static uint64_t features;

#define HAS(f) ((features >> (f)) & 1u)

#if H3_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int request_amx_permission(void) {
#if defined(__linux__)
    /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 (Linux >= 5.16). */
    long rc = syscall(SYS_arch_prctl, 0x1023, 18);
    return rc == 0;
#else
    return 0;
#endif
}
#endif

static void detect(void) {
    uint64_t f = 0;
#if H3_X86
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        int osxsave = (c >> 27) & 1;
        if ((c >> 28) & 1) f |= 1ull << F_AVX;
        if ((c >> 12) & 1) f |= 1ull << F_FMA;
        if ((c >> 29) & 1) f |= 1ull << F_F16C;
        if (osxsave) {
            uint64_t xcr0 = xgetbv0();
            if ((xcr0 & 0x6) == 0x6) f |= 1ull << F_OS_AVX;
            if ((xcr0 & 0xe6) == 0xe6) f |= 1ull << F_OS_AVX512;
            if ((xcr0 & 0x60000) == 0x60000) f |= 1ull << F_OS_AMX;
        }
    }
    if (__get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if ((b >> 5) & 1) f |= 1ull << F_AVX2;
        if ((b >> 16) & 1) f |= 1ull << F_AVX512F;
        if ((b >> 17) & 1) f |= 1ull << F_AVX512DQ;
        if ((b >> 30) & 1) f |= 1ull << F_AVX512BW;
        if ((b >> 31) & 1) f |= 1ull << F_AVX512VL;
        if ((c >> 11) & 1) f |= 1ull << F_AVX512VNNI;
        if ((d >> 24) & 1) f |= 1ull << F_AMXTILE;
        if ((d >> 22) & 1) f |= 1ull << F_AMXBF16;
        if ((d >> 25) & 1) f |= 1ull << F_AMXINT8;
        unsigned maxsub = a;
        if (maxsub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            if ((a >> 4) & 1) f |= 1ull << F_AVXVNNI;
            if ((a >> 5) & 1) f |= 1ull << F_AVX512BF16;
        }
    }
    uint64_t amx = (1ull << F_AMXTILE) | (1ull << F_AMXBF16) | (1ull << F_AMXINT8) |
                   (1ull << F_OS_AMX);
    if ((f & amx) == amx && request_amx_permission()) f |= 1ull << F_AMX_PERM;
#elif H3_ARM64
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    if (hw & (1ul << 1)) f |= 1ull << F_NEON;          /* HWCAP_ASIMD */
    if (hw & (1ul << 20)) f |= 1ull << F_NEON_DOTPROD; /* HWCAP_ASIMDDP (SDOT/UDOT) */
    /* ARMv8.6 matrix extensions (optional from v8.2): the kernel reports them in HWCAP2 */
    unsigned long hw2 = getauxval(AT_HWCAP2);
    if (hw2 & (1ul << 13)) f |= 1ull << F_NEON_I8MM; /* HWCAP2_I8MM (SMMLA/UMMLA/USMMLA) */
    if (hw2 & (1ul << 14)) f |= 1ull << F_NEON_BF16; /* HWCAP2_BF16 (BFDOT/BFMMLA/BFCVT) */
#else
    f |= 1ull << F_NEON; /* Advanced SIMD is mandatory on AArch64 (Apple Silicon etc.) */
#endif
#endif
    features = f;
}

uint64_t h3_cpu_features(void) {
    pthread_once(&detect_once, detect);
    return features;
}

const char *h3_cpu_feature_name(int i) {
    return (i >= 0 && i < F_COUNT) ? feature_names[i] : NULL;
}

int h3_cpu_has_avx512_bf16(void) { h3_cpu_features(); return (int)HAS(F_AVX512BF16); }
int h3_cpu_has_avx512_vnni(void) { h3_cpu_features(); return (int)HAS(F_AVX512VNNI); }
int h3_cpu_has_neon_dotprod(void) { h3_cpu_features(); return (int)HAS(F_NEON_DOTPROD); }
int h3_cpu_has_neon_i8mm(void) { h3_cpu_features(); return (int)HAS(F_NEON_I8MM); }
int h3_cpu_has_neon_bf16(void) { h3_cpu_features(); return (int)HAS(F_NEON_BF16); }

int h3_cpu_extensions(void) {
    h3_cpu_features();
    return (HAS(F_NEON_I8MM) ? H3_EXT_I8MM : 0) | (HAS(F_NEON_BF16) ? H3_EXT_BF16 : 0);
}

static const char *isa_names[H3_ISA_COUNT] = {"ref", "avx2", "avx512", "amx", "neon", "avxvnni"};

const char *h3_isa_name(h3_isa isa) {
    return ((unsigned)isa < H3_ISA_COUNT) ? isa_names[isa] : "?";
}

int h3_isa_from_name(const char *name, h3_isa *out) {
    if (!name) return 0;
    for (int i = 0; i < H3_ISA_COUNT; i++)
        if (strcmp(name, isa_names[i]) == 0) { *out = (h3_isa)i; return 1; }
    return 0;
}

static int avx2_ok(void) {
    return HAS(F_AVX) && HAS(F_AVX2) && HAS(F_FMA) && HAS(F_F16C) && HAS(F_OS_AVX);
}
static int avx512_ok(void) {
    return avx2_ok() && HAS(F_AVX512F) && HAS(F_AVX512BW) && HAS(F_AVX512VL) &&
           HAS(F_AVX512DQ) && HAS(F_OS_AVX512);
}

int h3_isa_supported(h3_isa isa) {
    h3_cpu_features();
    switch (isa) {
    case H3_ISA_REF: return 1;
#if H3_X86
    case H3_ISA_AVX2: return avx2_ok();
    case H3_ISA_AVXVNNI: return avx2_ok() && HAS(F_AVXVNNI);
    case H3_ISA_AVX512: return avx512_ok();
    case H3_ISA_AMX: return avx512_ok() && HAS(F_AMX_PERM);
#endif
#if H3_ARM64
    case H3_ISA_NEON: return (int)HAS(F_NEON);
#endif
    default: return 0;
    }
}

h3_isa h3_isa_vector(h3_isa isa) {
    if (isa == H3_ISA_AMX) return H3_ISA_AVX512;
    if (isa == H3_ISA_AVXVNNI) return H3_ISA_AVX2;
    return isa;
}

h3_isa h3_isa_best(void) {
    /* AMX first: its kernel tests passed on a Sapphire Rapids-class machine with
     * H3CY_ISA=amx (bench/results/amx_kernel_tests.log), which made it the default. */
    static const h3_isa order[] = {H3_ISA_AMX, H3_ISA_AVX512, H3_ISA_AVXVNNI, H3_ISA_AVX2, H3_ISA_NEON};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (h3_isa_supported(order[i])) return order[i];
    return H3_ISA_REF;
}

h3_status h3_isa_check(h3_isa isa, h3_err *err) {
    if ((unsigned)isa >= H3_ISA_COUNT)
        return h3_fail(err, H3_EINVAL, "unknown ISA id %d", (int)isa);
    if (h3_isa_supported(isa)) return H3_OK;
    h3_cpu_features();
    const char *why = "this build targets another architecture";
#if H3_X86
    if (isa == H3_ISA_AMX) {
        if (!(HAS(F_AMXTILE) && HAS(F_AMXBF16) && HAS(F_AMXINT8))) why = "the CPU has no AMX";
        else if (!HAS(F_OS_AMX)) why = "the OS does not enable AMX tile state (XCR0)";
        else if (!HAS(F_AMX_PERM)) why = "Linux refused AMX tile permission (arch_prctl)";
        else why = "AVX-512 is not available";
    } else if (isa == H3_ISA_AVX512) {
        why = HAS(F_AVX512F) ? "the OS does not enable AVX-512 state or BW/VL/DQ are missing"
                             : "the CPU has no AVX-512";
    } else if (isa == H3_ISA_AVX2) {
        why = "the CPU lacks AVX2/FMA/F16C or the OS does not enable AVX state";
    } else if (isa == H3_ISA_AVXVNNI) {
        why = avx2_ok() ? "the CPU has no AVX-VNNI (VEX vpdpbusd)"
                        : "the CPU lacks AVX2/FMA/F16C or the OS does not enable AVX state";
    }
#endif
    return h3_fail(err, H3_EUNSUPPORTED, "ISA path '%s' is not available on this machine: %s",
                   h3_isa_name(isa), why);
}
