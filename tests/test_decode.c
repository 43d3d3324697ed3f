/* test_decode.c - the CPU decode path (fa_forward_kvcache with 1-16 new tokens per
 * sequence) against the oracle on every backend under test, and on the CPU backend with
 * 1, 2 and 3 threads: each run checked by the tolerance rule, and every CPU run bitwise
 * equal to the first (repeated runs and other thread counts alike: the key splits depend
 * on the shapes only).
 *
 * Cases: page sizes 1, 3, 16, 256 and contiguous; GQA groups 1, 4, 8; new tokens 1-16;
 * split counts 1 to 64 (batch x KV heads against cache lengths); fp32, fp16, bf16 caches;
 * causal both alignments, windows, softcap, ALiBi, sinks, lse and none; d_qk != d_v; the
 * AVX-512 row kernels' shapes (1-16 and 40 rows per KV head, d 96/128) and an Inf in V.
 * fa_query names the decode path for the shape (fa_forward's dense form) and the reason
 * for the calls it leaves to the loop nest (bias, dropout, too many rows).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dtype.h"

typedef struct {
    const char *tag;
    int64_t B, H, Hkv, Sq, dqk, dv;
    int64_t page_size;        /* 0: contiguous cache */
    int64_t s_new;            /* rows appended per sequence (0: none) */
    int32_t cs[4];            /* cache_seqlens */
    fa_dtype dt, odt;
    fa_causal causal; int window; int64_t wl, wr;
    float softcap;
    int alibi, sinks, no_lse;
    int inf_v;                /* V of sequence 0's last new token, head 0, column 1 = +Inf */
    uint64_t seed;
} dc_case;

#define DFAIL(...) do { char m_[1024]; snprintf(m_, sizeof m_, __VA_ARGS__); \
        ck_abort_msg("[%s] seed=%llu B=%lld Sq=%lld H=%lld/%lld d=%lld/%lld page=%lld " \
                     "s_new=%lld %s/%s causal=%d window=%d(%lld,%lld) softcap=%g alibi=%d " \
                     "sinks=%d: %s", dc->tag, (unsigned long long)dc->seed, (long long)dc->B, \
                     (long long)dc->Sq, (long long)dc->H, (long long)dc->Hkv, \
                     (long long)dc->dqk, (long long)dc->dv, (long long)dc->page_size, \
                     (long long)dc->s_new, tu_dtype_name(dc->dt), tu_dtype_name(dc->odt), \
                     dc->causal, dc->window, (long long)dc->wl, (long long)dc->wr, \
                     (double)dc->softcap, dc->alibi, dc->sinks, m_); } while (0)

/* The call's data and the oracle's answer. */
typedef struct {
    tu_buf *kc, *vc, *q, *kn, *vn, *out, *lse;
    int32_t *bt, cs[4];
    int64_t max_pages;
    float slopes[64], sinks[64];
    fa_options opt;
    double *o_out, *n_out, *o_lse, *n_lse;
} dc_data;

static int64_t dc_sk(const dc_case *dc, int64_t b) { return dc->cs[b] + dc->s_new; }

static void dc_make(const dc_case *dc, dc_data *d)
{
    tu_rng rng = { dc->seed * 7919 + 1 };
    const int64_t B = dc->B, H = dc->H, Hkv = dc->Hkv, Sq = dc->Sq, ps = dc->page_size;
    int64_t smax = 1;
    memset(d, 0, sizeof *d);
    for (int64_t b = 0; b < B; b++) if (dc_sk(dc, b) > smax) smax = dc_sk(dc, b);
    memcpy(d->cs, dc->cs, sizeof d->cs);
    if (ps > 0) {
        d->max_pages = (smax + ps - 1) / ps;
        int64_t np = B * d->max_pages + 2;
        d->bt = malloc(sizeof(int32_t) * (size_t)(B * d->max_pages));
        for (int64_t x = 0; x < B * d->max_pages; x++)   /* pages in reverse, interleaved */
            d->bt[x] = (int32_t)(np - 1 - ((x % B) * d->max_pages + x / B));
        d->kc = tu_buf_new(dc->dt, np, ps, Hkv, dc->dqk, TL_CONTIG);
        d->vc = tu_buf_new(dc->dt, np, ps, Hkv, dc->dv, TL_CONTIG);
    } else {
        d->kc = tu_buf_new(dc->dt, B, smax, Hkv, dc->dqk, TL_CONTIG);
        d->vc = tu_buf_new(dc->dt, B, smax, Hkv, dc->dv, TL_CONTIG);
    }
    tu_fill(d->kc, &rng, 1.0); tu_fill(d->vc, &rng, 1.0);
    d->q = tu_buf_new(dc->dt, B, Sq, H, dc->dqk, TL_CONTIG);
    tu_fill(d->q, &rng, 1.0);
    if (dc->s_new) {
        d->kn = tu_buf_new(dc->dt, B, dc->s_new, Hkv, dc->dqk, TL_CONTIG);
        d->vn = tu_buf_new(dc->dt, B, dc->s_new, Hkv, dc->dv, TL_CONTIG);
        tu_fill(d->kn, &rng, 1.0); tu_fill(d->vn, &rng, 1.0);
        if (dc->inf_v) tu_set(d->vn, 0, dc->s_new - 1, 0, 1, INFINITY);
    }
    for (int64_t h = 0; h < H; h++) {
        d->slopes[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)H);
        d->sinks[h] = (float)(tu_unif(&rng) * 2);
    }
    fa_options *o = &d->opt;
    o->causal = dc->causal; o->window = dc->window; o->window_left = dc->wl;
    o->window_right = dc->wr; o->softcap = dc->softcap;
    o->alibi_slopes = dc->alibi ? d->slopes : NULL; o->sinks = dc->sinks ? d->sinks : NULL;
    d->out = tu_buf_new(dc->odt, B, Sq, H, dc->dv, TL_CONTIG);
    d->lse = tu_buf_flat(FA_F32, B * H * Sq);
}

/* Element of cache row (sequence b, position j, head h, column c): the cache or k_new. */
static double dc_kv(const dc_case *dc, const dc_data *d, int v, int64_t b, int64_t j,
                    int64_t h, int64_t c)
{
    const tu_buf *t = v ? d->vc : d->kc;
    if (j >= dc->cs[b]) return tu_get(v ? d->vn : d->kn, b, j - dc->cs[b], h, c);
    if (dc->page_size > 0)
        return tu_get(t, d->bt[b * d->max_pages + j / dc->page_size], j % dc->page_size, h, c);
    return tu_get(t, b, j, h, c);
}

static void dc_oracle(const dc_case *dc, dc_data *d)
{
    const int64_t B = dc->B, H = dc->H, Hkv = dc->Hkv, Sq = dc->Sq, dqk = dc->dqk, dv = dc->dv;
    double slopes[64], sinks[64];
    for (int64_t h = 0; h < H; h++) { slopes[h] = d->slopes[h]; sinks[h] = d->sinks[h]; }
    d->o_out = calloc((size_t)(B * Sq * H * dv), sizeof(double));
    d->n_out = calloc((size_t)(B * Sq * H * dv), sizeof(double));
    d->o_lse = calloc((size_t)(B * H * Sq), sizeof(double));
    d->n_lse = calloc((size_t)(B * H * Sq), sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        int64_t sk = dc_sk(dc, b);
        double *kk = malloc(sizeof(double) * (size_t)(sk * Hkv * dqk + 1));
        double *vv = malloc(sizeof(double) * (size_t)(sk * Hkv * dv + 1));
        for (int64_t j = 0; j < sk; j++)
            for (int64_t h = 0; h < Hkv; h++) {
                for (int64_t c = 0; c < dqk; c++) kk[(j * Hkv + h) * dqk + c] = dc_kv(dc, d, 0, b, j, h, c);
                for (int64_t c = 0; c < dv; c++) vv[(j * Hkv + h) * dv + c] = dc_kv(dc, d, 1, b, j, h, c);
            }
        double *qq = tu_gather(d->q, b, 0, Sq);
        or_seq s;
        memset(&s, 0, sizeof s);
        s.sq = Sq; s.sk = sk; s.hq = H; s.hkv = Hkv; s.dqk = dqk; s.dv = dv;
        s.scale = 1.0 / sqrt((double)dqk); s.causal = dc->causal; s.window = dc->window;
        s.wl = dc->wl; s.wr = dc->wr; s.softcap = dc->softcap;
        s.alibi = dc->alibi ? slopes : NULL; s.sinks = dc->sinks ? sinks : NULL;
        s.drop_b = b; s.drop_i0 = dc->cs[b];
        or_forward(&s, qq, kk, vv, d->o_out + b * Sq * H * dv, d->o_lse + b * H * Sq);
        or_forward_sp(&s, dc->dt, dc->odt, qq, kk, vv, d->n_out + b * Sq * H * dv,
                      d->n_lse + b * H * Sq);
        free(kk); free(vv); free(qq);
    }
}

static void dc_free(dc_data *d)
{
    tu_buf_free(d->kc); tu_buf_free(d->vc); tu_buf_free(d->q); tu_buf_free(d->kn);
    tu_buf_free(d->vn); tu_buf_free(d->out); tu_buf_free(d->lse); free(d->bt);
    free(d->o_out); free(d->n_out); free(d->o_lse); free(d->n_lse);
}

/* One call on ctx, checked against the oracle; out and lse stay in d. */
static void dc_call(const dc_case *dc, dc_data *d, fa_context *ctx, const char *who)
{
    const int64_t B = dc->B, H = dc->H, Sq = dc->Sq, dv = dc->dv;
    char msg[512];
    tu_poison(d->out); tu_poison(d->lse);
    if (dc->no_lse) memset(d->lse->must, 0, d->lse->nel);
    tu_snapshot(d->out); tu_snapshot(d->lse);
    fa_status st = fa_forward_kvcache(ctx, &d->out->t, dc->no_lse ? NULL : (float *)d->lse->t.data,
                                      &d->q->t, &d->kc->t, &d->vc->t, d->kn ? &d->kn->t : NULL,
                                      d->vn ? &d->vn->t : NULL, d->cs, d->bt, d->max_pages, &d->opt);
    if (st != FA_OK) DFAIL("%s: fa_forward_kvcache = %d: %s", who, (int)st, fa_last_error(ctx));
    if (!tu_check_written(d->out, "out", msg, sizeof msg)) DFAIL("%s: %s", who, msg);
    if (!tu_check_written(d->lse, "lse", msg, sizeof msg)) DFAIL("%s: %s", who, msg);
    double *g = malloc(sizeof(double) * (size_t)(B * Sq * H * dv));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t c = 0; c < dv; c++)
                    g[((b * Sq + i) * H + h) * dv + c] = tu_get(d->out, b, i, h, c);
    or_cmp r;
    if (!or_tol_plain(g, d->o_out, d->n_out, B * Sq * H * dv, dc->dt, dc->odt, 2.0, &r))
        DFAIL("%s: out: max err %.3e > bound %.3e at %lld: %.9g vs %.9g", who, r.err, r.bound,
              (long long)r.worst, r.ours_w, r.orc_w);
    if (!dc->no_lse) {
        for (int64_t x = 0; x < B * H * Sq; x++) g[x] = ((float *)d->lse->t.data)[x];
        if (!or_tol_plain(g, d->o_lse, d->n_lse, B * H * Sq, dc->dt, FA_F32, 2.0, &r))
            DFAIL("%s: lse: max err %.3e > bound %.3e at %lld", who, r.err, r.bound,
                  (long long)r.worst);
    }
    free(g);
}

/* fa_query on the call's dense form (q against a [B, max Sk, Hkv, d] k/v). */
static const char *dc_query(const dc_case *dc, fa_context *ctx, const fa_options *opt)
{
    int64_t sk = 1;
    for (int64_t b = 0; b < dc->B; b++) if (dc_sk(dc, b) > sk) sk = dc_sk(dc, b);
    fa_tensor q = fa_tensor_contiguous(NULL, dc->dt, dc->B, dc->Sq, dc->H, dc->dqk);
    fa_tensor k = fa_tensor_contiguous(NULL, dc->dt, dc->B, sk, dc->Hkv, dc->dqk);
    fa_tensor v = fa_tensor_contiguous(NULL, dc->dt, dc->B, sk, dc->Hkv, dc->dv);
    fa_tensor o = fa_tensor_contiguous(NULL, dc->odt, dc->B, dc->Sq, dc->H, dc->dv);
    const char *name = NULL;
    fa_status st = fa_query(ctx, &name, &o, NULL, &q, &k, &v, opt);
    ck_assert_msg(st == FA_OK && name, "fa_query = %d: %s", (int)st, fa_last_error(ctx));
    return name;
}

static void dc_run(const dc_case *dc)
{
    dc_data d;
    dc_make(dc, &d);
    dc_oracle(dc, &d);
    fa_backend bes[8];
    int nb = tu_backends(bes);
    size_t obytes = d.out->nel * d.out->esz, lbytes = d.lse->nel * d.lse->esz;
    unsigned char *first_o = malloc(obytes), *first_l = malloc(lbytes);
    int have_first = 0;
    for (int bi = 0; bi < nb; bi++) {
        int cpu = bes[bi] == FA_BACKEND_CPU;
        static const int thr[] = { 1, 2, 3, 2 };
        for (int x = 0; x < (cpu ? 4 : 1); x++) {
            char who[64];
            snprintf(who, sizeof who, "%s threads=%d", tu_backend_name(bes[bi]), cpu ? thr[x] : 0);
            fa_context *ctx = tu_ctx(bes[bi]);
            if (cpu) {
                fa_context_set_threads(ctx, thr[x]);
                const char *name = dc_query(dc, ctx, &d.opt);
                if (!strstr(name, " decode ")) DFAIL("%s: fa_query names %s", who, name);
            }
            dc_call(dc, &d, ctx, who);
            fa_context_destroy(ctx);
            if (!cpu) continue;
            if (!have_first) {
                memcpy(first_o, d.out->base, obytes);
                memcpy(first_l, d.lse->base, lbytes);
                have_first = 1;
            } else if (memcmp(first_o, d.out->base, obytes) || memcmp(first_l, d.lse->base, lbytes)) {
                DFAIL("%s: out/lse not bitwise equal to the first CPU run (threads=1)", who);
            }
        }
    }
    free(first_o); free(first_l);
    dc_free(&d);
}

static dc_case dc_base(const char *tag, uint64_t seed)
{
    dc_case c;
    memset(&c, 0, sizeof c);
    c.tag = tag; c.seed = seed;
    c.B = 2; c.H = 8; c.Hkv = 2; c.Sq = 1; c.dqk = c.dv = 64;
    c.cs[0] = 700; c.cs[1] = 133;
    c.dt = c.odt = FA_F32; c.wl = c.wr = -1; c.causal = FA_CAUSAL_BOTTOM_RIGHT;
    return c;
}

/* page sizes {contiguous, 1, 3, 16, 256} x dtypes {fp32, bf16, fp16} */
START_TEST(test_decode_pages)
{
    static const int64_t pss[5] = { 0, 1, 3, 16, 256 };
    static const fa_dtype dts[3] = { FA_F32, FA_BF16, FA_F16 };
    dc_case c = dc_base("decode-pages", 5000 + (uint64_t)_i);
    c.page_size = pss[_i / 3];
    c.dt = dts[_i % 3];
    c.odt = _i % 2 ? FA_F32 : c.dt;
    c.Sq = 1 + _i % 4;
    c.s_new = _i % 2 ? c.Sq : 0;
    c.sinks = _i % 5 == 0;
    dc_run(&c);
}
END_TEST

/* GQA groups 1, 4, 8 x new tokens 1, 5, 16 */
START_TEST(test_decode_groups)
{
    static const int64_t groups[3] = { 1, 4, 8 };
    static const int64_t toks[3] = { 1, 5, 16 };
    dc_case c = dc_base("decode-groups", 5100 + (uint64_t)_i);
    c.Hkv = 2; c.H = 2 * groups[_i / 3];
    c.Sq = toks[_i % 3];
    c.s_new = _i % 2 ? c.Sq : 0;
    c.page_size = _i % 3 == 1 ? 16 : 0;
    c.dt = _i % 2 ? FA_BF16 : FA_F32;
    dc_run(&c);
}
END_TEST

/* The key splits: 1 (batch x KV heads >= 64), 2, 4, 9 and 64 (one KV head, a long cache). */
START_TEST(test_decode_splits)
{
    dc_case c = dc_base("decode-splits", 5200 + (uint64_t)_i);
    c.dqk = c.dv = 32;
    switch (_i) {
    case 0: c.B = 4; c.H = 32; c.Hkv = 16; c.cs[0] = 900; c.cs[1] = 5; c.cs[2] = 0; c.cs[3] = 77; break;
    case 1: c.B = 2; c.H = 4; c.Hkv = 1; c.cs[0] = 1100; c.cs[1] = 300; break;
    case 2: c.B = 1; c.H = 4; c.Hkv = 1; c.cs[0] = 2100; c.Sq = 3; c.s_new = 3; break;
    case 3: c.B = 1; c.H = 8; c.Hkv = 4; c.cs[0] = 4700; c.Sq = 2; break;
    case 4: c.B = 1; c.H = 2; c.Hkv = 1; c.cs[0] = 40000; c.page_size = 256; c.dt = FA_BF16; break;
    }
    dc_run(&c);
}
END_TEST

/* The row kernels (AVX-512, d_qk and d_v multiples of 32): rows per KV head 1-16 (packed
   scores, padded to a power of two) and over 16; d = 96, 128; an Inf in V that only the
   last query row sees (a partly masked block: the other rows stay finite); d_qk = 48
   (not a multiple of 32: the K^T path). */
START_TEST(test_decode_rows)
{
    dc_case c = dc_base("decode-rows", 5500 + (uint64_t)_i);
    c.dqk = c.dv = 128;
    switch (_i) {
    case 0: c.dt = FA_F16; break;                                          /* 4 rows */
    case 1: c.dt = FA_BF16; c.H = 16; c.Sq = 2; c.page_size = 16; break;   /* 16 */
    case 2: c.H = 2; c.Sq = 3; c.page_size = 3; break;                     /* 3 -> 4 */
    case 3: c.dt = FA_BF16; c.Sq = 5; c.H = 16; c.dqk = c.dv = 64; break;  /* 40 */
    case 4: c.dt = FA_F16; c.H = 4; c.dqk = c.dv = 96; c.odt = FA_F32; break;   /* 2 */
    case 5: c.H = 8; c.Sq = 3; c.dt = FA_F16; c.window = 1; c.wl = 90; c.wr = 0; break;
    case 6: c.tag = "decode-inf-v"; c.Sq = 4; c.s_new = 4; c.inf_v = 1; break;
    case 7: c.tag = "decode-inf-v"; c.Sq = 4; c.s_new = 4; c.inf_v = 1; c.dt = FA_BF16;
        c.page_size = 1; break;
    case 8: c.dt = FA_BF16; c.dqk = 48; c.dv = 64; c.page_size = 16; break;
    }
    dc_run(&c);
}
END_TEST

START_TEST(test_decode_features)
{
    dc_case c = dc_base("", 5300 + (uint64_t)_i);
    c.page_size = _i % 2 ? 3 : 0;
    c.Sq = 4; c.s_new = _i % 3 ? 4 : 0;
    switch (_i) {
    case 0: c.tag = "decode-topleft"; c.causal = FA_CAUSAL_TOP_LEFT; break;
    case 1: c.tag = "decode-bottomright-16"; c.Sq = 16; c.s_new = 16; break;
    case 2: c.tag = "decode-noncausal"; c.causal = FA_CAUSAL_NONE; break;
    case 3: c.tag = "decode-window"; c.window = 1; c.wl = 100; c.wr = 0; break;
    case 4: c.tag = "decode-window-both"; c.causal = FA_CAUSAL_NONE; c.window = 1; c.wl = 60; c.wr = 7; break;
    case 5: c.tag = "decode-softcap"; c.softcap = 3.0f; c.dt = FA_BF16; break;
    case 6: c.tag = "decode-alibi"; c.alibi = 1; c.dt = FA_F16; c.odt = FA_F32; break;
    case 7: c.tag = "decode-sinks-softcap-alibi"; c.sinks = 1; c.softcap = 5.0f; c.alibi = 1; break;
    case 8: c.tag = "decode-no-lse"; c.no_lse = 1; break;
    case 9: c.tag = "decode-dqk!=dv"; c.dqk = 96; c.dv = 40; break;
    case 10: c.tag = "decode-mqa"; c.H = 8; c.Hkv = 1; c.sinks = 1; break;
    case 11: c.tag = "decode-empty-cache"; c.cs[0] = 0; c.cs[1] = 3; c.sinks = 1; break;
    case 12: c.tag = "decode-topleft-masked-rows"; c.causal = FA_CAUSAL_TOP_LEFT; c.cs[0] = 0;
        c.cs[1] = 2; c.s_new = 0; c.sinks = 1; break;
    }
    dc_run(&c);
}
END_TEST

/* Calls the decode path leaves to the loop nest: fa_query says why, and they still run
   right (test_forward and test_varlen_kvcache check their numbers). */
START_TEST(test_decode_fallback_names)
{
    fa_context *ctx = tu_ctx(FA_BACKEND_CPU);
    dc_case c = dc_base("decode-fallback", 5400);
    fa_options opt;
    memset(&opt, 0, sizeof opt);
    opt.causal = FA_CAUSAL_BOTTOM_RIGHT;
    const char *name = dc_query(&c, ctx, &opt);
    ck_assert_msg(strstr(name, " decode ") != NULL, "decode-shaped call: %s", name);
    opt.dropout_p = 0.1f;
    name = dc_query(&c, ctx, &opt);
    ck_assert_msg(strstr(name, "not the decode path: dropout") != NULL, "dropout: %s", name);
    opt.dropout_p = 0.0f;
    c.H = 32; c.Hkv = 1; c.Sq = 5;   /* 160 rows per KV head */
    name = dc_query(&c, ctx, &opt);
    ck_assert_msg(strstr(name, "not the decode path: more than 128") != NULL, "rows: %s", name);
    c.H = 8; c.Hkv = 2; c.Sq = 17;   /* not decode-shaped: the loop nest, nothing to say */
    name = dc_query(&c, ctx, &opt);
    ck_assert_msg(strstr(name, "decode") == NULL, "Sq=17: %s", name);
    fa_context_destroy(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode");
    TCase *tc;
#define LOOP(fn, n, to) tc = tcase_create(#fn); tcase_set_timeout(tc, to); \
    tcase_add_loop_test(tc, fn, 0, n); suite_add_tcase(s, tc)
    LOOP(test_decode_pages, 15, 120);
    LOOP(test_decode_groups, 9, 120);
    LOOP(test_decode_splits, 5, 240);
    LOOP(test_decode_features, 13, 120);
    LOOP(test_decode_rows, 9, 120);
    TU_ADD(s, test_decode_fallback_names, 60);
    return tu_main(s);
}
