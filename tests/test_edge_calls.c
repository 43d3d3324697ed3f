/* test_edge_calls.c - valid calls at the edges of what validation lets through: empty
 * problems, no query heads, zero-size views, stride-0 inputs, and dimensions so large that
 * only a closed-form count or an early return can answer them. Each must succeed (FA_OK)
 * with the documented result, on every backend under test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Valid calls at the edges of what validation lets through: no query heads with KV heads
   (0 % Hkv == 0: an empty problem, as docs/api.md defines it), and inputs with stride 0 on an
   extent > 1 (inputs may alias themselves; only outputs may not). */
START_TEST(test_edge_valid_calls)
{
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        float q[64], k[80], v[80], o[64], dq[64], dk[80], dv[80], dout[64], lse[64];
        for (int i = 0; i < 80; i++) { k[i] = 0.01f * (float)i; v[i] = 1.0f - 0.02f * (float)i; dk[i] = dv[i] = NAN; }
        for (int i = 0; i < 64; i++) { q[i] = 0.03f * (float)(i % 7); dout[i] = 0.5f; o[i] = dq[i] = lse[i] = NAN; }
        /* H = 0, Hkv = 2: q/out [1, 3, 0, 8], k/v [1, 5, 2, 8] */
        fa_tensor tq = fa_tensor_contiguous(q, FA_F32, 1, 3, 0, 8), to = fa_tensor_contiguous(o, FA_F32, 1, 3, 0, 8);
        fa_tensor tk = fa_tensor_contiguous(k, FA_F32, 1, 5, 2, 8), tv = fa_tensor_contiguous(v, FA_F32, 1, 5, 2, 8);
        fa_status st = fa_forward(ctx, &to, lse, &tq, &tk, &tv, NULL);
        ck_assert_msg(st == FA_OK, "%s: forward with H=0, Hkv=2: %d %s", be, (int)st, fa_last_error(ctx));
        fa_tensor tdq = fa_tensor_contiguous(dq, FA_F32, 1, 3, 0, 8), tdo = fa_tensor_contiguous(dout, FA_F32, 1, 3, 0, 8);
        fa_tensor tdk = fa_tensor_contiguous(dk, FA_F32, 1, 5, 2, 8), tdv = fa_tensor_contiguous(dv, FA_F32, 1, 5, 2, 8);
        st = fa_backward(ctx, &tdq, &tdk, &tdv, NULL, &tdo, &tq, &tk, &tv, &to, lse, NULL);
        ck_assert_msg(st == FA_OK, "%s: backward with H=0, Hkv=2: %d %s", be, (int)st, fa_last_error(ctx));
        for (int i = 0; i < 80; i++)   /* no query reads any key: dk = dv = 0 */
            ck_assert_msg(dk[i] == 0.0f && dv[i] == 0.0f, "%s: H=0: dk/dv[%d] = %g/%g, want 0", be, i, dk[i], dv[i]);
        /* Views with a zero-size dimension from fa_tensor_contiguous: S = 0 gives
           stride[0] = 0 with shape[0] = 2, which is no aliasing (no element exists, so
           no output element is written twice). Sq = 0: out, dq, dout; Sk = 0: k, v, dk, dv. */
        for (int side = 0; side < 2; side++) {
            const int64_t sq = side == 0 ? 0 : 3, sk = side == 0 ? 5 : 0;
            float dk2[160], dv2[160], lse2[16];
            for (int i = 0; i < 160; i++) dk2[i] = dv2[i] = NAN;
            for (int i = 0; i < 64; i++) o[i] = dq[i] = NAN;
            for (int i = 0; i < 16; i++) lse2[i] = NAN;
            fa_tensor zq = fa_tensor_contiguous(q, FA_F32, 2, sq, 1, 8), zo = fa_tensor_contiguous(o, FA_F32, 2, sq, 1, 8);
            fa_tensor zk = fa_tensor_contiguous(k, FA_F32, 2, sk, 1, 8), zv = fa_tensor_contiguous(v, FA_F32, 2, sk, 1, 8);
            fa_tensor zdq = fa_tensor_contiguous(dq, FA_F32, 2, sq, 1, 8), zdo = fa_tensor_contiguous(dout, FA_F32, 2, sq, 1, 8);
            fa_tensor zdk = fa_tensor_contiguous(dk2, FA_F32, 2, sk, 1, 8), zdv = fa_tensor_contiguous(dv2, FA_F32, 2, sk, 1, 8);
            ck_assert(side == 0 ? zo.stride[0] == 0 : zdk.stride[0] == 0);
            st = fa_forward(ctx, &zo, lse2, &zq, &zk, &zv, NULL);
            ck_assert_msg(st == FA_OK, "%s: forward with %s = 0 views (stride[0] = 0): %d %s", be,
                          side == 0 ? "Sq" : "Sk", (int)st, fa_last_error(ctx));
            for (int i = 0; i < 2 * 3 && side == 1; i++)   /* Sk = 0: out = 0, lse = -inf */
                ck_assert_msg(lse2[i] == -INFINITY && o[i * 8] == 0.0f, "%s: Sk = 0: lse[%d] = %g, out = %g",
                              be, i, lse2[i], o[i * 8]);
            st = fa_backward(ctx, &zdq, &zdk, &zdv, NULL, &zdo, &zq, &zk, &zv, &zo, lse2, NULL);
            ck_assert_msg(st == FA_OK, "%s: backward with %s = 0 views (stride[0] = 0): %d %s", be,
                          side == 0 ? "Sq" : "Sk", (int)st, fa_last_error(ctx));
            for (int i = 0; i < 2 * 5 * 8 && side == 0; i++)   /* Sq = 0: dk = dv = 0 */
                ck_assert_msg(dk2[i] == 0.0f && dv2[i] == 0.0f, "%s: Sq = 0: dk/dv[%d] = %g/%g, want 0",
                              be, i, dk2[i], dv2[i]);
            for (int i = 0; i < 2 * 3 * 8 && side == 1; i++)   /* Sk = 0: dq = 0 */
                ck_assert_msg(dq[i] == 0.0f, "%s: Sk = 0: dq[%d] = %g, want 0", be, i, dq[i]);
        }
        /* k and v with stride 0 on the sequence: every key the same row, out = v row 0 */
        tq = fa_tensor_contiguous(q, FA_F32, 1, 3, 2, 8); to = fa_tensor_contiguous(o, FA_F32, 1, 3, 2, 8);
        tk = fa_tensor_contiguous(k, FA_F32, 1, 5, 2, 8); tv = fa_tensor_contiguous(v, FA_F32, 1, 5, 2, 8);
        tk.stride[1] = tv.stride[1] = 0;
        st = fa_forward(ctx, &to, lse, &tq, &tk, &tv, NULL);
        ck_assert_msg(st == FA_OK, "%s: forward with k/v stride[1] = 0: %d %s", be, (int)st, fa_last_error(ctx));
        for (int s = 0; s < 3; s++)
            for (int h = 0; h < 2; h++)
                for (int d = 0; d < 8; d++)
                    ck_assert_msg(fabsf(o[(s * 2 + h) * 8 + d] - v[h * 8 + d]) < 1e-6f,
                                  "%s: stride-0 keys: out[%d,%d,%d] = %g, want %g", be, s, h, d,
                                  o[(s * 2 + h) * 8 + d], v[h * 8 + d]);
        fa_context_destroy(ctx);
    }
}
END_TEST

/* Valid calls whose dimensions are huge but whose data is never read, found by fuzz_args
   (its corpus keeps the inputs: tests/fuzz/corpus/fuzz_args/regress-*). Each must answer
   FA_OK at once, with no undefined behaviour (the sanitizer build aborts on an int64
   overflow) and no runaway loop (the test's timeout):
   - B = 0 with d_qk = 2^40: an empty problem, no scratch sized from the head dims
     (forward and backward).
   - fa_query on q/out [2^31, 2^20, 4, 8]: the Q-block count in closed form; and
     q [2^62, 0, 1, 8] (Sq = 0): no walk over the batch (fa_query and fa_forward).
   - fa_query and an empty forward with d_qk + d_v near 2^62 (the tile formula).
   - a backward with 2^40 query heads, Sq = 0, and real keys (dk = dv = 0).
   - an empty query side against k/v [1, 2^62, 1, 1] (stride 0, a few bytes), and
     fa_forward_varlen with max_seqlen_q/k = 2^62 (valid upper bounds): the same numbers
     as with tight bounds. */
START_TEST(test_huge_valid_dims)
{
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        float dummy[64] = { 0 };
        float lse[16], dsinks[4] = { NAN, NAN, NAN, NAN }, sinks[4] = { 0.5f, -1.0f, 2.0f, 0.0f };
        const char *name = NULL;
        fa_status st;

        /* q/k [0, 4, 1, 2^40], v/out [0, 4, 1, 1] */
        fa_tensor q = fa_tensor_contiguous(dummy, FA_F32, 0, 4, 1, (int64_t)1 << 40);
        fa_tensor k = q;
        fa_tensor v = fa_tensor_contiguous(dummy, FA_F32, 0, 4, 1, 1), out = v;
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL);
        ck_assert_msg(st == FA_OK, "%s: forward B=0 d=2^40: %d %s", be, (int)st, fa_last_error(ctx));
        fa_tensor dq = q, dk = k, dvv = v, dout = v;
        fa_options opt;
        memset(&opt, 0, sizeof opt);
        opt.sinks = sinks;
        st = fa_backward(ctx, &dq, &dk, &dvv, dsinks, &dout, &q, &k, &v, &out, lse, &opt);
        ck_assert_msg(st == FA_OK, "%s: backward B=0 d=2^40: %d %s", be, (int)st, fa_last_error(ctx));
        ck_assert_msg(dsinks[0] == 0.0f, "%s: backward B=0: dsinks[0] = %g, want 0", be, dsinks[0]);

        /* fa_query on [2^31, 2^20, 4, 8] (data not read) */
        q = fa_tensor_contiguous(NULL, FA_F32, (int64_t)1 << 31, (int64_t)1 << 20, 4, 8);
        k = v = out = q;
        st = fa_query(ctx, &name, &out, NULL, &q, &k, &v, NULL);
        ck_assert_msg(st == FA_OK && name, "%s: fa_query [2^31, 2^20, 4, 8]: %d %s", be, (int)st,
                      fa_last_error(ctx));
        /* Sq = 0 with a batch of 2^62 */
        q = fa_tensor_contiguous(dummy, FA_F32, (int64_t)1 << 62, 0, 1, 8);
        k = v = out = q;
        st = fa_query(ctx, &name, &out, NULL, &q, &k, &v, NULL);
        ck_assert_msg(st == FA_OK, "%s: fa_query [2^62, 0, 1, 8]: %d %s", be, (int)st, fa_last_error(ctx));
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL);
        ck_assert_msg(st == FA_OK, "%s: forward [2^62, 0, 1, 8]: %d %s", be, (int)st, fa_last_error(ctx));

        /* head dims near 2^62 (d_qk + d_v overflows nothing in the library) */
        const int64_t big = ((int64_t)1 << 62) - 3;
        q = fa_tensor_contiguous(dummy, FA_F32, 0, 2, 1, big);
        k = q;
        v = fa_tensor_contiguous(dummy, FA_F32, 0, 2, 1, big + 1);
        out = v;
        st = fa_query(ctx, &name, &out, NULL, &q, &k, &v, NULL);
        ck_assert_msg(st == FA_OK, "%s: fa_query d ~ 2^62: %d %s", be, (int)st, fa_last_error(ctx));
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL);
        ck_assert_msg(st == FA_OK, "%s: forward B=0 d ~ 2^62: %d %s", be, (int)st, fa_last_error(ctx));

        /* the backward with 2^40 query heads but Sq = 0, against 3 real keys: dk = dv
           = 0, nothing sized or walked by the query heads */
        {
            float kk[24], vv2[24], dk3[24], dv3[24];
            for (int i = 0; i < 24; i++) { kk[i] = 0.1f * (float)i; vv2[i] = -0.05f * (float)i; dk3[i] = dv3[i] = NAN; }
            fa_tensor hq = fa_tensor_contiguous(dummy, FA_F32, 1, 0, (int64_t)1 << 40, 8);
            fa_tensor tk3 = fa_tensor_contiguous(kk, FA_F32, 1, 3, 1, 8), tv3 = fa_tensor_contiguous(vv2, FA_F32, 1, 3, 1, 8);
            fa_tensor tdk3 = fa_tensor_contiguous(dk3, FA_F32, 1, 3, 1, 8), tdv3 = fa_tensor_contiguous(dv3, FA_F32, 1, 3, 1, 8);
            st = fa_backward(ctx, &hq, &tdk3, &tdv3, NULL, &hq, &hq, &tk3, &tv3, &hq, lse, NULL);
            ck_assert_msg(st == FA_OK, "%s: backward H=2^40, Sq=0: %d %s", be, (int)st, fa_last_error(ctx));
            for (int i = 0; i < 24; i++)
                ck_assert_msg(dk3[i] == 0.0f && dv3[i] == 0.0f, "%s: dk/dv[%d] = %g/%g, want 0", be,
                              i, dk3[i], dv3[i]);
        }

        /* no query row against k/v [1, 2^62, 1, 1] of stride 0 */
        q = fa_tensor_contiguous(dummy, FA_F32, 1, 0, 1, 1);
        out = q;
        k = fa_tensor_contiguous(dummy, FA_F32, 1, (int64_t)1 << 62, 1, 1);
        k.stride[0] = k.stride[1] = 0;
        v = k;
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL);
        ck_assert_msg(st == FA_OK, "%s: forward Sq=0, Sk=2^62 (stride 0): %d %s", be, (int)st,
                      fa_last_error(ctx));
        /* varlen, two sequences (2 + 1 queries, 3 + 2 keys), bounds 2^62 vs tight */
        float qv[3 * 2 * 8], kv[5 * 1 * 8], vv[5 * 1 * 8], o1[3 * 2 * 8], o2[3 * 2 * 8];
        float l1[2 * 3], l2[2 * 3];
        for (int i = 0; i < 48; i++) qv[i] = 0.1f * (float)(i % 11) - 0.4f;
        for (int i = 0; i < 40; i++) { kv[i] = 0.07f * (float)(i % 13) - 0.3f; vv[i] = 0.05f * (float)(i % 9) - 0.2f; }
        int32_t cuq[3] = { 0, 2, 3 }, cuk[3] = { 0, 3, 5 };
        fa_tensor tq = fa_tensor_contiguous(qv, FA_F32, 1, 3, 2, 8);
        fa_tensor tk = fa_tensor_contiguous(kv, FA_F32, 1, 5, 1, 8);
        fa_tensor tv = fa_tensor_contiguous(vv, FA_F32, 1, 5, 1, 8);
        fa_tensor to1 = fa_tensor_contiguous(o1, FA_F32, 1, 3, 2, 8);
        fa_tensor to2 = fa_tensor_contiguous(o2, FA_F32, 1, 3, 2, 8);
        memset(&opt, 0, sizeof opt);
        opt.causal = FA_CAUSAL_BOTTOM_RIGHT;
        st = fa_forward_varlen(ctx, &to1, l1, &tq, &tk, &tv, cuq, cuk, 2, 2, 3, &opt);
        ck_assert_msg(st == FA_OK, "%s: varlen tight bounds: %d %s", be, (int)st, fa_last_error(ctx));
        st = fa_forward_varlen(ctx, &to2, l2, &tq, &tk, &tv, cuq, cuk, 2, (int64_t)1 << 62,
                               (int64_t)1 << 62, &opt);
        ck_assert_msg(st == FA_OK, "%s: varlen max_seqlen_q/k = 2^62: %d %s", be, (int)st,
                      fa_last_error(ctx));
        for (int i = 0; i < 48; i++)
            ck_assert_msg(fabsf(o1[i] - o2[i]) <= 1e-6f, "%s: varlen out[%d] %.9g vs %.9g", be,
                          i, o1[i], o2[i]);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(fabsf(l1[i] - l2[i]) <= 1e-6f, "%s: varlen lse[%d] %.9g vs %.9g", be,
                          i, l1[i], l2[i]);
        fa_context_destroy(ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("edge_calls");
    TU_ADD(s, test_edge_valid_calls, 30);
    TU_ADD(s, test_huge_valid_dims, 30);
    return tu_main(s);
}
