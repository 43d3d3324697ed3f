/* problem.c - the oracle of a whole problem (see oracle.h): the double-precision oracle,
 * the same-precision models and the sizes of the terms that set the floors, sequence
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

/* Same-precision models, two at a time: keep in a[x] whichever of a[x], b[x] is farther from the
   oracle o[x] (the naive error is the larger of theirs: P's roundings to a half dtype fall
   in different places in a plain and in a flash-style implementation, and a row with few
   keys has few of them) */
static void far_of(double *a, const double *b, const double *o, int64_t n)
{
    for (int64_t x = 0; x < n; x++)
        if (fabs(b[x] - o[x]) > fabs(a[x] - o[x])) a[x] = b[x];
}

/* One KV head's share of one sequence: query heads [h0, h0 + grp) with KV head hk, its
   inputs gathered into dense arrays of grp (and 1) heads. The models see it as a sequence
   of its own; every element is computed by the same operations as in the whole sequence,
   and the slices of a sequence write disjoint parts of the problem-wide arrays, so they
   run in parallel. */
typedef struct {
    or_seq s;
    const or_seq_data *d;
    int64_t hk, h0, grp;
    double *q, *k, *v, *dout;
    double smax, sterm, oterm, vmax, qkmax, domax;   /* this slice's share of the maxima */
} slice;

static int slice_make(const or_problem *p, const or_seq_data *d, int64_t hk, slice *sl)
{
    const int64_t grp = p->hq / p->hkv, h0 = hk * grp;
    memset(sl, 0, sizeof *sl);
    sl->d = d; sl->hk = hk; sl->h0 = h0; sl->grp = grp;
    or_seq *s = &sl->s;
    s->sq = d->sq; s->sk = d->sk; s->hq = grp; s->hkv = 1; s->dqk = p->dqk; s->dv = p->dv;
    s->scale = p->scale; s->causal = p->causal; s->window = p->window; s->wl = p->wl;
    s->wr = p->wr; s->softcap = p->softcap;
    s->alibi = p->alibi ? p->alibi + h0 : NULL;
    s->sinks = p->sinks ? p->sinks + h0 : NULL;
    s->bias = d->bias ? d->bias + h0 * d->sq * d->sk : NULL;
    s->dropout_p = p->dropout_p; s->seed = p->seed; s->offset = p->offset;
    s->drop_b = d->drop_b; s->drop_h0 = h0; s->drop_i0 = d->drop_i0;
    int fail = 0;
    sl->q = dalloc(d->sq * grp * p->dqk, &fail);
    sl->k = dalloc(d->sk * p->dqk, &fail);
    sl->v = dalloc(d->sk * p->dv, &fail);
    if (d->dout) sl->dout = dalloc(d->sq * grp * p->dv, &fail);
    if (fail) return -1;
    for (int64_t i = 0; i < d->sq; i++)
        for (int64_t g = 0; g < grp; g++) {
            memcpy(sl->q + (i * grp + g) * p->dqk, d->q + (i * p->hq + h0 + g) * p->dqk,
                   sizeof(double) * (size_t)p->dqk);
            if (d->dout)
                memcpy(sl->dout + (i * grp + g) * p->dv, d->dout + (i * p->hq + h0 + g) * p->dv,
                       sizeof(double) * (size_t)p->dv);
        }
    for (int64_t j = 0; j < d->sk; j++) {
        memcpy(sl->k + j * p->dqk, d->k + (j * p->hkv + hk) * p->dqk, sizeof(double) * (size_t)p->dqk);
        memcpy(sl->v + j * p->dv, d->v + (j * p->hkv + hk) * p->dv, sizeof(double) * (size_t)p->dv);
    }
    return 0;
}

static void slice_free(slice *sl)
{
    free(sl->q); free(sl->k); free(sl->v); free(sl->dout);
}

/* scatter a slice's [n][grp][D] array into the problem-wide [rows][H][D] at row r0, heads
   from h0 */
static void put_heads(double *dst, const double *src, int64_t r0, int64_t n, int64_t H,
                      int64_t h0, int64_t grp, int64_t D)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + ((r0 + i) * H + h0) * D, src + i * grp * D, sizeof(double) * (size_t)(grp * D));
}

static void put_lse(const or_problem *p, double *dst, const double *tl, const slice *sl)
{
    for (int64_t g = 0; g < sl->grp; g++)
        for (int64_t i = 0; i < sl->d->sq; i++)
            dst[(sl->h0 + g) * p->nq + sl->d->q_row + i] = tl[g * sl->d->sq + i];
}

static void max_into(double *m, const double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > *m) *m = fabs(x[i]);
}

/* The largest |scale| sum_c |q_c k_c| (the size of a score's terms: any fp32 score carries
   roundoff of that size, and so does an lse dominated by one score) and, for large-logit
   problems, the largest |scale q.k|. */
static void score_sizes(const or_problem *p, slice *sl)
{
    const or_seq *s = &sl->s;
    for (int64_t h = 0; h < s->hq; h++)
        for (int64_t i = 0; i < s->sq; i++)
            for (int64_t j = 0; j < s->sk; j++) {
                double dot = 0.0, dabs = 0.0;
                const double *qr = sl->q + (i * s->hq + h) * s->dqk, *kr = sl->k + j * s->dqk;
                for (int64_t x = 0; x < s->dqk; x++) {
                    dot += qr[x] * kr[x];
                    dabs += fabs(qr[x] * kr[x]);
                }
                if (p->large_logits && fabs(dot * p->scale) > sl->smax) sl->smax = fabs(dot * p->scale);
                if (isfinite(dabs) && dabs * fabs(p->scale) > sl->sterm) sl->sterm = dabs * fabs(p->scale);
            }
}

/* The forward of one slice: oracle, naive (the larger error of the two models for half
   inputs), out's and lse's terms. oo: the oracle's out; to_sp, to_fl (NULL for fp32
   inputs): the two models' out, which the backward models take as given; t_l: lse's
   terms. All [sq][grp][dv] or [grp][sq]. */
static int slice_forward(or_oracle *o, slice *sl, double *oo, double *to_sp, double **to_fl,
                         double *t_l)
{
    const or_problem *p = &o->p;
    const or_seq *s = &sl->s;
    const int64_t G = sl->grp, dv = p->dv, n = s->sq * G * dv, r0 = sl->d->q_row;
    int fail = 0;
    double *to = dalloc(n, &fail), *tl = dalloc(G * s->sq, &fail), *t_o = dalloc(n, &fail);
    *to_fl = NULL;
    if (fail) goto done;
    or_forward(s, sl->q, sl->k, sl->v, oo, tl);
    put_heads(o->out, oo, r0, s->sq, p->hq, sl->h0, G, dv);
    put_lse(p, o->lse, tl, sl);
    or_forward_sp(s, p->dt, p->odt, sl->q, sl->k, sl->v, to, tl);
    memcpy(to_sp, to, sizeof(double) * (size_t)n);
    if (p->dt != FA_F32) {
        *to_fl = dalloc(n, &fail);
        if (fail) goto done;
        or_forward_sp_flash(s, p->dt, p->odt, sl->q, sl->k, sl->v, *to_fl, NULL);
        far_of(to, *to_fl, oo, n);
    }
    put_heads(o->n_out, to, r0, s->sq, p->hq, sl->h0, G, dv);
    put_lse(p, o->n_lse, tl, sl);
    /* out's term floor, and out's and lse's terms per row for dsinks' */
    or_forward_terms(s, sl->q, sl->k, sl->v, oo, t_o, t_l);
    sl->oterm = or_max_abs(t_o, n);
    put_heads(o->tout, t_o, r0, s->sq, p->hq, sl->h0, G, dv);
    put_lse(p, o->tlse, t_l, sl);
    /* the sizes behind the flush floors */
    max_into(&sl->vmax, sl->v, s->sk * dv);
    max_into(&sl->qkmax, sl->k, s->sk * p->dqk);
    max_into(&sl->qkmax, sl->q, s->sq * G * p->dqk);
    if (sl->dout) max_into(&sl->domax, sl->dout, s->sq * G * dv);
done:
    free(to); free(tl); free(t_o);
    return fail ? -1 : 0;
}

/* The backward of one slice: oracle, naive, and the terms of dq, dk, dv. */
static int slice_backward(or_oracle *o, slice *sl, const double *oo, const double *to_sp,
                          const double *to_fl, const double *t_l)
{
    const or_problem *p = &o->p;
    const or_seq *s = &sl->s;
    const int64_t G = sl->grp, dqk = p->dqk, dv = p->dv, sq = s->sq, sk = s->sk;
    const int64_t r0 = sl->d->q_row, kr0 = sl->d->k_row, H = p->hq, Hkv = p->hkv, hk = sl->hk;
    const int64_t nq = sq * G * dqk, nk = sk * dqk, nv = sk * dv;
    int fail = 0;
    double *oq = dalloc(nq, &fail), *ok = dalloc(nk, &fail), *ov = dalloc(nv, &fail);
    double *gq = dalloc(nq, &fail), *gk = dalloc(nk, &fail), *gv = dalloc(nv, &fail);
    double *fq = dalloc(nq, &fail), *fk = dalloc(nk, &fail), *fv = dalloc(nv, &fail);
    double *gq2 = dalloc(nq, &fail), *gk2 = dalloc(nk, &fail);
    if (fail) goto done;
    or_backward(s, sl->q, sl->k, sl->v, sl->dout, oq, ok, ov, o->ds + sl->h0);
    or_backward_sp(s, p->dt, p->odt, sl->q, sl->k, sl->v, to_sp, sl->dout, gq, gk, gv,
                   o->n_ds + sl->h0);
    /* the backward from the flash-style model's out, with P and dS rounded to dt as the
       products' operands and with them kept in fp32: both are roundings a correct
       implementation makes, and their errors differ in sign and size element by element
       (a lucky rounding of one must not set the bound for the other). Each writes every
       element of fq, fk, fv (their dsinks are not compared). */
    for (int fp32_ops = 0; to_fl && fp32_ops <= 1; fp32_ops++) {
        or_backward_sp_flash(s, p->dt, p->odt, sl->q, sl->k, sl->v, to_fl, sl->dout, fq, fk,
                             fv, NULL, fp32_ops);
        far_of(gq, fq, oq, nq);
        far_of(gk, fk, ok, nk);
        far_of(gv, fv, ov, nv);
    }
    put_heads(o->dq, oq, r0, sq, H, sl->h0, G, dqk);
    put_heads(o->n_dq, gq, r0, sq, H, sl->h0, G, dqk);
    put_heads(o->dk, ok, kr0, sk, Hkv, hk, 1, dqk);
    put_heads(o->n_dk, gk, kr0, sk, Hkv, hk, 1, dqk);
    put_heads(o->dv, ov, kr0, sk, Hkv, hk, 1, dv);
    put_heads(o->n_dv, gv, kr0, sk, Hkv, hk, 1, dv);
    memset(gq, 0, sizeof(double) * (size_t)nq);
    memset(gk, 0, sizeof(double) * (size_t)nk);
    memset(gv, 0, sizeof(double) * (size_t)nv);
    /* D's terms at the rounding of out as stored: one odt ulp per fp32 ulp when out is
       coarser than fp32 */
    or_backward_terms(s, sl->q, sl->k, sl->v, oo, sl->dout, t_l,
                      or_eps(or_coarser(FA_F32, p->odt)) / or_eps(FA_F32), gq, gk, gv, gq2, gk2);
    /* P's own roundoff, the root of its squares, joins the terms' floor */
    for (int64_t x = 0; x < nq; x++) gq[x] += sqrt(gq2[x]);
    for (int64_t x = 0; x < nk; x++) gk[x] += sqrt(gk2[x]);
    put_heads(o->t_q, gq, r0, sq, H, sl->h0, G, dqk);
    put_heads(o->t_k, gk, kr0, sk, Hkv, hk, 1, dqk);
    put_heads(o->t_v, gv, kr0, sk, Hkv, hk, 1, dv);
done:
    free(oq); free(ok); free(ov); free(gq); free(gk); free(gv); free(fq); free(fk); free(fv);
    free(gq2); free(gk2);
    return fail ? -1 : 0;
}

/* Everything of one slice. Returns 0, or -1 (out of memory). */
static int slice_run(or_oracle *o, const or_seq_data *d, int64_t hk, int backward, slice *sl)
{
    const or_problem *p = &o->p;
    if (slice_make(p, d, hk, sl)) { slice_free(sl); return -1; }
    score_sizes(p, sl);
    const int64_t n = d->sq * sl->grp * p->dv;
    int fail = 0;
    double *oo = dalloc(n, &fail), *to_sp = dalloc(n, &fail), *to_fl = NULL;
    double *t_l = dalloc(sl->grp * d->sq, &fail);   /* lse's terms: dsinks, gradients */
    if (!fail) fail = slice_forward(o, sl, oo, to_sp, &to_fl, t_l);
    if (!fail && backward) fail = slice_backward(o, sl, oo, to_sp, to_fl, t_l);
    free(oo); free(to_sp); free(to_fl); free(t_l);
    slice_free(sl);
    return fail ? -1 : 0;
}

/* Masked query rows and unseen keys of a sequence (the same for every head). */
static void visibility(or_oracle *o, const or_seq_data *d)
{
    or_seq s;
    memset(&s, 0, sizeof s);
    const or_problem *p = &o->p;
    s.sq = d->sq; s.sk = d->sk; s.causal = p->causal; s.window = p->window;
    s.wl = p->wl; s.wr = p->wr;
    for (int64_t i = 0; i < d->sq; i++) {
        int vis = 0;
        for (int64_t j = 0; j < d->sk && !vis; j++) vis = or_visible(&s, i, j);
        o->row_masked[d->q_row + i] = !vis;
        o->q_used[d->q_row + i] = 1;
    }
    for (int64_t j = 0; j < d->sk; j++) {
        int vis = 0;
        for (int64_t i = 0; i < d->sq && !vis; i++) vis = or_visible(&s, i, j);
        o->key_unseen[d->k_row + j] = !vis;
        o->k_used[d->k_row + j] = 1;
    }
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
    const fa_dtype ds_dt = or_coarser(p->dt, p->odt);
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
    int fail = 0;
    /* sequences one after the other (dsinks sums over them in order), the KV heads of
       each in parallel */
    for (int64_t b = 0; b < p->nseq && !fail; b++) {
        const or_seq_data *d = &p->seqs[b];
        visibility(o, d);
        if (d->sk > o->skmax) o->skmax = d->sk;
        if (d->sq > o->sqmax) o->sqmax = d->sq;
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t hk = 0; hk < p->hkv; hk++) {
            slice sl;
            int f = slice_run(o, d, hk, backward, &sl);
#pragma omp critical(or_compute_merge)
            {
                if (f) fail = 1;
                if (sl.smax > o->smax) o->smax = sl.smax;
                if (sl.sterm > o->sterm) o->sterm = sl.sterm;
                if (sl.oterm > o->oterm) o->oterm = sl.oterm;
                if (sl.vmax > o->vmax) o->vmax = sl.vmax;
                if (sl.qkmax > o->qkmax) o->qkmax = sl.qkmax;
                if (sl.domax > o->domax) o->domax = sl.domax;
            }
        }
    }
    if (fail) { or_free(o); return -1; }
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
