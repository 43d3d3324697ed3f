/* decode_avx512.c - the decode path's AVX-512 kernels (decode_kernels.h): scores and
 * O = alpha O + P V straight from the cache rows (fp32, bf16, fp16), and the older
 * bf16/fp16 K^T pass for head dims that are not a multiple of 32.
 *
 * A 32-element chunk of a cache row widens to two fp32 vectors: fp32 two loads, fp16 its
 * two halves, bf16 its even and odd elements (a shift and a mask of the 32-bit words, the
 * cheapest widening; q rows and O rows of a bf16 cache are kept in that "paired" order,
 * fa_cpu_decode_pair_avx512 / unpair). Scores: per group of 16 dot products (16 / R keys
 * x R rows), one accumulator each over d, then 16 horizontal sums in one 45-op tree: no
 * transpose of K. P V: per key one pass over the V row, R <= 4 rows x 64 columns of O in
 * registers.
 */
#include "config.h"
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include "decode_kernels.h"
#include "kernels_shared512.h"

#define AI static inline __attribute__((always_inline))

/* The rows to prefetch while the kernel reads the current ones: the next block's, the
   first n of them (same offset and columns as the row read beside it). */
typedef struct { const char *const *rows; int n; } dec_pf;

/* bytes from a into L2 (the next block is read a whole block later: too far for L1). */
AI void prefetch_l2(const char *a, int64_t bytes)
{
    for (int64_t x = 0; x < bytes; x += 64) _mm_prefetch(a + x, _MM_HINT_T1);
}

/* 16 16-bit elements (m: the lanes to read) -> fp32, exactly. */
static inline __m512i load16(const uint16_t *p, __mmask16 m, int f16)
{
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (f16) return _mm512_castps_si512(_mm512_cvtph_ps(h));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

void fa_cpu_decode_kt16_avx512(float *dst, int64_t ldd, const uint16_t *src, int64_t lds,
                               int nk, int64_t d, int f16)
{
    for (int j0 = 0; j0 < nk; j0 += 16) {
        int rows = nk - j0 < 16 ? nk - j0 : 16;
        for (int64_t c0 = 0; c0 < d; c0 += 16) {
            int cols = d - c0 < 16 ? (int)(d - c0) : 16;
            __mmask16 m = (__mmask16)((1u << cols) - 1u);
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = i < rows ? load16(src + (int64_t)(j0 + i) * lds + c0, m, f16)
                                : _mm512_setzero_si512();
            tr16x16(v);
            for (int i = 0; i < cols; i++) _mm512_storeu_si512(dst + (c0 + i) * ldd + j0, v[i]);
        }
    }
}

/* Elements c .. c+31 of a row of type dt -> a, b (see the file comment for the order). */
AI void widen32(const char *row, int64_t c, int dt, __m512 *a, __m512 *b)
{
    if (dt == FA_CPU_DEC_F32) {
        *a = _mm512_loadu_ps((const float *)row + c);
        *b = _mm512_loadu_ps((const float *)row + c + 16);
    } else if (dt == FA_CPU_DEC_F16) {
        __m512i x = _mm512_loadu_si512((const uint16_t *)row + c);
        *a = _mm512_cvtph_ps(_mm512_castsi512_si256(x));
        *b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
    } else {
        __m512i x = _mm512_loadu_si512((const uint16_t *)row + c);
        *a = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
        *b = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
    }
}

/* Lane i of the result: the sum of the 16 lanes of a[i]. */
AI __m512 hsum16(__m512 *a)
{
    __m512 b[8], c[4], d[2];
    #pragma GCC unroll 16
    for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
        c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    #pragma GCC unroll 16
    for (int i = 0; i < 2; i++)
        d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88),
                         _mm512_shuffle_f32x4(d[0], d[1], 0xdd));
}

/* Scores of rows r0 .. r0+R-1 against keys j0 .. j0+16/R-1 (key j: rows[min(j, nk-1)]
   + off); s[j * lds + r] for the keys below nk. */
AI void qk_group(float *s, int64_t lds, const float *q, int64_t ldq, int r0, int R,
                 const char *const *rows, const dec_pf *pf, int64_t off, int j0, int nk,
                 int64_t d, int dt)
{
    const int kc = 16 / R;
    const char *kr[16];
    __m512 acc[16];
    for (int x = 0; x < kc; x++) kr[x] = rows[j0 + x < nk ? j0 + x : nk - 1] + off;
    for (int x = 0; x < kc && j0 + x < pf->n; x++)
        prefetch_l2(pf->rows[j0 + x] + off, d * (dt == FA_CPU_DEC_F32 ? 4 : 2));
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 32) {
        #pragma GCC unroll 16
        for (int x = 0; x < kc; x++) {
#ifdef FA_HAVE_AVX512BF16
            if (dt == FA_CPU_DEC_BF16DOT) {
                __m512 kx = _mm512_loadu_ps((const uint16_t *)kr[x] + c);
                #pragma GCC unroll 16
                for (int r = 0; r < R; r++) {
                    const uint16_t *qr = (const uint16_t *)(q + (int64_t)(r0 + r) * ldq);
                    __m512 qx = _mm512_loadu_ps(qr + c);
                    acc[x * R + r] = _mm512_dpbf16_ps(acc[x * R + r], (__m512bh)kx, (__m512bh)qx);
                }
                continue;
            }
#endif
            __m512 ka, kb;
            widen32(kr[x], c, dt, &ka, &kb);
            #pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                const float *qr = q + (int64_t)(r0 + r) * ldq + c;
                acc[x * R + r] = _mm512_fmadd_ps(ka, _mm512_loadu_ps(qr), acc[x * R + r]);
                acc[x * R + r] = _mm512_fmadd_ps(kb, _mm512_loadu_ps(qr + 16), acc[x * R + r]);
            }
        }
    }
    __m512 sum = hsum16(acc);
    if (lds == R && r0 == 0 && j0 + kc <= nk) {   /* packed S^T: 16 consecutive scores */
        _mm512_storeu_ps(s + (int64_t)j0 * R, sum);
        return;
    }
    float out[16] __attribute__((aligned(64)));
    _mm512_store_ps(out, sum);
    for (int x = 0; x < kc && j0 + x < nk; x++)
        #pragma GCC unroll 16
        for (int r = 0; r < R; r++) s[(int64_t)(j0 + x) * lds + r0 + r] = out[x * R + r];
}

AI void qk_rows(float *s, int64_t lds, const float *q, int64_t ldq, int r0, int R,
                const char *const *rows, const dec_pf *pf, int64_t off, int nk, int64_t d,
                int dt)
{
    for (int j0 = 0; j0 < nk; j0 += 16 / R)
        qk_group(s, lds, q, ldq, r0, R, rows, pf, off, j0, nk, d, dt);
}

/* The rows' passes over the keys, 16 rows at a time; the first one prefetches. */
AI void qk_dt(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
              const char *const *rows, dec_pf pf, int64_t off, int nk, int64_t d, int dt)
{
    for (int r0 = 0; r0 < nr; r0 += 16, pf.n = 0) {
        int n = nr - r0;
        if (n > 8) qk_rows(s, lds, q, ldq, r0, 16, rows, &pf, off, nk, d, dt);
        else if (n > 4) qk_rows(s, lds, q, ldq, r0, 8, rows, &pf, off, nk, d, dt);
        else if (n > 2) qk_rows(s, lds, q, ldq, r0, 4, rows, &pf, off, nk, d, dt);
        else if (n > 1) qk_rows(s, lds, q, ldq, r0, 2, rows, &pf, off, nk, d, dt);
        else qk_rows(s, lds, q, ldq, r0, 1, rows, &pf, off, nk, d, dt);
    }
}

void fa_cpu_decode_qk_avx512(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                             const char *const *rows, const char *const *pf, int npf,
                             int64_t off, int nk, int64_t d, int dt)
{
    dec_pf f = { pf, pf ? npf : 0 };
    if (dt == FA_CPU_DEC_F32) qk_dt(s, lds, q, ldq, nr, rows, f, off, nk, d, FA_CPU_DEC_F32);
    else if (dt == FA_CPU_DEC_F16) qk_dt(s, lds, q, ldq, nr, rows, f, off, nk, d, FA_CPU_DEC_F16);
#ifdef FA_HAVE_AVX512BF16
    else if (dt == FA_CPU_DEC_BF16DOT)
        qk_dt(s, lds, q, ldq, nr, rows, f, off, nk, d, FA_CPU_DEC_BF16DOT);
#endif
    else qk_dt(s, lds, q, ldq, nr, rows, f, off, nk, d, FA_CPU_DEC_BF16);
}

/* Rows r0 .. r0+R-1, columns c0 .. c0+32*C-1 of O: alpha O + sum over keys ka .. ke-1 of
   P V (p: s[j * lds + r]). */
AI void pv_tile(float *o, int64_t ldo, const float *alpha, const float *s, int64_t lds, int r0,
                int R, int64_t c0, int C, const char *const *rows, const dec_pf *pf,
                int64_t off, int ka, int ke, int dt)
{
    const int64_t es = dt == FA_CPU_DEC_F32 ? 4 : 2;
    __m512 acc[4][8];
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        __m512 al = _mm512_set1_ps(alpha[r0 + r]);
        #pragma GCC unroll 16
        for (int x = 0; x < 2 * C; x++)
            acc[r][x] = _mm512_mul_ps(al, _mm512_loadu_ps(o + (r0 + r) * ldo + c0 + 16 * x));
    }
    for (int j = ka; j < ke; j++) {
        const char *vr = rows[j] + off;
        const float *pj = s + (int64_t)j * lds + r0;
        if (j < pf->n) prefetch_l2(pf->rows[j] + off + c0 * es, 32 * C * es);
        #pragma GCC unroll 16
        for (int x = 0; x < C; x++) {
            __m512 va, vb;
            widen32(vr, c0 + 32 * x, dt, &va, &vb);
            #pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                __m512 p = _mm512_set1_ps(pj[r]);
                acc[r][2 * x] = _mm512_fmadd_ps(p, va, acc[r][2 * x]);
                acc[r][2 * x + 1] = _mm512_fmadd_ps(p, vb, acc[r][2 * x + 1]);
            }
        }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 16
        for (int x = 0; x < 2 * C; x++)
            _mm512_storeu_ps(o + (int64_t)(r0 + r) * ldo + c0 + 16 * x, acc[r][x]);
}

AI void pv_rows(float *o, int64_t ldo, const float *alpha, const float *s, int64_t lds, int r0,
                int R, const char *const *rows, const dec_pf *pf, int64_t off, int ka, int ke,
                int64_t dv, int dt)
{
    int64_t c0 = 0;
    for (; c0 + 64 <= dv; c0 += 64)
        pv_tile(o, ldo, alpha, s, lds, r0, R, c0, 2, rows, pf, off, ka, ke, dt);
    if (c0 < dv) pv_tile(o, ldo, alpha, s, lds, r0, R, c0, 1, rows, pf, off, ka, ke, dt);
}

/* The rows' passes over the keys, 4 rows at a time; the first one prefetches (each
   column tile its columns). */
AI void pv_dt(float *o, int64_t ldo, const float *alpha, const float *s, int64_t lds, int r0,
              int nr, const char *const *rows, dec_pf pf, int64_t off, int ka, int ke,
              int64_t dv, int dt)
{
    for (int r = r0; r < r0 + nr; r += 4, pf.n = 0) {
        int n = r0 + nr - r;
        if (n >= 4) pv_rows(o, ldo, alpha, s, lds, r, 4, rows, &pf, off, ka, ke, dv, dt);
        else if (n == 3) pv_rows(o, ldo, alpha, s, lds, r, 3, rows, &pf, off, ka, ke, dv, dt);
        else if (n == 2) pv_rows(o, ldo, alpha, s, lds, r, 2, rows, &pf, off, ka, ke, dv, dt);
        else pv_rows(o, ldo, alpha, s, lds, r, 1, rows, &pf, off, ka, ke, dv, dt);
    }
}

void fa_cpu_decode_pv_avx512(float *o, int64_t ldo, const float *alpha, const float *s,
                             int64_t lds, int r0, int nr, const char *const *rows,
                             const char *const *pf, int npf, int64_t off, int ka, int ke,
                             int64_t dv, int dt)
{
    dec_pf f = { pf, pf ? npf : 0 };
    if (dt == FA_CPU_DEC_F32)
        pv_dt(o, ldo, alpha, s, lds, r0, nr, rows, f, off, ka, ke, dv, FA_CPU_DEC_F32);
    else if (dt == FA_CPU_DEC_F16)
        pv_dt(o, ldo, alpha, s, lds, r0, nr, rows, f, off, ka, ke, dv, FA_CPU_DEC_F16);
    else
        pv_dt(o, ldo, alpha, s, lds, r0, nr, rows, f, off, ka, ke, dv, FA_CPU_DEC_BF16);
}

void fa_cpu_decode_colmax_avx512(const float *s, int nv, float sc, float *mx)
{
    __m512 a = _mm512_set1_ps(-INFINITY), b = a, vs = _mm512_set1_ps(sc);
    int v = 0;
    for (; v + 1 < nv; v += 2) {
        a = _mm512_max_ps(a, _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v), vs));
        b = _mm512_max_ps(b, _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v + 16), vs));
    }
    if (v < nv) a = _mm512_max_ps(a, _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v), vs));
    _mm512_storeu_ps(mx, _mm512_max_ps(a, b));
}

/* Natural order <-> paired order (per 32: the even elements, then the odd ones). */
static void permute32(float *x, int64_t ld, int rows, int64_t d, __m512i ia, __m512i ib)
{
    for (int r = 0; r < rows; r++)
        for (int64_t c = 0; c < d; c += 32) {
            float *p = x + (int64_t)r * ld + c;
            __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
            _mm512_storeu_ps(p, _mm512_permutex2var_ps(lo, ia, hi));
            _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(lo, ib, hi));
        }
}

void fa_cpu_decode_pair_avx512(float *x, int64_t ld, int rows, int64_t d)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    permute32(x, ld, rows, d, ev, _mm512_add_epi32(ev, _mm512_set1_epi32(1)));
}

void fa_cpu_decode_unpair_avx512(float *x, int64_t ld, int rows, int64_t d)
{
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    permute32(x, ld, rows, d, lo, _mm512_add_epi32(lo, _mm512_set1_epi32(8)));
}
