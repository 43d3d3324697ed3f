/* test_big.c - 64-bit offsets on the key/value side: k and v of more than 2^31 elements
 * each (bf16, 4 GiB each, 8 GiB in all), a few query rows, every backend under test.
 * Runs only with FA_TEST_BIG=1 (otherwise it prints a visible "skipped" note and passes).
 * The query side (q and out over 2^31 elements) is test_forward's test_big_tensor.
 *
 * Layout: k, v [1, SK, 1, 64] with SK = 2^25 + 4096, i.e. 2^31 + 262144 elements; the last
 * 4096 rows lie past element 2^31. k is zero except its last TAIL rows (random); v is random
 * everywhere. q [1, 3, 2, 64] (GQA 2:1), out F32.
 *   1. window: bottom-right causal with window_left 300: each query sees only keys past
 *      element 2^31. Oracle (liboracle's models) on those keys, gathered.
 *   2. full: no mask, every key. All zero keys share the logit 0, so sum_j exp(0) v_j =
 *      N mean(v): the oracle runs on one key carrying mean(v) with bias log(N), plus the
 *      TAIL random keys. An offset that wrapped at 2^31 would read the wrong (early) rows
 *      of the tail, whose logits dominate.
 *   3. paged KV cache: the same memory as k_cache/v_cache [SK/256, 256, 1, 64]; the
 *      block_table points at the last two pages (past 2^31), k_new/v_new append 2 rows there.
 * Memory: 8 GiB + a few MiB. Time: see docs/reliability.md.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "dtype.h"

#define D 64
#define HQ 2
#define SQ 3
#define TAIL 512
#define WL 300
static const int64_t SK = ((int64_t)1 << 25) + 4096;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double bf(uint16_t x) { return (double)fa_bf16_to_f32(x); }

/* max |got - want| over n, and max |want| */
static void cmp(const float *got, const double *want, int64_t n, double *err, double *mag)
{
    *err = 0.0; *mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= *err)) *err = e;   /* NaN sticks */
        if (fabs(want[i]) > *mag) *mag = fabs(want[i]);
    }
}

/* liboracle's rule (or_tol_plain): 2 x the same-precision naive error + floor. */
static int tol_ok(const float *got, const double *orc, const double *naive, int64_t n)
{
    double g[SQ * HQ * D];
    for (int64_t i = 0; i < n; i++) g[i] = got[i];
    or_cmp r;
    return or_tol_plain(g, orc, naive, n, FA_BF16, FA_F32, 2.0, &r);
}

START_TEST(test_big_kv)
{
    if (!tu_env_flag("FA_TEST_BIG")) {
        tu_note("test_big: skipped: set FA_TEST_BIG=1 (needs 8 GiB)");
        return;
    }
    double t0 = now();
    size_t n = (size_t)(SK * D);
    uint16_t *k = malloc(n * sizeof(uint16_t)), *v = malloc(n * sizeof(uint16_t));
    ck_assert_msg(k && v, "test_big: cannot allocate 2 x %zu bytes", n * sizeof(uint16_t));
    tu_rng r = { 777 };
    memset(k, 0, (size_t)(SK - TAIL) * D * sizeof(uint16_t));
    for (size_t x = (size_t)(SK - TAIL) * D; x < n; x++) k[x] = fa_f32_to_bf16((float)(2.0 * tu_unif(&r)));
    /* v: a random block of P elements repeated (P odd, so rows differ), cheap to write */
    enum { P = 1048573 };
    uint16_t *blk = malloc(P * sizeof(uint16_t));
    for (int x = 0; x < P; x++) blk[x] = fa_f32_to_bf16((float)tu_unif(&r));
    for (size_t x = 0; x < n; x += P) memcpy(v + x, blk, (n - x < P ? n - x : P) * sizeof(uint16_t));
    free(blk);
    uint16_t q[SQ * HQ * D];
    for (int x = 0; x < SQ * HQ * D; x++) q[x] = fa_f32_to_bf16((float)(1.5 * tu_unif(&r)));
    /* mean of v over the zero-key rows, per column (double) */
    const int64_t N = SK - TAIL;
    double vmean[D] = { 0 };
    for (int64_t j = 0; j < N; j++)
        for (int c = 0; c < D; c++) vmean[c] += bf(v[(size_t)j * D + (size_t)c]);
    for (int c = 0; c < D; c++) vmean[c] /= (double)N;
    tu_note("test_big: %zu elements per k/v (2^31 + %lld), %.1f GiB, set up in %.1f s", n,
            (long long)(n - ((size_t)1 << 31)), 2.0 * (double)n * 2 / (1 << 30), now() - t0);

    fa_tensor tq = { q, FA_BF16, { 1, SQ, HQ, D }, { SQ * HQ * D, HQ * D, D, 1 } };
    fa_tensor tk = { k, FA_BF16, { 1, SK, 1, D }, { SK * D, D, D, 1 } };
    fa_tensor tv = { v, FA_BF16, { 1, SK, 1, D }, { SK * D, D, D, 1 } };
    float out[SQ * HQ * D], lse[HQ * SQ];
    fa_tensor to = { out, FA_F32, { 1, SQ, HQ, D }, { SQ * HQ * D, HQ * D, D, 1 } };
    double qd[SQ * HQ * D];
    for (int x = 0; x < SQ * HQ * D; x++) qd[x] = bf(q[x]);
    const double scale = 1.0 / 8.0;   /* tests 1 and 3 */

    /* oracle 1: window, keys [SK - SQ - WL, SK) gathered */
    const int64_t nw = SQ + WL, j0 = SK - nw;
    double *kw = malloc(sizeof(double) * (size_t)(nw * D)), *vw = malloc(sizeof(double) * (size_t)(nw * D));
    for (int64_t j = 0; j < nw; j++)
        for (int c = 0; c < D; c++) {
            kw[j * D + c] = bf(k[(size_t)(j0 + j) * D + (size_t)c]);
            vw[j * D + c] = bf(v[(size_t)(j0 + j) * D + (size_t)c]);
        }
    or_seq sw;
    memset(&sw, 0, sizeof sw);
    sw.sq = SQ; sw.sk = nw; sw.hq = HQ; sw.hkv = 1; sw.dqk = D; sw.dv = D; sw.scale = scale;
    sw.causal = FA_CAUSAL_BOTTOM_RIGHT; sw.window = 1; sw.wl = WL; sw.wr = 0;
    double ow[SQ * HQ * D], lw[HQ * SQ], nw_o[SQ * HQ * D], nw_l[HQ * SQ];
    or_forward(&sw, qd, kw, vw, ow, lw);
    or_forward_sp(&sw, FA_BF16, FA_F32, qd, kw, vw, nw_o, nw_l);
    free(kw); free(vw);

    /* oracle 2: full = one compressed zero key (mean v, bias log N) + the TAIL keys */
    const int64_t nf = 1 + TAIL;
    double *kf = calloc((size_t)(nf * D), sizeof(double)), *vf = malloc(sizeof(double) * (size_t)(nf * D));
    double *bias = calloc((size_t)(HQ * SQ * nf), sizeof(double));
    memcpy(vf, vmean, sizeof vmean);
    for (int64_t j = 1; j < nf; j++)
        for (int c = 0; c < D; c++) {
            kf[j * D + c] = bf(k[(size_t)(N + j - 1) * D + (size_t)c]);
            vf[j * D + c] = bf(v[(size_t)(N + j - 1) * D + (size_t)c]);
        }
    for (int h = 0; h < HQ; h++)
        for (int i = 0; i < SQ; i++) bias[(h * SQ + i) * nf] = log((double)N);
    /* scale so that the largest tail logit is log(N) + 2: the tail and the N zero keys
       both carry weight, so reading either from the wrong place changes the result */
    double dmax = 0.0;
    for (int i = 0; i < SQ; i++)
        for (int h = 0; h < HQ; h++)
            for (int64_t j = 1; j < nf; j++) {
                double dot = 0.0;
                for (int c = 0; c < D; c++) dot += qd[(i * HQ + h) * D + c] * kf[j * D + c];
                if (dot > dmax) dmax = dot;
            }
    const float fscale = (float)((log((double)N) + 2.0) / dmax);
    or_seq sf;
    memset(&sf, 0, sizeof sf);
    sf.sq = SQ; sf.sk = nf; sf.hq = HQ; sf.hkv = 1; sf.dqk = D; sf.dv = D; sf.scale = fscale;
    sf.bias = bias;
    double of[SQ * HQ * D], lf[HQ * SQ];
    or_forward(&sf, qd, kf, vf, of, lf);
    free(kf); free(vf); free(bias);

    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        double err, mag, lerr, lmag;
        /* 1. window */
        fa_options opt;
        memset(&opt, 0, sizeof opt);
        opt.causal = FA_CAUSAL_BOTTOM_RIGHT; opt.window = 1; opt.window_left = WL; opt.window_right = -1;
        double t = now();
        fa_status st = fa_forward(ctx, &to, lse, &tq, &tk, &tv, &opt);
        ck_assert_msg(st == FA_OK, "%s: window forward: %s", be, fa_last_error(ctx));
        cmp(out, ow, SQ * HQ * D, &err, &mag);
        cmp(lse, lw, HQ * SQ, &lerr, &lmag);
        tu_note("test_big: %s window (keys past 2^31): %.2f s, max|out-oracle| %.2e (max|oracle| %.2f), "
                "max|lse-oracle| %.2e", be, now() - t, err, mag, lerr);
        ck_assert_msg(tol_ok(out, ow, nw_o, SQ * HQ * D) && tol_ok(lse, lw, nw_l, HQ * SQ),
                      "%s: window: out error %.3e (max %.3e), lse error %.3e: over the tolerance "
                      "rule", be, err, mag, lerr);
        /* 2. full */
        t = now();
        memset(&opt, 0, sizeof opt);
        opt.scale = fscale;
        st = fa_forward(ctx, &to, lse, &tq, &tk, &tv, &opt);
        ck_assert_msg(st == FA_OK, "%s: full forward: %s", be, fa_last_error(ctx));
        cmp(out, of, SQ * HQ * D, &err, &mag);
        cmp(lse, lf, HQ * SQ, &lerr, &lmag);
        tu_note("test_big: %s full (%lld keys): %.2f s, max|out-oracle| %.2e (max|oracle| %.2f), "
                "max|lse-oracle| %.2e", be, (long long)SK, now() - t, err, mag, lerr);
        /* bf16 inputs (P may be rounded to bf16 as the tolerance rule allows) and fp32
           sums over 2^25 keys: a few bf16 ulps; a wrapped offset moves the result by O(mag) */
        ck_assert_msg(err <= 4 * 0x1p-8 * mag && lerr <= 1e-4 * (1 + lmag),
                      "%s: full: out error %.3e (max %.3e), lse error %.3e", be, err, mag, lerr);
        fa_context_destroy(ctx);
    }

    /* 3. paged KV cache over the same memory, appending into the last page */
    const int64_t PS = 256, NP = SK / PS;
    fa_tensor pk = { k, FA_BF16, { NP, PS, 1, D }, { PS * D, D, D, 1 } };
    fa_tensor pv = { v, FA_BF16, { NP, PS, 1, D }, { PS * D, D, D, 1 } };
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        uint16_t kn[2 * D], vn[2 * D];
        for (int x = 0; x < 2 * D; x++) { kn[x] = fa_f32_to_bf16((float)tu_unif(&r)); vn[x] = fa_f32_to_bf16((float)tu_unif(&r)); }
        fa_tensor tkn = { kn, FA_BF16, { 1, 2, 1, D }, { 2 * D, D, D, 1 } };
        fa_tensor tvn = { vn, FA_BF16, { 1, 2, 1, D }, { 2 * D, D, D, 1 } };
        int32_t cs[1] = { 300 }, bt[2] = { (int32_t)(NP - 2), (int32_t)(NP - 1) };
        fa_options opt;
        memset(&opt, 0, sizeof opt);
        opt.causal = FA_CAUSAL_BOTTOM_RIGHT;
        double t = now();
        fa_status st = fa_forward_kvcache(ctx, &to, lse, &tq, &pk, &pv, &tkn, &tvn, cs, bt, 2, &opt);
        ck_assert_msg(st == FA_OK, "%s: paged kvcache: %s", be, fa_last_error(ctx));
        /* the appended rows landed at cache positions 300, 301: page NP-1, rows 44, 45 */
        for (int tt = 0; tt < 2; tt++)
            ck_assert_msg(memcmp(&k[(size_t)((NP - 1) * PS + 44 + tt) * D], &kn[tt * D], D * 2) == 0 &&
                          memcmp(&v[(size_t)((NP - 1) * PS + 44 + tt) * D], &vn[tt * D], D * 2) == 0,
                          "%s: k_new/v_new row %d not at its cache position past 2^31", be, tt);
        const int64_t nk = 302;
        double *kc = malloc(sizeof(double) * (size_t)(nk * D)), *vc = malloc(sizeof(double) * (size_t)(nk * D));
        for (int64_t j = 0; j < nk; j++) {
            size_t row = (size_t)((NP - 2 + j / PS) * PS + j % PS);
            for (int c = 0; c < D; c++) { kc[j * D + c] = bf(k[row * D + (size_t)c]); vc[j * D + c] = bf(v[row * D + (size_t)c]); }
        }
        or_seq sc;
        memset(&sc, 0, sizeof sc);
        sc.sq = SQ; sc.sk = nk; sc.hq = HQ; sc.hkv = 1; sc.dqk = D; sc.dv = D; sc.scale = scale;
        sc.causal = FA_CAUSAL_BOTTOM_RIGHT;
        double oc[SQ * HQ * D], lc[HQ * SQ], noc[SQ * HQ * D], nlc[HQ * SQ], err, mag, lerr, lmag;
        or_forward(&sc, qd, kc, vc, oc, lc);
        or_forward_sp(&sc, FA_BF16, FA_F32, qd, kc, vc, noc, nlc);
        free(kc); free(vc);
        cmp(out, oc, SQ * HQ * D, &err, &mag);
        cmp(lse, lc, HQ * SQ, &lerr, &lmag);
        tu_note("test_big: %s paged kvcache (pages past 2^31, append): %.2f s, max|out-oracle| %.2e, "
                "max|lse-oracle| %.2e", be, now() - t, err, lerr);
        ck_assert_msg(tol_ok(out, oc, noc, SQ * HQ * D) && tol_ok(lse, lc, nlc, HQ * SQ),
                      "%s: paged kvcache (over the tolerance rule): out error %.3e (max %.3e), lse error %.3e", be, err, mag, lerr);
        fa_context_destroy(ctx);
    }
    free(k); free(v);
    tu_note("test_big: total %.1f s", now() - t0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("big");
    TU_ADD(s, test_big_kv, 3600);
    return tu_main(s);
}
