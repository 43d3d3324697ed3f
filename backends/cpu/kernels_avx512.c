/* kernels_avx512.c - AVX-512 (F/BW/VL/DQ + FMA) kernel set: 6 x 64 register tiles
 * (24 zmm accumulators, 4 for B, 1 broadcast; k blocked by 128 so that the B panel stays
 * in L1). A broadcast costs an FMA-port slot on the Xeon cores measured: 4 B vectors
 * per broadcast run the FMAs at up to 4/5 of peak, 2 at 2/3.
 * Built with $(FA_AVX512_CFLAGS) only; cpu.c calls it only after CPUID + XGETBV agree. */
#include "config.h"
#include <immintrin.h>
#include <string.h>

#define VF __m512
#define VW 16
#define MR 6
#define NV 4
#define KC 128
#define VMASK __mmask16
static inline VMASK vmask_n(int n) { return n >= 16 ? (VMASK)0xffff : (VMASK)((1u << n) - 1u); }
#define VLOAD(p) _mm512_loadu_ps(p)
#define VLOADM(p, mk) _mm512_maskz_loadu_ps(mk, p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSTOREM(p, mk, v) _mm512_mask_storeu_ps(p, mk, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VZERO _mm512_setzero_ps()
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VBLEND_NEGINF(x, y) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), x, y)

#define VFNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define VFMS(a, b, c) _mm512_fmsub_ps(a, b, c)
#define VROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#include "kernels_exp.h"

/* exp(x): vexp_reduced (kernels_exp.h) on x clamped to [-88, 89], 2^n by vscalefps.
   x < -87.3 (exp below the smallest normal, including -inf) gives exactly 0; NaN stays
   NaN. */
static inline __m512 exp512(__m512 x)
{
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_max_ps(_mm512_set1_ps(-88.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    __m512 n, p = vexp_reduced(x, &n);
    return _mm512_maskz_scalef_ps((__mmask16)~tiny, p, n);
}
#define VEXP(x) exp512(x)

/* exp(t) in base 2 (kernels_exp.h): yh + yl = t log2 e, n = round(yh), 2^f by the
   degree-6 fit, 2^n by vscalefps. yh < -126 (below the smallest normal, -inf included)
   gives exactly 0; NaN stays NaN. 13 operations against exp512's 15 and its range clamps. */
static inline __m512 expt_512(__m512 t)
{
    __m512 yl, yh = vexpt_split(t, &yl);
    __mmask16 tiny = _mm512_cmp_ps_mask(yh, _mm512_set1_ps(-126.0f), _CMP_LT_OQ);
    __m512 n = VROUND(yh);
    return _mm512_maskz_scalef_ps((__mmask16)~tiny, vexpt_poly(yh, n, yl), n);
}
#define VEXPT(x) expt_512(x)

#include "kernels_simd.h"
#include "kernels_shared512.h"

static void cvt_in(float *dst, const void *src, int64_t n, fa_dtype t)
{
    int64_t i = 0;
    if (t == FA_F32) { memcpy(dst, src, (size_t)n * sizeof(float)); return; }
    const uint16_t *h = (const uint16_t *)src;
    if (t == FA_F16) {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
        for (; i < n; i++) dst[i] = fa_f16_to_f32(h[i]);
    } else {
        for (; i + 16 <= n; i += 16) {
            __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i)));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        }
        for (; i < n; i++) dst[i] = fa_bf16_to_f32(h[i]);
    }
}

static void cvt_out(void *dst, fa_dtype t, const float *src, int64_t n, float mul)
{
    int64_t i = 0;
    __m512 vm = _mm512_set1_ps(mul);
    if (t == FA_F32) {
        float *d = (float *)dst;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_mul_ps(_mm512_loadu_ps(src + i), vm));
        for (; i < n; i++) d[i] = src[i] * mul;
        return;
    }
    uint16_t *h = (uint16_t *)dst;
    if (t == FA_F16) {
        for (; i + 16 <= n; i += 16) {
            __m512 v = _mm512_mul_ps(_mm512_loadu_ps(src + i), vm);
            _mm256_storeu_si256((__m256i *)(h + i),
                                _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        for (; i < n; i++) h[i] = fa_f32_to_f16(src[i] * mul);
    } else {
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(h + i), fa_bf16_rne_512(_mm512_mul_ps(_mm512_loadu_ps(src + i), vm)));
        for (; i < n; i++) h[i] = fa_f32_to_bf16(src[i] * mul);
    }
}

#ifdef FA_HAVE_AVX512BF16
/* ---- bf16 dot-product path: 6 x 32 tiles, one vdpbf16ps = 2 k per FMA slot ---- */
static inline __attribute__((always_inline)) void
mk_bf16(const int M, const int ROW, const int FULL, int kp, const uint16_t *a, int64_t lda,
        const uint16_t *b, int64_t ldb, float *c, int64_t ldc, VMASK m0, VMASK m1, int acc)
{
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < M; i++) {
        if (acc) {
            c0[i] = FULL ? VLOAD(c + i * ldc) : VLOADM(c + i * ldc, m0);
            c1[i] = FULL ? VLOAD(c + i * ldc + VW) : VLOADM(c + i * ldc + VW, m1);
        } else {
            c0[i] = VZERO; c1[i] = VZERO;
        }
    }
    for (int p = 0; p < kp; p++) {
        const uint16_t *bp = b + 2 * (int64_t)p * ldb;
        __m512i b0 = FULL ? _mm512_loadu_si512(bp) : _mm512_maskz_loadu_epi32(m0, bp);
        __m512i b1 = FULL ? _mm512_loadu_si512(bp + 32) : _mm512_maskz_loadu_epi32(m1, bp + 32);
#pragma GCC unroll 16
        for (int i = 0; i < M; i++) {
            const uint16_t *ap = ROW ? a + i * lda + 2 * p : a + 2 * ((int64_t)p * lda + i);
            uint32_t w;
            memcpy(&w, ap, 4);
            __m512i ai = _mm512_set1_epi32((int)w);
            c0[i] = _mm512_dpbf16_ps(c0[i], (__m512bh)ai, (__m512bh)b0);
            c1[i] = _mm512_dpbf16_ps(c1[i], (__m512bh)ai, (__m512bh)b1);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < M; i++) {
        if (FULL) {
            VSTORE(c + i * ldc, c0[i]);
            VSTORE(c + i * ldc + VW, c1[i]);
        } else {
            VSTOREM(c + i * ldc, m0, c0[i]);
            VSTOREM(c + i * ldc + VW, m1, c1[i]);
        }
    }
}

#undef MK_CASE
#define MK_CASE(M)                                                                      \
    case M:                                                                             \
        if (full) mk_bf16(M, ROW, 1, k, ap, lda, bp, ldb, cp, ldc, m0, m1, acc);        \
        else mk_bf16(M, ROW, 0, k, ap, lda, bp, ldb, cp, ldc, m0, m1, acc);             \
        break;

static inline __attribute__((always_inline)) void
gemm_bf16_body(const int ROW, int m, int n, int k, const uint16_t *a, int64_t lda,
               const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int acc)
{
    for (int n0 = 0; n0 < n; n0 += 2 * VW) {
        int nn = n - n0 < 2 * VW ? n - n0 : 2 * VW;
        int full = nn == 2 * VW;
        VMASK m0 = vmask_n(nn < VW ? nn : VW);
        VMASK m1 = vmask_n(nn > VW ? nn - VW : 0);
        const uint16_t *bp = b + 2 * n0;
        for (int i0 = 0; i0 < m; i0 += MR) {
            int mm = m - i0 < MR ? m - i0 : MR;
            const uint16_t *ap = ROW ? a + (int64_t)i0 * lda : a + 2 * i0;
            float *cp = c + (int64_t)i0 * ldc + n0;
            switch (mm) {
            MK_CASES
            default: break;
            }
        }
    }
}

static void gemm_bf16_rowA(int m, int n, int kp, const uint16_t *a, int64_t lda,
                           const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int acc)
{
    gemm_bf16_body(1, m, n, kp, a, lda, b, ldb, c, ldc, acc);
}

static void gemm_bf16_colA(int m, int n, int kp, const uint16_t *a, int64_t lda,
                           const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int acc)
{
    gemm_bf16_body(0, m, n, kp, a, lda, b, ldb, c, ldc, acc);
}

static void to_pairs(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int nk, int nn)
{
    /* lanes 2i and 2i+1 of the result take element i of row k and of row k+1 */
    static const uint16_t idx[32] = { 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31 };
    const __m512i vidx = _mm512_loadu_si512(idx);
    for (int k = 0; k < nk; k += 2) {
        const float *r0 = src + (int64_t)k * lds;
        const float *r1 = k + 1 < nk ? r0 + lds : NULL;
        uint16_t *d = dst + (int64_t)k * ldd;   /* pair row k/2: 2*ldd elements */
        for (int n0 = 0; n0 < nn; n0 += 16) {
            int cnt = nn - n0 < 16 ? nn - n0 : 16;
            __mmask16 mk = vmask_n(cnt);
            __m512 x0 = _mm512_maskz_loadu_ps(mk, r0 + n0);
            __m512 x1 = r1 ? _mm512_maskz_loadu_ps(mk, r1 + n0) : _mm512_setzero_ps();
            __m512i pr = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
            pr = _mm512_permutexvar_epi16(vidx, pr);
            _mm512_mask_storeu_epi32(d + 2 * n0, mk, pr);
        }
    }
}
#define BF16_SLOTS , gemm_bf16_rowA, gemm_bf16_colA, to_pairs
#else
#define BF16_SLOTS , NULL, NULL, NULL
#endif

const fa_cpu_kernels fa_cpu_kernels_avx512 = {
    "avx512", MR, NR, gemm_rowA, gemm_colA, softmax_fwd, exp_sub, ds_kernel, cvt_in, cvt_out
    BF16_SLOTS, KC, gemm_colA_scaled, fa_tr32_512
};
