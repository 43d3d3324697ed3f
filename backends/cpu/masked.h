/* masked.h - the loop nests' products over a partly masked tile, restricted to the
 * pairs some row sees (fp32, bf16 dot-product and AMX kernel sets). */
#ifndef FA_CPU_MASKED_H
#define FA_CPU_MASKED_H

#include <stdint.h>
#include <string.h>
#include "kernels.h"

/* A causal mask (or a window) leaves whole rectangles of a diagonal tile unseen: with
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

#endif
