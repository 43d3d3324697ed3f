/* dtype.h - storage conversions: fp16 and bf16 <-> fp32, round to nearest even.
 *
 * Written with integer operations only so that every backend and every compiler rounds
 * the same way, bit for bit. Inline: the reference uses them per element, the CPU kernels
 * in their (non-hot) packing loops.
 */
#ifndef FA_DTYPE_H
#define FA_DTYPE_H

#include <stdint.h>
#include <string.h>
#include "flashattn.h"

static inline uint32_t fa_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float fa_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float fa_bf16_to_f32(uint16_t h) { return fa_bits_f32((uint32_t)h << 16); }

static inline uint16_t fa_f32_to_bf16(float f)
{
    uint32_t u = fa_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)           /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);               /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static inline float fa_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)                                        /* inf / NaN */
        return fa_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return fa_bits_f32(sign);             /* signed zero */
        /* subnormal: value = man * 2^-24 (exact in fp32) */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return fa_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fa_f32_to_f16(float f)
{
    uint32_t u = fa_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* rounds to inf */
    if (a < 0x38800000u) {                                           /* fp16 subnormal / 0 */
        /* value / 2^-24, rounded to nearest even: done exactly in fp32 by adding 0.5 */
        float v = fa_bits_f32(a) * 16777216.0f;                      /* exact scaling */
        /* round half to even on v (v < 1024) */
        uint32_t iv = (uint32_t)v;
        float frac = v - (float)iv;
        if (frac > 0.5f || (frac == 0.5f && (iv & 1u))) iv++;
        return (uint16_t)(sign | iv);
    }
    uint32_t mant_round = a + 0xfffu + ((a >> 13) & 1u);             /* ties to even */
    return (uint16_t)(sign | ((mant_round - 0x38000000u) >> 13));
}

/* Load element idx (in elements) of a buffer of the given dtype, as fp32. */
static inline float fa_load(const void *base, fa_dtype t, int64_t idx)
{
    switch (t) {
    case FA_F16:  return fa_f16_to_f32(((const uint16_t *)base)[idx]);
    case FA_BF16: return fa_bf16_to_f32(((const uint16_t *)base)[idx]);
    default:      return ((const float *)base)[idx];
    }
}

/* Store x into element idx of a buffer of the given dtype (rounded to nearest even). */
static inline void fa_store(void *base, fa_dtype t, int64_t idx, float x)
{
    switch (t) {
    case FA_F16:  ((uint16_t *)base)[idx] = fa_f32_to_f16(x); break;
    case FA_BF16: ((uint16_t *)base)[idx] = fa_f32_to_bf16(x); break;
    default:      ((float *)base)[idx] = x; break;
    }
}

/* Round x through the dtype and back (what storing then loading would give). */
static inline float fa_round_to(fa_dtype t, float x)
{
    switch (t) {
    case FA_F16:  return fa_f16_to_f32(fa_f32_to_f16(x));
    case FA_BF16: return fa_bf16_to_f32(fa_f32_to_bf16(x));
    default:      return x;
    }
}

#endif /* FA_DTYPE_H */
