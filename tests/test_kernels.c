/* test_kernels.c - the CPU kernel sets' softmax pieces, called directly (linked from their
 * convenience libraries, not through the API), against double precision:
 *   - exp_sub over the whole range of its argument, with -inf, NaN, the underflow edge and
 *     lse = +inf (a row with no key);
 *   - softmax_fwd on tiles with masked (-inf) scores, fully masked columns, columns that
 *     start from a sink (finite m, l = 1), an odd number of keys, scale > 0 (the max is
 *     taken on the raw scores) and scale < 0 (finite scores).
 * The end-to-end suites see these kernels only through typical scores; this checks every
 * magnitude. Each set runs only where this CPU and OS support its ISA; a set that cannot
 * run here is named on stderr, never passed silently.
 */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

typedef struct {
    const char *name;
    const fa_cpu_kernels *k;
    int ok;                /* this CPU and OS run it */
    int fma;               /* forms scale s - m with one FMA */
} kset;

static kset sets[3];
static int nsets;

static void find_sets(void)
{
    sets[nsets++] = (kset){ "generic", &fa_cpu_kernels_generic, 1, 0 };
#ifdef FA_HAVE_AVX2
    __builtin_cpu_init();
    sets[nsets++] = (kset){ "avx2", &fa_cpu_kernels_avx2,
                            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), 1 };
#endif
#ifdef FA_HAVE_AVX512
    sets[nsets++] = (kset){ "avx512", &fa_cpu_kernels_avx512,
                            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"), 1 };
#endif
}

static uint64_t rng_state = 88172645463325252ull;
static double unif(void)   /* [0, 1) */
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* |p - e^t| allowed for a result p of exp at t (the exact argument, double): 4 fp32 units
   of e^t for the exp itself plus |t| for the one rounding of t to fp32 (it moves e^t by
   |t| 2^-24 relative), plus 2 |x| where the set rounds the score x = scale s before
   subtracting (generic: no FMA; x = 0 for the sets that form t with one FMA). A second
   rounding at |t| inside the exp (t log2 e in one fp32 product) fails this for |t| > ~8
   (KNOWN_FAILURES #24). Below t = -87.5 the result is exactly 0 (below fp32's smallest
   normal); between -87.5 and -87.3 either is accepted. */
static void check_exp(const char *set, const char *what, float p, double t, double x, long where)
{
    if (isnan(t)) {
        ck_assert_msg(isnan(p), "%s %s [%ld]: NaN argument gave %.9g", set, what, where, p);
        return;
    }
    if (t < -87.5) {
        ck_assert_msg(p == 0.0f && !signbit(p), "%s %s [%ld]: exp(%.9g) = %.9g, want exactly 0",
                      set, what, where, t, p);
        return;
    }
    double e = exp(t);
    double tol = e * (4.0 + fabs(t) + 2.0 * fabs(x)) * 0x1p-24;
    if (t < -87.3 && p == 0.0f) return;
    ck_assert_msg(fabs(p - e) <= tol, "%s %s [%ld]: exp(%.9g) = %.9g, want %.9g (error %.3g units "
                  "of e^t 2^-24)", set, what, where, t, p, e, fabs(p - e) / (e * 0x1p-24));
}

START_TEST(test_exp_sub)
{
    enum { NQ = 48, NK = 701 };
    for (int si = 0; si < nsets; si++) {
        if (!sets[si].ok) continue;
        const fa_cpu_kernels *K = sets[si].k;
        float *s = malloc(sizeof(float) * NQ * NK), *s0 = malloc(sizeof(float) * NQ * NK);
        float lse[NQ];
        const float scale = _i == 0 ? 1.0f : 0.0883883476f;
        for (int i = 0; i < NQ; i++) lse[i] = i == 5 ? INFINITY : (float)((unif() - 0.5) * 40.0);
        for (long x = 0; x < (long)NQ * NK; x++) {
            long j = x / NQ;
            /* keys sweep t = scale s - lse over [-110, +3]; a few specials */
            double t = -110.0 + 113.0 * (double)j / (NK - 1) + unif() * 0.1;
            s0[x] = (float)((t + (isinf(lse[x % NQ]) ? 0.0 : lse[x % NQ])) / scale);
            if (j == 7) s0[x] = -INFINITY;
            if (j == 11 && x % NQ == 3) s0[x] = NAN;
        }
        memcpy(s, s0, sizeof(float) * NQ * NK);
        K->exp_sub(s, NK, NQ, NQ, scale, lse);
        for (long x = 0; x < (long)NQ * NK; x++) {
            int i = (int)(x % NQ);
            if (i == 5) {   /* lse = +inf: no key, P = 0 */
                if (!isnan(s0[x]))
                    ck_assert_msg(s[x] == 0.0f, "%s exp_sub [%ld]: lse = +inf gave %.9g",
                                  sets[si].name, x, s[x]);
                continue;
            }
            double t = (double)s0[x] * scale - lse[i];
            check_exp(sets[si].name, "exp_sub", s[x], t, sets[si].fma ? 0.0 : (double)s0[x] * scale, x);
        }
        free(s); free(s0);
    }
}
END_TEST

START_TEST(test_softmax_fwd)
{
    enum { NQ = 48 };
    const int nk = 37 + 2 * (_i % 3);          /* odd key counts: the pairwise loop's tail */
    const float scale = _i < 3 ? 0.125f : -0.3f;
    for (int si = 0; si < nsets; si++) {
        if (!sets[si].ok) continue;
        const fa_cpu_kernels *K = sets[si].k;
        float *s = malloc(sizeof(float) * NQ * (size_t)nk), *s0 = malloc(sizeof(float) * NQ * (size_t)nk);
        float m[NQ], l[NQ], alpha[NQ], m0[NQ], l0[NQ];
        for (int i = 0; i < NQ; i++) {
            /* columns: 0 mod 4 fresh (m = -inf, l = 0); 1 a sink (m = sink, l = 1); else a
               running state from an earlier tile, sometimes above this tile's max */
            if (i % 4 == 0) { m0[i] = -INFINITY; l0[i] = 0.0f; }
            else if (i % 4 == 1) { m0[i] = (float)(unif() * 4 - 2); l0[i] = 1.0f; }
            else { m0[i] = (float)(unif() * 30 - 10); l0[i] = (float)(1 + unif() * 50); }
        }
        for (int j = 0; j < nk; j++)
            for (int i = 0; i < NQ; i++) {
                double v = (unif() - 0.5) * 160.0;            /* scores up to |80| / scale */
                if (i == 8 || (i + j) % 9 == 0) v = -INFINITY; /* masked; column 8 fully */
                if (i == 12 && j == nk - 1) v = 400.0;         /* one large logit */
                s0[(long)j * NQ + i] = (float)v;
            }
        if (scale < 0)   /* the contract's masked entries are -inf after the scale; the
                            forward never passes scale <= 0 (such calls take the slow score
                            path with scale 1), so only finite scores are checked here */
            for (long x = 0; x < (long)NQ * nk; x++)
                if (isinf(s0[x])) s0[x] = (float)((unif() - 0.5) * 160.0);
        memcpy(s, s0, sizeof(float) * NQ * (size_t)nk);
        memcpy(m, m0, sizeof m); memcpy(l, l0, sizeof l);
        K->softmax_fwd(s, nk, NQ, NQ, scale, m, l, alpha);
        for (int i = 0; i < NQ; i++) {
            /* m: max(m0, max_j fl(scale s)), exactly */
            float mx = m0[i];
            for (int j = 0; j < nk; j++) {
                float x = s0[(long)j * NQ + i] * scale;
                if (x > mx) mx = x;
            }
            ck_assert_msg(m[i] == mx,
                          "%s softmax_fwd col %d: m = %.9g, want %.9g", sets[si].name, i, m[i], mx);
            double mu = mx == -INFINITY ? 0.0 : mx, sum = 0.0;
            for (int j = 0; j < nk; j++) {
                double t = (double)s0[(long)j * NQ + i] * scale - mu;
                float p = s[(long)j * NQ + i];
                check_exp(sets[si].name, "softmax_fwd P", p, t,
                          sets[si].fma ? 0.0 : (double)s0[(long)j * NQ + i] * scale, (long)j * NQ + i);
                sum += p;
            }
            double a = m0[i] == -INFINITY ? 0.0 : exp((double)m0[i] - mu);
            if (m0[i] == -INFINITY)
                ck_assert_msg(alpha[i] == 0.0f, "%s softmax_fwd col %d: alpha = %.9g, want 0",
                              sets[si].name, i, alpha[i]);
            else
                check_exp(sets[si].name, "softmax_fwd alpha", alpha[i], (double)m0[i] - mu, 0.0, i);
            double lw = (double)l0[i] * alpha[i] + sum;
            ck_assert_msg(fabs(l[i] - lw) <= (nk + 4) * 0x1p-24 * (fabs(lw) + (double)l0[i] * a),
                          "%s softmax_fwd col %d: l = %.9g, want %.9g", sets[si].name, i, l[i], lw);
            if (scale > 0 && i == 8 && m0[i] == -INFINITY)
                ck_assert_msg(l[i] == 0.0f, "%s: fully masked fresh column: l = %.9g", sets[si].name, l[i]);
        }
        free(s); free(s0);
    }
}
END_TEST

int main(void)
{
    find_sets();
    for (int si = 0; si < nsets; si++)
        if (!sets[si].ok)
            fprintf(stderr, "NOTE: test_kernels: kernel set %s not run: this CPU or OS lacks its ISA\n",
                    sets[si].name);
    Suite *su = suite_create("kernels");
    TCase *tc = tcase_create("softmax");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_exp_sub, 0, 2);
    tcase_add_loop_test(tc, test_softmax_fwd, 0, 6);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
