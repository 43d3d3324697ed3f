/* test_varlen_kvcache.c - fa_forward_varlen / fa_backward_varlen and fa_forward_kvcache
 * against the oracle on every backend under test.
 *
 * Varlen: empty sequences (every 5th and the last), total < batch, rows past the totals
 * (left untouched), per-sequence causal alignment and windows, dropout keyed by sequence.
 * KV cache: contiguous and paged (page sizes 1, 7, 16, 256), with and without k_new/v_new
 * (the append is checked: exactly the new rows change in the cache), cache_seqlens 0,
 * decode (Sq = 1), chunked prefill, dropout at position cache_seqlens[b] + t.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dtype.h"

/* ---- varlen ------------------------------------------------------------------------------ */
static int64_t LQ[64], LK[64];

static tu_case varlen_case(int i)
{
    tu_case c;
    memset(&c, 0, sizeof c);
    c.varlen = 1; c.seed = 3000 + (uint64_t)i;
    c.H = 4; c.Hkv = 2; c.dqk = c.dv = 64; c.dt = c.odt = FA_F16;
    c.wl = c.wr = -1; c.extra_rows = 5; c.bias_dt = FA_F32;
    c.lq = LQ; c.lk = LK;
    tu_rng r = { 777 + (uint64_t)i };
    c.B = 11;
    for (int64_t b = 0; b < c.B; b++) {
        LQ[b] = 1 + (int64_t)(tu_next(&r) % 40);
        LK[b] = 1 + (int64_t)(tu_next(&r) % 60);
        if (b % 5 == 4 || b == c.B - 1) LQ[b] = LK[b] = 0;   /* every 5th and the last */
    }
    LK[1] = 0;            /* queries with no keys: fully masked rows */
    LQ[2] = 0;            /* keys with no queries */
    switch (i) {
    case 0: c.tag = "varlen-plain"; break;
    case 1: c.tag = "varlen-causal-br"; c.causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 2: c.tag = "varlen-causal-tl"; c.causal = FA_CAUSAL_TOP_LEFT; c.dt = c.odt = FA_BF16; break;
    case 3: c.tag = "varlen-window"; c.window = 1; c.wl = 5; c.wr = 2; c.dt = c.odt = FA_F32; break;
    case 4: c.tag = "varlen-sinks-alibi-softcap"; c.sinks = 1; c.alibi = 1; c.softcap = 4.0f;
        c.causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 5: c.tag = "varlen-dropout"; c.dropout_p = 0.2f; c.dseed = 31; c.doffset = 7; break;
    case 6: c.tag = "varlen-gqa-8:1-padded"; c.H = 8; c.Hkv = 1; c.layout = TL_PADDED; c.odt = FA_F32; break;
    case 7: c.tag = "varlen-transposed-slack"; c.layout = TL_TRANSPOSED; c.max_slack = 9; c.dqk = 59; c.dv = 32; break;
    case 8: c.tag = "varlen-total<batch"; c.B = 8;
        for (int64_t b = 0; b < 8; b++) LQ[b] = LK[b] = 0;
        LQ[2] = 1; LK[2] = 2; LQ[5] = 2; LK[5] = 1; LK[6] = 3;
        c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.sinks = 1; break;
    case 9: c.tag = "varlen-all-empty"; c.B = 3; for (int b = 0; b < 3; b++) LQ[b] = LK[b] = 0; c.sinks = 1; break;
    case 10: c.tag = "varlen-long"; c.B = 3; LQ[0] = 300; LK[0] = 257; LQ[1] = 0; LK[1] = 0; LQ[2] = 129; LK[2] = 400;
        c.causal = FA_CAUSAL_BOTTOM_RIGHT; c.dqk = c.dv = 32; c.extra_rows = 0; break;
    default: c.tag = NULL; break;
    }
    return c;
}
#define N_VARLEN 11

START_TEST(test_varlen_fwd)
{
    tu_case c = varlen_case(_i);
    tu_run(&c);
}
END_TEST

START_TEST(test_varlen_bwd)
{
    tu_case c = varlen_case(_i);
    c.backward = 1; c.seed += 100;
    c.deterministic = _i & 1;
    tu_run(&c);
}
END_TEST

/* ---- KV cache ------------------------------------------------------------------------------ */
typedef struct {
    const char *tag;
    int64_t B, H, Hkv, Sq, dqk, dv;
    int64_t page_size;        /* 0: contiguous cache */
    int64_t s_cache;          /* contiguous capacity; paged: max_pages_per_seq * page_size >= this */
    int64_t s_new;            /* 0: no k_new/v_new */
    int32_t cs[8];            /* cache_seqlens */
    fa_dtype dt, odt;
    tu_layout layout;
    fa_causal causal; int window; int64_t wl, wr;
    float softcap, dropout_p;
    int alibi, sinks, no_lse;
    uint64_t seed;
} kv_case;

#define KFAIL(...) do { char m_[1024]; snprintf(m_, sizeof m_, __VA_ARGS__); \
        fprintf(stderr, "FAIL [%s] seed=%llu B=%lld Sq=%lld H=%lld/%lld d=%lld/%lld page=%lld " \
                "cap=%lld s_new=%lld %s/%s causal=%d window=%d(%lld,%lld) softcap=%g dropout=%g " \
                "alibi=%d sinks=%d: %s\n", kc->tag, (unsigned long long)kc->seed, \
                (long long)kc->B, (long long)kc->Sq, (long long)kc->H, (long long)kc->Hkv, \
                (long long)kc->dqk, (long long)kc->dv, (long long)kc->page_size, \
                (long long)kc->s_cache, (long long)kc->s_new, tu_dtype_name(kc->dt), \
                tu_dtype_name(kc->odt), kc->causal, kc->window, (long long)kc->wl, \
                (long long)kc->wr, (double)kc->softcap, (double)kc->dropout_p, kc->alibi, \
                kc->sinks, m_); \
        ck_abort_msg("[%s] seed=%llu: %s", kc->tag, (unsigned long long)kc->seed, m_); } while (0)

static void kv_run(const kv_case *kc)
{
    tu_rng rng = { kc->seed * 7919 + 1 };
    const int64_t B = kc->B, H = kc->H, Hkv = kc->Hkv, Sq = kc->Sq, dqk = kc->dqk, dv = kc->dv;
    const int64_t ps = kc->page_size;
    int64_t max_pages = 0, num_pages = 0;
    int32_t *bt = NULL;
    tu_buf *kc_b, *vc_b;
    if (ps > 0) {
        max_pages = (kc->s_cache + ps - 1) / ps;
        num_pages = B * max_pages + 3;
        bt = malloc(sizeof(int32_t) * (size_t)(B * max_pages + 1));
        /* a shuffled assignment of pages; entries past the pages in use are -1 */
        int64_t *perm = malloc(sizeof(int64_t) * (size_t)num_pages);
        for (int64_t x = 0; x < num_pages; x++) perm[x] = x;
        for (int64_t x = num_pages - 1; x > 0; x--) {
            int64_t y = (int64_t)(tu_next(&rng) % (uint64_t)(x + 1));
            int64_t t = perm[x]; perm[x] = perm[y]; perm[y] = t;
        }
        for (int64_t b = 0; b < B; b++) {
            int64_t used = (kc->cs[b] + kc->s_new + ps - 1) / ps;
            for (int64_t p = 0; p < max_pages; p++)
                bt[b * max_pages + p] = p < used ? (int32_t)perm[b * max_pages + p] : -1;
        }
        free(perm);
        kc_b = tu_buf_new(kc->dt, num_pages, ps, Hkv, dqk, kc->layout);
        vc_b = tu_buf_new(kc->dt, num_pages, ps, Hkv, dv, kc->layout);
    } else {
        kc_b = tu_buf_new(kc->dt, B, kc->s_cache, Hkv, dqk, kc->layout);
        vc_b = tu_buf_new(kc->dt, B, kc->s_cache, Hkv, dv, kc->layout);
    }
    tu_fill(kc_b, &rng, 1.0); tu_fill(vc_b, &rng, 1.0);
    tu_buf *q = tu_buf_new(kc->dt, B, Sq, H, dqk, kc->layout);
    tu_buf *kn = kc->s_new ? tu_buf_new(kc->dt, B, kc->s_new, Hkv, dqk, kc->layout) : NULL;
    tu_buf *vn = kc->s_new ? tu_buf_new(kc->dt, B, kc->s_new, Hkv, dv, kc->layout) : NULL;
    tu_fill(q, &rng, 1.0);
    if (kn) { tu_fill(kn, &rng, 1.0); tu_fill(vn, &rng, 1.0); }
    float slopes[64], sinks[64];
    double slopes_d[64], sinks_d[64];
    for (int64_t h = 0; h < H; h++) {
        slopes[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)H); slopes_d[h] = slopes[h];
        sinks[h] = (float)(tu_unif(&rng) * 2); sinks_d[h] = sinks[h];
    }
    int32_t cs[8];
    memcpy(cs, kc->cs, sizeof cs);
    fa_options opt;
    memset(&opt, 0, sizeof opt);
    opt.causal = kc->causal; opt.window = kc->window; opt.window_left = kc->wl;
    opt.window_right = kc->wr; opt.softcap = kc->softcap; opt.dropout_p = kc->dropout_p;
    opt.seed = kc->seed; opt.offset = 3;
    opt.alibi_slopes = kc->alibi ? slopes : NULL; opt.sinks = kc->sinks ? sinks : NULL;

    /* element index of cache row (sequence b, position j, head h, col 0) */
#define CROW(buf, b, j, h) (ps > 0 ? tu_idx(buf, bt[(b) * max_pages + (j) / ps], (j) % ps, h, 0) \
                                   : tu_idx(buf, b, j, h, 0))
    /* oracle */
    double *o_out = calloc((size_t)(B * Sq * H * dv + 1), sizeof(double));
    double *n_out = calloc((size_t)(B * Sq * H * dv + 1), sizeof(double));
    double *o_lse = calloc((size_t)(B * H * Sq + 1), sizeof(double));
    double *n_lse = calloc((size_t)(B * H * Sq + 1), sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        int64_t sk = cs[b] + kc->s_new;
        double *kk = malloc(sizeof(double) * (size_t)(sk * Hkv * dqk + 1));
        double *vv = malloc(sizeof(double) * (size_t)(sk * Hkv * dv + 1));
        for (int64_t j = 0; j < sk; j++)
            for (int64_t h = 0; h < Hkv; h++) {
                for (int64_t c = 0; c < dqk; c++)
                    kk[(j * Hkv + h) * dqk + c] = j < cs[b]
                        ? fa_load(kc_b->base, kc->dt, CROW(kc_b, b, j, h) + c)
                        : tu_get(kn, b, j - cs[b], h, c);
                for (int64_t c = 0; c < dv; c++)
                    vv[(j * Hkv + h) * dv + c] = j < cs[b]
                        ? fa_load(vc_b->base, kc->dt, CROW(vc_b, b, j, h) + c)
                        : tu_get(vn, b, j - cs[b], h, c);
            }
        double *qq = tu_gather(q, b, 0, Sq);
        or_seq s;
        memset(&s, 0, sizeof s);
        s.sq = Sq; s.sk = sk; s.hq = H; s.hkv = Hkv; s.dqk = dqk; s.dv = dv;
        s.scale = 1.0 / sqrt((double)dqk); s.causal = kc->causal; s.window = kc->window;
        s.wl = kc->wl; s.wr = kc->wr; s.softcap = kc->softcap;
        s.alibi = kc->alibi ? slopes_d : NULL; s.sinks = kc->sinks ? sinks_d : NULL;
        s.dropout_p = kc->dropout_p; s.seed = kc->seed; s.offset = 3;
        s.drop_b = b; s.drop_i0 = cs[b];
        or_forward(&s, qq, kk, vv, o_out + b * Sq * H * dv, o_lse + b * H * Sq);
        or_forward_sp(&s, kc->dt, kc->odt, qq, kk, vv, n_out + b * Sq * H * dv, n_lse + b * H * Sq);
        free(kk); free(vv); free(qq);
    }
    /* expected cache after the append */
    unsigned char *kexp = malloc(kc_b->nel * kc_b->esz), *vexp = malloc(vc_b->nel * vc_b->esz);
    unsigned char *korig = malloc(kc_b->nel * kc_b->esz), *vorig = malloc(vc_b->nel * vc_b->esz);
    memcpy(kexp, kc_b->base, kc_b->nel * kc_b->esz); memcpy(korig, kexp, kc_b->nel * kc_b->esz);
    memcpy(vexp, vc_b->base, vc_b->nel * vc_b->esz); memcpy(vorig, vexp, vc_b->nel * vc_b->esz);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < kc->s_new; t++)
            for (int64_t h = 0; h < Hkv; h++) {
                int64_t j = cs[b] + t;
                memcpy(kexp + (size_t)CROW(kc_b, b, j, h) * kc_b->esz,
                       kn->base + (size_t)tu_idx(kn, b, t, h, 0) * kn->esz, (size_t)dqk * kn->esz);
                memcpy(vexp + (size_t)CROW(vc_b, b, j, h) * vc_b->esz,
                       vn->base + (size_t)tu_idx(vn, b, t, h, 0) * vn->esz, (size_t)dv * vn->esz);
            }

    fa_backend bes[8];
    int nb = tu_backends(bes);
    tu_buf *out = tu_buf_new(kc->odt, B, Sq, H, dv, kc->layout);
    tu_buf *lse = tu_buf_flat(FA_F32, B * H * Sq);
    char msg[512];
    double *g_out = calloc((size_t)(B * Sq * H * dv + 1), sizeof(double));
    double *g_lse = calloc((size_t)(B * H * Sq + 1), sizeof(double));
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        memcpy(kc_b->base, korig, kc_b->nel * kc_b->esz);
        memcpy(vc_b->base, vorig, vc_b->nel * vc_b->esz);
        fa_context *ctx = tu_ctx(bes[bi]);
        tu_poison(out); tu_poison(lse);
        if (kc->no_lse) memset(lse->must, 0, lse->nel);
        tu_snapshot(out); tu_snapshot(lse); tu_snapshot(q);
        if (kn) { tu_snapshot(kn); tu_snapshot(vn); }
        fa_status st = fa_forward_kvcache(ctx, &out->t, kc->no_lse ? NULL : (float *)lse->t.data,
                                          &q->t, &kc_b->t, &vc_b->t, kn ? &kn->t : NULL,
                                          vn ? &vn->t : NULL, cs, bt, max_pages, &opt);
        if (st != FA_OK) KFAIL("%s: fa_forward_kvcache = %d (%s): %s", be, (int)st,
                               fa_status_string(st), fa_last_error(ctx));
        if (!tu_check_written(out, "out", msg, sizeof msg)) KFAIL("%s: %s", be, msg);
        if (!tu_check_written(lse, "lse", msg, sizeof msg)) KFAIL("%s: %s", be, msg);
        if (!tu_check_unchanged(q, "q", msg, sizeof msg)) KFAIL("%s: %s", be, msg);
        if (kn && (!tu_check_unchanged(kn, "k_new", msg, sizeof msg) ||
                   !tu_check_unchanged(vn, "v_new", msg, sizeof msg))) KFAIL("%s: %s", be, msg);
        for (size_t e = 0; e < kc_b->nel; e++)
            if (memcmp(kc_b->base + e * kc_b->esz, kexp + e * kc_b->esz, kc_b->esz))
                KFAIL("%s: k_cache element %zu: expected %s", be, e,
                      memcmp(kexp + e * kc_b->esz, korig + e * kc_b->esz, kc_b->esz)
                      ? "the appended k_new value" : "unchanged");
        for (size_t e = 0; e < vc_b->nel; e++)
            if (memcmp(vc_b->base + e * vc_b->esz, vexp + e * vc_b->esz, vc_b->esz))
                KFAIL("%s: v_cache element %zu: expected %s", be, e,
                      memcmp(vexp + e * vc_b->esz, vorig + e * vc_b->esz, vc_b->esz)
                      ? "the appended v_new value" : "unchanged");
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t c = 0; c < dv; c++)
                        g_out[((b * Sq + i) * H + h) * dv + c] = tu_get(out, b, i, h, c);
        or_cmp r;
        if (!or_tol_plain(g_out, o_out, n_out, B * Sq * H * dv, kc->dt, kc->odt, 2.0, &r))
            KFAIL("%s: out: max err %.3e > bound %.3e (naive %.3e, mag %.3e) at %lld: %.9g vs %.9g",
                  be, r.err, r.bound, r.nerr, r.mag, (long long)r.worst, r.ours_w, r.orc_w);
        if (!kc->no_lse) {
            for (int64_t x = 0; x < B * H * Sq; x++) g_lse[x] = ((float *)lse->t.data)[x];
            if (!or_tol_plain(g_lse, o_lse, n_lse, B * H * Sq, kc->dt, FA_F32, 2.0, &r))
                KFAIL("%s: lse: max err %.3e > bound %.3e (naive %.3e, mag %.3e) at %lld: %.9g vs %.9g",
                      be, r.err, r.bound, r.nerr, r.mag, (long long)r.worst, r.ours_w, r.orc_w);
        }
        fa_context_destroy(ctx);
    }
    free(g_out); free(g_lse); free(o_out); free(n_out); free(o_lse); free(n_lse);
    free(kexp); free(vexp); free(korig); free(vorig); free(bt);
    tu_buf_free(kc_b); tu_buf_free(vc_b); tu_buf_free(q); tu_buf_free(kn); tu_buf_free(vn);
    tu_buf_free(out); tu_buf_free(lse);
#undef CROW
}

static kv_case kv_base(const char *tag, uint64_t seed)
{
    kv_case k;
    memset(&k, 0, sizeof k);
    k.tag = tag; k.seed = seed;
    k.B = 3; k.H = 4; k.Hkv = 2; k.Sq = 1; k.dqk = k.dv = 64; k.s_cache = 80;
    k.cs[0] = 17; k.cs[1] = 0; k.cs[2] = 63;
    k.dt = k.odt = FA_F16; k.wl = k.wr = -1; k.causal = FA_CAUSAL_BOTTOM_RIGHT;
    return k;
}

/* page sizes {0 = contiguous, 1, 7, 16, 256} x {no append, append 1, append 5 (chunk)} */
START_TEST(test_kvcache_pages)
{
    static const int64_t pss[5] = { 0, 1, 7, 16, 256 };
    static const int64_t news[3] = { 0, 1, 5 };
    kv_case k = kv_base("kvcache-pages", 4000 + (uint64_t)_i);
    k.page_size = pss[_i / 3];
    k.s_new = news[_i % 3];
    k.Sq = k.s_new ? k.s_new : 1;      /* decode or chunked prefill */
    if (_i % 2) { k.dt = FA_BF16; k.odt = FA_F32; }
    kv_run(&k);
}
END_TEST

START_TEST(test_kvcache_features)
{
    kv_case k = kv_base("", 4100 + (uint64_t)_i);
    k.page_size = (_i % 2) ? 7 : 0;
    switch (_i) {
    case 0: k.tag = "kv-cs0-no-new"; k.cs[0] = k.cs[1] = k.cs[2] = 0; k.sinks = 1; break;
    case 1: k.tag = "kv-cs0-append"; k.cs[0] = k.cs[1] = k.cs[2] = 0; k.s_new = 4; k.Sq = 4; break;
    case 2: k.tag = "kv-prefill-chunk"; k.Sq = 16; k.s_new = 16; k.s_cache = 100; k.cs[2] = 84; break;
    case 3: k.tag = "kv-prefill-no-new"; k.Sq = 9; k.cs[0] = 40; k.cs[1] = 9; k.cs[2] = 80; break;
    case 4: k.tag = "kv-topleft"; k.causal = FA_CAUSAL_TOP_LEFT; k.Sq = 6; k.s_new = 3; break;
    case 5: k.tag = "kv-noncausal"; k.causal = FA_CAUSAL_NONE; k.Sq = 3; k.s_new = 2; k.alibi = 1; break;
    case 6: k.tag = "kv-window"; k.window = 1; k.wl = 8; k.wr = 0; k.Sq = 4; k.s_new = 4; break;
    case 7: k.tag = "kv-softcap-sinks"; k.softcap = 3.0f; k.sinks = 1; k.Sq = 2; k.s_new = 2; break;
    case 8: k.tag = "kv-dropout"; k.dropout_p = 0.3f; k.Sq = 5; k.s_new = 5; break;
    case 9: k.tag = "kv-dropout-no-new"; k.dropout_p = 0.25f; k.Sq = 3; break;
    case 10: k.tag = "kv-gqa-8:1-f32"; k.H = 8; k.Hkv = 1; k.dt = k.odt = FA_F32; k.s_new = 2; k.Sq = 2; break;
    case 11: k.tag = "kv-transposed"; k.layout = TL_TRANSPOSED; k.s_new = 3; k.Sq = 3; break;
    case 12: k.tag = "kv-padded-dqk!=dv"; k.layout = TL_PADDED; k.dqk = 96; k.dv = 48; k.s_new = 1; break;
    case 13: k.tag = "kv-full-capacity"; k.s_cache = 70; k.cs[0] = 60; k.cs[1] = 0; k.cs[2] = 65; k.s_new = 5; k.Sq = 5; break;
    case 14: k.tag = "kv-lse-null"; k.no_lse = 1; k.s_new = 2; k.Sq = 2; break;
    case 15: k.tag = "kv-masked-rows"; k.Sq = 8; k.cs[0] = 2; k.cs[1] = 0; k.cs[2] = 5; k.sinks = 1; break;
    }
    kv_run(&k);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("varlen_kvcache");
    TCase *tc;
#define LOOP(fn, n, to) tc = tcase_create(#fn); tcase_set_timeout(tc, to); \
    tcase_add_loop_test(tc, fn, 0, n); suite_add_tcase(s, tc)
    LOOP(test_varlen_fwd, N_VARLEN, 120);
    LOOP(test_varlen_bwd, N_VARLEN, 120);
    LOOP(test_kvcache_pages, 15, 120);
    LOOP(test_kvcache_features, 16, 120);
    return tu_main(s);
}
