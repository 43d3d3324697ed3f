/* problem.c - the oracle of a whole problem (see oracle.h): the double-precision oracle,
 * the two same-precision models and the sizes of the terms that set the floors, sequence
 * by sequence, scattered into the problem-wide layouts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

static double *dalloc(int64_t n, int *fail)
{
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!x) *fail = 1;
    return x;
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* The coarser of two dtypes: the precision the data of a result passed through. */
static fa_dtype coarser(fa_dtype a, fa_dtype b)
{
    return or_eps(a) >= or_eps(b) ? a : b;
}

/* Two same-precision models: keep in a[x] whichever of a[x], b[x] is farther from the
   oracle o[x] (the naive error is the larger of theirs: P's roundings to a half dtype fall
   in different places in a plain and in a flash-style implementation, and a row with few
   keys has few of them) */
static void far_of(double *a, const double *b, const double *o, int64_t n)
{
    for (int64_t x = 0; x < n; x++)
        if (fabs(b[x] - o[x]) > fabs(a[x] - o[x])) a[x] = b[x];
}

/* scatter a [n][H][D] double array into a problem-wide [rows][H][D] array at row r0 */
static void put_rows(double *dst, const double *src, int64_t r0, int64_t n, int64_t H,
                     int64_t D)
{
    if (n > 0) memcpy(dst + r0 * H * D, src, sizeof(double) * (size_t)(n * H * D));
}

static or_seq seq_of(const or_problem *p, const or_seq_data *d)
{
    or_seq s;
    memset(&s, 0, sizeof s);
    s.sq = d->sq; s.sk = d->sk; s.hq = p->hq; s.hkv = p->hkv; s.dqk = p->dqk; s.dv = p->dv;
    s.scale = p->scale; s.causal = p->causal; s.window = p->window; s.wl = p->wl;
    s.wr = p->wr; s.softcap = p->softcap; s.alibi = p->alibi; s.sinks = p->sinks;
    s.bias = d->bias; s.dropout_p = p->dropout_p; s.seed = p->seed; s.offset = p->offset;
    s.drop_b = d->drop_b; s.drop_i0 = d->drop_i0;
    return s;
}

static void put_lse(const or_problem *p, double *dst, const double *tl, const or_seq_data *d)
{
    for (int64_t h = 0; h < p->hq; h++)
        for (int64_t i = 0; i < d->sq; i++) dst[h * p->nq + d->q_row + i] = tl[h * d->sq + i];
}

/* The largest |scale| sum_c |q_c k_c| (the size of a score's terms: any fp32 score carries
   roundoff of that size, and so does an lse dominated by one score) and, for large-logit
   problems, the largest |scale q.k|. */
static void score_sizes(const or_problem *p, const or_seq_data *d, or_oracle *o)
{
    const int64_t H = p->hq, Hkv = p->hkv, dqk = p->dqk;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < d->sq; i++)
            for (int64_t j = 0; j < d->sk; j++) {
                double dot = 0.0, dabs = 0.0;
                const double *qr = d->q + (i * H + h) * dqk, *kr = d->k + (j * Hkv + h / (H / Hkv)) * dqk;
                for (int64_t x = 0; x < dqk; x++) {
                    dot += qr[x] * kr[x];
                    dabs += fabs(qr[x] * kr[x]);
                }
                if (p->large_logits && fabs(dot * p->scale) > o->smax) o->smax = fabs(dot * p->scale);
                if (isfinite(dabs) && dabs * fabs(p->scale) > o->sterm) o->sterm = dabs * fabs(p->scale);
            }
}

static void max_into(double *m, const double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > *m) *m = fabs(x[i]);
}

/* The forward of one sequence: oracle, naive (the larger error of the two models for
   half inputs), out's and lse's terms, masked rows and unseen keys. to_sp, to_fl (NULL
   for fp32 inputs): the two models' out, which the backward models take as given. */
static int seq_forward(or_oracle *o, const or_seq *s, const or_seq_data *d, double *to_sp,
                       double **to_fl, double *t_l)
{
    const or_problem *p = &o->p;
    const int64_t H = p->hq, dv = p->dv, r0 = d->q_row;
    int fail = 0;
    double *to = dalloc(d->sq * H * dv, &fail), *tl = dalloc(H * d->sq, &fail);
    double *t_o = dalloc(d->sq * H * dv, &fail);
    *to_fl = NULL;
    if (fail) goto done;
    or_forward(s, d->q, d->k, d->v, to, tl);
    put_rows(o->out, to, r0, d->sq, H, dv);
    put_lse(p, o->lse, tl, d);
    or_forward_sp(s, p->dt, p->odt, d->q, d->k, d->v, to, tl);
    memcpy(to_sp, to, sizeof(double) * (size_t)(d->sq * H * dv));
    if (p->dt != FA_F32) {
        *to_fl = dalloc(d->sq * H * dv, &fail);
        if (fail) goto done;
        or_forward_sp_flash(s, p->dt, p->odt, d->q, d->k, d->v, *to_fl, NULL);
        far_of(to, *to_fl, o->out + r0 * H * dv, d->sq * H * dv);
    }
    put_rows(o->n_out, to, r0, d->sq, H, dv);
    put_lse(p, o->n_lse, tl, d);
    /* out's term floor, and out's and lse's terms per row for dsinks' */
    or_forward_terms(s, d->q, d->k, d->v, o->out + r0 * H * dv, t_o, t_l);
    double m = max_abs(t_o, d->sq * H * dv);
    if (m > o->oterm) o->oterm = m;
    put_rows(o->tout, t_o, r0, d->sq, H, dv);
    put_lse(p, o->tlse, t_l, d);
    for (int64_t i = 0; i < d->sq; i++) {
        int vis = 0;
        for (int64_t j = 0; j < d->sk && !vis; j++) vis = or_visible(s, i, j);
        o->row_masked[r0 + i] = !vis;
        o->q_used[r0 + i] = 1;
    }
    for (int64_t j = 0; j < d->sk; j++) {
        int vis = 0;
        for (int64_t i = 0; i < d->sq && !vis; i++) vis = or_visible(s, i, j);
        o->key_unseen[d->k_row + j] = !vis;
        o->k_used[d->k_row + j] = 1;
    }
done:
    free(to); free(tl); free(t_o);
    return fail ? -1 : 0;
}

/* The backward of one sequence: oracle, naive, and the terms of dq, dk, dv. */
static int seq_backward(or_oracle *o, const or_seq *s, const or_seq_data *d,
                        const double *to_sp, const double *to_fl, const double *t_l)
{
    const or_problem *p = &o->p;
    const int64_t H = p->hq, Hkv = p->hkv, dqk = p->dqk, dv = p->dv;
    const int64_t r0 = d->q_row, kr0 = d->k_row, sq = d->sq, sk = d->sk;
    int fail = 0;
    double *gq = dalloc(sq * H * dqk, &fail), *gk = dalloc(sk * Hkv * dqk, &fail);
    double *gv = dalloc(sk * Hkv * dv, &fail);
    double *gq2 = dalloc(sq * H * dqk, &fail), *gk2 = dalloc(sk * Hkv * dqk, &fail);
    if (fail) goto done;
    or_backward(s, d->q, d->k, d->v, d->dout, gq, gk, gv, o->ds);
    put_rows(o->dq, gq, r0, sq, H, dqk); put_rows(o->dk, gk, kr0, sk, Hkv, dqk);
    put_rows(o->dv, gv, kr0, sk, Hkv, dv);
    or_backward_sp(s, p->dt, p->odt, d->q, d->k, d->v, to_sp, d->dout, gq, gk, gv, o->n_ds);
    put_rows(o->n_dq, gq, r0, sq, H, dqk); put_rows(o->n_dk, gk, kr0, sk, Hkv, dqk);
    put_rows(o->n_dv, gv, kr0, sk, Hkv, dv);
    if (to_fl) {   /* the backward from the flash-style model's out; it writes every
                      element of gq, gk, gv (its dsinks are not compared) */
        or_backward_sp_flash(s, p->dt, p->odt, d->q, d->k, d->v, to_fl, d->dout, gq, gk, gv, NULL);
        far_of(o->n_dq + r0 * H * dqk, gq, o->dq + r0 * H * dqk, sq * H * dqk);
        far_of(o->n_dk + kr0 * Hkv * dqk, gk, o->dk + kr0 * Hkv * dqk, sk * Hkv * dqk);
        far_of(o->n_dv + kr0 * Hkv * dv, gv, o->dv + kr0 * Hkv * dv, sk * Hkv * dv);
    }
    memset(gq, 0, sizeof(double) * (size_t)(sq * H * dqk));
    memset(gk, 0, sizeof(double) * (size_t)(sk * Hkv * dqk));
    memset(gv, 0, sizeof(double) * (size_t)(sk * Hkv * dv));
    /* D's terms at the rounding of out as stored: one odt ulp per fp32 ulp when out is
       coarser than fp32 */
    or_backward_terms(s, d->q, d->k, d->v, o->out + r0 * H * dv, d->dout, t_l,
                      or_eps(coarser(FA_F32, p->odt)) / or_eps(FA_F32), gq, gk, gv, gq2, gk2);
    /* P's own roundoff, the root of its squares, joins the terms' floor */
    for (int64_t x = 0; x < sq * H * dqk; x++) gq[x] += sqrt(gq2[x]);
    for (int64_t x = 0; x < sk * Hkv * dqk; x++) gk[x] += sqrt(gk2[x]);
    put_rows(o->t_q, gq, r0, sq, H, dqk); put_rows(o->t_k, gk, kr0, sk, Hkv, dqk);
    put_rows(o->t_v, gv, kr0, sk, Hkv, dv);
done:
    free(gq); free(gk); free(gv); free(gq2); free(gk2);
    return fail ? -1 : 0;
}

/* dsinks' reference magnitude: max over heads of sqrt(sum_i (psink_i L_i)^2), psink_i =
   exp(sink_h - lse_i), L_i = sum_c |dout_ic out_ic| (oracle out and lse). D_i's rounding
   error is at most about eps * L_i (one rounding per term: out stored in its dtype, and
   the sum's own adds); the rows' errors are independent, so they add in quadrature.
   psink_i itself is exp of a difference of fp32 numbers, so it carries a relative error of
   fp32 eps * (|sink_h| + |lse_i|), plus lse_i's own roundoff from its scores, eps * tlse_i
   (an fp32 dot product rounds at the size of its terms, whatever lse's size); and D_i is
   formed from out, whose elements carry eps * tout_ic of the same roundoff: that part
   (ss2) is added in fp32 ulps, converted to the floor dtype's. ds_l1: the largest
   sum_i psink_i L_i (the size of the fp32 sum over rows). */
static void dsinks_sizes(or_oracle *o)
{
    const or_problem *p = &o->p;
    const int64_t H = p->hq, dv = p->dv;
    const fa_dtype ds_dt = coarser(p->dt, p->odt);
    for (int64_t h = 0; h < H; h++) {
        double ss = 0.0, ss2 = 0.0, sl1 = 0.0;
        for (int64_t b = 0; b < p->nseq; b++) {
            const or_seq_data *d = &p->seqs[b];
            for (int64_t i = 0; i < d->sq; i++) {
                int64_t li = h * p->nq + d->q_row + i;
                if (!isfinite(o->lse[li])) continue;
                double ps = exp(p->sinks[h] - o->lse[li]), l1 = 0.0, dt_o = 0.0;
                for (int64_t x = 0; x < dv; x++) {
                    const double g = fabs(d->dout[(i * H + h) * dv + x]);
                    const int64_t oi = ((d->q_row + i) * H + h) * dv + x;
                    l1 += g * fabs(o->out[oi]);
                    if (isfinite(g * o->tout[oi])) dt_o += g * o->tout[oi];
                }
                ss += ps * l1 * ps * l1;
                sl1 += ps * l1;
                const double tls = isfinite(o->tlse[li]) ? o->tlse[li] : 0.0;
                double e = ps * (l1 * (fabs(p->sinks[h]) + fabs(o->lse[li]) + tls) + dt_o);
                ss2 += e * e;
            }
        }
        double m = sqrt(ss) + sqrt(ss2) * or_eps(FA_F32) / or_eps(ds_dt);
        if (m > o->ds_rss) o->ds_rss = m;
        if (sl1 > o->ds_l1) o->ds_l1 = sl1;
    }
}

static int alloc_all(or_oracle *o)
{
    const or_problem *p = &o->p;
    const int64_t H = p->hq, Hkv = p->hkv, nq = p->nq, nk = p->nk;
    int fail = 0;
    o->out = dalloc(nq * H * p->dv, &fail); o->n_out = dalloc(nq * H * p->dv, &fail);
    o->lse = dalloc(H * nq, &fail); o->n_lse = dalloc(H * nq, &fail);
    o->tout = dalloc(nq * H * p->dv, &fail); o->tlse = dalloc(H * nq, &fail);
    o->q_used = calloc((size_t)(nq > 0 ? nq : 1), 1);
    o->k_used = calloc((size_t)(nk > 0 ? nk : 1), 1);
    o->row_masked = calloc((size_t)(nq > 0 ? nq : 1), 1);
    o->key_unseen = calloc((size_t)(nk > 0 ? nk : 1), 1);
    if (!o->q_used || !o->k_used || !o->row_masked || !o->key_unseen) fail = 1;
    if (p->sinks) {
        o->sinks = dalloc(H, &fail);
        if (o->sinks) memcpy(o->sinks, p->sinks, sizeof(double) * (size_t)H);
    }
    if (o->backward) {
        o->dq = dalloc(nq * H * p->dqk, &fail); o->n_dq = dalloc(nq * H * p->dqk, &fail);
        o->dk = dalloc(nk * Hkv * p->dqk, &fail); o->n_dk = dalloc(nk * Hkv * p->dqk, &fail);
        o->dv = dalloc(nk * Hkv * p->dv, &fail); o->n_dv = dalloc(nk * Hkv * p->dv, &fail);
        o->ds = dalloc(H, &fail); o->n_ds = dalloc(H, &fail);
        o->t_q = dalloc(nq * H * p->dqk, &fail); o->t_k = dalloc(nk * Hkv * p->dqk, &fail);
        o->t_v = dalloc(nk * Hkv * p->dv, &fail);
    }
    return fail ? -1 : 0;
}

int or_compute(const or_problem *p, int backward, or_oracle *o)
{
    memset(o, 0, sizeof *o);
    o->p = *p;
    o->backward = backward;
    if (alloc_all(o)) { or_free(o); return -1; }
    const int64_t H = p->hq, dv = p->dv;
    for (int64_t b = 0; b < p->nseq; b++) {
        const or_seq_data *d = &p->seqs[b];
        or_seq s = seq_of(p, d);
        score_sizes(p, d, o);
        int fail = 0;
        double *to_sp = dalloc(d->sq * H * dv, &fail), *to_fl = NULL;
        double *t_l = dalloc(H * d->sq, &fail);   /* lse's terms [H][sq]: dsinks, gradients */
        if (!fail) fail = seq_forward(o, &s, d, to_sp, &to_fl, t_l);
        if (!fail) {   /* the sizes behind the flush floors */
            max_into(&o->vmax, d->v, d->sk * p->hkv * dv);
            max_into(&o->qkmax, d->k, d->sk * p->hkv * p->dqk);
            max_into(&o->qkmax, d->q, d->sq * H * p->dqk);
            if (d->dout) max_into(&o->domax, d->dout, d->sq * H * dv);
            if (d->sk > o->skmax) o->skmax = d->sk;
            if (d->sq > o->sqmax) o->sqmax = d->sq;
        }
        if (!fail && backward) fail = seq_backward(o, &s, d, to_sp, to_fl, t_l);
        free(to_sp); free(to_fl); free(t_l);
        if (fail) { or_free(o); return -1; }
    }
    if (backward && p->sinks) dsinks_sizes(o);
    return 0;
}

void or_free(or_oracle *o)
{
    double *all[] = { o->out, o->n_out, o->lse, o->n_lse, o->dq, o->n_dq, o->dk, o->n_dk,
                      o->dv, o->n_dv, o->ds, o->n_ds, o->tout, o->tlse, o->t_q, o->t_k,
                      o->t_v, o->sinks };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free(o->q_used); free(o->k_used); free(o->row_masked); free(o->key_unseen);
    memset(o, 0, sizeof *o);
}
