/* scratch.h - helpers shared by the loop nests: thread ids, aligned scratch, the per-score
 * feature pipeline (softcap, ALiBi, bias) and dropout on S^T tiles. */
#ifndef FA_CPU_SCRATCH_H
#define FA_CPU_SCRATCH_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu.h"
#include "dtype.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static inline int fa_cpu_tid(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* 64-byte aligned, zeroed; NULL on failure or overflow. */
static inline float *fa_cpu_alloc(int64_t nfloats)
{
    if (nfloats < 1) nfloats = 1;
    size_t bytes = ((size_t)nfloats * sizeof(float) + 63) / 64 * 64;
    if ((uint64_t)nfloats > SIZE_MAX / 8) return NULL;
    void *ptr = NULL;
    if (posix_memalign(&ptr, 64, bytes)) return NULL;
    memset(ptr, 0, bytes);
    return (float *)ptr;
}

/* 64-byte aligned, NOT zeroed (callers zero it where needed, e.g. in parallel so each
   thread first-touches its own slice); NULL on failure or overflow. */
static inline float *fa_cpu_alloc_raw(int64_t nfloats)
{
    if (nfloats < 1) nfloats = 1;
    if ((uint64_t)nfloats > SIZE_MAX / 8) return NULL;
    size_t bytes = ((size_t)nfloats * sizeof(float) + 63) / 64 * 64;
    void *ptr = NULL;
    if (posix_memalign(&ptr, 64, bytes)) return NULL;
    return (float *)ptr;
}

/* Scratch sizes (elements) from the call's dimensions, which validation bounds only by
   the tensors' element counts (an input may be a stride-0 view of a few bytes): products
   and sums of non-negative sizes that set *ovf instead of wrapping when the result does
   not fit int64. A set *ovf means the scratch cannot exist: FA_ERR_NO_MEMORY. */
static inline int64_t fa_sz_mul(int64_t a, int64_t b, int *ovf)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) { *ovf = 1; return 0; }
    return r;
}
static inline int64_t fa_sz_add(int64_t a, int64_t b, int *ovf)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) { *ovf = 1; return 0; }
    return r;
}
static inline int64_t fa_sz_pad(int64_t n, int *ovf)
{
    if (n > INT64_MAX - FA_CPU_PAD) { *ovf = 1; return 0; }
    return fa_cpu_pad(n);
}
static inline int64_t fa_sz_ld(int64_t n, int *ovf)
{
    if (n > INT64_MAX - 2 * FA_CPU_PAD) { *ovf = 1; return 0; }
    return fa_cpu_ld(n);
}
/* ceil(n / d) for n >= 0, d > 0, without forming n + d - 1. */
static inline int64_t fa_sz_ceil_div(int64_t n, int64_t d)
{
    return n / d + (n % d != 0);
}

/* 1 when one of the rows x[r*ld + c] (r < rows, c < n) is Inf or NaN. On the bits: the
   exponent field plus one exponent unit reaches bit 31 exactly when the field is all
   ones, so an OR of (u & exp) + unit over the row has bit 31 set iff some element is
   Inf/NaN. Eight lanes of fixed width, which gcc -O2 turns into vector and/add/or at the
   library's baseline ISA (a NaN-aware float compare, x - x == 0, stayed a scalar
   ucomiss/setp/cmov per element, also under omp simd once inlined into the loop nests). */
static inline int fa_cpu_nonfinite(const float *x, int rows, int64_t n, int64_t ld)
{
    uint32_t acc[8] = { 0 }, bad = 0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        int64_t c = 0;
        for (; c + 8 <= n; c += 8) {
            uint32_t u[8];
            memcpy(u, xr + c, sizeof u);
            for (int e = 0; e < 8; e++) acc[e] |= (u[e] & 0x7f800000u) + 0x00800000u;
        }
        for (; c < n; c++) {
            uint32_t u;
            memcpy(&u, xr + c, sizeof u);
            bad |= (u & 0x7f800000u) + 0x00800000u;
        }
    }
    for (int e = 0; e < 8; e++) bad |= acc[e];
    return (int)(bad >> 31);
}

/* sum_c a[c] b[c] in a fixed order: eight lanes of fixed width (element c goes to lane
   c % 8 while eight remain), the lanes added pairwise (0+4, 1+5, ... then 0+2, 1+3, then
   0+1), then the tail in order. gcc -O2 keeps the lanes in vector registers at the
   library's baseline ISA; a plain running sum is one dependent add per element. The
   order depends on n only, so the result is the same on every thread. */
static inline float fa_cpu_dot(const float *restrict a, const float *restrict b, int64_t n)
{
    float acc[8] = { 0 };
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int e = 0; e < 8; e++) acc[e] += a[c + e] * b[c + e];
    for (int e = 0; e < 4; e++) acc[e] += acc[e + 4];
    acc[0] += acc[2]; acc[1] += acc[3];
    float s = acc[0] + acc[1];
    for (; c < n; c++) s += a[c] * b[c];
    return s;
}

/* dst[x] = a[x] + b[x], x < n (dst may be a; b never overlaps either). Blocks of eight
   fixed lanes, like fa_cpu_dot: gcc -O2's cost model vectorizes those, not a loop of
   unknown count. */
static inline void fa_cpu_add_f32(float *dst, const float *a, const float *restrict b, int64_t n)
{
    int64_t x = 0;
    for (; x + 8 <= n; x += 8) {
        float t[8];
        for (int e = 0; e < 8; e++) t[e] = a[x + e] + b[x + e];
        for (int e = 0; e < 8; e++) dst[x + e] = t[e];
    }
    for (; x < n; x++) dst[x] = a[x] + b[x];
}

/* dst[c*ldd + r] = src[r*lds + c], r < rows, c < cols: the kernel set's register
   transpose where it has one, else 16 x 16 blocks in C (a row at a time would store each
   element to another cache line). The Q^T blocks of the forward and the backward. */
static inline void fa_cpu_transpose_f32(const fa_cpu_kernels *K, float *dst, int64_t ldd,
                                        const float *src, int64_t lds, int rows, int64_t cols)
{
    if (K->tr32) {
        K->tr32((uint32_t *)dst, ldd, (const uint32_t *)src, lds, rows, (int)cols);
        return;
    }
    for (int r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            int r1 = rows - r0 < 16 ? rows : r0 + 16;
            int64_t c1 = cols - c0 < 16 ? cols : c0 + 16;
            for (int64_t c = c0; c < c1; c++)
                for (int r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

/* Does the call need the per-element score pipeline (the "slow" pre-pass)? */
static inline int fa_cpu_slow_scores(const fa_problem *p)
{
    return p->softcap > 0.0f || p->alibi || p->has_bias || !(p->scale > 0.0f);
}

/* Apply s = scale*qk ; softcap ; + alibi ; + bias to an S^T tile in place, key j0 + j,
   query row r at (b, h[r], i[r]). t (optional) receives tanh(scale*qk / softcap). */
static inline void fa_cpu_score_pass(const fa_problem *p, const fa_seq *sq, int64_t b,
                                     float *s, int nk, int nq, int64_t ld, int64_t j0,
                                     const int64_t *hr, const int64_t *ir, float *t)
{
    float scale = p->scale, cap = p->softcap;
    for (int r = 0; r < nq; r++) {
        int64_t h = hr[r], i = ir[r];
        float slope = p->alibi ? p->alibi[h] : 0.0f;
        int64_t pos = i + sq->off;
        int64_t bidx = p->has_bias ? fa_bias_index(p, sq->tb, i, h, 0) : 0;
        for (int j = 0; j < nk; j++) {
            float x = s[j * ld + r] * scale;
            if (cap > 0.0f) {
                float th = tanhf(x / cap);
                if (t) t[j * ld + r] = th;
                x = cap * th;
            }
            if (p->alibi) {
                int64_t dist = pos - (j0 + j);
                if (dist < 0) dist = -dist;
                x += -slope * (float)dist;
            }
            if (p->has_bias) x += fa_load(p->bias.data, p->bias.dtype, bidx + j0 + j);
            s[j * ld + r] = x;
        }
    }
}

/* -inf outside each row's visible key range [lo[r], hi[r]). When lo and hi are
   non-decreasing in r (one head's consecutive queries: causal, windows), the masked
   queries of key j are a prefix (hi <= j) and a suffix (lo > j) of the row: filled as two
   contiguous runs per key instead of a compare per score. */
static inline void fa_cpu_mask_pass(float *s, int nk, int nq, int64_t ld, int64_t j0,
                                    const int64_t *lo, const int64_t *hi)
{
    int mono = 1;
    for (int r = 1; r < nq && mono; r++)
        if (lo[r] < lo[r - 1] || hi[r] < hi[r - 1]) mono = 0;
    if (mono) {
        int r1 = 0, r2 = 0;
        for (int j = 0; j < nk; j++) {
            int64_t jj = j0 + j;
            float *row = s + j * ld;
            while (r1 < nq && hi[r1] <= jj) r1++;
            while (r2 < nq && lo[r2] <= jj) r2++;
#pragma omp simd
            for (int r = 0; r < r1; r++) row[r] = -INFINITY;
#pragma omp simd
            for (int r = r2 > r1 ? r2 : r1; r < nq; r++) row[r] = -INFINITY;
        }
        return;
    }
    for (int r = 0; r < nq; r++) {
        for (int j = 0; j < nk; j++) {
            int64_t jj = j0 + j;
            if (jj < lo[r] || jj >= hi[r]) s[j * ld + r] = -INFINITY;
        }
    }
}

/* ---- products over a partly masked tile, restricted to the pairs some row sees ----------
   A causal mask (or a window) leaves whole rectangles of a diagonal tile unseen: with
   256 x 256 tiles about half of each diagonal tile, so at S = 1024 a fifth and at S = 4096
   about 6% of all the products of a causal call. These wrappers split the tile into
   panels and give each product only the span that one of the panel's rows sees. Every
   score a row sees is computed by the same kernel on the same operands in the same order
   as by the whole-tile call (bitwise the same); the terms the accumulating products skip
   are masked pairs, whose P and dS are exactly 0 (the sums are the same up to the sign of
   a zero). Those need finite operands (0 * Inf is NaN): the forward's tile with Inf/NaN
   in V and the backward's select path keep their own visible-only loops. */

/* Panel width for the wrappers below: the kernel set's tile, at least 16 (the generic
   set's 1 x 1 tile would make a call per row). */
static inline int fa_cpu_seen_step(int tile) { return tile < 16 ? 16 : tile; }

/* [*ja, *jb): the tile's keys (relative to j0, within nk) seen by one of the rows
   r0 .. r1-1, as one span (the union of their visible ranges); 0, 0 when none. */
static inline void fa_cpu_key_span(const int64_t *lo, const int64_t *hi, int r0, int r1,
                                   int64_t j0, int nk, int *ja, int *jb)
{
    int64_t a = INT64_MAX, e = INT64_MIN;
    for (int r = r0; r < r1; r++) {
        int64_t l = lo[r] > j0 ? lo[r] : j0, h = hi[r] < j0 + nk ? hi[r] : j0 + nk;
        if (l >= h) continue;
        if (l < a) a = l;
        if (h > e) e = h;
    }
    *ja = a < e ? (int)(a - j0) : 0;
    *jb = a < e ? (int)(e - j0) : 0;
}

/* [*ra, *rb): the rows (of nq) that see one of the keys j0 + ja .. j0 + jb - 1, as one
   span; 0, 0 when none. */
static inline void fa_cpu_row_span(const int64_t *lo, const int64_t *hi, int nq, int64_t j0,
                                   int ja, int jb, int *ra, int *rb)
{
    int a = nq, e = 0;
    for (int r = 0; r < nq; r++)
        if (lo[r] < hi[r] && lo[r] < j0 + jb && hi[r] > j0 + ja) {
            if (r < a) a = r;
            e = r + 1;
        }
    *ra = a < e ? a : 0;
    *rb = a < e ? e : 0;
}

/* S^T-shaped product C[j][r] = A[j][:] . B[:][r] (overwrite; keys j < nk, rows r < nq),
   computed per panel of NR rows (the set's, 16 at least) over the keys one of them sees;
   the panel's other keys get 0 (the mask pass or exp then makes them -inf or 0).
   bf16 = 0: gemm_rowA on fp32 A, B, kd the inner dimension; bf16 = 1: gemm_bf16_rowA on
   bf16 K rows and Q^T pairs (kernels.h), kd the number of k pairs. */
static inline void fa_cpu_rowA_seen(const fa_cpu_kernels *K, int bf16, int nk, int nq, int kd,
                                    const void *a, int64_t lda, const void *b, int64_t ldb,
                                    float *c, int64_t ldc, int64_t j0, const int64_t *lo,
                                    const int64_t *hi)
{
    const int step = fa_cpu_seen_step(K->nr);
    for (int r0 = 0; r0 < nq; r0 += step) {
        int r1 = nq - r0 < step ? nq : r0 + step, ja, jb;
        size_t w = sizeof(float) * (size_t)(r1 - r0);
        fa_cpu_key_span(lo, hi, r0, r1, j0, nk, &ja, &jb);
        for (int j = 0; j < ja; j++) memset(c + j * ldc + r0, 0, w);
        if (ja < jb && bf16)
            K->gemm_bf16_rowA(jb - ja, r1 - r0, kd, (const uint16_t *)a + ja * lda, lda,
                              (const uint16_t *)b + 2 * r0, ldb, c + ja * ldc + r0, ldc, 0);
        else if (ja < jb)
            K->gemm_rowA(jb - ja, r1 - r0, kd, (const float *)a + ja * lda, lda,
                         (const float *)b + r0, ldb, c + ja * ldc + r0, ldc, 0);
        for (int j = jb; j < nk; j++) memset(c + j * ldc + r0, 0, w);
    }
}

/* C[j][:] += sum_r A[j][r] B[r][:] over an S^T-shaped A (keys j < nk, rows r < nq) that
   is 0 at the pairs no row sees (gemm_rowA, accumulate; n columns): per block of 4 MR
   keys (16 at least), the inner dimension is the rows that see one of them. */
static inline void fa_cpu_rowA_keys_seen(const fa_cpu_kernels *K, int nk, int n, int nq,
                                         const float *a, int64_t lda, const float *b,
                                         int64_t ldb, float *c, int64_t ldc, int64_t j0,
                                         const int64_t *lo, const int64_t *hi)
{
    const int step = fa_cpu_seen_step(4 * K->mr);
    for (int j = 0; j < nk; j += step) {
        int je = nk - j < step ? nk : j + step, ra, rb;
        fa_cpu_row_span(lo, hi, nq, j0, j, je, &ra, &rb);
        if (ra < rb)
            K->gemm_rowA(je - j, n, rb - ra, a + j * lda + ra, lda, b + ra * ldb, ldb,
                         c + j * ldc, ldc, 1);
    }
}

/* C[r][:] (= alpha[r] C[r][:]) += sum_j A[j][r] B[j][:] over an S^T-shaped A (keys j < nk,
   rows r < nq) that is 0 at the pairs no row sees: per block of 4 MR rows (16 at least),
   the inner dimension is the keys one of them sees.
   bf16 = 0: gemm_colA (accumulate), or gemm_colA_scaled when alpha is given;
   bf16 = 1: gemm_bf16_colA on P^T pairs and V pairs (kernels.h), alpha NULL; the span is
   rounded out to whole key pairs (the pair past an odd nk is 0 in both operands). */
static inline void fa_cpu_colA_rows_seen(const fa_cpu_kernels *K, int bf16, int nq, int n,
                                         int nk, const void *a, int64_t lda, const void *b,
                                         int64_t ldb, float *c, int64_t ldc, int64_t j0,
                                         const int64_t *lo, const int64_t *hi,
                                         const float *alpha)
{
    const int step = fa_cpu_seen_step(4 * K->mr);
    for (int r = 0; r < nq; r += step) {
        int re = nq - r < step ? nq : r + step, ja, jb;
        fa_cpu_key_span(lo, hi, r, re, j0, nk, &ja, &jb);
        if (ja < jb && bf16) {
            ja &= ~1;
            K->gemm_bf16_colA(re - r, n, (jb - ja + 1) / 2,
                              (const uint16_t *)a + ja * lda + 2 * r, lda,
                              (const uint16_t *)b + ja * ldb, ldb, c + r * ldc, ldc, 1);
        } else if (ja < jb && alpha) {
            K->gemm_colA_scaled(re - r, n, jb - ja, (const float *)a + ja * lda + r, lda,
                                (const float *)b + ja * ldb, ldb, c + r * ldc, ldc, alpha + r);
        } else if (ja < jb) {
            K->gemm_colA(re - r, n, jb - ja, (const float *)a + ja * lda + r, lda,
                         (const float *)b + ja * ldb, ldb, c + r * ldc, ldc, 1);
        } else if (alpha) {
            for (int i = r; i < re; i++)
                if (alpha[i] != 1.0f)
                    for (int x = 0; x < n; x++) c[i * ldc + x] *= alpha[i];
        }
    }
}

/* The same restriction for the AMX tile kernels (kernels.h: whole 16 x 16 C tiles, k in
   steps of 32): spans are rounded out to whole tiles, which stay inside the padding every
   whole-tile call already reads and writes. A k step that the restriction leaves out
   holds only masked pairs (P, dS = 0), whose products add zeros (the one difference from
   the whole-tile call: TDPBF16PS flushes a denormal accumulator to 0, and a step left out
   does not; at most 2^-126 apart). */

/* S^T-shaped C[j][r] = A[j][:] B[:][r] (overwrite; A bf16 rows, B pairs, k32 steps) per
   32 rows r (one 2 x 2 tile block wide) over the 16-row tiles of keys they see; the
   other keys of those columns get 0. */
static inline void fa_cpu_amx_rowA_seen(const fa_cpu_amx_kernels *X, int nk, int nq, int k32,
                                        const uint16_t *a, int64_t lda, const uint32_t *b,
                                        int64_t ldb, float *c, int64_t ldc, int64_t j0,
                                        const int64_t *lo, const int64_t *hi)
{
    for (int r0 = 0; r0 < nq; r0 += 32) {
        int r1 = nq - r0 < 32 ? nq : r0 + 32, ja, jb;
        /* whole 16-column tiles, as the gemm writes them (the padding stays finite) */
        size_t w = sizeof(float) * (size_t)((r1 - r0 + 15) / 16 * 16);
        fa_cpu_key_span(lo, hi, r0, r1, j0, nk, &ja, &jb);
        ja = ja / 16 * 16;
        jb = (jb + 15) / 16 * 16;
        for (int j = 0; j < ja; j++) memset(c + j * ldc + r0, 0, w);
        if (ja < jb)
            X->gemm(jb - ja, r1 - r0, k32, a + ja * lda, lda, b + r0, ldb, c + ja * ldc + r0,
                    ldc, 0);
        for (int j = jb; j < nk; j++) memset(c + j * ldc + r0, 0, w);
    }
}

/* O^T[x][r] += sum_j A[x][j] P[j][r] (m rows x, A bf16 rows over keys, B = P^T pairs over
   keys, 0 at unseen pairs): per 32 rows r over the 32-key steps they see. */
static inline void fa_cpu_amx_ot_seen(const fa_cpu_amx_kernels *X, int m, int nq, int nk,
                                      const uint16_t *a, int64_t lda, const uint32_t *b,
                                      int64_t ldb, float *c, int64_t ldc, int64_t j0,
                                      const int64_t *lo, const int64_t *hi)
{
    for (int r0 = 0; r0 < nq; r0 += 32) {
        int r1 = nq - r0 < 32 ? nq : r0 + 32, ja, jb;
        fa_cpu_key_span(lo, hi, r0, r1, j0, nk, &ja, &jb);
        if (ja >= jb) continue;
        ja = ja / 32 * 32;
        X->gemm(m, r1 - r0, (jb - ja + 31) / 32, a + ja, lda, b + (ja / 2) * ldb + r0, ldb,
                c + r0, ldc, 1);
    }
}

/* C[i][:] += sum_k A[i][k] B[k][:] (A bf16 rows, 0 at unseen pairs; B pairs over k), per
   32 i over the 32-wide k steps that see them: i keys and k rows (dV, dK; keys = 1, m = nk
   and nk2 = the tile's rows) or i rows and k keys (dQ; keys = 0, m = the rows, nk2 = nk). */
static inline void fa_cpu_amx_acc_seen(const fa_cpu_amx_kernels *X, int keys, int m, int n,
                                       int nk2, const uint16_t *a, int64_t lda,
                                       const uint32_t *b, int64_t ldb, float *c, int64_t ldc,
                                       int64_t j0, const int64_t *lo, const int64_t *hi)
{
    for (int i = 0; i < m; i += 32) {
        int ie = m - i < 32 ? m : i + 32, ka, kb;
        if (keys)
            fa_cpu_row_span(lo, hi, nk2, j0, i, ie, &ka, &kb);
        else
            fa_cpu_key_span(lo, hi, i, ie, j0, nk2, &ka, &kb);
        if (ka >= kb) continue;
        ka = ka / 32 * 32;
        X->gemm(ie - i, n, (kb - ka + 31) / 32, a + i * lda + ka, lda, b + (ka / 2) * ldb, ldb,
                c + i * ldc, ldc, 1);
    }
}

/* Dropout keep factors of an S^T tile: f[j][r] = keep ? kept : 0 multiplied into d0 and
   (when not NULL) d1, same layout. The backward passes kept = keep_scale; the forward
   passes 1 (a mask) and applies keep_scale with 1/l to the finished row (forward.c). */
static inline void fa_cpu_dropout_pass(const fa_problem *p, int64_t b, int nk, int nq,
                                       int64_t ld, int64_t j0, const int64_t *hr,
                                       const int64_t *ir_drop, float kept, float *d0,
                                       float *d1)
{
    const fa_dropout_key *key = &p->drop;
    float ks = kept;
    for (int r = 0; r < nq; r++) {
        int64_t jj = j0 & ~(int64_t)3;
        uint32_t w[4];
        for (; jj < j0 + nk; jj += 4) {
            fa_dropout_words(key, b, hr[r], ir_drop[r], jj, w);
            for (int e = 0; e < 4; e++) {
                int64_t j = jj + e - j0;
                if (j < 0 || j >= nk) continue;
                float f = w[e] >= key->threshold ? ks : 0.0f;
                d0[j * ld + r] *= f;
                if (d1) d1[j * ld + r] *= f;
            }
        }
    }
}

#endif
