/* convert.c — scalar f16 <-> f32 conversions (exact, round-to-nearest-even).  These are
 * the reference the SIMD conversions (elem_*.c) must match bit for bit; the public
 * h3_convert entries live in elem.c. */
#include "h3_internal.h"

#include <math.h>
#include <string.h>

float h3_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            man &= 0x3ffu;
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t h3_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* overflow -> inf */
    if (a < 0x38800000u) {                                           /* subnormal or zero */
        /* value = a as float; f16 subnormal unit = 2^-24; round to nearest even */
        float af;
        memcpy(&af, &a, 4);
        float scaled = af * 16777216.0f; /* exact: multiply by 2^24 */
        uint32_t q = (uint32_t)scaled;
        float rem = scaled - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = ((a >> 23) - 127 + 15);
    uint32_t m = a & 0x7fffffu;
    uint32_t hm = m >> 13;
    uint32_t rest = m & 0x1fffu;
    uint32_t h = (e << 10) | hm;
    if (rest > 0x1000u || (rest == 0x1000u && (hm & 1u))) h++;     /* may carry into exp */
    return (uint16_t)(sign | h);
}
