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
 *     and rounding ties, and the tile gemm against the emulation where AMX runs. Each set runs only where this CPU and OS support its ISA; a set that cannot
 * run here is named on stderr, never passed silently.
 *   - the loop nests' products over a partly masked tile (masked.h: fa_cpu_rowA_seen,
 *     fa_cpu_rowA_keys_seen, fa_cpu_colA_rows_seen) against the whole-tile gemm calls
 *     of each set: the same value at every pair a row sees, for causal, window, ragged
 *     and non-monotone visible ranges; and their AMX counterparts on the C emulation of
 *     the tile kernels.
 */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "masked.h"
#ifdef FA_HAVE_AMX
#include <cpuid.h>
#include <unistd.h>
#include <sys/syscall.h>
#endif

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

/* Visible ranges of nq rows over a tile at key j0 of nk keys, by pattern: 0 causal
   diagonal (lo 0, hi = j0 + r + 1 + off), 1 window of 40 keys, 2 random (non-monotone,
   some rows empty), 3 every key, 4 none. */
static void seen_ranges(int pat, int nq, int nk, int64_t j0, int64_t *lo, int64_t *hi)
{
    int off = (int)(unif() * 40) - 20;
    for (int r = 0; r < nq; r++) {
        switch (pat) {
        case 0: lo[r] = 0; hi[r] = j0 + r + 1 + off; break;
        case 1: lo[r] = j0 + r + off - 40; hi[r] = j0 + r + off; break;
        case 2: {
            int64_t a = j0 - 5 + (int64_t)(unif() * (nk + 10)), b = j0 - 5 + (int64_t)(unif() * (nk + 10));
            lo[r] = a < b ? a : b; hi[r] = a < b ? b : a;
            if (unif() < 0.1) hi[r] = lo[r];
            break;
        }
        case 3: lo[r] = j0 - 3; hi[r] = j0 + nk + 3; break;
        default: lo[r] = j0 + nk; hi[r] = j0 + nk + 5; break;
        }
    }
}

static float rnd(void) { return (float)(unif() * 2.0 - 1.0); }

START_TEST(test_seen_products)
{
    for (int si = 0; si < nsets; si++) {
        if (!sets[si].ok) continue;
        const fa_cpu_kernels *K = sets[si].k;
        for (int it = 0; it < 40; it++) {
            int pat = it % 5;
            int nk = 1 + (int)(unif() * 300), nq = 1 + (int)(unif() * 300);
            int kd = 1 + (int)(unif() * 150), n = 1 + (int)(unif() * 150);
            int64_t j0 = (int64_t)(unif() * 1000);
            int64_t ld = nq + 16, lda = kd + 3, ldn = n + 5;
            int64_t *lo = malloc(sizeof(int64_t) * nq), *hi = malloc(sizeof(int64_t) * nq);
            seen_ranges(pat, nq, nk, j0, lo, hi);
#define SEEN(j, r) (j0 + (j) >= lo[r] && j0 + (j) < hi[r])
            /* S^T-shaped product: keys x rows from K rows [nk][kd] and Q^T [kd][nq] */
            float *A = malloc(sizeof(float) * nk * lda), *B = malloc(sizeof(float) * kd * ld);
            float *c0 = malloc(sizeof(float) * nk * ld), *c1 = malloc(sizeof(float) * nk * ld);
            for (long x = 0; x < (long)nk * lda; x++) A[x] = rnd();
            for (long x = 0; x < (long)kd * ld; x++) B[x] = rnd();
            for (long x = 0; x < (long)nk * ld; x++) c0[x] = c1[x] = NAN;
            K->gemm_rowA(nk, nq, kd, A, lda, B, ld, c0, ld, 0);
            fa_cpu_rowA_seen(K, 0, nk, nq, kd, A, lda, B, ld, c1, ld, j0, lo, hi);
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < nq; r++) {
                    float x0 = c0[j * ld + r], x1 = c1[j * ld + r];
                    if (SEEN(j, r))
                        ck_assert_msg(memcmp(&x0, &x1, sizeof x0) == 0,
                                      "%s rowA_seen pat %d (%d x %d, kd %d) [%d][%d]: %.9g, whole tile %.9g",
                                      sets[si].name, pat, nk, nq, kd, j, r, x1, x0);
                    else
                        ck_assert_msg(!isnan(x1), "%s rowA_seen pat %d [%d][%d] left unwritten",
                                      sets[si].name, pat, j, r);
                }
            /* a P^T / dS^T tile: 0 at the pairs no row sees */
            float *T = malloc(sizeof(float) * nk * ld), *R = malloc(sizeof(float) * nq * ldn);
            float *V = malloc(sizeof(float) * nk * ldn), *alpha = malloc(sizeof(float) * (nq + 16));
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < nq; r++) T[j * ld + r] = SEEN(j, r) ? rnd() : 0.0f;
            for (long x = 0; x < (long)nq * ldn; x++) R[x] = rnd();
            for (long x = 0; x < (long)nk * ldn; x++) V[x] = rnd();
            for (int r = 0; r < nq + 16; r++) alpha[r] = r % 3 == 0 ? 1.0f : (float)unif();
            /* dV += P^T dO: keys x n over the rows */
            float *d0 = malloc(sizeof(float) * nk * ldn), *d1 = malloc(sizeof(float) * nk * ldn);
            for (long x = 0; x < (long)nk * ldn; x++) d0[x] = d1[x] = rnd();
            K->gemm_rowA(nk, n, nq, T, ld, R, ldn, d0, ldn, 1);
            fa_cpu_rowA_keys_seen(K, nk, n, nq, T, ld, R, ldn, d1, ldn, j0, lo, hi);
            for (long x = 0; x < (long)nk * ldn; x++)
                ck_assert_msg(d0[x] == d1[x], "%s rowA_keys_seen pat %d (%d x %d, rows %d) [%ld]: %.9g, whole tile %.9g",
                              sets[si].name, pat, nk, n, nq, x, d1[x], d0[x]);
            /* O (= alpha O) += P V, dQ += dS K: rows x n over the keys */
            for (int sc = 0; sc < 2; sc++) {
                if (sc && !K->gemm_colA_scaled) continue;
                float *o0 = malloc(sizeof(float) * nq * ldn), *o1 = malloc(sizeof(float) * nq * ldn);
                for (long x = 0; x < (long)nq * ldn; x++) o0[x] = o1[x] = rnd();
                if (sc)
                    K->gemm_colA_scaled(nq, n, nk, T, ld, V, ldn, o0, ldn, alpha);
                else
                    K->gemm_colA(nq, n, nk, T, ld, V, ldn, o0, ldn, 1);
                fa_cpu_colA_rows_seen(K, 0, nq, n, nk, T, ld, V, ldn, o1, ldn, j0, lo, hi,
                                      sc ? alpha : NULL);
                for (long x = 0; x < (long)nq * ldn; x++)
                    ck_assert_msg(o0[x] == o1[x], "%s colA_rows_seen%s pat %d (%d x %d, keys %d) [%ld]: %.9g, whole tile %.9g",
                                  sets[si].name, sc ? " (scaled)" : "", pat, nq, n, nk, x, o1[x], o0[x]);
                free(o0); free(o1);
            }
#undef SEEN
            free(lo); free(hi); free(A); free(B); free(c0); free(c1); free(T); free(R); free(V);
            free(alpha); free(d0); free(d1);
        }
    }
}
END_TEST

/* The AMX wrappers against whole-tile calls, on the C emulation of the tile kernels (the
   same contract; linked on every machine): the same value at every pair a row sees. */
static uint16_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static int rup(int n, int m) { return (n + m - 1) / m * m; }

/* fa_cpu_amx_acc_seen(E, keys, m, ...) against the whole-tile gemm: C [m16][n16] (random)
   += A [m][lda] (bf16 rows, 0 at unseen pairs, k < nk2) x B (random pairs over k). */
static void check_amx_acc(const fa_cpu_amx_kernels *E, int keys, int m, int n, int nk2,
                          const uint16_t *A, int lda, int64_t j0, const int64_t *lo,
                          const int64_t *hi, int pat)
{
    int n16 = rup(n, 16), m16 = rup(m, 16), k32 = rup(nk2, 32);
    uint32_t *B = calloc((size_t)k32 / 2 * n16, 4);
    for (int k = 0; k < nk2; k++)
        for (int x = 0; x < n; x++)
            B[(k / 2) * n16 + x] |= (uint32_t)bf16_of(rnd()) << (16 * (k & 1));
    float *c0 = malloc(sizeof(float) * m16 * n16), *c1 = malloc(sizeof(float) * m16 * n16);
    for (int x = 0; x < m16 * n16; x++) c0[x] = c1[x] = rnd();
    E->gemm(m, n, k32 / 32, A, lda, B, n16, c0, n16, 1);
    fa_cpu_amx_acc_seen(E, keys, m, n, nk2, A, lda, B, n16, c1, n16, j0, lo, hi);
    for (int i = 0; i < m; i++)
        for (int x = 0; x < n; x++)
            ck_assert_msg(c0[i * n16 + x] == c1[i * n16 + x],
                          "amx_acc_seen (%s) pat %d [%d][%d]: %.9g, whole tile %.9g",
                          keys ? "keys" : "rows", pat, i, x, c1[i * n16 + x], c0[i * n16 + x]);
    free(B); free(c0); free(c1);
}

START_TEST(test_amx_seen_products)
{
    const fa_cpu_amx_kernels *E = &fa_cpu_kernels_amx_emu;
    for (int it = 0; it < 30; it++) {
        int pat = it % 5;
        int nk = 1 + (int)(unif() * 200), nq = 1 + (int)(unif() * 200);
        int k32 = 1 + (int)(unif() * 3), n = 1 + (int)(unif() * 90);
        int64_t j0 = (int64_t)(unif() * 1000);
        int nk16 = rup(nk, 16), nk32 = rup(nk, 32), nq16 = rup(nq, 16), nq32 = rup(nq, 32);
        int n16 = rup(n, 16);
        int64_t *lo = malloc(sizeof(int64_t) * nq), *hi = malloc(sizeof(int64_t) * nq);
        seen_ranges(pat, nq, nk, j0, lo, hi);
#define SEEN(j, r) (j0 + (j) >= lo[r] && j0 + (j) < hi[r])
        /* S^T = A B: A [nk16][32 k32] bf16 rows, B [16 k32][nq16] pairs */
        int64_t lda = 32 * k32;
        uint16_t *A = calloc((size_t)nk16 * lda, 2);
        uint32_t *B = calloc((size_t)16 * k32 * nq16, 4);
        float *c0 = malloc(sizeof(float) * nk16 * nq16), *c1 = malloc(sizeof(float) * nk16 * nq16);
        for (int j = 0; j < nk; j++)
            for (int x = 0; x < lda; x++) A[j * lda + x] = bf16_of(rnd());
        for (int x = 0; x < 16 * k32; x++)
            for (int r = 0; r < nq; r++)
                B[x * nq16 + r] = bf16_of(rnd()) | (uint32_t)bf16_of(rnd()) << 16;
        for (int x = 0; x < nk16 * nq16; x++) c0[x] = c1[x] = NAN;
        E->gemm(nk, nq, k32, A, lda, B, nq16, c0, nq16, 0);
        fa_cpu_amx_rowA_seen(E, nk, nq, k32, A, lda, B, nq16, c1, nq16, j0, lo, hi);
        for (int j = 0; j < nk; j++)
            for (int r = 0; r < nq; r++)
                if (SEEN(j, r))
                    ck_assert_msg(memcmp(c0 + j * nq16 + r, c1 + j * nq16 + r, 4) == 0,
                                  "amx_rowA_seen pat %d (%d x %d) [%d][%d]: %.9g, whole tile %.9g",
                                  pat, nk, nq, j, r, c1[j * nq16 + r], c0[j * nq16 + r]);
                else
                    ck_assert_msg(!isnan(c1[j * nq16 + r]), "amx_rowA_seen [%d][%d] unwritten", j, r);
        /* a P^T tile, 0 at unseen pairs: as pairs over keys [nk32/2][nq16] and as rows
           [nk16][nq32] (keys x rows) and rows^T [nq16][nk32] (rows x keys) */
        uint32_t *Pp = calloc((size_t)nk32 / 2 * nq16, 4);
        uint16_t *Pr = calloc((size_t)nk16 * nq32, 2), *Pt = calloc((size_t)nq16 * nk32, 2);
        for (int j = 0; j < nk; j++)
            for (int r = 0; r < nq; r++) {
                uint16_t v = SEEN(j, r) ? bf16_of(rnd()) : 0;
                Pp[(j / 2) * nq16 + r] |= (uint32_t)v << (16 * (j & 1));
                Pr[j * nq32 + r] = v;
                Pt[r * nk32 + j] = v;
            }
        /* O^T [n16][nq16] += V^T [n16][nk32] P */
        uint16_t *Vt = calloc((size_t)n16 * nk32, 2);
        for (int x = 0; x < n; x++)
            for (int j = 0; j < nk; j++) Vt[x * nk32 + j] = bf16_of(rnd());
        float *o0 = malloc(sizeof(float) * n16 * nq16), *o1 = malloc(sizeof(float) * n16 * nq16);
        for (int x = 0; x < n16 * nq16; x++) o0[x] = o1[x] = rnd();
        E->gemm(n, nq, nk32 / 32, Vt, nk32, Pp, nq16, o0, nq16, 1);
        fa_cpu_amx_ot_seen(E, n, nq, nk, Vt, nk32, Pp, nq16, o1, nq16, j0, lo, hi);
        for (int x = 0; x < n; x++)
            for (int r = 0; r < nq; r++)
                ck_assert_msg(o0[x * nq16 + r] == o1[x * nq16 + r],
                              "amx_ot_seen pat %d [%d][%d]: %.9g, whole tile %.9g", pat, x, r,
                              o1[x * nq16 + r], o0[x * nq16 + r]);
        /* dV [nk16][n16] += P^T rows x dO pairs over rows; dQ [nq16][n16] += dS rows x
           K pairs over keys */
        check_amx_acc(E, 1, nk, n, nq, Pr, nq32, j0, lo, hi, pat);
        check_amx_acc(E, 0, nq, n, nk, Pt, nk32, j0, lo, hi, pat);
#undef SEEN
        free(lo); free(hi); free(A); free(B); free(c0); free(c1); free(Pp); free(Pr); free(Pt);
        free(Vt); free(o0); free(o1);
    }
}
END_TEST

/* The bf16 dot-product wrappers against whole-tile calls (sets with those kernels, where
   the CPU has AVX-512 BF16). */
START_TEST(test_bf16_seen_products)
{
    int ran = 0;
    for (int si = 0; si < nsets; si++) {
        const fa_cpu_kernels *K = sets[si].k;
        if (!sets[si].ok || !K->gemm_bf16_rowA) continue;
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx512bf16")) continue;
        ran = 1;
        for (int it = 0; it < 30; it++) {
            int pat = it % 5;
            int nk = 1 + (int)(unif() * 300), nq = 1 + (int)(unif() * 300);
            int kp = 1 + (int)(unif() * 70), n = 1 + (int)(unif() * 150);
            int64_t j0 = (int64_t)(unif() * 1000);
            int64_t ld = nq + 16, lda = 2 * kp + 2, ldn = n + 5;
            int nkp = (nk + 1) / 2;
            int64_t *lo = malloc(sizeof(int64_t) * nq), *hi = malloc(sizeof(int64_t) * nq);
            seen_ranges(pat, nq, nk, j0, lo, hi);
#define SEEN(j, r) (j0 + (j) >= lo[r] && j0 + (j) < hi[r])
            /* S^T: A bf16 rows [nk][lda], B pairs [kp][ld] */
            uint16_t *A = calloc((size_t)nk * lda, 2), *B = calloc((size_t)kp * ld * 2, 2);
            float *c0 = malloc(sizeof(float) * nk * ld), *c1 = malloc(sizeof(float) * nk * ld);
            for (long x = 0; x < (long)nk * lda; x++) A[x] = bf16_of(rnd());
            for (long x = 0; x < (long)kp * ld * 2; x++) B[x] = bf16_of(rnd());
            for (long x = 0; x < (long)nk * ld; x++) c0[x] = c1[x] = NAN;
            K->gemm_bf16_rowA(nk, nq, kp, A, lda, B, ld, c0, ld, 0);
            fa_cpu_rowA_seen(K, 1, nk, nq, kp, A, lda, B, ld, c1, ld, j0, lo, hi);
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < nq; r++)
                    if (SEEN(j, r))
                        ck_assert_msg(memcmp(c0 + j * ld + r, c1 + j * ld + r, 4) == 0,
                                      "%s rowA_seen (bf16) pat %d [%d][%d]: %.9g, whole tile %.9g",
                                      sets[si].name, pat, j, r, c1[j * ld + r], c0[j * ld + r]);
                    else
                        ck_assert_msg(!isnan(c1[j * ld + r]), "rowA_seen (bf16) [%d][%d] unwritten", j, r);
            /* O += P V: P^T pairs over keys [nkp][ld] (0 unseen and past nk), V pairs [nkp][ldn] */
            uint16_t *P = calloc((size_t)nkp * ld * 2, 2), *V = calloc((size_t)nkp * ldn * 2, 2);
            for (int j = 0; j < nk; j++) {
                for (int r = 0; r < nq; r++)
                    P[2 * ((j / 2) * ld + r) + (j & 1)] = SEEN(j, r) ? bf16_of(rnd()) : 0;
                for (int x = 0; x < n; x++) V[2 * ((j / 2) * ldn + x) + (j & 1)] = bf16_of(rnd());
            }
            float *o0 = malloc(sizeof(float) * nq * ldn), *o1 = malloc(sizeof(float) * nq * ldn);
            for (long x = 0; x < (long)nq * ldn; x++) o0[x] = o1[x] = rnd();
            K->gemm_bf16_colA(nq, n, nkp, P, ld, V, ldn, o0, ldn, 1);
            fa_cpu_colA_rows_seen(K, 1, nq, n, nk, P, ld, V, ldn, o1, ldn, j0, lo, hi, NULL);
            for (int r = 0; r < nq; r++)
                for (int x = 0; x < n; x++)
                    ck_assert_msg(o0[r * ldn + x] == o1[r * ldn + x],
                                  "%s colA_rows_seen (bf16) pat %d [%d][%d]: %.9g, whole tile %.9g",
                                  sets[si].name, pat, r, x, o1[r * ldn + x], o0[r * ldn + x]);
#undef SEEN
            free(lo); free(hi); free(A); free(B); free(c0); free(c1); free(P); free(V);
            free(o0); free(o1);
        }
    }
    if (!ran)
        fprintf(stderr, "NOTE: test_kernels: the bf16 dot-product wrappers not run: no kernel set with them runs here\n");
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
    TCase *tp = tcase_create("products");
    tcase_set_timeout(tp, 60);
    tcase_add_test(tp, test_seen_products);
    tcase_add_test(tp, test_amx_seen_products);
    tcase_add_test(tp, test_bf16_seen_products);
    suite_add_tcase(su, tp);
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
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
