/* test_forward.c - fa_forward against the oracle on every backend under test.
 *
 * Default run: every feature of the API on a small base shape, every head dim, every
 * (Sq, Sk) pair of cases.h (one case each), fully masked rows, large logits, NaN
 * propagation, a few big shapes. FA_TEST_SLOW=1 adds the full cross product
 * (head dims x seq pairs x dtypes x causal) -- too slow for `make check` on a small machine
 * with the reference backend. FA_TEST_BIG=1 adds the > 2^31-element tensor test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "cases.h"
#include "dtype.h"

START_TEST(test_features)
{
    tu_case c = base_case("", 100 + (uint64_t)_i);
    ck_assert(feature_case(_i, &c));
    tu_run(&c);
}
END_TEST

START_TEST(test_head_dims)
{
    static const fa_dtype dts[3] = { FA_F16, FA_BF16, FA_F32 };
    tu_case c = base_case("head-dim", 200 + (uint64_t)_i);
    c.B = 1; c.H = 2; c.Hkv = 1; c.Sq = 67; c.Sk = 91;
    if (_i < N_HEAD_DIMS) { c.dqk = c.dv = HEAD_DIMS[_i]; }
    else { c.dqk = DQK_DV[_i - N_HEAD_DIMS][0]; c.dv = DQK_DV[_i - N_HEAD_DIMS][1]; }
    c.dt = c.odt = dts[_i % 3];
    c.causal = (_i & 1) ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    tu_run(&c);
}
END_TEST

START_TEST(test_seq_pairs)
{
    tu_case c = base_case("seq-pair", 300 + (uint64_t)_i);
    c.B = 1; c.H = 2; c.Hkv = 1; c.dqk = c.dv = 32;
    c.Sq = SEQ_PAIRS[_i][0]; c.Sk = SEQ_PAIRS[_i][1];
    if (c.Sq * c.Sk >= 1000000) { c.H = 1; }
    c.dt = c.odt = (_i & 1) ? FA_BF16 : FA_F16;
    c.causal = (fa_causal)(_i % 3);
    tu_run(&c);
    if (c.Sq * c.Sk < 300000) {           /* also fp32, non-causal */
        c.dt = c.odt = FA_F32; c.causal = FA_CAUSAL_NONE; c.seed += 1000;
        tu_run(&c);
    }
}
END_TEST

START_TEST(test_fully_masked_rows)
{
    tu_case c = base_case("fully-masked", 400);
    c.dt = c.odt = FA_F32;
    /* bottom-right causal with Sq > Sk: the first Sq - Sk rows see nothing */
    c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.Sq = 50; c.Sk = 20;
    tu_run(&c);
    c.sinks = 1; c.seed++; c.dt = c.odt = FA_BF16;
    tu_run(&c);
    /* a window that leaves some rows empty: top-left, left = right = 0, Sq > Sk */
    c = base_case("fully-masked-window", 402);
    c.causal = FA_CAUSAL_TOP_LEFT; c.window = 1; c.wl = 0; c.wr = 0; c.Sq = 40; c.Sk = 25;
    tu_run(&c);
    /* window in front of every key: non-causal, off = Sk - Sq < 0, right = 2 */
    c = base_case("fully-masked-window2", 403);
    c.window = 1; c.wl = 3; c.wr = 2; c.Sq = 60; c.Sk = 10;
    c.alibi = 1; c.softcap = 5.0f;
    tu_run(&c);
    /* Sk = 0: every row masked; with and without sinks */
    c = base_case("sk=0", 404);
    c.Sk = 0;
    tu_run(&c);
    c.sinks = 1; c.seed++;
    tu_run(&c);
}
END_TEST

START_TEST(test_large_logits)
{
    static const fa_dtype dts[3] = { FA_F32, FA_F16, FA_BF16 };
    tu_case c = base_case("large-logits", 500 + (uint64_t)_i);
    /* scale 1, |q|,|k| up to 30, d = 64: |s| reaches ~1e4 */
    c.scale = 1.0f; c.amp = 30.0; c.dt = c.odt = dts[_i % 3];
    c.causal = _i >= 3 ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    c.sinks = _i >= 3;
    tu_run(&c);
}
END_TEST

START_TEST(test_nan_propagation)
{
    /* NaN in one q row, one k row, one v element: NaN exactly where the oracle has it,
       every other element within tolerance (NaN inputs propagate, docs/api.md). */
    tu_case c = base_case("nan", 600 + (uint64_t)_i);
    c.dt = c.odt = FA_F32;
    c.nan_mode = 1 + _i % 3;
    c.causal = _i >= 3 ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    tu_run(&c);
}
END_TEST

START_TEST(test_no_lse)
{
    tu_case c = base_case("lse-null", 700);
    c.no_lse = 1; c.sinks = 1; c.causal = FA_CAUSAL_BOTTOM_RIGHT;
    tu_run(&c);
}
END_TEST

START_TEST(test_big_shapes)
{
    tu_case c = base_case("big", 800 + (uint64_t)_i);
    c.B = 1; c.H = 1; c.Hkv = 1;
    switch (_i) {
    case 0: c.Sq = c.Sk = 2048; c.dqk = c.dv = 128; c.causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 1: c.Sq = c.Sk = 512; c.dqk = c.dv = 256; c.dt = c.odt = FA_BF16; break;
    case 2: c.Sq = 1; c.Sk = 2048; c.dqk = c.dv = 256; c.H = 8; c.dt = c.odt = FA_F32; break;
    }
    tu_run(&c);
}
END_TEST

/* FA_TEST_SLOW=1: every head dim x every seq pair x {f16 causal-br, bf16 none, f32 tl}. */
START_TEST(test_slow_sweep)
{
    if (!tu_env_flag("FA_TEST_SLOW")) {
        if (_i == 0) tu_note("test_forward: slow sweep skipped: set FA_TEST_SLOW=1");
        return;
    }
    int nd = N_HEAD_DIMS + 2;
    int di = _i % nd, pi = _i / nd;
    static const fa_dtype dts[3] = { FA_F16, FA_BF16, FA_F32 };
    for (int v = 0; v < 3; v++) {
        tu_case c = base_case("slow-sweep", 10000 + (uint64_t)_i * 3 + (uint64_t)v);
        c.B = 1; c.H = 2; c.Hkv = 1;
        if (di < N_HEAD_DIMS) c.dqk = c.dv = HEAD_DIMS[di];
        else { c.dqk = DQK_DV[di - N_HEAD_DIMS][0]; c.dv = DQK_DV[di - N_HEAD_DIMS][1]; }
        c.Sq = SEQ_PAIRS[pi][0]; c.Sk = SEQ_PAIRS[pi][1];
        c.dt = c.odt = dts[v];
        c.causal = (fa_causal)((v + 1) % 3);
        tu_run(&c);
    }
}
END_TEST

/* FA_TEST_BIG=1: q and out with more than 2^31 elements (64-bit offsets). Checked on
   sampled rows (first, middle, last) against the oracle, plus guard words at the end. */
START_TEST(test_big_tensor)
{
    if (!tu_env_flag("FA_TEST_BIG")) {
        tu_note("test_forward: > 2^31-element test skipped: set FA_TEST_BIG=1");
        return;
    }
    const int64_t H = 8, d = 64, Sk = 5, Sq = ((int64_t)1 << 22) + 3;   /* 2^31 + 1536 elements */
    size_t nq = (size_t)(Sq * H * d);
    uint16_t *q = malloc(nq * 2 + 64), *out = malloc(nq * 2 + 64);
    uint16_t k[5 * 8 * 64], v[5 * 8 * 64];
    ck_assert(q && out);
    tu_rng r = { 4242 };
    for (size_t x = 0; x < nq; x++) q[x] = fa_f32_to_bf16((float)tu_unif(&r));
    for (int x = 0; x < 5 * 8 * 64; x++) { k[x] = fa_f32_to_bf16((float)tu_unif(&r)); v[x] = fa_f32_to_bf16((float)tu_unif(&r)); }
    for (size_t x = 0; x < nq + 32; x++) out[x] = 0x7fd5;
    fa_tensor tq = { q, FA_BF16, { 1, Sq, H, d }, { Sq * H * d, H * d, d, 1 } };
    fa_tensor tk = { k, FA_BF16, { 1, Sk, H, d }, { Sk * H * d, H * d, d, 1 } };
    fa_tensor tv = { v, FA_BF16, { 1, Sk, H, d }, { Sk * H * d, H * d, d, 1 } };
    fa_tensor to = { out, FA_BF16, { 1, Sq, H, d }, { Sq * H * d, H * d, d, 1 } };
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        fa_context *ctx = tu_ctx(bes[bi]);
        fa_status st = fa_forward(ctx, &to, NULL, &tq, &tk, &tv, NULL);
        ck_assert_msg(st == FA_OK, "%s: %s", tu_backend_name(bes[bi]), fa_last_error(ctx));
        for (int x = 0; x < 32; x++) ck_assert_msg(out[nq + (size_t)x] == 0x7fd5, "guard after out modified");
        int64_t rows[3] = { 0, Sq / 2, Sq - 1 };
        for (int ri = 0; ri < 3; ri++)
            for (int64_t h = 0; h < H; h++) {
                or_seq s;
                memset(&s, 0, sizeof s);
                s.sq = 1; s.sk = Sk; s.hq = 1; s.hkv = 1; s.dqk = d; s.dv = d;
                s.scale = 1.0 / 8.0;
                double dq_[64], dk_[5 * 64], dv_[5 * 64], o[64], l;
                for (int64_t c = 0; c < d; c++) dq_[c] = fa_bf16_to_f32(q[(size_t)((rows[ri] * H + h) * d + c)]);
                for (int64_t j = 0; j < Sk; j++)
                    for (int64_t c = 0; c < d; c++) {
                        dk_[j * d + c] = fa_bf16_to_f32(k[(j * H + h) * d + c]);
                        dv_[j * d + c] = fa_bf16_to_f32(v[(j * H + h) * d + c]);
                    }
                or_forward(&s, dq_, dk_, dv_, o, &l);
                for (int64_t c = 0; c < d; c++) {
                    double got = fa_bf16_to_f32(out[(size_t)((rows[ri] * H + h) * d + c)]);
                    ck_assert_msg(fabs(got - o[c]) <= 3 * 0x1p-8 * (1 + fabs(o[c])),
                                  "%s: big tensor row %lld head %lld col %lld: %g vs %g",
                                  tu_backend_name(bes[bi]), (long long)rows[ri], (long long)h,
                                  (long long)c, got, o[c]);
                }
            }
        fa_context_destroy(ctx);
    }
    free(q); free(out);
}
END_TEST

/* A case the fuzzer found, tiles and threads included: bf16 inputs, F32 out, dropout. The cpu backend multiplied keep_scale = 1/(1-p) into P before
   rounding P to bf16 for the P V product; the row maximum's P is exactly 1, so every row's
   dominant term carried the same rounding of keep_scale (0.3 % for p = 0.94; 16 of 60
   data seeds of this shape failed the rule, none since). A second input of that finding
   (Sk = 1) was a limit of the rule, not of the backend, like cases 1 and 2: inputs the
   rule itself failed when it had one naive model (few roundings of P in a row with few
   keys); they pass the bf16 P paths now (make check runs this suite under
   FA_CPU_AMX_EMULATE too, tests/amx_emulated.sh). */
static int regression_case(int i, tu_case *c)
{
    memset(c, 0, sizeof *c);
    c->wl = c->wr = -1; c->amp = 1.0; c->dt = FA_BF16; c->odt = FA_F32; c->threads = 2;
    switch (i) {
    case 0:
        c->tag = "dropout-0.94-keep-scale"; c->seed = 42354;
        c->B = 3; c->Sq = 4; c->Sk = 39; c->H = c->Hkv = 1; c->dqk = c->dv = 32;
        c->layout = TL_PADDED; c->causal = FA_CAUSAL_TOP_LEFT; c->alibi = 1;
        c->bias = TB_Q_STRIDE0; c->bias_dt = FA_BF16;
        c->dropout_p = 0.940476f; c->dseed = 65535; c->doffset = 255;
        c->tile_q = 64; c->tile_kv = 5;
        return 1;
    case 1:   /* six keys whose terms P_j v_j cancel (2% of |out| under the bf16 P V
                 paths, AMX and the bf16-dot set; the normalized naive model's six P
                 roundings gave 18x less): the flash-style naive model covers it */
        c->tag = "six-keys-cancel"; c->seed = 33913;
        c->B = 1; c->Sq = 1; c->Sk = 6; c->H = c->Hkv = 1; c->dqk = c->dv = 1;
        c->layout = TL_PADDED; c->causal = FA_CAUSAL_BOTTOM_RIGHT;
        c->window = 1; c->wl = 7; c->wr = 5; c->alibi = 1; c->sinks = 1;
        c->bias = TB_FULL; c->bias_dt = FA_BF16; c->deterministic = 1;
        c->tile_q = 5; c->threads = 1;
        return 1;
    case 2:   /* a row whose one key has P = 1, F32 out 2 ulps off where both naive
                 models are exact (bf16-dot set); out's floor for F32 of half inputs */
        c->tag = "f32-out-two-ulps"; c->seed = 288;
        c->B = 3; c->Sq = 23; c->Sk = 32; c->H = c->Hkv = 1; c->dqk = 32; c->dv = 3;
        c->layout = TL_PADDED; c->causal = FA_CAUSAL_BOTTOM_RIGHT;
        c->window = 1; c->wl = 0; c->wr = -1; c->scale = 0.5625f; c->sink_amp = 8;
        c->backward = 1; c->tile_q = 5;
        return 1;
    }
    return 0;
}

START_TEST(test_regressions)
{
    tu_case c;
    ck_assert(regression_case(_i, &c));
    tu_run(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("forward");
    TCase *tc;
    int nf = 0;
    { tu_case c; while (feature_case(nf, &c)) nf++; }
#define LOOP(fn, n, to) tc = tcase_create(#fn); tcase_set_timeout(tc, to); \
    tcase_add_loop_test(tc, fn, 0, n); suite_add_tcase(s, tc)
    LOOP(test_features, nf, 120);
    LOOP(test_head_dims, N_HEAD_DIMS + 2, 120);
    LOOP(test_seq_pairs, N_SEQ_PAIRS, 300);
    LOOP(test_large_logits, 6, 120);
    LOOP(test_nan_propagation, 6, 120);
    LOOP(test_big_shapes, 3, 300);
    LOOP(test_slow_sweep, (N_HEAD_DIMS + 2) * N_SEQ_PAIRS, 1200);
    int nr = 0;
    { tu_case c; while (regression_case(nr, &c)) nr++; }
    LOOP(test_regressions, nr, 60);
    TU_ADD(s, test_fully_masked_rows, 120);
    TU_ADD(s, test_no_lse, 60);
    TU_ADD(s, test_big_tensor, 1200);
    return tu_main(s);
}
