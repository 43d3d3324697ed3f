/* test_kernels.c - the CPU kernel sets' softmax pieces, called directly (linked from their
 * convenience libraries, not through the API), against double precision:
 *   - exp_sub over the whole range of its argument, with -inf, NaN, the underflow edge and
 *     lse = +inf (a row with no key);
 *   - softmax_fwd on tiles with masked (-inf) scores, fully masked columns, columns that
 *     start from a sink (finite m, l = 1), an odd number of keys, scale > 0 (the max is
 *     taken on the raw scores) and scale < 0 (finite scores).
 * The end-to-end suites see these kernels only through typical scores; this checks every
 * magnitude.
 *   - the AMX set's packing kernels (to_rows, to_pairs, tr32, pair_rows: AVX-512 BF16 code)
 *     bit for bit against their C emulation (kernels_amx_emu.c, which the end-to-end
 *     suites run under FA_CPU_AMX_EMULATE=1), over ragged sizes with NaN, Inf, denormals
 *     and rounding ties, and the tile gemm against the emulation where AMX runs.
 * Each set runs only where this CPU and OS support its ISA; a set that cannot run here is
 * named on stderr, never passed silently. The products over partly masked tiles are
 * test_masked_products.c's; the kernel sets and the random stream, kernel_sets.c's.
 */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_sets.h"
#ifdef FA_HAVE_AMX
#include <cpuid.h>
#include <unistd.h>
#include <sys/syscall.h>
#endif

/* |p - e^t| allowed for a result p of exp at t (the exact argument, double): 4 fp32 units
   of e^t for the exp itself plus |t| for the one rounding of t to fp32 (it moves e^t by
   |t| 2^-24 relative), plus 2 |x| where the set rounds the score x = scale s before
   subtracting (generic: no FMA; x = 0 for the sets that form t with one FMA). A second
   rounding at |t| inside the exp (t log2 e in one fp32 product) fails this for |t| > ~8
   (the kernels carry t log2 e in two parts). Below t = -87.5 the result is exactly 0 (below fp32's smallest
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

#ifdef FA_HAVE_AMX
/* 1: the AVX-512 BF16 packing code of the AMX set runs here; 2: the tiles too (CPUID,
   XGETBV and Linux's permission for the tile data state). */
static int amx_level(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
        return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return 0;   /* AVX512-BF16 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 1;
    if (!((d >> 22) & 1) || !((d >> 24) & 1)) return 1;                           /* AMX-BF16, TILE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000) != 0x60000) return 1;
#ifdef SYS_arch_prctl
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) return 1;
    return 2;
#else
    return 1;
#endif
}

/* A float that exercises conversion: normal, tie, denormal, zero, Inf, NaN. */
static float pack_value(void)
{
    double u = unif();
    if (u < 0.02) return NAN;
    if (u < 0.04) return unif() < 0.5 ? INFINITY : -INFINITY;
    if (u < 0.07) return (float)((unif() - 0.5) * 0x1p-130);       /* denormal */
    if (u < 0.09) return 0.0f;
    if (u < 0.20) {   /* exactly halfway between two bf16 values */
        uint32_t w = ((uint32_t)(unif() * 65536.0) << 16) | 0x8000u;
        w &= 0xbfffffffu;   /* keep it finite */
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    return (float)((unif() - 0.5) * 8.0);
}

START_TEST(test_amx_packing)
{
    static const int dims[][2] = { { 1, 1 }, { 3, 5 }, { 16, 16 }, { 17, 33 }, { 31, 47 },
                                   { 32, 32 }, { 45, 70 }, { 64, 128 }, { 7, 96 } };
    const fa_cpu_amx_kernels *X = &fa_cpu_kernels_amx, *E = &fa_cpu_kernels_amx_emu;
    enum { LD = 160, ROWS = 96 };
    float *src = malloc(sizeof(float) * ROWS * LD);
    uint32_t *a = malloc(sizeof(uint32_t) * ROWS * LD), *e = malloc(sizeof(uint32_t) * ROWS * LD);
    uint16_t *rows16 = malloc(sizeof(uint16_t) * ROWS * LD);
    ck_assert(src && a && e && rows16);
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int nr = dims[di][0], nc = dims[di][1];
        for (int i = 0; i < ROWS * LD; i++) src[i] = pack_value();
        for (int i = 0; i < ROWS * LD; i++) rows16[i] = (uint16_t)(unif() * 65536.0);
        /* to_rows: dst ld in bf16 elements (even), rows up to round_up(nr, 16) */
        memset(a, 0xa5, sizeof(uint32_t) * ROWS * LD); memset(e, 0xa5, sizeof(uint32_t) * ROWS * LD);
        X->to_rows((uint16_t *)a, 2 * LD, src, LD, nr, nc);
        E->to_rows((uint16_t *)e, 2 * LD, src, LD, nr, nc);
        ck_assert_msg(!memcmp(a, e, sizeof(uint32_t) * ROWS * LD), "to_rows %dx%d differs from the emulation", nr, nc);
        /* to_pairs: reads columns up to round_up(nc, 16), writes round_up(nr, 32)/2 rows */
        memset(a, 0xa5, sizeof(uint32_t) * ROWS * LD); memset(e, 0xa5, sizeof(uint32_t) * ROWS * LD);
        X->to_pairs(a, LD, src, LD, nr, nc);
        E->to_pairs(e, LD, src, LD, nr, nc);
        ck_assert_msg(!memcmp(a, e, sizeof(uint32_t) * ROWS * LD), "to_pairs %dx%d differs from the emulation", nr, nc);
        /* tr32 */
        memset(a, 0xa5, sizeof(uint32_t) * ROWS * LD); memset(e, 0xa5, sizeof(uint32_t) * ROWS * LD);
        X->tr32(a, ROWS, (const uint32_t *)src, LD, nr, nc);
        E->tr32(e, ROWS, (const uint32_t *)src, LD, nr, nc);
        ck_assert_msg(!memcmp(a, e, sizeof(uint32_t) * ROWS * LD), "tr32 %dx%d differs from the emulation", nr, nc);
        /* pair_rows, including its Inf/NaN flag */
        const uint16_t *rp[ROWS];
        for (int r = 0; r < nr; r++) rp[r] = rows16 + r * LD;
        memset(a, 0xa5, sizeof(uint32_t) * ROWS * LD); memset(e, 0xa5, sizeof(uint32_t) * ROWS * LD);
        int fa = X->pair_rows(a, LD, rp, nr, nc), fe = E->pair_rows(e, LD, rp, nr, nc);
        ck_assert_msg(fa == fe, "pair_rows %dx%d: Inf/NaN flag %d, emulation %d", nr, nc, fa, fe);
        ck_assert_msg(!memcmp(a, e, sizeof(uint32_t) * ROWS * LD), "pair_rows %dx%d differs from the emulation", nr, nc);
    }
    free(src); free(a); free(e); free(rows16);
}
END_TEST

START_TEST(test_amx_gemm)
{
    static const int shapes[][3] = { { 16, 16, 1 }, { 17, 5, 2 }, { 48, 40, 4 }, { 64, 64, 3 }, { 1, 33, 1 } };
    const fa_cpu_amx_kernels *X = &fa_cpu_kernels_amx, *E = &fa_cpu_kernels_amx_emu;
    enum { LDA = 160, LDB = 80, LDC = 80 };
    uint16_t *A = malloc(sizeof(uint16_t) * 64 * LDA);
    uint32_t *B = malloc(sizeof(uint32_t) * 64 * LDB);
    float *c0 = malloc(sizeof(float) * 64 * LDC), *c1 = malloc(sizeof(float) * 64 * LDC);
    float *mag = malloc(sizeof(float) * 64 * LDC);
    ck_assert(A && B && c0 && c1 && mag);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int acc = 0; acc < 2; acc++) {
            int m = shapes[si][0], n = shapes[si][1], k32 = shapes[si][2];
            for (int i = 0; i < 64 * LDA; i++) {   /* some denormals (read as 0 by both) */
                float f = unif() < 0.05 ? (float)((unif() - 0.5) * 0x1p-128) : (float)(unif() - 0.5);
                uint32_t w; memcpy(&w, &f, 4); A[i] = (uint16_t)(w >> 16);
            }
            /* the last 32-wide k step half padding (zeros in A), as the loop nests pad k */
            for (int i = 0; i < 64; i++)
                for (int kk = 32 * k32 - 16; kk < 32 * k32; kk++) A[i * LDA + kk] = 0;
            if (si == 2) A[5 * LDA + 3] = 0x7fc0;   /* a NaN: its row of C must be NaN in both */
            for (int i = 0; i < 64 * LDB; i++) {
                float f = (float)(unif() - 0.5), g = (float)(unif() - 0.5);
                uint32_t w, v; memcpy(&w, &f, 4); memcpy(&v, &g, 4);
                B[i] = (w >> 16) | (v & 0xffff0000u);
            }
            for (int i = 0; i < 64 * LDC; i++) c0[i] = c1[i] = (float)(unif() - 0.5);
            /* the bound: fp32 roundoff of the sum of |terms| (order of summation differs) */
            for (int i = 0; i < 64 * LDC; i++) mag[i] = acc ? fabsf(c0[i]) : 0.0f;
            E->gemm(m, n, k32, A, LDA, B, LDB, c0, LDC, acc);
            X->gemm(m, n, k32, A, LDA, B, LDB, c1, LDC, acc);
            int mend = (m + 15) / 16 * 16, nend = (n + 15) / 16 * 16;
            for (int i = 0; i < mend; i++)
                for (int j = 0; j < nend; j++) {
                    double t = mag[i * LDC + j];
                    for (int kk = 0; kk < 32 * k32; kk++) {
                        uint32_t w = B[(kk / 2) * LDB + j];
                        uint32_t bb = (kk & 1) ? (w & 0xffff0000u) : (w << 16), ab = (uint32_t)A[i * LDA + kk] << 16;
                        float x, y; memcpy(&x, &ab, 4); memcpy(&y, &bb, 4);
                        t += fabs((double)x * y);
                    }
                    if (isnan(c0[i * LDC + j]) || isnan(c1[i * LDC + j])) {
                        ck_assert_msg(isnan(c0[i * LDC + j]) && isnan(c1[i * LDC + j]),
                                      "amx gemm m%d n%d [%d][%d]: NaN in one of tile %.9g, emulation %.9g",
                                      m, n, i, j, c1[i * LDC + j], c0[i * LDC + j]);
                        continue;
                    }
                    double d = fabs((double)c0[i * LDC + j] - c1[i * LDC + j]);
                    ck_assert_msg(d <= 64 * 0x1p-24 * t + 1e-30,
                                  "amx gemm m%d n%d k32 %d acc %d [%d][%d]: %.9g vs emulation %.9g",
                                  m, n, k32, acc, i, j, c1[i * LDC + j], c0[i * LDC + j]);
                }
        }
    free(A); free(B); free(c0); free(c1); free(mag);
}
END_TEST
#endif

int main(void)
{
    find_sets("test_kernels");
    Suite *su = suite_create("kernels");
    TCase *tc = tcase_create("softmax");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_exp_sub, 0, 2);
    tcase_add_loop_test(tc, test_softmax_fwd, 0, 6);
    suite_add_tcase(su, tc);
#ifdef FA_HAVE_AMX
    int al = amx_level();
    TCase *ta = tcase_create("amx");
    tcase_set_timeout(ta, 60);
    if (al >= 1) tcase_add_test(ta, test_amx_packing);
    else fprintf(stderr, "NOTE: test_kernels: the AMX set's packing kernels not run: this CPU lacks AVX-512 BF16\n");
    if (al >= 2) tcase_add_test(ta, test_amx_gemm);
    else fprintf(stderr, "NOTE: test_kernels: the AMX tile gemm not run: this CPU or OS lacks AMX\n");
    suite_add_tcase(su, ta);
#else
    fprintf(stderr, "NOTE: test_kernels: the AMX set not compiled in: its kernels not run\n");
#endif
    return tu_main(su);
}
