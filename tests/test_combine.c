/* test_combine.c - fa_combine on every backend under test.
 *   - split Sk into 1..7 parts (some empty), run fa_forward on each (sinks on exactly one
 *     part), merge with fa_combine: matches the oracle of the whole call;
 *   - random parts of every dtype with -inf rows: matches the double combine;
 *   - n = 1 and all parts -inf (out = 0, lse = -inf).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dtype.h"

START_TEST(test_combine_split)
{
    const int n = 1 + _i % 7;
    const int64_t B = 2, H = 3, Sq = 19, Sk = 57, d = 40;
    fa_dtype dt = (_i < 7) ? FA_F16 : FA_F32;
    fa_dtype odt = (_i % 2) ? FA_F32 : dt;
    const int sinks_on = _i % 3 != 2;
    tu_rng r = { 5000 + (uint64_t)_i };
    tu_buf *q = tu_buf_new(dt, B, Sq, H, d, TL_CONTIG), *k = tu_buf_new(dt, B, Sk, H, d, TL_PADDED);
    tu_buf *v = tu_buf_new(dt, B, Sk, H, d, TL_TRANSPOSED);
    tu_fill(q, &r, 1.5); tu_fill(k, &r, 1.5); tu_fill(v, &r, 1.0);
    float sinks[3]; double sinks_d[3];
    for (int h = 0; h < 3; h++) { sinks[h] = (float)tu_unif(&r) * 2; sinks_d[h] = sinks[h]; }
    /* split points: part p covers [cut[p], cut[p+1]); part 1 is empty when n >= 3 */
    int64_t cut[8];
    cut[0] = 0;
    for (int p = 1; p < n; p++) cut[p] = Sk * p / n;
    cut[n] = Sk;
    if (n >= 3) cut[2] = cut[1];
    /* oracle of the whole */
    double *o = calloc((size_t)(B * Sq * H * d), 8), *no = calloc((size_t)(B * Sq * H * d), 8);
    double *ol = calloc((size_t)(B * H * Sq), 8), *nl = calloc((size_t)(B * H * Sq), 8);
    for (int64_t b = 0; b < B; b++) {
        or_seq s;
        memset(&s, 0, sizeof s);
        s.sq = Sq; s.sk = Sk; s.hq = H; s.hkv = H; s.dqk = d; s.dv = d; s.scale = 1 / sqrt((double)d);
        s.sinks = sinks_on ? sinks_d : NULL;
        double *bq = tu_gather(q, b, 0, Sq), *bk = tu_gather(k, b, 0, Sk), *bv = tu_gather(v, b, 0, Sk);
        or_forward(&s, bq, bk, bv, o + b * Sq * H * d, ol + b * H * Sq);
        or_forward_sp(&s, dt, odt, bq, bk, bv, no + b * Sq * H * d, nl + b * H * Sq);
        free(bq); free(bk); free(bv);
    }
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        tu_buf *parts[7];
        fa_tensor views[7];
        float *lps[7];
        for (int p = 0; p < n; p++) {
            parts[p] = tu_buf_new(FA_F32, B, Sq, H, d, TL_CONTIG);
            tu_poison(parts[p]);
            lps[p] = malloc(sizeof(float) * (size_t)(B * H * Sq));
            fa_tensor kp = k->t, vp = v->t;
            kp.data = (char *)k->t.data + (size_t)(cut[p] * k->t.stride[1]) * 2 * (dt == FA_F32 ? 2 : 1);
            vp.data = (char *)v->t.data + (size_t)(cut[p] * v->t.stride[1]) * 2 * (dt == FA_F32 ? 2 : 1);
            kp.shape[1] = vp.shape[1] = cut[p + 1] - cut[p];
            fa_options opt;
            memset(&opt, 0, sizeof opt);
            if (p == 0 && sinks_on) opt.sinks = sinks;
            fa_status st = fa_forward(ctx, &parts[p]->t, lps[p], &q->t, &kp, &vp, &opt);
            ck_assert_msg(st == FA_OK, "%s: part %d forward: %s", be, p, fa_last_error(ctx));
            views[p] = parts[p]->t;
        }
        tu_buf *out = tu_buf_new(odt, B, Sq, H, d, TL_PADDED), *lse = tu_buf_flat(FA_F32, B * H * Sq);
        tu_poison(out); tu_poison(lse); tu_snapshot(out); tu_snapshot(lse);
        fa_status st = fa_combine(ctx, &out->t, (float *)lse->t.data, views,
                                  (const float *const *)lps, n);
        ck_assert_msg(st == FA_OK, "%s: fa_combine(n=%d): %s", be, n, fa_last_error(ctx));
        char msg[512];
        ck_assert_msg(tu_check_written(out, "out", msg, sizeof msg), "%s: %s", be, msg);
        ck_assert_msg(tu_check_written(lse, "lse", msg, sizeof msg), "%s: %s", be, msg);
        double *g = calloc((size_t)(B * Sq * H * d), 8), *gl = calloc((size_t)(B * H * Sq), 8);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t c = 0; c < d; c++) g[((b * Sq + i) * H + h) * d + c] = tu_get(out, b, i, h, c);
        for (int64_t x = 0; x < B * H * Sq; x++) gl[x] = ((float *)lse->t.data)[x];
        or_cmp rr;
        ck_assert_msg(or_tol_plain(g, o, no, B * Sq * H * d, dt, odt, 2.0, &rr),
                      "%s: combine of %d parts (seed %d, %s->%s, sinks %d): out err %.3e > %.3e "
                      "(naive %.3e mag %.3e) at %lld: %.9g vs %.9g", be, n, _i, tu_dtype_name(dt),
                      tu_dtype_name(odt), sinks_on, rr.err, rr.bound, rr.nerr, rr.mag,
                      (long long)rr.worst, rr.ours_w, rr.orc_w);
        ck_assert_msg(or_tol_plain(gl, ol, nl, B * H * Sq, dt, FA_F32, 2.0, &rr),
                      "%s: combine of %d parts (seed %d): lse err %.3e > %.3e (naive %.3e) at %lld",
                      be, n, _i, rr.err, rr.bound, rr.nerr, (long long)rr.worst);
        free(g); free(gl);
        for (int p = 0; p < n; p++) { tu_buf_free(parts[p]); free(lps[p]); }
        tu_buf_free(out); tu_buf_free(lse);
        fa_context_destroy(ctx);
    }
    tu_buf_free(q); tu_buf_free(k); tu_buf_free(v);
    free(o); free(no); free(ol); free(nl);
}
END_TEST

/* Random parts of mixed dtypes and layouts, -inf rows (one part, and all parts). */
START_TEST(test_combine_direct)
{
    const int n = 1 + _i % 5;
    const int64_t B = 2, S = 13, H = 2, d = 24, rows = B * S * H;
    static const fa_dtype dts[3] = { FA_F32, FA_F16, FA_BF16 };
    fa_dtype odt = dts[_i % 3];
    tu_rng r = { 5100 + (uint64_t)_i };
    tu_buf *parts[5];
    fa_tensor views[5];
    float *lps[5];
    double *pd[5], *ld[5];
    for (int p = 0; p < n; p++) {
        parts[p] = tu_buf_new(dts[(p + _i) % 3], B, S, H, d, (tu_layout)(p % 3));
        tu_fill(parts[p], &r, 1.0);
        views[p] = parts[p]->t;
        lps[p] = malloc(sizeof(float) * (size_t)rows);
        pd[p] = malloc(sizeof(double) * (size_t)(rows * d));
        ld[p] = malloc(sizeof(double) * (size_t)rows);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < S; i++) {
                    int64_t li = (b * H + h) * S + i;
                    float l = (float)(tu_unif(&r) * 20);
                    if (i == 3) l = -INFINITY;                  /* all parts -inf   */
                    if (i == 5 && p == 0) l = -INFINITY;        /* one part -inf    */
                    if (i == 7) l = (float)(80 + p);            /* large lse        */
                    lps[p][li] = l;
                    ld[p][(b * S + i) * H + h] = l;
                    for (int64_t c = 0; c < d; c++)
                        pd[p][((b * S + i) * H + h) * d + c] = tu_get(parts[p], b, i, h, c);
                }
        tu_snapshot(parts[p]);
    }
    double *o = calloc((size_t)(rows * d), 8), *ol = calloc((size_t)rows, 8);
    or_combine(n, rows, d, (const double *const *)pd, (const double *const *)ld, o, ol);
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        tu_buf *out = tu_buf_new(odt, B, S, H, d, TL_PADDED), *lse = tu_buf_flat(FA_F32, rows);
        tu_poison(out); tu_poison(lse); tu_snapshot(out); tu_snapshot(lse);
        float *lsep = (_i % 4 == 3) ? NULL : (float *)lse->t.data;
        if (!lsep) { memset(lse->must, 0, lse->nel); }
        fa_status st = fa_combine(ctx, &out->t, lsep, views, (const float *const *)lps, n);
        ck_assert_msg(st == FA_OK, "%s: fa_combine: %s", be, fa_last_error(ctx));
        char msg[512];
        ck_assert_msg(tu_check_written(out, "out", msg, sizeof msg), "%s: %s", be, msg);
        ck_assert_msg(tu_check_written(lse, "lse", msg, sizeof msg), "%s: %s", be, msg);
        for (int p = 0; p < n; p++)
            ck_assert_msg(tu_check_unchanged(parts[p], "out_parts[p]", msg, sizeof msg), "%s: %s", be, msg);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < S; i++)
                for (int64_t h = 0; h < H; h++) {
                    int64_t row = (b * S + i) * H + h, li = (b * H + h) * S + i;
                    double mag = 0;
                    for (int64_t c = 0; c < d; c++) if (fabs(o[row * d + c]) > mag) mag = fabs(o[row * d + c]);
                    for (int64_t c = 0; c < d; c++) {
                        double got = tu_get(out, b, i, h, c), want = o[row * d + c];
                        double tol = (mag + 1e-30) * (or_eps(odt) + 16 * 0x1p-23);
                        ck_assert_msg(fabs(got - want) <= tol && !isnan(got),
                                      "%s: combine n=%d (case %d) out[b=%lld,i=%lld,h=%lld,c=%lld] = %.9g, "
                                      "want %.9g", be, n, _i, (long long)b, (long long)i, (long long)h,
                                      (long long)c, got, want);
                        if (ol[row] == -INFINITY)
                            ck_assert_msg(got == 0.0, "%s: all-(-inf) row: out = %g, want 0", be, got);
                    }
                    if (lsep) {
                        double gl = lsep[li];
                        if (ol[row] == -INFINITY)
                            ck_assert_msg(gl == -INFINITY, "%s: all-(-inf) row: lse = %g", be, gl);
                        else
                            ck_assert_msg(fabs(gl - ol[row]) <= 8 * 0x1p-23 * fabs(ol[row]) + 1e-6,
                                          "%s: combine lse[%lld] = %.9g want %.9g", be, (long long)li,
                                          gl, ol[row]);
                    }
                }
        tu_buf_free(out); tu_buf_free(lse);
        fa_context_destroy(ctx);
    }
    for (int p = 0; p < n; p++) { tu_buf_free(parts[p]); free(lps[p]); free(pd[p]); free(ld[p]); }
    free(o); free(ol);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("combine");
    TCase *tc = tcase_create("test_combine_split");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_combine_split, 0, 14);
    suite_add_tcase(s, tc);
    tc = tcase_create("test_combine_direct");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_combine_direct, 0, 12);
    suite_add_tcase(s, tc);
    return tu_main(s);
}
