/* kernels_avx2.c - AVX2 + FMA + F16C kernel set: 6 x 16 register tiles (12 ymm
 * accumulators, 2 for B, 1 broadcast). Built with $(FA_AVX2_CFLAGS) only. */
#include "config.h"
#include <immintrin.h>
#include <string.h>

#define VF __m256
#define VW 8
#define MR 6
#define VMASK __m256i
static inline VMASK vmask_n(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#define VLOAD(p) _mm256_loadu_ps(p)
#define VLOADM(p, mk) _mm256_maskload_ps(p, mk)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSTOREM(p, mk, v) _mm256_maskstore_ps(p, mk, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VZERO _mm256_setzero_ps()
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VBLEND_NEGINF(x, y) \
    _mm256_blendv_ps(x, y, _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ))

#define VFNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define VFMS(a, b, c) _mm256_fmsub_ps(a, b, c)
#define VROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#include "kernels_exp.h"

/* exp(x) as in kernels_avx512.c (x clamped to [-87.3, 88.3]), 2^n built in the exponent
   field. */
static inline __m256 exp256(__m256 x)
{
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);
    x = _mm256_min_ps(_mm256_set1_ps(88.3f), x);
    __m256 n, p = vexp_reduced(x, &n);
    /* n in [-126, 128]: split 2^n = 2^(n/2) * 2^(n - n/2) so 128 does not overflow the field */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_andnot_ps(tiny, p);
}
#define VEXP(x) exp256(x)

/* exp(t) as expt_512 in kernels_avx512.c, yh clamped to [-126, 128] before n = round(yh),
   2^n built in the exponent field (split in two halves so that n = 128 does not overflow
   it; n >= -126 where the result is kept). */
static inline __m256 expt_256(__m256 t)
{
    __m256 yl, yh = vexpt_split(t, &yl);
    __m256 tiny = _mm256_cmp_ps(yh, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    yh = _mm256_max_ps(_mm256_set1_ps(-126.0f), yh);
    yh = _mm256_min_ps(_mm256_set1_ps(128.0f), yh);
    __m256 n = VROUND(yh);
    __m256 p = vexpt_poly(yh, n, yl);
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_andnot_ps(tiny, p);
}
#define VEXPT(x) expt_256(x)

#include "kernels_simd.h"

static void cvt_in(float *dst, const void *src, int64_t n, fa_dtype t)
{
    int64_t i = 0;
    if (t == FA_F32) { memcpy(dst, src, (size_t)n * sizeof(float)); return; }
    const uint16_t *h = (const uint16_t *)src;
    if (t == FA_F16) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
        for (; i < n; i++) dst[i] = fa_f16_to_f32(h[i]);
    } else {
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
        for (; i < n; i++) dst[i] = fa_bf16_to_f32(h[i]);
    }
}

static void cvt_out(void *dst, fa_dtype t, const float *src, int64_t n, float mul)
{
    int64_t i = 0;
    if (t == FA_F32) {
        float *d = (float *)dst;
        __m256 vm = _mm256_set1_ps(mul);
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_loadu_ps(src + i), vm));
        for (; i < n; i++) d[i] = src[i] * mul;
        return;
    }
    uint16_t *h = (uint16_t *)dst;
    if (t == FA_F16)
        for (; i < n; i++) h[i] = fa_f32_to_f16(src[i] * mul);
    else
        for (; i < n; i++) h[i] = fa_f32_to_bf16(src[i] * mul);
}

const fa_cpu_kernels fa_cpu_kernels_avx2 = {
    "avx2", MR, NR, gemm_rowA, gemm_colA, softmax_fwd, exp_sub, ds_kernel, cvt_in, cvt_out,
    NULL, NULL, NULL, KC, gemm_colA_scaled, NULL
};
