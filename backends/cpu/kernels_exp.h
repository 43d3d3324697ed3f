/* kernels_exp.h - the exp range reductions and polynomials of VEXP and VEXPT, written once
 * over the vector vocabulary of kernels_simd.h; kernels_avx2.c and kernels_avx512.c define
 * the vocabulary, include this file, and build exp from these pieces with their own
 * range clamps, masks and 2^n (vscalefps, or the exponent field). Do not include it
 * anywhere else.
 *
 * Vocabulary used besides kernels_simd.h's: VFNMA(a, b, c) = c - a*b, VFMS(a, b, c) =
 * a*b - c (both one rounding), VROUND(x) (to nearest integer, ties to even, no exceptions).
 */

/* c0 x^5 + c1 x^4 + ... + c5 by Horner's rule: five FMAs, one rounding each. */
static inline __attribute__((always_inline)) VF
vhorner6(VF x, float c0, float c1, float c2, float c3, float c4, float c5)
{
    VF p = VSET1(c0);
    p = VFMA(p, x, VSET1(c1));
    p = VFMA(p, x, VSET1(c2));
    p = VFMA(p, x, VSET1(c3));
    p = VFMA(p, x, VSET1(c4));
    return VFMA(p, x, VSET1(c5));
}

/* exp(x) = 2^n exp(r) for x the caller has clamped: n = round(x log2 e), r = x - n ln2
   (ln2 in two parts), exp(r) by the cephes degree-6 polynomial (about 1 ulp). Returns
   exp(r) and sets *n. */
static inline __attribute__((always_inline)) VF vexp_reduced(VF x, VF *n)
{
    VF nn = VROUND(VMUL(x, VSET1(1.44269504088896341f)));
    VF r = VFNMA(nn, VSET1(0.693359375f), x);
    r = VFNMA(nn, VSET1(-2.12194440e-4f), r);
    VF p = vhorner6(r, 1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                    4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f);
    VF r2 = VMUL(r, r);
    *n = nn;
    return VFMA(p, r2, VADD(r, VSET1(1.0f)));
}

/* exp(t) in base 2, first half: y = t log2 e carried as yh + yl (yh = fl(t L), yl its
   rounding error plus t times L's own error, so y is exact to ~2^-48 relative and P keeps
   the accuracy of a two-part reduction: a one-part t log2 e loses up to |t| ulp of P at
   large |t|). Returns yh, sets *yl. */
static inline __attribute__((always_inline)) VF vexpt_split(VF t, VF *yl)
{
    const VF L = VSET1(1.44269502e+00f), Llo = VSET1(1.92596303e-08f);
    VF yh = VMUL(t, L);
    *yl = VFMA(t, Llo, VFMS(t, L, yh));
    return yh;
}

/* Second half, for n = round(yh): f = (yh - n) + yl (|f| <= 1/2 + tiny), 2^f = 1 + f c1
   + ... + f^6 c6 (fitted for relative error 2e-9 on [-1/2, 1/2]; 1.3 units of 2^-24
   evaluated in fp32). Returns 2^f; the caller scales by 2^n. */
static inline __attribute__((always_inline)) VF vexpt_poly(VF yh, VF n, VF yl)
{
    VF f = VADD(VSUB(yh, n), yl);
    VF p = vhorner6(f, 1.5353362e-4f, 1.3398875e-3f, 9.6184369e-3f, 5.5503324e-2f,
                    2.4022648e-1f, 6.9314718e-1f);
    return VFMA(p, f, VSET1(1.0f));
}
