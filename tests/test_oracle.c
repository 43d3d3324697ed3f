/* test_oracle.c - checks of the test machinery itself (no library calls):
 *   - Philox4x32-10 against the published Random123 known-answer vectors
 *     (github.com/DEShawResearch/random123, tests/kat_vectors, "philox4x32 10" lines;
 *     columns: counter[4] key[2] -> output[4]);
 *   - the dropout keep-mask of lib/philox.h against its written definition;
 *   - fp16/bf16 conversions of lib/dtype.h on known values and round trips;
 *   - the oracle's backward against central finite differences in double on tiny shapes,
 *     with every feature (causal both ways, windows, softcap, ALiBi, bias, sinks/dsinks,
 *     dropout with its fixed mask, GQA, d_qk != d_v, fully masked rows);
 *   - the oracle's forward on cases with known answers, and the same-precision naive
 *     version against the oracle.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "oracle.h"
#include "philox.h"
#include "dtype.h"

START_TEST(test_philox_kat)
{
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        { { 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u }, { 0x00000000u, 0x00000000u },
          { 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u } },
        { { 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu }, { 0xffffffffu, 0xffffffffu },
          { 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu } },
        { { 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u }, { 0xa4093822u, 0x299f31d0u },
          { 0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u } },
    };
    for (size_t t = 0; t < sizeof kat / sizeof kat[0]; t++) {
        uint32_t out[4];
        fa_philox4x32_10(kat[t].ctr, kat[t].key[0], kat[t].key[1], out);
        for (int w = 0; w < 4; w++)
            ck_assert_msg(out[w] == kat[t].out[w], "philox KAT %zu word %d: got %08x want %08x",
                          t, w, out[w], kat[t].out[w]);
    }
}
END_TEST

/* The keep-mask, computed from the definition in philox.h's comment. */
static int keep_by_definition(uint64_t seed, uint64_t offset, float p, int64_t b, int64_t h,
                              int64_t i, int64_t j)
{
    uint32_t c1[4] = { (uint32_t)(offset & 0xffffffffu), (uint32_t)(offset >> 32), 0x64726f70u, 0 };
    uint32_t kk[4];
    fa_philox4x32_10(c1, (uint32_t)(seed & 0xffffffffu), (uint32_t)(seed >> 32), kk);
    uint32_t c2[4] = { (uint32_t)((uint64_t)j >> 2), (uint32_t)i, (uint32_t)h, (uint32_t)b };
    uint32_t w[4];
    fa_philox4x32_10(c2, kk[0], kk[1], w);
    double thr = floor((double)p * 4294967296.0);
    return (double)w[j & 3] >= thr;
}

START_TEST(test_dropout_mask_definition)
{
    const float ps[] = { 0.0f, 0.1f, 0.5f, 0.9f, 0.999f };
    const uint64_t seeds[] = { 0, 42, 0x123456789abcdefull };
    for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++)
        for (size_t sidx = 0; sidx < 3; sidx++) {
            uint64_t seed = seeds[sidx], offset = seed * 7 + 0x100000000ull * sidx;
            fa_dropout_key key = fa_dropout_make_key(seed, offset, ps[a]);
            long kept = 0, n = 0;
            for (int64_t b = 0; b < 2; b++)
                for (int64_t h = 0; h < 3; h++)
                    for (int64_t i = 0; i < 17; i++)
                        for (int64_t j = 0; j < 67; j++) {
                            int k1 = fa_dropout_keep(&key, b, h, i, j);
                            int k2 = keep_by_definition(seed, offset, ps[a], b, h, i, j);
                            ck_assert_msg(k1 == k2, "keep(%lld,%lld,%lld,%lld) p=%g seed=%llu: "
                                          "%d vs definition %d", (long long)b, (long long)h,
                                          (long long)i, (long long)j, (double)ps[a],
                                          (unsigned long long)seed, k1, k2);
                            kept += k1; n++;
                        }
            double frac = (double)kept / (double)n;
            ck_assert_msg(fabs(frac - (1.0 - ps[a])) < 0.03, "keep fraction %g for p=%g", frac,
                          (double)ps[a]);
            if (ps[a] > 0)
                ck_assert_msg(fabs(key.keep_scale - 1.0 / (1.0 - ps[a])) < 1e-6 / (1.0 - ps[a]),
                              "keep_scale %g", (double)key.keep_scale);
        }
    /* The mask depends on every key component. */
    fa_dropout_key k1 = fa_dropout_make_key(1, 0, 0.5f), k2 = fa_dropout_make_key(2, 0, 0.5f);
    fa_dropout_key k3 = fa_dropout_make_key(1, 1, 0.5f);
    int d12 = 0, d13 = 0;
    for (int j = 0; j < 256; j++) {
        d12 += fa_dropout_keep(&k1, 0, 0, 0, j) != fa_dropout_keep(&k2, 0, 0, 0, j);
        d13 += fa_dropout_keep(&k1, 0, 0, 0, j) != fa_dropout_keep(&k3, 0, 0, 0, j);
    }
    ck_assert_msg(d12 > 64 && d13 > 64, "mask barely depends on seed/offset: %d %d", d12, d13);
}
END_TEST

START_TEST(test_dtype_conversions)
{
    ck_assert_uint_eq(fa_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(fa_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(fa_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(fa_f32_to_f16(65519.0f), 0x7bff);
    ck_assert_uint_eq(fa_f32_to_f16(65520.0f), 0x7c00);     /* ties-to-even rounds to inf */
    ck_assert_uint_eq(fa_f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(fa_f32_to_f16(0x1p-25f), 0x0000);     /* tie -> even (0) */
    ck_assert_uint_eq(fa_f32_to_f16(0x3p-25f), 0x0002);     /* tie -> even (2) */
    ck_assert_uint_eq(fa_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    ck_assert_uint_eq(fa_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
    ck_assert_uint_eq(fa_f32_to_f16(INFINITY), 0x7c00);
    ck_assert(isnan(fa_f16_to_f32(fa_f32_to_f16(NAN))));
    ck_assert_uint_eq(fa_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(fa_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    ck_assert_uint_eq(fa_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
    ck_assert_uint_eq(fa_f32_to_bf16(-INFINITY), 0xff80);
    ck_assert(isnan(fa_bf16_to_f32(fa_f32_to_bf16(NAN))));
    ck_assert(fa_f16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(fa_f16_to_f32(0x7bff) == 65504.0f);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fa_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        ck_assert_msg(fa_f32_to_f16(f) == h, "f16 round trip %04x", h);
        float g = fa_bf16_to_f32((uint16_t)h);
        if (isnan(g)) continue;
        ck_assert_msg(fa_f32_to_bf16(g) == h, "bf16 round trip %04x", h);
    }
}
END_TEST

/* ---- finite differences ------------------------------------------------------------- */
typedef struct {
    const char *name;
    int64_t sq, sk, hq, hkv, dqk, dv;
    int causal, window; int64_t wl, wr;
    double softcap; int alibi, sinks, bias; float p; double scale;
} fd_case;

static double fd_loss(const or_seq *s, const double *q, const double *k, const double *v,
                      const double *dout)
{
    int64_t n = s->sq * s->hq * s->dv;
    double *out = calloc((size_t)(n + 1), sizeof(double));
    or_forward(s, q, k, v, out, NULL);
    double L = 0.0;
    for (int64_t x = 0; x < n; x++) L += out[x] * dout[x];
    free(out);
    return L;
}

static void fd_check_one(const fd_case *fc, uint64_t seed)
{
    tu_rng r = { seed };
    or_seq s;
    memset(&s, 0, sizeof s);
    s.sq = fc->sq; s.sk = fc->sk; s.hq = fc->hq; s.hkv = fc->hkv; s.dqk = fc->dqk; s.dv = fc->dv;
    s.scale = fc->scale; s.causal = fc->causal; s.window = fc->window; s.wl = fc->wl;
    s.wr = fc->wr; s.softcap = fc->softcap; s.dropout_p = fc->p; s.seed = 77; s.offset = 5;
    s.drop_b = 1; s.drop_i0 = 3;
    int64_t nq = s.sq * s.hq * s.dqk, nk = s.sk * s.hkv * s.dqk, nv = s.sk * s.hkv * s.dv;
    int64_t no = s.sq * s.hq * s.dv;
    double *q = malloc(sizeof(double) * (size_t)nq), *k = malloc(sizeof(double) * (size_t)nk);
    double *v = malloc(sizeof(double) * (size_t)nv), *dout = malloc(sizeof(double) * (size_t)no);
    double *dq = malloc(sizeof(double) * (size_t)nq), *dk = malloc(sizeof(double) * (size_t)nk);
    double *dv = malloc(sizeof(double) * (size_t)nv);
    double alibi[8], sinks[8], dsinks[8] = { 0 };
    double *bias = malloc(sizeof(double) * (size_t)(s.hq * s.sq * s.sk));
    for (int64_t x = 0; x < nq; x++) q[x] = tu_unif(&r) * 1.5;
    for (int64_t x = 0; x < nk; x++) k[x] = tu_unif(&r) * 1.5;
    for (int64_t x = 0; x < nv; x++) v[x] = tu_unif(&r);
    for (int64_t x = 0; x < no; x++) dout[x] = tu_unif(&r);
    for (int h = 0; h < 8; h++) { alibi[h] = 0.3 + 0.2 * h; sinks[h] = tu_unif(&r) * 2; }
    for (int64_t x = 0; x < s.hq * s.sq * s.sk; x++) bias[x] = tu_unif(&r);
    s.alibi = fc->alibi ? alibi : NULL;
    s.sinks = fc->sinks ? sinks : NULL;
    s.bias = fc->bias ? bias : NULL;
    or_backward(&s, q, k, v, dout, dq, dk, dv, dsinks);
    const double h = 1e-5;
    struct { double *x, *g; int64_t n; const char *nm; } arr[4] = {
        { q, dq, nq, "dq" }, { k, dk, nk, "dk" }, { v, dv, nv, "dv" },
        { sinks, dsinks, fc->sinks ? s.hq : 0, "dsinks" } };
    double gmax = 0.0;
    for (int a = 0; a < 4; a++)
        for (int64_t x = 0; x < arr[a].n; x++)
            if (fabs(arr[a].g[x]) > gmax) gmax = fabs(arr[a].g[x]);
    ck_assert_msg(gmax > 1e-3, "%s: gradients all ~0 (%g): not a meaningful case", fc->name, gmax);
    for (int a = 0; a < 4; a++)
        for (int64_t x = 0; x < arr[a].n; x++) {
            double save = arr[a].x[x];
            arr[a].x[x] = save + h;
            double lp = fd_loss(&s, q, k, v, dout);
            arr[a].x[x] = save - h;
            double lm = fd_loss(&s, q, k, v, dout);
            arr[a].x[x] = save;
            double fd = (lp - lm) / (2 * h);
            double tol = 1e-7 * (1.0 + gmax) + 1e-6 * fabs(fd);
            ck_assert_msg(fabs(fd - arr[a].g[x]) <= tol,
                          "FD check %s (seed %llu): %s[%lld] analytic %.12g vs FD %.12g",
                          fc->name, (unsigned long long)seed, arr[a].nm, (long long)x,
                          arr[a].g[x], fd);
        }
    free(q); free(k); free(v); free(dout); free(dq); free(dk); free(dv); free(bias);
}

static const fd_case fd_cases[] = {
    /* name            sq sk hq hkv dqk dv causal window wl wr softcap alibi sinks bias p scale */
    { "plain",          3, 4, 1, 1, 3, 3, 0, 0, -1, -1, 0, 0, 0, 0, 0.0f, 0.6 },
    { "causal-br",      3, 5, 2, 1, 3, 2, 1, 0, -1, -1, 0, 0, 0, 0, 0.0f, 0.7 },
    { "causal-tl",      4, 3, 2, 2, 2, 3, 2, 0, -1, -1, 0, 0, 0, 0, 0.0f, 0.7 },
    { "masked-rows-br", 5, 2, 1, 1, 3, 2, 1, 0, -1, -1, 0, 0, 0, 0, 0.0f, 0.7 },
    { "window-both",    5, 6, 1, 1, 2, 2, 0, 1, 1, 2, 0, 0, 0, 0, 0.0f, 0.8 },
    { "window-left",    4, 6, 1, 1, 2, 2, 1, 1, 2, -1, 0, 0, 0, 0, 0.0f, 0.8 },
    { "softcap",        3, 4, 2, 1, 3, 2, 0, 0, -1, -1, 1.5, 0, 0, 0, 0.0f, 1.3 },
    { "alibi",          3, 5, 2, 1, 2, 3, 0, 0, -1, -1, 0, 1, 0, 0, 0.0f, 0.9 },
    { "bias",           3, 4, 2, 2, 2, 2, 0, 0, -1, -1, 0, 0, 0, 1, 0.0f, 0.9 },
    { "sinks",          3, 4, 2, 1, 3, 2, 0, 0, -1, -1, 0, 0, 1, 0, 0.0f, 0.9 },
    { "sinks-masked",   4, 2, 2, 1, 2, 2, 1, 0, -1, -1, 0, 0, 1, 0, 0.0f, 0.9 },
    { "dropout",        3, 6, 2, 1, 3, 3, 0, 0, -1, -1, 0, 0, 0, 0, 0.4f, 0.9 },
    { "gqa-4:2",        3, 4, 4, 2, 2, 3, 0, 0, -1, -1, 0, 0, 0, 0, 0.0f, 0.9 },
    { "everything",     4, 5, 4, 2, 3, 2, 1, 1, 3, 0, 2.0, 1, 1, 1, 0.25f, 0.9 },
};

START_TEST(test_oracle_fd)
{
    const fd_case *fc = &fd_cases[_i];
    for (uint64_t seed = 1; seed <= 3; seed++) fd_check_one(fc, seed * 1000 + (uint64_t)_i);
}
END_TEST

/* Known answers: one key -> out = v, lse = s; all keys equal -> out = mean of v. */
START_TEST(test_oracle_known)
{
    or_seq s;
    memset(&s, 0, sizeof s);
    s.sq = 2; s.sk = 1; s.hq = 1; s.hkv = 1; s.dqk = 2; s.dv = 3; s.scale = 0.5;
    double q[4] = { 1, 2, -1, 0.5 }, k[2] = { 0.25, -3 }, v[3] = { 1, -2, 3 }, out[6], lse[2];
    or_forward(&s, q, k, v, out, lse);
    for (int i = 0; i < 2; i++) {
        for (int c = 0; c < 3; c++) ck_assert(out[i * 3 + c] == v[c]);
        double sc = 0.5 * (q[i * 2] * k[0] + q[i * 2 + 1] * k[1]);
        ck_assert(fabs(lse[i] - sc) < 1e-15);
    }
    /* sinks: lse = log(exp(s) + exp(sink)), out = v * exp(s - lse) */
    double sink = 0.7;
    s.sinks = &sink;
    or_forward(&s, q, k, v, out, lse);
    double sc0 = 0.5 * (q[0] * k[0] + q[1] * k[1]);
    double l0 = log(exp(sc0) + exp(sink));
    ck_assert(fabs(lse[0] - l0) < 1e-14);
    ck_assert(fabs(out[0] - v[0] * exp(sc0 - l0)) < 1e-14);
    /* q = 0: uniform attention over 3 keys */
    double qz[2] = { 0, 0 }, k3[6] = { 1, 2, 3, 4, 5, 6 }, v3[6] = { 1, 2, 3, 4, 5, 9 }, o1[2], l1;
    or_seq t;
    memset(&t, 0, sizeof t);
    t.sq = 1; t.sk = 3; t.hq = 1; t.hkv = 1; t.dqk = 2; t.dv = 2; t.scale = 1;
    or_forward(&t, qz, k3, v3, o1, &l1);
    ck_assert(fabs(o1[0] - 3.0) < 1e-14 && fabs(o1[1] - 5.0) < 1e-14);
    ck_assert(fabs(l1 - log(3.0)) < 1e-14);
    /* visibility: bottom-right vs top-left, window */
    or_seq m;
    memset(&m, 0, sizeof m);
    m.sq = 2; m.sk = 4; m.causal = FA_CAUSAL_BOTTOM_RIGHT;
    ck_assert(or_visible(&m, 0, 2) && !or_visible(&m, 0, 3) && or_visible(&m, 1, 3));
    m.causal = FA_CAUSAL_TOP_LEFT;
    ck_assert(or_visible(&m, 0, 0) && !or_visible(&m, 0, 1) && or_visible(&m, 1, 1) &&
              !or_visible(&m, 1, 2));
    m.causal = FA_CAUSAL_NONE; m.window = 1; m.wl = 1; m.wr = 0;   /* off = 2 */
    ck_assert(!or_visible(&m, 0, 0) && or_visible(&m, 0, 1) && or_visible(&m, 0, 2) &&
              !or_visible(&m, 0, 3));
    m.window = 0;  /* values ignored */
    ck_assert(or_visible(&m, 0, 0) && or_visible(&m, 0, 3));
    m.causal = FA_CAUSAL_BOTTOM_RIGHT; m.window = 1; m.wl = -1; m.wr = 5;  /* causal wins */
    ck_assert(!or_visible(&m, 0, 3));
    m.sq = 5; m.sk = 2;  /* off = -3: rows 0..2 fully masked */
    ck_assert(!or_visible(&m, 0, 0) && !or_visible(&m, 2, 0) && or_visible(&m, 3, 0));
    /* combine: two halves give the whole */
    double pa[2] = { 1, 2 }, pb[2] = { 3, 4 }, la = 0.5, lb = -0.25, oc[2], lc;
    const double *parts[2] = { pa, pb }, *lps[2] = { &la, &lb };
    or_combine(2, 1, 2, parts, lps, oc, &lc);
    double L = log(exp(la) + exp(lb));
    ck_assert(fabs(lc - L) < 1e-15);
    ck_assert(fabs(oc[0] - (exp(la - L) * 1 + exp(lb - L) * 3)) < 1e-14);
    double ninf = -INFINITY;
    const double *lps2[2] = { &ninf, &ninf };
    or_combine(2, 1, 2, parts, lps2, oc, &lc);
    ck_assert(oc[0] == 0 && oc[1] == 0 && lc == -INFINITY);
}
END_TEST

/* Same-precision naive: F32 agrees with the oracle to ~1e-6; F16/BF16 differ by a
   plausible amount (not 0, not huge). */
START_TEST(test_naive_sp)
{
    tu_rng r = { 99 };
    or_seq s;
    memset(&s, 0, sizeof s);
    s.sq = 37; s.sk = 53; s.hq = 2; s.hkv = 1; s.dqk = 16; s.dv = 8; s.scale = 0.25;
    s.causal = FA_CAUSAL_BOTTOM_RIGHT; s.softcap = 5;
    int64_t nq = s.sq * s.hq * s.dqk, nk = s.sk * s.hkv * s.dqk, nv = s.sk * s.hkv * s.dv;
    int64_t no = s.sq * s.hq * s.dv;
    double *q = malloc(8 * (size_t)nq), *k = malloc(8 * (size_t)nk), *v = malloc(8 * (size_t)nv);
    double *o = malloc(8 * (size_t)no), *o2 = malloc(8 * (size_t)no);
    double l[74], l2[74];
    fa_dtype dts[3] = { FA_F32, FA_F16, FA_BF16 };
    for (int t = 0; t < 3; t++) {
        for (int64_t x = 0; x < nq; x++) q[x] = fa_round_to(dts[t], (float)tu_unif(&r) * 2);
        for (int64_t x = 0; x < nk; x++) k[x] = fa_round_to(dts[t], (float)tu_unif(&r) * 2);
        for (int64_t x = 0; x < nv; x++) v[x] = fa_round_to(dts[t], (float)tu_unif(&r));
        or_forward(&s, q, k, v, o, l);
        or_forward_sp(&s, dts[t], dts[t], q, k, v, o2, l2);
        double e = 0, m = 0;
        for (int64_t x = 0; x < no; x++) {
            if (fabs(o[x] - o2[x]) > e) e = fabs(o[x] - o2[x]);
            if (fabs(o[x]) > m) m = fabs(o[x]);
        }
        double lim = dts[t] == FA_F32 ? 1e-6 : 8 * or_eps(dts[t]);
        ck_assert_msg(e / m < lim, "naive %s rel err %g", tu_dtype_name(dts[t]), e / m);
        if (dts[t] != FA_F32) ck_assert_msg(e > 0, "naive %s identical to oracle?", tu_dtype_name(dts[t]));
    }
    free(q); free(k); free(v); free(o); free(o2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("oracle");
    TU_ADD(s, test_philox_kat, 30);
    TU_ADD(s, test_dropout_mask_definition, 60);
    TU_ADD(s, test_dtype_conversions, 30);
    TU_ADD(s, test_oracle_known, 30);
    TU_ADD(s, test_naive_sp, 60);
    TCase *tc = tcase_create("test_oracle_fd");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_oracle_fd, 0, (int)(sizeof fd_cases / sizeof fd_cases[0]));
    suite_add_tcase(s, tc);
    return tu_main(s);
}
