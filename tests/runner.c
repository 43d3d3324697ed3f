/* runner.c - the case runner (see testutil.h): one tu_case, forward and optionally
 * backward, on every backend under test, each output checked against the oracle with the
 * rule of liboracle (tests/oracle/oracle.h), plus: every output element written, nothing
 * outside the outputs touched, inputs unchanged. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "oracle.h"

#define FAILF(...) do { char d_[1024]; tu_case_str(c, d_, sizeof d_); \
        char m_[1024]; snprintf(m_, sizeof m_, __VA_ARGS__); \
        fprintf(stderr, "FAIL %s: %s\n", d_, m_); \
        ck_abort_msg("%s: %s", d_, m_); } while (0)

/* Where the sequences lie: per sequence b its first rows q0/k0 in the tensors (batch entry
   tb(b)), its lengths; the tensors' rows per batch entry; cu_seqlens for varlen. */
typedef struct {
    int64_t B, TB, Tq, Tk, rows_q, rows_k, maxq, maxk;
    int64_t *q0, *k0, *sq, *sk;
    int32_t *cuq, *cuk;
} seqmap;

static void seqmap_make(const tu_case *c, seqmap *m)
{
    const int64_t B = c->B;
    memset(m, 0, sizeof *m);
    m->B = B;
    m->q0 = calloc((size_t)(B + 1), sizeof(int64_t)); m->k0 = calloc((size_t)(B + 1), sizeof(int64_t));
    m->sq = calloc((size_t)(B + 1), sizeof(int64_t)); m->sk = calloc((size_t)(B + 1), sizeof(int64_t));
    m->cuq = calloc((size_t)(B + 1), sizeof(int32_t)); m->cuk = calloc((size_t)(B + 1), sizeof(int32_t));
    ck_assert(m->q0 && m->k0 && m->sq && m->sk && m->cuq && m->cuk);
    if (c->varlen) {
        for (int64_t b = 0; b < B; b++) {
            m->q0[b] = m->Tq; m->k0[b] = m->Tk; m->sq[b] = c->lq[b]; m->sk[b] = c->lk[b];
            m->Tq += m->sq[b]; m->Tk += m->sk[b];
            m->cuq[b + 1] = (int32_t)m->Tq; m->cuk[b + 1] = (int32_t)m->Tk;
            if (m->sq[b] > m->maxq) m->maxq = m->sq[b];
            if (m->sk[b] > m->maxk) m->maxk = m->sk[b];
        }
        m->rows_q = m->Tq + c->extra_rows; m->rows_k = m->Tk + c->extra_rows;
    } else {
        for (int64_t b = 0; b < B; b++) { m->sq[b] = c->Sq; m->sk[b] = c->Sk; }
        m->Tq = m->rows_q = c->Sq; m->Tk = m->rows_k = c->Sk;
    }
    m->TB = c->varlen ? 1 : B;
}

static void seqmap_free(seqmap *m)
{
    free(m->q0); free(m->k0); free(m->sq); free(m->sk); free(m->cuq); free(m->cuk);
}

static tu_buf *make_bias(const tu_case *c, tu_rng *r)
{
    int64_t B = c->B, Sq = c->Sq, H = c->H, Sk = c->Sk;
    int64_t shape[4] = { B, Sq, H, Sk }, st[4] = { Sq * H * Sk, H * Sk, Sk, 1 };
    switch (c->bias) {
    case TB_B_STRIDE0: st[0] = 0; break;
    case TB_H_SHAPE1: shape[2] = 1; st[1] = Sk; st[0] = Sq * Sk; break;
    case TB_BH_SHAPE1_PADDED: shape[0] = 1; shape[2] = 1; st[2] = Sk + 2; st[1] = Sk + 5;
        st[0] = Sq * (Sk + 5) + 1; break;
    case TB_Q_STRIDE0: st[1] = 0; st[0] = H * Sk; break;
    default: break;
    }
    tu_buf *b = tu_buf_strided(c->bias_dt, shape, st);
    tu_fill(b, r, 2.0);
    return b;
}

/* bias for sequence b as [H][Sq][Sk] doubles */
static double *bias_gather(const tu_buf *bb, int64_t b, int64_t H, int64_t Sq, int64_t Sk)
{
    double *x = malloc(sizeof(double) * (size_t)(H * Sq * Sk > 0 ? H * Sq * Sk : 1));
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t j = 0; j < Sk; j++)
                x[(h * Sq + i) * Sk + j] = tu_get(bb, bb->t.shape[0] == 1 ? 0 : b, i,
                                                  bb->t.shape[2] == 1 ? 0 : h, j);
    return x;
}

/* ours: problem-wide [B*rows][H][D] doubles from a buffer (rows = shape[1]) */
static double *gather_all(const tu_buf *b)
{
    int64_t B = b->t.shape[0], S = b->t.shape[1], H = b->t.shape[2], D = b->t.shape[3];
    double *x = malloc(sizeof(double) * (size_t)(B * S * H * D > 0 ? B * S * H * D : 1));
    for (int64_t i0 = 0; i0 < B; i0++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++)
                    x[((i0 * S + s) * H + h) * D + d] = tu_get(b, i0, s, h, d);
    return x;
}

/* The inputs of a case, as the library sees them and as the oracle does. */
typedef struct {
    tu_buf *q, *k, *v, *dout, *bias;
    float *slopes, *sinks;
    double *slopes_d, *sinks_d;
    fa_options opt;
} inputs;

static void inputs_make(const tu_case *c, const seqmap *m, inputs *in)
{
    tu_rng rng = { c->seed * 0x9E3779B97F4A7C15ull + 12345 };
    const int64_t H = c->H, Hkv = c->Hkv, TB = m->TB, rows_q = m->rows_q, rows_k = m->rows_k;
    memset(in, 0, sizeof *in);
    in->q = tu_buf_new(c->dt, TB, rows_q, H, c->dqk, c->layout);
    in->k = tu_buf_new(c->dt, TB, rows_k, Hkv, c->dqk, c->layout);
    in->v = tu_buf_new(c->dt, TB, rows_k, Hkv, c->dv, c->layout);
    in->dout = tu_buf_new(c->dt, TB, rows_q, H, c->dv, c->layout);   /* dout has q's dtype */
    double amp = c->amp > 0 ? c->amp : 1.0;
    tu_fill(in->q, &rng, amp);
    tu_fill(in->k, &rng, amp);
    tu_fill(in->v, &rng, 1.0);
    tu_fill(in->dout, &rng, 1.0);
    /* NaN modes poison batch entry 0: none exists when TB = 0 (B = 0) */
    if (c->nan_mode == TN_Q_ROW && TB > 0 && rows_q > 0 && H > 0)
        for (int64_t d = 0; d < c->dqk; d++) tu_set(in->q, 0, rows_q / 2, H - 1, d, NAN);
    if (c->nan_mode == TN_K_ROW && TB > 0 && rows_k > 0 && Hkv > 0) tu_set(in->k, 0, rows_k / 3, 0, 0, NAN);
    if (c->nan_mode == TN_V_ELEM && TB > 0 && rows_k > 0 && Hkv > 0 && c->dv > 1)
        tu_set(in->v, 0, rows_k - 1, 0, 1, NAN);
    if (c->alibi) {
        in->slopes = malloc(sizeof(float) * (size_t)(H + 1));
        in->slopes_d = malloc(sizeof(double) * (size_t)(H + 1));
        for (int64_t h = 0; h < H; h++) {
            in->slopes[h] = (float)(exp2(-8.0 * (double)(h + 1) / (double)H) * (1.0 + 0.1 * tu_unif(&rng)));
            in->slopes_d[h] = in->slopes[h];
        }
    }
    if (c->sinks) {
        double sa = c->sink_amp > 0 ? c->sink_amp : 2.0;
        in->sinks = malloc(sizeof(float) * (size_t)(H + 1));
        in->sinks_d = malloc(sizeof(double) * (size_t)(H + 1));
        for (int64_t h = 0; h < H; h++) { in->sinks[h] = (float)(tu_unif(&rng) * sa); in->sinks_d[h] = in->sinks[h]; }
    }
    in->bias = c->bias ? make_bias(c, &rng) : NULL;
    fa_options *o = &in->opt;
    o->scale = c->scale; o->causal = c->causal; o->window = c->window;
    o->window_left = c->wl; o->window_right = c->wr; o->softcap = c->softcap;
    o->alibi_slopes = in->slopes; o->sinks = in->sinks; o->bias = in->bias ? &in->bias->t : NULL;
    o->dropout_p = c->dropout_p; o->seed = c->dseed; o->offset = c->doffset;
    o->deterministic = c->deterministic;
}

static void inputs_free(inputs *in)
{
    tu_buf_free(in->q); tu_buf_free(in->k); tu_buf_free(in->v); tu_buf_free(in->dout);
    tu_buf_free(in->bias);
    free(in->slopes); free(in->sinks); free(in->slopes_d); free(in->sinks_d);
}

/* The oracle of the case: every sequence gathered into doubles, then or_compute. */
static void oracle_make(const tu_case *c, const seqmap *m, const inputs *in, or_oracle *o)
{
    const int64_t B = c->B, H = c->H;
    or_seq_data *sd = calloc((size_t)(B > 0 ? B : 1), sizeof *sd);
    ck_assert(sd != NULL);
    for (int64_t b = 0; b < B; b++) {
        int64_t tb = c->varlen ? 0 : b;
        or_seq_data *d = &sd[b];
        d->sq = m->sq[b]; d->sk = m->sk[b];
        d->q_row = tb * m->rows_q + m->q0[b]; d->k_row = tb * m->rows_k + m->k0[b];
        d->drop_b = b; d->drop_i0 = 0;
        d->q = tu_gather(in->q, tb, m->q0[b], d->sq); d->k = tu_gather(in->k, tb, m->k0[b], d->sk);
        d->v = tu_gather(in->v, tb, m->k0[b], d->sk); d->dout = tu_gather(in->dout, tb, m->q0[b], d->sq);
        d->bias = in->bias ? bias_gather(in->bias, b, H, d->sq, d->sk) : NULL;
    }
    or_problem p;
    memset(&p, 0, sizeof p);
    p.nseq = B; p.nq = m->TB * m->rows_q; p.nk = m->TB * m->rows_k;
    p.hq = H; p.hkv = c->Hkv; p.dqk = c->dqk; p.dv = c->dv; p.dt = c->dt; p.odt = c->odt;
    p.scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)c->dqk);
    p.causal = c->causal; p.window = c->window; p.wl = c->wl; p.wr = c->wr;
    p.softcap = c->softcap; p.alibi = in->slopes_d; p.sinks = in->sinks_d;
    p.dropout_p = c->dropout_p; p.seed = c->dseed; p.offset = c->doffset;
    p.large_logits = (c->amp > 0 ? c->amp : 1.0) >= 10.0;
    p.seqs = sd;
    ck_assert_msg(or_compute(&p, c->backward, o) == 0, "or_compute: out of memory");
    for (int64_t b = 0; b < B; b++) {
        free((void *)sd[b].q); free((void *)sd[b].k); free((void *)sd[b].v);
        free((void *)sd[b].dout); free((void *)sd[b].bias);
    }
    free(sd);
}

static void check(const tu_case *c, const char *be, const or_oracle *o, or_tensor t,
                  const double *ours)
{
    or_result r;
    if (!or_check(o, t, ours, &r)) {
        char msg[512];
        or_result_str(&r, t, msg, sizeof msg);
        FAILF("%s: %s", be, msg);
    }
}

/* The outputs of a case, reused by every backend. */
typedef struct { tu_buf *out, *lse, *dq, *dk, *dv, *dsk; } outputs;

static void forward_one(const tu_case *c, const seqmap *m, inputs *in, outputs *ou,
                        fa_context *ctx, const char *be, const or_oracle *o)
{
    const int64_t H = c->H, rows_q = m->rows_q;
    tu_buf *ins[5] = { in->q, in->k, in->v, in->dout, in->bias };
    const char *in_names[5] = { "q", "k", "v", "dout", "bias" };
    char msg[512];
    tu_poison(ou->out); tu_poison(ou->lse);
    if (c->varlen) {
        tu_must_rows(ou->out, 0, m->Tq);
        memset(ou->lse->must, 0, ou->lse->nel);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < m->Tq; i++) ou->lse->must[ou->lse->off + h * rows_q + i] = 1;
    }
    if (c->no_lse) memset(ou->lse->must, 0, ou->lse->nel);
    tu_snapshot(ou->out); tu_snapshot(ou->lse);
    for (int x = 0; x < 5; x++) if (ins[x]) tu_snapshot(ins[x]);
    float *lsep = c->no_lse ? NULL : (float *)ou->lse->t.data;
    fa_status st = c->varlen
        ? fa_forward_varlen(ctx, &ou->out->t, lsep, &in->q->t, &in->k->t, &in->v->t, m->cuq,
                            m->cuk, c->B, m->maxq + c->max_slack, m->maxk + c->max_slack, &in->opt)
        : fa_forward(ctx, &ou->out->t, lsep, &in->q->t, &in->k->t, &in->v->t, &in->opt);
    if (st != FA_OK)
        FAILF("%s: forward returned %d (%s): %s", be, (int)st, fa_status_string(st),
              fa_last_error(ctx));
    if (!tu_check_written(ou->out, "out", msg, sizeof msg)) FAILF("%s: forward: %s", be, msg);
    if (!tu_check_written(ou->lse, "lse", msg, sizeof msg)) FAILF("%s: forward: %s", be, msg);
    for (int x = 0; x < 5; x++)
        if (ins[x] && !tu_check_unchanged(ins[x], in_names[x], msg, sizeof msg))
            FAILF("%s: forward modified an input: %s", be, msg);
    double *g_out = gather_all(ou->out);
    check(c, be, o, OR_OUT, g_out);
    free(g_out);
    if (c->no_lse) return;
    /* the library's lse ([B][H][Sq], or [H][rows] for varlen) in the oracle's [H][rows] */
    const int64_t nq = m->TB * rows_q;
    double *g_lse = calloc((size_t)(H * nq > 0 ? H * nq : 1), sizeof(double));
    ck_assert(g_lse != NULL);
    for (int64_t h = 0; h < H; h++)
        for (int64_t r = 0; r < nq; r++) {
            int64_t li = c->varlen ? h * rows_q + r : ((r / rows_q) * H + h) * rows_q + r % rows_q;
            g_lse[h * nq + r] = ((float *)ou->lse->t.data)[li];
        }
    check(c, be, o, OR_LSE, g_lse);
    free(g_lse);
}

static void backward_one(const tu_case *c, const seqmap *m, inputs *in, outputs *ou,
                         fa_context *ctx, const char *be, const or_oracle *o)
{
    tu_buf *ins[5] = { in->q, in->k, in->v, in->dout, in->bias };
    const char *in_names[5] = { "q", "k", "v", "dout", "bias" };
    char msg[512];
    tu_poison(ou->dq); tu_poison(ou->dk); tu_poison(ou->dv); tu_poison(ou->dsk);
    if (c->varlen) {
        tu_must_rows(ou->dq, 0, m->Tq); tu_must_rows(ou->dk, 0, m->Tk); tu_must_rows(ou->dv, 0, m->Tk);
    }
    if (!in->sinks) memset(ou->dsk->must, 0, ou->dsk->nel);
    tu_snapshot(ou->dq); tu_snapshot(ou->dk); tu_snapshot(ou->dv); tu_snapshot(ou->dsk);
    tu_snapshot(ou->out); tu_snapshot(ou->lse);
    float *dsp = in->sinks ? (float *)ou->dsk->t.data : NULL;
    fa_status st = c->varlen
        ? fa_backward_varlen(ctx, &ou->dq->t, &ou->dk->t, &ou->dv->t, dsp, &in->dout->t,
                             &in->q->t, &in->k->t, &in->v->t, &ou->out->t,
                             (float *)ou->lse->t.data, m->cuq, m->cuk, c->B,
                             m->maxq + c->max_slack, m->maxk + c->max_slack, &in->opt)
        : fa_backward(ctx, &ou->dq->t, &ou->dk->t, &ou->dv->t, dsp, &in->dout->t, &in->q->t,
                      &in->k->t, &in->v->t, &ou->out->t, (float *)ou->lse->t.data, &in->opt);
    if (st != FA_OK)
        FAILF("%s: backward returned %d (%s): %s", be, (int)st, fa_status_string(st),
              fa_last_error(ctx));
    if (!tu_check_written(ou->dq, "dq", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
    if (!tu_check_written(ou->dk, "dk", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
    if (!tu_check_written(ou->dv, "dv", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
    if (!tu_check_written(ou->dsk, "dsinks", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
    for (int x = 0; x < 5; x++)
        if (ins[x] && !tu_check_unchanged(ins[x], in_names[x], msg, sizeof msg))
            FAILF("%s: backward modified an input: %s", be, msg);
    if (!tu_check_unchanged(ou->out, "out", msg, sizeof msg) ||
        !tu_check_unchanged(ou->lse, "lse", msg, sizeof msg))
        FAILF("%s: backward modified an input: %s", be, msg);
    double *g = gather_all(ou->dq);
    check(c, be, o, OR_DQ, g);
    free(g);
    g = gather_all(ou->dk);
    check(c, be, o, OR_DK, g);
    free(g);
    g = gather_all(ou->dv);
    check(c, be, o, OR_DV, g);
    free(g);
    if (in->sinks) {
        double g_ds[512];
        ck_assert(c->H <= 512);
        for (int64_t h = 0; h < c->H; h++) g_ds[h] = ((float *)ou->dsk->t.data)[h];
        check(c, be, o, OR_DSINKS, g_ds);
    }
}

void tu_run(const tu_case *c)
{
    seqmap m;
    inputs in;
    or_oracle o;
    seqmap_make(c, &m);
    inputs_make(c, &m, &in);
    oracle_make(c, &m, &in, &o);
    const int64_t TB = m.TB, H = c->H, Hkv = c->Hkv;
    const int64_t lse_n = c->varlen ? H * m.rows_q : c->B * H * c->Sq;
    outputs ou;
    ou.out = tu_buf_new(c->odt, TB, m.rows_q, H, c->dv, c->layout);
    ou.lse = tu_buf_flat(FA_F32, lse_n);
    ou.dq = tu_buf_new(c->odt, TB, m.rows_q, H, c->dqk, c->layout);
    ou.dk = tu_buf_new(c->odt, TB, m.rows_k, Hkv, c->dqk, c->layout);
    ou.dv = tu_buf_new(c->odt, TB, m.rows_k, Hkv, c->dv, c->layout);
    ou.dsk = tu_buf_flat(FA_F32, H);
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        if (c->tile_q || c->tile_kv)
            ck_assert_int_eq(fa_context_set_tiles(ctx, c->tile_q, c->tile_kv), FA_OK);
        if (c->threads && bes[bi] != FA_BACKEND_REFERENCE)
            ck_assert_int_eq(fa_context_set_threads(ctx, c->threads), FA_OK);
        forward_one(c, &m, &in, &ou, ctx, be, &o);
        if (c->backward) backward_one(c, &m, &in, &ou, ctx, be, &o);
        fa_context_destroy(ctx);
    }
    tu_buf_free(ou.out); tu_buf_free(ou.lse); tu_buf_free(ou.dq); tu_buf_free(ou.dk);
    tu_buf_free(ou.dv); tu_buf_free(ou.dsk);
    or_free(&o);
    inputs_free(&in);
    seqmap_free(&m);
}
