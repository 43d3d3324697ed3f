/* kernels_simd.h - the micro-kernels of kernels.h written once over a small vector
 * vocabulary; kernels_avx2.c and kernels_avx512.c define the vocabulary and include this
 * file (each compiled with its own ISA flags). Do not include it anywhere else.
 *
 * Vocabulary the includer defines: VF (vector), VW (lanes), MR (register rows),
 * VMASK, vmask_n(n) (first n lanes), VLOAD(p), VLOADM(p, mk), VSTORE(p, v), VSTOREM(p, mk, v),
 * VSET1(x), VZERO, VFMA(a, b, c) = a*b + c, VMUL, VADD, VSUB, VMAX, VEXP(x) (exp with
 * exp(-inf) = 0 exactly, NaN kept), VBLEND_NEGINF(x, y): lanes where x == -inf take y,
 * VHSUM not needed. NR = 2 * VW.
 */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "dtype.h"

#define NR (2 * VW)

/* One MR x NR register tile (M <= MR rows, compile-time), k-loop of length k.
   ROW: A[i][p] = a[i*lda + p]; else A[i][p] = a[p*lda + i]. FULL: n == NR. */
static inline __attribute__((always_inline)) void
mk_tile(const int M, const int ROW, const int FULL, int k, const float *a, int64_t lda,
        const float *b, int64_t ldb, float *c, int64_t ldc, VMASK m0, VMASK m1, int acc)
{
    VF c0[MR], c1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < M; i++) {
        if (acc) {
            c0[i] = FULL ? VLOAD(c + i * ldc) : VLOADM(c + i * ldc, m0);
            c1[i] = FULL ? VLOAD(c + i * ldc + VW) : VLOADM(c + i * ldc + VW, m1);
        } else {
            c0[i] = VZERO; c1[i] = VZERO;
        }
    }
    if (ROW) {
        const float *a0 = a, *a4 = a + 4 * lda, *a8 = a + 8 * lda;
        for (int p = 0; p < k; p++) {
            VF b0 = FULL ? VLOAD(b) : VLOADM(b, m0);
            VF b1 = FULL ? VLOAD(b + VW) : VLOADM(b + VW, m1);
#pragma GCC unroll 16
            for (int i = 0; i < M; i++) {
                const float *ap = i < 4 ? a0 + i * lda : i < 8 ? a4 + (i - 4) * lda
                                                               : a8 + (i - 8) * lda;
                VF ai = VSET1(ap[p]);
                c0[i] = VFMA(ai, b0, c0[i]);
                c1[i] = VFMA(ai, b1, c1[i]);
            }
            b += ldb;
        }
    } else {
        for (int p = 0; p < k; p++) {
            VF b0 = FULL ? VLOAD(b) : VLOADM(b, m0);
            VF b1 = FULL ? VLOAD(b + VW) : VLOADM(b + VW, m1);
#pragma GCC unroll 16
            for (int i = 0; i < M; i++) {
                VF ai = VSET1(a[i]);
                c0[i] = VFMA(ai, b0, c0[i]);
                c1[i] = VFMA(ai, b1, c1[i]);
            }
            a += lda;
            b += ldb;
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

#define MK_CASE(M)                                                                      \
    case M:                                                                             \
        if (full) mk_tile(M, ROW, 1, k, ap, lda, bp, ldb, cp, ldc, m0, m1, acc);        \
        else mk_tile(M, ROW, 0, k, ap, lda, bp, ldb, cp, ldc, m0, m1, acc);             \
        break;

#if MR == 12
#define MK_CASES MK_CASE(1) MK_CASE(2) MK_CASE(3) MK_CASE(4) MK_CASE(5) MK_CASE(6) \
                 MK_CASE(7) MK_CASE(8) MK_CASE(9) MK_CASE(10) MK_CASE(11) MK_CASE(12)
#elif MR == 6
#define MK_CASES MK_CASE(1) MK_CASE(2) MK_CASE(3) MK_CASE(4) MK_CASE(5) MK_CASE(6)
#else
#error "kernels_simd.h: MR must be 6 or 12"
#endif

static inline __attribute__((always_inline)) void
gemm_body(const int ROW, int m, int n, int k, const float *a, int64_t lda, const float *b,
          int64_t ldb, float *c, int64_t ldc, int acc)
{
    for (int n0 = 0; n0 < n; n0 += NR) {
        int nn = n - n0 < NR ? n - n0 : NR;
        int full = nn == NR;
        VMASK m0 = vmask_n(nn < VW ? nn : VW);
        VMASK m1 = vmask_n(nn > VW ? nn - VW : 0);
        const float *bp = b + n0;
        for (int i0 = 0; i0 < m; i0 += MR) {
            int mm = m - i0 < MR ? m - i0 : MR;
            const float *ap = ROW ? a + (int64_t)i0 * lda : a + i0;
            float *cp = c + (int64_t)i0 * ldc + n0;
            switch (mm) {
            MK_CASES
            default: break;
            }
        }
    }
}

static void gemm_rowA(int m, int n, int k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int acc)
{
    gemm_body(1, m, n, k, a, lda, b, ldb, c, ldc, acc);
}

static void gemm_colA(int m, int n, int k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int acc)
{
    gemm_body(0, m, n, k, a, lda, b, ldb, c, ldc, acc);
}

static void softmax_fwd(float *s, int nk, int nq, int64_t ld, float scale, float *m,
                        float *l, float *alpha)
{
    const VF vs = VSET1(scale), ninf = VSET1(-INFINITY);
    for (int i0 = 0; i0 < nq; i0 += VW) {
        VF mo = VLOAD(m + i0), mx = mo;
        for (int j = 0; j < nk; j++)
            mx = VMAX(mx, VMUL(VLOAD(s + j * ld + i0), vs));
        VF mu = VBLEND_NEGINF(mx, VZERO);
        VF sum0 = VZERO, sum1 = VZERO;
        int j = 0;
        for (; j + 1 < nk; j += 2) {
            VF p0 = VEXP(VFMA(VLOAD(s + j * ld + i0), vs, VSUB(VZERO, mu)));
            VF p1 = VEXP(VFMA(VLOAD(s + (j + 1) * ld + i0), vs, VSUB(VZERO, mu)));
            VSTORE(s + j * ld + i0, p0);
            VSTORE(s + (j + 1) * ld + i0, p1);
            sum0 = VADD(sum0, p0);
            sum1 = VADD(sum1, p1);
        }
        for (; j < nk; j++) {
            VF p0 = VEXP(VFMA(VLOAD(s + j * ld + i0), vs, VSUB(VZERO, mu)));
            VSTORE(s + j * ld + i0, p0);
            sum0 = VADD(sum0, p0);
        }
        VF a = VEXP(VSUB(mo, mu));
        VSTORE(alpha + i0, a);
        VSTORE(l + i0, VFMA(VLOAD(l + i0), a, VADD(sum0, sum1)));
        VSTORE(m + i0, mx);
        (void)ninf;
    }
}

static void exp_sub(float *s, int nk, int nq, int64_t ld, float scale, const float *lse)
{
    const VF vs = VSET1(scale);
    for (int i0 = 0; i0 < nq; i0 += VW) {
        VF nl = VSUB(VZERO, VLOAD(lse + i0));
        for (int j = 0; j < nk; j++)
            VSTORE(s + j * ld + i0, VEXP(VFMA(VLOAD(s + j * ld + i0), vs, nl)));
    }
}

static void ds_kernel(float *dp, const float *p, int nk, int nq, int64_t ld, const float *D)
{
    for (int i0 = 0; i0 < nq; i0 += VW) {
        VF d = VLOAD(D + i0);
        for (int j = 0; j < nk; j++)
            VSTORE(dp + j * ld + i0,
                   VMUL(VLOAD(p + j * ld + i0), VSUB(VLOAD(dp + j * ld + i0), d)));
    }
}
