/* kernels_simd.h - the micro-kernels of kernels.h written once over a small vector
 * vocabulary; kernels_avx2.c and kernels_avx512.c define the vocabulary and include this
 * file (each compiled with its own ISA flags). Do not include it anywhere else.
 *
 * Vocabulary the includer defines: VF (vector), VW (lanes), MR (register rows),
 * VMASK, vmask_n(n) (first n lanes), VLOAD(p), VLOADM(p, mk), VSTORE(p, v), VSTOREM(p, mk, v),
 * VSET1(x), VZERO, VFMA(a, b, c) = a*b + c, VMUL, VADD, VSUB, VMAX, VEXP(x) (exp with
 * exp(-inf) = 0 exactly, NaN kept), VEXPT(t) (exp(t) through base 2, the same rules; both
 * built on the shared reductions and polynomials of kernels_exp.h),
 * VBLEND_NEGINF(x, y): lanes where x == -inf take y,
 * VHSUM not needed. NR = 2 * VW.
 */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "dtype.h"

#ifndef NV
#define NV 2               /* B vectors per register-tile row */
#endif
#define NR (NV * VW)
#ifndef KC
#define KC 0               /* k block of gemm_body (0: whole k) */
#endif

/* One MR x NR register tile (M <= MR rows, compile-time), k-loop of length k.
   ROW: A[i][p] = a[i*lda + p]; else A[i][p] = a[p*lda + i]. FULL: n == NR.
   Per k: NV vector loads of B, M broadcasts of A, M*NV FMAs. On AVX-512 cores whose
   broadcasts take a slot of an FMA port, the FMA rate is NV/(NV+1) of peak, hence NV 4
   there. */
static inline __attribute__((always_inline)) void
mk_tile(const int M, const int ROW, const int FULL, int k, const float *a, int64_t lda,
        const float *b, int64_t ldb, float *c, int64_t ldc, const VMASK *mk, int acc,
        const float *al)
{
    VF cc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < M; i++) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            if (acc)
                cc[i][v] = FULL ? VLOAD(c + i * ldc + v * VW) : VLOADM(c + i * ldc + v * VW, mk[v]);
            else
                cc[i][v] = VZERO;
        }
    }
    if (acc && al) {   /* C row i scaled by al[i] before the products (gemm_colA_scaled) */
#pragma GCC unroll 16
        for (int i = 0; i < M; i++) {
            VF s = VSET1(al[i]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) cc[i][v] = VMUL(cc[i][v], s);
        }
    }
    const float *a0 = a, *a4 = a + 4 * lda, *a8 = a + 8 * lda;
    for (int p = 0; p < k; p++) {
        VF bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = FULL ? VLOAD(b + v * VW) : VLOADM(b + v * VW, mk[v]);
#pragma GCC unroll 16
        for (int i = 0; i < M; i++) {
            VF ai;
            if (ROW) {
                const float *ap = i < 4 ? a0 + i * lda : i < 8 ? a4 + (i - 4) * lda
                                                               : a8 + (i - 8) * lda;
                ai = VSET1(ap[p]);
            } else {
                ai = VSET1(a[i]);
            }
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) cc[i][v] = VFMA(ai, bv[v], cc[i][v]);
        }
        if (!ROW) a += lda;
        b += ldb;
    }
#pragma GCC unroll 16
    for (int i = 0; i < M; i++) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            if (FULL) VSTORE(c + i * ldc + v * VW, cc[i][v]);
            else VSTOREM(c + i * ldc + v * VW, mk[v], cc[i][v]);
        }
    }
}

#define MK_CASE(M)                                                                      \
    case M:                                                                             \
        if (full) mk_tile(M, ROW, 1, kk, ap, lda, bp, ldb, cp, ldc, mk, ac, alp);       \
        else mk_tile(M, ROW, 0, kk, ap, lda, bp, ldb, cp, ldc, mk, ac, alp);            \
        break;

#if MR == 12
#define MK_CASES MK_CASE(1) MK_CASE(2) MK_CASE(3) MK_CASE(4) MK_CASE(5) MK_CASE(6) \
                 MK_CASE(7) MK_CASE(8) MK_CASE(9) MK_CASE(10) MK_CASE(11) MK_CASE(12)
#elif MR == 6
#define MK_CASES MK_CASE(1) MK_CASE(2) MK_CASE(3) MK_CASE(4) MK_CASE(5) MK_CASE(6)
#else
#error "kernels_simd.h: MR must be 6 or 12"
#endif

/* Loop order: k block (KC; the B panel of KC x NR stays in L1) outer, NR panel of B,
   MR block of A inner. Each C element still sums p = 0 .. k-1 in order into one fp32
   accumulator (stored and reloaded exactly between k blocks), so the blocking does not
   change any result. */
static inline __attribute__((always_inline)) void
gemm_body(const int ROW, int m, int n, int k, const float *a, int64_t lda, const float *b,
          int64_t ldb, float *c, int64_t ldc, int acc, const float *al)
{
#if KC > 0
    int nkb = k > KC ? (k + KC - 1) / KC : 1;
#else
    int nkb = 1;
#endif
    int kstep = (k + nkb - 1) / nkb;
    for (int k0 = 0; k0 < k || k0 == 0; k0 += kstep) {
        int kk = k - k0 < kstep ? k - k0 : kstep;
        int ac = k0 > 0 ? 1 : acc;
        const float *ak = ROW ? a + k0 : a + (int64_t)k0 * lda;
        const float *bk = b + (int64_t)k0 * ldb;
        for (int n0 = 0; n0 < n; n0 += NR) {
            int nn = n - n0 < NR ? n - n0 : NR;
            int full = nn == NR;
            VMASK mk[NV];
            for (int v = 0; v < NV; v++) {
                int r = nn - v * VW;
                mk[v] = vmask_n(r < 0 ? 0 : r > VW ? VW : r);
            }
            const float *bp = bk + n0;
            for (int i0 = 0; i0 < m; i0 += MR) {
                int mm = m - i0 < MR ? m - i0 : MR;
                const float *ap = ROW ? ak + (int64_t)i0 * lda : ak + i0;
                float *cp = c + (int64_t)i0 * ldc + n0;
                const float *alp = al && k0 == 0 ? al + i0 : NULL;
                switch (mm) {
                MK_CASES
                default: break;
                }
            }
        }
        if (kk <= 0) break;
    }
}

static void gemm_rowA(int m, int n, int k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int acc)
{
    gemm_body(1, m, n, k, a, lda, b, ldb, c, ldc, acc, NULL);
}

static void gemm_colA(int m, int n, int k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int acc)
{
    gemm_body(0, m, n, k, a, lda, b, ldb, c, ldc, acc, NULL);
}

/* C = diag(alpha) C + A B (colA layout): the forward's O = alpha O + P V in one pass over
   O. alpha[i] * C[i][j] is rounded exactly as the separate rescale was (x * 1 = x), and
   the products then accumulate in the same order, so the result is bitwise the same. */
static void gemm_colA_scaled(int m, int n, int k, const float *a, int64_t lda, const float *b,
                             int64_t ldb, float *c, int64_t ldc, const float *alpha)
{
    gemm_body(0, m, n, k, a, lda, b, ldb, c, ldc, 1, alpha);
}

/* Online softmax over one tile (columns = queries, rows = keys): m, l, alpha per column.
   P = exp(t) by VEXPT, in base 2 with t log2 e carried in two parts (13 vector ops against
   VEXP's 15 and its clamps). t = s * scale - m is formed by one
   FMA as before, so each P stays relative to exactly the m that is stored. */
static void softmax_fwd(float *s, int nk, int nq, int64_t ld, float scale, float *m,
                        float *l, float *alpha)
{
    const VF vs = VSET1(scale);
    /* scale > 0: fl(x * scale) is monotone in x, so max(x) * scale is bitwise
       max(x * scale); one multiply per column instead of one per score */
    const int raw = scale > 0.0f;
    for (int i0 = 0; i0 < nq; i0 += VW) {
        VF mo = VLOAD(m + i0), mx;
        if (raw) {
            VF r0 = VSET1(-INFINITY), r1 = r0;
            int j = 0;
            for (; j + 1 < nk; j += 2) {
                r0 = VMAX(r0, VLOAD(s + j * ld + i0));
                r1 = VMAX(r1, VLOAD(s + (j + 1) * ld + i0));
            }
            if (j < nk) r0 = VMAX(r0, VLOAD(s + j * ld + i0));
            mx = VMAX(mo, VMUL(VMAX(r0, r1), vs));
        } else {
            mx = mo;
            for (int j = 0; j < nk; j++)
                mx = VMAX(mx, VMUL(VLOAD(s + j * ld + i0), vs));
        }
        VF mu = VBLEND_NEGINF(mx, VZERO), nmu = VSUB(VZERO, mu);
        VF sum0 = VZERO, sum1 = VZERO;
        int j = 0;
        for (; j + 1 < nk; j += 2) {
            VF p0 = VEXPT(VFMA(VLOAD(s + j * ld + i0), vs, nmu));
            VF p1 = VEXPT(VFMA(VLOAD(s + (j + 1) * ld + i0), vs, nmu));
            VSTORE(s + j * ld + i0, p0);
            VSTORE(s + (j + 1) * ld + i0, p1);
            sum0 = VADD(sum0, p0);
            sum1 = VADD(sum1, p1);
        }
        for (; j < nk; j++) {
            VF p0 = VEXPT(VFMA(VLOAD(s + j * ld + i0), vs, nmu));
            VSTORE(s + j * ld + i0, p0);
            sum0 = VADD(sum0, p0);
        }
        VF a = VEXP(VSUB(mo, mu));
        VSTORE(alpha + i0, a);
        VSTORE(l + i0, VFMA(VLOAD(l + i0), a, VADD(sum0, sum1)));
        VSTORE(m + i0, mx);
    }
}

static void exp_sub(float *s, int nk, int nq, int64_t ld, float scale, const float *lse)
{
    const VF vs = VSET1(scale);
    for (int i0 = 0; i0 < nq; i0 += VW) {
        VF nl = VSUB(VZERO, VLOAD(lse + i0));
        for (int j = 0; j < nk; j++)
            VSTORE(s + j * ld + i0, VEXPT(VFMA(VLOAD(s + j * ld + i0), vs, nl)));
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
