/* test_backward.c - fa_backward (dq, dk, dv, dsinks) against the oracle's textbook
 * gradients on every backend under test. Each case first runs the backend's own forward
 * (checked too), then the backward with that out and lse.
 *
 * Default run: every feature on a small base shape, every head dim, every (Sq, Sk) pair,
 * fully masked rows, large logits, deterministic mode. FA_TEST_SLOW=1 adds the full cross
 * product (head dims x seq pairs x dtypes x causal).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "cases.h"

START_TEST(test_bwd_features)
{
    tu_case c = base_case("", 2100 + (uint64_t)_i);
    ck_assert(feature_case(_i, &c));
    c.backward = 1;
    c.deterministic = _i & 1;
    tu_run(&c);
}
END_TEST

START_TEST(test_bwd_head_dims)
{
    static const fa_dtype dts[3] = { FA_BF16, FA_F32, FA_F16 };
    tu_case c = base_case("bwd-head-dim", 2200 + (uint64_t)_i);
    c.B = 1; c.H = 2; c.Hkv = 1; c.Sq = 45; c.Sk = 71; c.backward = 1;
    if (_i < N_HEAD_DIMS) { c.dqk = c.dv = HEAD_DIMS[_i]; }
    else { c.dqk = DQK_DV[_i - N_HEAD_DIMS][0]; c.dv = DQK_DV[_i - N_HEAD_DIMS][1]; }
    c.dt = c.odt = dts[_i % 3];
    c.causal = (_i & 1) ? FA_CAUSAL_NONE : FA_CAUSAL_BOTTOM_RIGHT;
    c.sinks = _i % 4 == 1;
    tu_run(&c);
}
END_TEST

START_TEST(test_bwd_seq_pairs)
{
    tu_case c = base_case("bwd-seq-pair", 2300 + (uint64_t)_i);
    c.B = 1; c.H = 1; c.Hkv = 1; c.dqk = c.dv = 32; c.backward = 1;
    c.Sq = SEQ_PAIRS[_i][0]; c.Sk = SEQ_PAIRS[_i][1];
    if (c.Sq * c.Sk >= 1000000) c.dqk = c.dv = 16;
    c.dt = c.odt = (_i & 1) ? FA_F16 : FA_BF16;
    c.causal = (fa_causal)((_i + 1) % 3);
    tu_run(&c);
    if (c.Sq * c.Sk < 300000) {
        c.dt = c.odt = FA_F32; c.seed += 1000; c.causal = FA_CAUSAL_NONE; c.H = 2;
        tu_run(&c);
    }
}
END_TEST

START_TEST(test_bwd_fully_masked)
{
    tu_case c = base_case("bwd-fully-masked", 2400 + (uint64_t)_i);
    c.backward = 1;
    switch (_i) {
    case 0: c.dt = c.odt = FA_F32; c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.Sq = 50; c.Sk = 20; break;
    case 1: c.dt = c.odt = FA_F32; c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.Sq = 50; c.Sk = 20; c.sinks = 1; break;
    case 2: c.tag = "bwd-fully-masked-window"; c.window = 1; c.wl = 2; c.wr = 1; c.Sq = 60; c.Sk = 12; c.sinks = 1; break;
    case 3: c.tag = "bwd-sk=0"; c.Sk = 0; c.sinks = 1; break;
    case 4: c.tag = "bwd-sq=0"; c.Sq = 0; c.sinks = 1; break;
    }
    tu_run(&c);
}
END_TEST

START_TEST(test_bwd_large_logits)
{
    static const fa_dtype dts[3] = { FA_F32, FA_BF16, FA_F16 };
    tu_case c = base_case("bwd-large-logits", 2500 + (uint64_t)_i);
    c.backward = 1; c.scale = 1.0f; c.amp = 30.0; c.dt = c.odt = dts[_i];
    c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.sinks = 1;
    tu_run(&c);
}
END_TEST

START_TEST(test_bwd_big_shapes)
{
    tu_case c = base_case("bwd-big", 2600 + (uint64_t)_i);
    c.B = 1; c.H = 1; c.Hkv = 1; c.backward = 1;
    switch (_i) {
    case 0: c.Sq = c.Sk = 512; c.dqk = c.dv = 256; c.causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 1: c.Sq = 256; c.Sk = 700; c.dqk = 192; c.dv = 128; c.dt = c.odt = FA_BF16; c.sinks = 1; break;
    }
    tu_run(&c);
}
END_TEST

START_TEST(test_bwd_slow_sweep)
{
    if (!tu_env_flag("FA_TEST_SLOW")) {
        if (_i == 0) tu_note("test_backward: slow sweep skipped: set FA_TEST_SLOW=1");
        return;
    }
    int nd = N_HEAD_DIMS + 2;
    int di = _i % nd, pi = _i / nd;
    static const fa_dtype dts[3] = { FA_F16, FA_BF16, FA_F32 };
    for (int v = 0; v < 3; v++) {
        tu_case c = base_case("bwd-slow-sweep", 20000 + (uint64_t)_i * 3 + (uint64_t)v);
        c.B = 1; c.H = 2; c.Hkv = 1; c.backward = 1; c.sinks = v == 2;
        if (di < N_HEAD_DIMS) c.dqk = c.dv = HEAD_DIMS[di];
        else { c.dqk = DQK_DV[di - N_HEAD_DIMS][0]; c.dv = DQK_DV[di - N_HEAD_DIMS][1]; }
        c.Sq = SEQ_PAIRS[pi][0]; c.Sk = SEQ_PAIRS[pi][1];
        c.dt = c.odt = dts[v];
        c.causal = (fa_causal)((v + 2) % 3);
        tu_run(&c);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("backward");
    TCase *tc;
    int nf = 0;
    { tu_case c; while (feature_case(nf, &c)) nf++; }
#define LOOP(fn, n, to) tc = tcase_create(#fn); tcase_set_timeout(tc, to); \
    tcase_add_loop_test(tc, fn, 0, n); suite_add_tcase(s, tc)
    LOOP(test_bwd_features, nf, 120);
    LOOP(test_bwd_head_dims, N_HEAD_DIMS + 2, 120);
    LOOP(test_bwd_seq_pairs, N_SEQ_PAIRS, 300);
    LOOP(test_bwd_large_logits, 3, 120);
    LOOP(test_bwd_big_shapes, 2, 300);
    LOOP(test_bwd_slow_sweep, (N_HEAD_DIMS + 2) * N_SEQ_PAIRS, 1200);
    LOOP(test_bwd_fully_masked, 5, 120);
    return tu_main(s);
}
