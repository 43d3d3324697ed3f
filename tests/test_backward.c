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

/* Cases the fuzzer found, replayed as decoded, tiles and threads included: dsinks held to
   3 x one sample of the naive's noise (bf16, bf16 inputs with F32 out, fp32); a gradient
   that is exactly 0, or that the naive gets exact, held to one ulp; a NaN key or query row
   reaching, through 0 * NaN, the gradients of rows or keys that cannot see it; dq and dk
   held to the fp32 noise of the terms of dP - D, not of a vanishing result; an fp32
   dsinks below the smallest subnormal. Cases 0, 3-6, 9 and 10 each fail without their fix
   (5 is the recorded input, 6 its query-side twin). Cases 1 and 2 are rebuilt from the
   dsinks finding's description (their bytes were not kept) and passed either way: they
   stay as coverage of varlen + sinks in bf16 -> F32 and in fp32. The fuzz_diff corpus
   (tests/fuzz/corpus/fuzz_diff/regress-*) holds the recorded inputs. */
static int regression_case(int i, tu_case *c)
{
    static const int64_t lq5b[1] = { 7 }, lk5b[1] = { 4 }, lq5c[1] = { 7 }, lk5c[1] = { 8 };
    static const int64_t lq12a[2] = { 6, 3 }, lk12a[2] = { 2, 4 };
    memset(c, 0, sizeof *c);
    c->backward = 1; c->wl = c->wr = -1; c->amp = 1.0;
    switch (i) {
    case 0:   /* dsinks' floor, fuzz_diff input sLaFIq1B... (corpus regress-dsinks-bf16) */
        c->tag = "dsinks-bf16"; c->seed = 50622;
        c->B = 3; c->Sq = 3; c->Sk = 5; c->H = c->Hkv = 3; c->dqk = 15; c->dv = 80;
        c->dt = c->odt = FA_BF16; c->layout = TL_PADDED; c->causal = FA_CAUSAL_BOTTOM_RIGHT;
        c->window = 1; c->wl = 3; c->wr = 0; c->sinks = 1; c->sink_amp = 8.0;
        c->bias = TB_BH_SHAPE1_PADDED; c->bias_dt = FA_BF16; c->deterministic = 1;
        c->dseed = 14137; c->doffset = 142; c->tile_kv = 17; c->threads = 1;
        return 1;
    case 1:   /* dsinks' floor, bf16 inputs, F32 out (recorded by its description) */
        c->tag = "dsinks-bf16-f32out"; c->seed = 57252; c->varlen = 1;
        c->B = 1; c->lq = lq5b; c->lk = lk5b; c->H = 2; c->Hkv = 1; c->dqk = 24; c->dv = 8;
        c->dt = FA_BF16; c->odt = FA_F32; c->causal = FA_CAUSAL_BOTTOM_RIGHT;
        c->softcap = 8.75f; c->sinks = 1; c->tile_q = 1; c->tile_kv = 64; c->threads = 2;
        return 1;
    case 2:   /* dsinks' floor, fp32 (recorded by its description) */
        c->tag = "dsinks-f32"; c->seed = 27575; c->varlen = 1;
        c->B = 1; c->lq = lq5c; c->lk = lk5c; c->H = c->Hkv = 1; c->dqk = 7; c->dv = 15;
        c->dt = c->odt = FA_F32; c->causal = FA_CAUSAL_TOP_LEFT;
        c->window = 1; c->wl = 1; c->wr = 2; c->alibi = 1; c->sinks = 1; c->tile_q = 5;
        return 1;
    case 3:   /* a gradient exactly 0, fuzz_diff input b3QgZHUg... (corpus regress-zero-dq) */
        c->tag = "zero-dq"; c->seed = 27753; c->varlen = 1;
        c->B = 2; c->lq = lq12a; c->lk = lk12a; c->max_slack = 2; c->H = c->Hkv = 1;
        c->dqk = 31; c->dv = 16; c->dt = c->odt = FA_F32; c->layout = TL_TRANSPOSED;
        c->causal = FA_CAUSAL_TOP_LEFT; c->window = 1; c->wl = 0; c->wr = 2;
        c->scale = -1.3125f; c->alibi = 1; c->sink_amp = 8.0; c->dseed = 46345; c->doffset = 10;
        c->tile_q = 2; c->tile_kv = 1; c->threads = 1;
        return 1;
    case 4:   /* a dv the naive gets exact, fuzz_diff input NeTerP7H... (corpus
                 regress-exact-naive-dv) */
        c->tag = "exact-naive-dv"; c->seed = 24539;
        c->B = 3; c->Sq = 23; c->Sk = 32; c->H = c->Hkv = 1; c->dqk = 32; c->dv = 3;
        c->dt = FA_BF16; c->odt = FA_F32; c->layout = TL_PADDED;
        c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->window = 1; c->wl = 0; c->wr = 7; c->alibi = 1;
        c->bias = TB_B_STRIDE0; c->bias_dt = FA_BF16; c->sink_amp = 8.0;
        c->dseed = 29984; c->doffset = 85; c->tile_q = 8; c->threads = 2;
        return 1;
    case 5: { /* NaN in a key row, found once fuzz_diff stopped skipping NaN in fully
                 masked rows (corpus regress-nan-key):
                 rows of a partly masked tile that cannot see the key got dq = NaN */
        static const int64_t lq[2] = { 20, 5 }, lk[2] = { 2, 1 };
        c->tag = "nan-key-row"; c->seed = 27067; c->varlen = 1;
        c->B = 2; c->lq = lq; c->lk = lk; c->H = 2; c->Hkv = 1; c->dqk = c->dv = 15;
        c->dt = c->odt = FA_F16; c->layout = TL_PADDED; c->causal = FA_CAUSAL_BOTTOM_RIGHT;
        c->wl = 6; c->wr = 0; c->scale = 0.4375f; c->bias_dt = FA_BF16; c->deterministic = 1;
        c->dseed = 62569; c->doffset = 210; c->nan_mode = TN_K_ROW; c->tile_q = 3;
        c->threads = 1;
        return 1;
    }
    case 7:   /* an exact-0 dq again, found when the gradient floor was 4 fp32 ulps: window
                 (0, 0), so every dq is exactly 0, with d_v = 31 and scale -1.4375: 5.7 fp32
                 ulps of gref (corpus regress-zero-dq-dv31) */
        c->tag = "zero-dq-dv31"; c->seed = 8362;
        c->B = 1; c->Sq = 17; c->Sk = 17; c->H = c->Hkv = 2; c->dqk = 96; c->dv = 31;
        c->dt = c->odt = FA_F32; c->layout = TL_PADDED; c->causal = FA_CAUSAL_TOP_LEFT;
        c->window = 1; c->wl = 0; c->wr = 0; c->scale = -1.4375f; c->bias = TB_BH_SHAPE1_PADDED;
        c->bias_dt = FA_F32; c->dseed = 59870; c->doffset = 110; c->nan_mode = TN_Q_ROW;
        c->tile_q = 32; c->threads = 2;
        return 1;
    case 8:   /* dsinks' floor again: fp32, sinks up to 8, softcap, dropout, d_v = 1: psink =
                 exp(sink - lse) carries fp32 eps x (|sink| + |lse|) of relative error
                 (corpus regress-dsinks-f32-lse) */
        c->tag = "dsinks-f32-lse"; c->seed = 41611;
        c->B = 3; c->Sq = 17; c->Sk = 17; c->H = c->Hkv = 1; c->dqk = 1; c->dv = 1;
        c->dt = c->odt = FA_F32; c->window = 1; c->wl = 2; c->wr = 2; c->scale = 1.9375f;
        c->softcap = 27.75f; c->alibi = 1; c->sinks = 1; c->sink_amp = 8.0;
        c->bias = TB_FULL; c->bias_dt = FA_F32;
        c->dropout_p = 0.916667f; c->dseed = 46662; c->doffset = 241; c->tile_q = 8; c->threads = 1;
        return 1;
    case 9: { /* fuzz_diff input 5PDw8PDw... (corpus regress-dq-term-floor-large-logits):
                 logits up to ~1e4, so every finite row's softmax is one key and dq ~ 1e-20,
                 while the cpu's dq carries the fp32 roundoff of dP - D (~2.8e-5); the NaN
                 query row 10 makes every dk and dv NaN, so nothing larger sets gref */
        static const int64_t lq[1] = { 20 }, lk[1] = { 20 };
        c->tag = "dq-term-floor-large-logits"; c->seed = 61680; c->varlen = 1;
        c->B = 1; c->lq = lq; c->lk = lk; c->H = c->Hkv = 1; c->dqk = 17; c->dv = 59;
        c->dt = c->odt = FA_F32; c->wl = 5; c->wr = 5; c->scale = 1.0f; c->sinks = 1;
        c->bias_dt = FA_F16; c->dseed = 61566; c->doffset = 240; c->amp = 30.0;
        c->deterministic = 1; c->nan_mode = TN_Q_ROW; c->tile_q = 1; c->tile_kv = 1;
        c->threads = 1;
        return 1;
    }
    case 10:  /* fuzz_diff input PwAAAPX/... (corpus regress-dsinks-underflow): the sink ~1e4
                 below the logits, dsinks ~1e-46, under half the smallest fp32 subnormal:
                 the stored result is 0 */
        c->tag = "dsinks-underflow"; c->seed = 209;
        c->B = 3; c->Sq = 17; c->Sk = 17; c->H = c->Hkv = 1; c->dqk = 1; c->dv = 1;
        c->dt = c->odt = FA_F32; c->window = 1; c->wl = 2; c->wr = 2; c->scale = 1.3125f;
        c->alibi = 1; c->sinks = 1; c->sink_amp = 8.0; c->bias = TB_FULL; c->bias_dt = FA_F32;
        c->dropout_p = 79.0f / 84.0f; c->dseed = 65535; c->doffset = 255; c->amp = 30.0;
        c->threads = 1;
        return 1;
    case 6:   /* the same for a NaN query row that sees some keys of a tile but not all:
                 dk of the keys it cannot see must stay finite */
        c->tag = "nan-query-row"; c->seed = 2714;
        c->B = 1; c->Sq = 6; c->Sk = 6; c->H = c->Hkv = 1; c->dqk = c->dv = 8;
        c->dt = c->odt = FA_F32; c->causal = FA_CAUSAL_TOP_LEFT; c->nan_mode = TN_Q_ROW;
        return 1;
    case 11:  /* cases 5, 6 and a NaN in V in bf16: with AMX (or FA_CPU_AMX_EMULATE) a
                 partly masked pair with non-finite data leaves the tiles for the fp32
                 kernels, whose transposed Q-side operands are made on demand */
        c->tag = "amx-select-nan-query-row-bf16"; c->seed = 3121;
        c->B = 1; c->Sq = 37; c->Sk = 37; c->H = c->Hkv = 1; c->dqk = c->dv = 40;
        c->dt = c->odt = FA_BF16; c->causal = FA_CAUSAL_TOP_LEFT; c->nan_mode = TN_Q_ROW;
        c->tile_q = 16; c->tile_kv = 16;
        return 1;
    case 12: {
        static const int64_t lq[2] = { 20, 5 }, lk[2] = { 2, 1 };
        c->tag = "amx-select-nan-key-row-bf16"; c->seed = 27067; c->varlen = 1;
        c->B = 2; c->lq = lq; c->lk = lk; c->H = 2; c->Hkv = 1; c->dqk = c->dv = 15;
        c->dt = c->odt = FA_BF16; c->layout = TL_PADDED; c->causal = FA_CAUSAL_BOTTOM_RIGHT;
        c->wl = 6; c->wr = 0; c->nan_mode = TN_K_ROW; c->tile_q = 3; c->threads = 1;
        return 1;
    }
    case 13:
        c->tag = "amx-select-nan-v-bf16"; c->seed = 9241;
        c->B = 2; c->Sq = 45; c->Sk = 61; c->H = 4; c->Hkv = 2; c->dqk = 64; c->dv = 48;
        c->dt = c->odt = FA_BF16; c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->nan_mode = TN_V_ELEM;
        c->tile_q = 32; c->tile_kv = 32; c->threads = 2;
        return 1;
    case 14:  /* the same with 4 KV chunks per head: the Q side is the shared pack, which the
                 fp32 fallback must not write (it transposes into its thread's own block) */
        c->tag = "amx-select-nan-v-bf16-shared-pack"; c->seed = 9242;
        c->B = 2; c->Sq = 45; c->Sk = 61; c->H = 4; c->Hkv = 2; c->dqk = 64; c->dv = 48;
        c->dt = c->odt = FA_BF16; c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->nan_mode = TN_V_ELEM;
        c->tile_q = 16; c->tile_kv = 16; c->threads = 2;
        return 1;
    case 15:  /* fuzz_diff input NeTerP7HfvfbX2gf... (corpus regress-fp32-ds-one-key): one
                 visible key per row beside the sink, so dS = P (dP - D) carries out's bf16
                 rounding of exp(s - sink) at 2e-3; the naive model that rounds dS to bf16
                 happened to round it back toward the oracle, and the CPU's fp32 dS was 8x
                 its error until the fp32-operand model joined the naive ones */
        c->tag = "fp32-ds-one-key"; c->seed = 52548;
        c->B = 3; c->Sq = 23; c->Sk = 1; c->H = c->Hkv = 1; c->dqk = 32; c->dv = 3;
        c->dt = FA_BF16; c->odt = FA_F32; c->layout = TL_PADDED;
        c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->window = 1; c->wl = 2; c->wr = 4; c->alibi = 1;
        c->sinks = 1; c->sink_amp = 8.0; c->bias = TB_B_STRIDE0; c->bias_dt = FA_F16;
        c->dseed = 32421; c->doffset = 247; c->tile_q = 3; c->threads = 1;
        return 1;
    }
    return 0;
}

START_TEST(test_bwd_regressions)
{
    tu_case c;
    ck_assert(regression_case(_i, &c));
    tu_run(&c);
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
    int nr = 0;
    { tu_case c; while (regression_case(nr, &c)) nr++; }
    LOOP(test_bwd_regressions, nr, 60);
    return tu_main(s);
}
