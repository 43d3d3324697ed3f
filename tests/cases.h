/* cases.h - the head dims, (Sq, Sk) pairs and feature variants the forward and backward
 * sweeps run, shared by test_forward.c and test_backward.c (each includes it once). */
#ifndef FA_TEST_CASES_H
#define FA_TEST_CASES_H

#include "testutil.h"

static const int64_t HEAD_DIMS[] = { 1, 8, 32, 59, 64, 80, 96, 111, 128, 192, 256 };
#define N_HEAD_DIMS ((int)(sizeof HEAD_DIMS / sizeof HEAD_DIMS[0]))
static const int64_t DQK_DV[][2] = { { 192, 128 }, { 64, 32 } };
static const int64_t SEQ_PAIRS[][2] = {
    { 1, 1 }, { 1, 239 }, { 239, 1 }, { 3, 799 }, { 799, 3 }, { 113, 203 }, { 128, 217 },
    { 256, 512 }, { 512, 256 }, { 1023, 1024 }, { 1024, 1023 }, { 2048, 2048 },
    { 0, 17 }, { 17, 0 }, { 0, 0 } };
#define N_SEQ_PAIRS ((int)(sizeof SEQ_PAIRS / sizeof SEQ_PAIRS[0]))

static tu_case base_case(const char *tag, uint64_t seed)
{
    tu_case c;
    memset(&c, 0, sizeof c);
    c.tag = tag; c.seed = seed;
    c.B = 2; c.H = 4; c.Hkv = 2; c.Sq = 37; c.Sk = 53; c.dqk = 64; c.dv = 64;
    c.dt = FA_F16; c.odt = FA_F16; c.bias_dt = FA_F32;
    c.wl = -1; c.wr = -1;
    return c;
}

/* Feature variants applied to a base case (index i). Returns 0 past the end. */
static int feature_case(int i, tu_case *c)
{
    switch (i) {
    case 0: c->tag = "plain"; return 1;
    case 1: c->tag = "causal-br"; c->causal = FA_CAUSAL_BOTTOM_RIGHT; return 1;
    case 2: c->tag = "causal-br-sq>sk"; c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->Sq = 61; c->Sk = 29; return 1;
    case 3: c->tag = "causal-tl"; c->causal = FA_CAUSAL_TOP_LEFT; return 1;
    case 4: c->tag = "causal-tl-sq>sk"; c->causal = FA_CAUSAL_TOP_LEFT; c->Sq = 61; c->Sk = 29; return 1;
    case 5: c->tag = "window-left"; c->window = 1; c->wl = 7; c->wr = -1; return 1;
    case 6: c->tag = "window-right"; c->window = 1; c->wl = -1; c->wr = 5; return 1;
    case 7: c->tag = "window-both"; c->window = 1; c->wl = 9; c->wr = 3; return 1;
    case 8: c->tag = "window-causal"; c->window = 1; c->wl = 6; c->wr = 4; c->causal = FA_CAUSAL_BOTTOM_RIGHT; return 1;
    case 9: c->tag = "window-0-0-tl"; c->window = 1; c->wl = 0; c->wr = 0; c->causal = FA_CAUSAL_TOP_LEFT; return 1;
    case 10: c->tag = "window-ignored"; c->window = 0; c->wl = -7; c->wr = -9; return 1;
    case 11: c->tag = "softcap"; c->softcap = 3.0f; c->amp = 2.0; return 1;
    case 12: c->tag = "alibi"; c->alibi = 1; return 1;
    case 13: c->tag = "alibi-causal"; c->alibi = 1; c->causal = FA_CAUSAL_BOTTOM_RIGHT; return 1;
    case 14: c->tag = "sinks"; c->sinks = 1; return 1;
    case 15: c->tag = "sinks-causal-masked"; c->sinks = 1; c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->Sq = 40; c->Sk = 20; return 1;
    case 16: c->tag = "bias-full"; c->bias = TB_FULL; return 1;
    case 17: c->tag = "bias-b-stride0"; c->bias = TB_B_STRIDE0; c->bias_dt = FA_F16; return 1;
    case 18: c->tag = "bias-h-shape1"; c->bias = TB_H_SHAPE1; c->bias_dt = FA_BF16; return 1;
    case 19: c->tag = "bias-bh-shape1-padded"; c->bias = TB_BH_SHAPE1_PADDED; return 1;
    case 20: c->tag = "bias-q-stride0"; c->bias = TB_Q_STRIDE0; return 1;
    case 21: c->tag = "dropout"; c->dropout_p = 0.17f; c->dseed = 1234; c->doffset = 99; return 1;
    case 22: c->tag = "dropout-causal"; c->dropout_p = 0.5f; c->dseed = 0xfeedbeefcafeull; c->doffset = 1ull << 40; c->causal = FA_CAUSAL_BOTTOM_RIGHT; return 1;
    case 23: c->tag = "gqa-8:1"; c->H = 8; c->Hkv = 1; return 1;
    case 24: c->tag = "gqa-4:2"; c->H = 4; c->Hkv = 2; return 1;
    case 25: c->tag = "mqa"; c->H = 3; c->Hkv = 1; return 1;
    case 26: c->tag = "mha"; c->H = 3; c->Hkv = 3; return 1;
    case 27: c->tag = "transposed"; c->layout = TL_TRANSPOSED; return 1;
    case 28: c->tag = "padded"; c->layout = TL_PADDED; return 1;
    case 29: c->tag = "f32"; c->dt = FA_F32; c->odt = FA_F32; return 1;
    case 30: c->tag = "bf16"; c->dt = FA_BF16; c->odt = FA_BF16; return 1;
    case 31: c->tag = "bf16-out-f32"; c->dt = FA_BF16; c->odt = FA_F32; return 1;
    case 32: c->tag = "f16-out-f32"; c->dt = FA_F16; c->odt = FA_F32; return 1;
    case 33: c->tag = "scale"; c->scale = 0.37f; return 1;
    case 34: c->tag = "everything"; c->causal = FA_CAUSAL_BOTTOM_RIGHT; c->window = 1; c->wl = 11; c->wr = 0;
        c->softcap = 4.0f; c->alibi = 1; c->sinks = 1; c->bias = TB_H_SHAPE1; c->dropout_p = 0.3f;
        c->dseed = 7; c->layout = TL_PADDED; c->H = 8; c->Hkv = 2; return 1;
    case 35: c->tag = "everything-f32"; c->dt = FA_F32; c->odt = FA_F32; c->causal = FA_CAUSAL_TOP_LEFT;
        c->window = 1; c->wl = 5; c->wr = 8; c->softcap = 2.0f; c->alibi = 1; c->sinks = 1;
        c->bias = TB_B_STRIDE0; c->dropout_p = 0.1f; c->dseed = 8; c->layout = TL_TRANSPOSED; return 1;
    default: return 0;
    }
}

#endif
