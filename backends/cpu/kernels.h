/* kernels.h - the CPU micro-kernel contract: what each ISA file (generic, AVX2, AVX-512)
 * implements, and nothing else. The loop nests (forward.c, backward.c) exist once and
 * call these through a table chosen at context creation (cpu.c).
 *
 * Layout convention (all fp32, row-major, leading dimensions in elements):
 *   S^T tiles are stored key-major: s[j * ld + i] is the score of query i and key j. The
 *   softmax statistics of a query are then one vector lane across the key loop, and the
 *   P^T tile is already the packed "A" operand of O += P V (MR queries contiguous per key).
 *
 * The two GEMM shapes (the only products flash attention needs, forward and backward):
 *
 *          k ->                      n ->                          n ->
 *    m  +-------+            k  +-----------+                m  +-----------+
 *    |  |   A   |   x        |  |     B     |  ldb    =      |  |  C (+)=   |  ldc
 *    v  +-------+            v  +-----------+                v  +-----------+
 *
 *   gemm_rowA: A[m][k] = a[m * lda + k]   (K rows for S^T = K Q^T; P^T, dS^T rows for
 *                                          dV = P^T dO, dK = dS^T Q; V rows for dP^T)
 *   gemm_colA: A[m][k] = a[k * lda + m]   (P^T as A of O = P V; dS^T as A of dQ = dS K)
 *   B[k][n] = b[k * ldb + n], C[m][n] = c[m * ldc + n]; acc = 0 overwrites C, 1 adds.
 *
 * Inside, each ISA blocks C into MR x NR register tiles (AVX-512 6 x 64, AVX2 6 x 16):
 *
 *        NR (NV vectors: 4 AVX-512, 2 AVX2)
 *      +----+----+--    per k: NV vector loads of B, MR broadcasts of A, NV*MR FMAs.
 *   MR | c0 | c1 |..    Loop order: k block (AVX-512: 128), NR-panel of B (stays in L1),
 *      |....|....|      MR-block of A inner.
 *      +----+----+      Edges: m < MR by a specialised kernel per m; n < NR by masked
 *                       loads and stores. Never reads B/C columns >= n nor A rows >= m.
 *
 * Softmax kernels work on S^T tiles of nk keys x nq queries; they may read and write
 * columns up to round_up(nq, 16) (callers pad every tile, m, l, alpha, lse, D buffers to
 * a multiple of 16 columns and keep the padding finite).
 */
#ifndef FA_CPU_KERNELS_H
#define FA_CPU_KERNELS_H

#include <stdint.h>
#include "flashattn.h"

#define FA_CPU_PAD 16      /* column padding of every tile (lanes of the widest ISA) */

typedef void (*fa_cpu_gemm_fn)(int m, int n, int k, const float *a, int64_t lda,
                               const float *b, int64_t ldb, float *c, int64_t ldc, int acc);

typedef struct {
    const char *name;      /* "generic", "avx2", "avx512"                                 */
    int mr, nr;            /* register tile, for describe and the tile formula          */
    fa_cpu_gemm_fn gemm_rowA, gemm_colA;
    /* Forward online softmax over an S^T tile, per query i (column):
     *   x = scale * s ; mx = max(m[i], max_j x) ; mu = mx or 0 when mx = -inf
     *   s <- exp(x - mu) ; alpha[i] = exp(m[i] - mu) ; l[i] = l[i] * alpha[i] + sum_j s
     *   m[i] = mx.   (masked scores are -inf on entry and give exactly 0) */
    void (*softmax_fwd)(float *s, int nk, int nq, int64_t ld, float scale,
                        float *m, float *l, float *alpha);
    /* Backward: s <- exp(scale * s - lse[i]); lse[i] = +inf for rows with no key (P = 0). */
    void (*exp_sub)(float *s, int nk, int nq, int64_t ld, float scale, const float *lse);
    /* Backward: dp <- p * (dp - D[i]). */
    void (*ds)(float *dp, const float *p, int nk, int nq, int64_t ld, const float *D);
    /* Conversions of n contiguous elements: storage -> fp32, fp32 * mul -> storage
       (round to nearest even, bitwise as dtype.h for finite values). */
    void (*cvt_in)(float *dst, const void *src, int64_t n, fa_dtype t);
    void (*cvt_out)(void *dst, fa_dtype t, const float *src, int64_t n, float mul);

    /* Optional (NULL when absent): bf16 dot products (AVX512-BF16 vdpbf16ps), for bf16
     * storage. Operands are bf16 "pairs": B[k][n] = b[2*((k/2)*ldb + n) + (k&1)], i.e.
     * two consecutive k of one column share a 32-bit word; kp = number of k pairs.
     *   gemm_bf16_rowA: A[m][k] = a[m*lda + k]          (bf16 K rows; lda even)
     *   gemm_bf16_colA: A[m][k] = a[2*((k/2)*lda + m) + (k&1)]   (P^T pairs)
     * C fp32 as above (acc = 0 overwrites). Products exact, sums fp32; bf16 denormals
     * are read as 0 (vdpbf16ps). */
    void (*gemm_bf16_rowA)(int m, int n, int kp, const uint16_t *a, int64_t lda,
                           const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int acc);
    void (*gemm_bf16_colA)(int m, int n, int kp, const uint16_t *a, int64_t lda,
                           const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int acc);
    /* fp32 rows src[k*lds + n] (k < nk, n < nn) -> bf16 pairs dst (ldd columns, round to
       nearest even); k = nk when nk is odd is written as 0. */
    void (*to_pairs)(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int nk, int nn);
    /* k block of gemm_rowA/colA (0: none): the B panel is kc x nr whatever k is, so the
       tile formula no longer bounds Bc by L1 (tiles.c). */
    int kc;
    /* Optional: c[i][:] = alpha[i] * c[i][:] + (A B)[i][:], A in gemm_colA's layout,
       bitwise equal to scaling C then gemm_colA(acc = 1). NULL: the caller scales. */
    void (*gemm_colA_scaled)(int m, int n, int k, const float *a, int64_t lda, const float *b,
                             int64_t ldb, float *c, int64_t ldc, const float *alpha);
    /* Optional: dst[c*ldd + r] = src[r*lds + c] for 32-bit words, r < rows, c < cols (the
       backward's Q^T and dO^T blocks). NULL: the caller transposes in C. */
    void (*tr32)(uint32_t *dst, int64_t ldd, const uint32_t *src, int64_t lds, int rows, int cols);
} fa_cpu_kernels;

extern const fa_cpu_kernels fa_cpu_kernels_generic;
#ifdef FA_HAVE_AVX2
extern const fa_cpu_kernels fa_cpu_kernels_avx2;
#endif
#ifdef FA_HAVE_AVX512
extern const fa_cpu_kernels fa_cpu_kernels_avx512;
#endif

/* Intel AMX bf16 (kernels_amx.c; the bf16 forward's and backward's products; the avx512 set
 * does everything else). Tiles of
 * 16 x 16 fp32 C, 16 x 32 bf16 A, 32 x 16 bf16 B; fp32 accumulation inside TDPBF16PS
 * (bf16 denormal inputs read as 0).
 *   gemm: C[m][n] (+)= A[m][k] B[k][n] with k = 32 * k32,
 *         A[m][k] = a[m*lda + k]                  bf16 row-major (lda even, elements)
 *         B[k][n] = b[(k/2)*ldb + n] bits 16*(k&1)  bf16 pairs in 32-bit words
 *         C fp32 c[m*ldc + n]; acc = 0 overwrites.
 *         m and n are worked in whole tiles: A must be readable for round_up(m, 16) rows
 *         and B for round_up(n, 16) columns, and C receives round_up(m, 16) x
 *         round_up(n, 16) values (the extra rows/columns are padding, any value). Padding
 *         k must be 0 in A and B (at least finite zeros on one side and finite on the other).
 *   to_pairs: fp32 src[k*lds + n] -> pairs dst[(k/2)*ldd + n], RNE, rows written up to
 *         round_up(nk, 32)/2 (zeros past nk), columns up to round_up(nn, 16).
 *   scale_cols: o[c*ld + r] *= alpha[r] (c < rows, r < round_up(n, 16)), skipping groups
 *         of 16 columns whose alpha are all 1. */
typedef struct {
    const char *name;
    void (*gemm)(int m, int n, int k32, const uint16_t *a, int64_t lda, const uint32_t *b,
                 int64_t ldb, float *c, int64_t ldc, int acc);
    void (*to_pairs)(uint32_t *dst, int64_t ldd, const float *src, int64_t lds, int nk, int nn);
    void (*scale_cols)(float *o, int64_t ld, int rows, int n, const float *alpha);
    /* Packing: tr32: dst[c*ldd + r] = src[r*lds + c] (32-bit words, r < rows, c < cols).
       pair_rows: dst[jp*ldd + c] = rows[2jp][c] | rows[2jp+1][c] << 16 (c < ncols; a
       missing odd row and the pair rows from ceil(nrows/2) to round_up(nrows, 32)/2 are
       0); returns 1 when an element is Inf/NaN. V^T = tr32(pair_rows(V)). */
    void (*tr32)(uint32_t *dst, int64_t ldd, const uint32_t *src, int64_t lds, int rows, int cols);
    int (*pair_rows)(uint32_t *dst, int64_t ldd, const uint16_t *const *rows, int nrows, int ncols);
    /* to_rows: fp32 src[r*lds + c] -> bf16 dst[r*ldd + c] (RNE, NaN stays NaN), r < rows,
       c < cols; zeros in columns up to round_up(cols, 32) and in rows up to
       round_up(rows, 16): the A operand of gemm with k = cols (the backward's P^T, dS^T). */
    void (*to_rows)(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int rows, int cols);
} fa_cpu_amx_kernels;
#ifdef FA_HAVE_AMX
extern const fa_cpu_amx_kernels fa_cpu_kernels_amx;
#endif
/* The same contract in plain C (kernels_amx_emu.c): tests of the AMX loop nests on CPUs
   without AMX, FA_CPU_AMX_EMULATE=1 only. */
extern const fa_cpu_amx_kernels fa_cpu_kernels_amx_emu;

#endif /* FA_CPU_KERNELS_H */
