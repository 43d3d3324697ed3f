/* check.c - one output tensor against the oracle of its problem (see oracle.h): the
 * parameters of the rule for each tensor, and why each floor is what it is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

int64_t or_count(const or_oracle *o, or_tensor t)
{
    const or_problem *p = &o->p;
    switch (t) {
    case OR_OUT: return p->nq * p->hq * p->dv;
    case OR_LSE: return p->hq * p->nq;
    case OR_DQ: return p->nq * p->hq * p->dqk;
    case OR_DK: return p->nk * p->hkv * p->dqk;
    case OR_DV: return p->nk * p->hkv * p->dv;
    case OR_DSINKS: return p->hq;
    }
    return 0;
}

const char *or_tensor_name(or_tensor t)
{
    static const char *n[] = { "out", "lse", "dq", "dk", "dv", "dsinks" };
    return (unsigned)t < 6 ? n[t] : "?";
}

/* How the rule is set for one tensor: the oracle and naive arrays, the dtype whose
   epsilon sets the floor, the factor, the reference magnitude, the floor in ulps and the
   term floor. */
typedef struct {
    const double *orc, *naive;
    fa_dtype odt;
    double factor, ref_mag, floor_ulps, term_floor;
} or_setting;

/* out's term floor: each score carries fp32 roundoff of its terms (|scale| sum_c
   |q_c k_c|) whatever the summation order, and out moves by P_ij (m_ij v_j - out_i) per
   unit of s_ij: one fp32 ulp of the largest sum_j P_ij |scale| (sum_c |q_ic k_jc|)
   |m_ij v_jc - out_ic|, plus the steps after the dot product, which round at the score's
   own size (or_forward_terms). Part of the floor: for fp32 inputs the 1e-5 relative rule
   still caps the bound. Plus the flush floor: the fast backends give P = 0 where exp is
   below fp32's smallest normal (2^-126) rather than a subnormal; each row then loses at
   most Sk such terms of |v| / (1 - p) (l >= 1: the row's maximum has P = 1). It matters
   only where out itself is near 1e-38. */
static double out_flush(const or_oracle *o)
{
    const or_problem *p = &o->p;
    const double dropk = p->dropout_p < 1.0f ? 1.0 / (1.0 - (double)p->dropout_p) : 1.0;
    return (double)o->skmax * 0x1p-126 * o->vmax * dropk;
}

/* The gradients' flush floor: a P flushed to 0 drops its dS = P (dP - D) terms from dq
   and dk (each at most |scale| (|dP| + |D|) max|k or q|) and its P dout terms from dv, at
   most max(Sq, Sk) of each per element. */
static double grad_flush(const or_oracle *o)
{
    const or_problem *p = &o->p;
    const double dropk = p->dropout_p < 1.0f ? 1.0 / (1.0 - (double)p->dropout_p) : 1.0;
    const double sc = fabs(p->scale) > 1.0 ? fabs(p->scale) : 1.0;
    return (double)(o->skmax > o->sqmax ? o->skmax : o->sqmax) * 0x1p-126 *
        (sc * (double)p->dv * o->domax *
         (o->vmax * dropk + or_max_abs(o->out, or_count(o, OR_OUT))) *
         (o->qkmax > 1.0 ? o->qkmax : 1.0) + o->domax * dropk);
}

static void setting_out(const or_oracle *o, or_setting *s)
{
    const or_problem *p = &o->p;
    s->orc = o->out; s->naive = o->n_out; s->odt = p->odt; s->factor = 2.0; s->ref_mag = 0.0;
    /* out: the floor stays in odt. A floor in the data's precision (for an F32 out of bf16
       inputs) would be one bf16 rounding at max|out|, larger than a systematic 0.3 % error
       of the kernels that this rule has caught. An F32 out of half inputs gets two fp32
       eps at max|out|, not one: its products P v are exact in fp32 where P is rounded to
       the inputs' dtype, so the naive models can be exact, while out still takes three
       fp32 roundings at its own size (the sum's last add, 1/l, the product), up to 1.5
       ulps, and one eps at max|out| is one to two ulps of it depending on where it lies
       in its binade (a row whose one key has P = 1 gives 2 ulps against a bound of 1.99). */
    s->floor_ulps = p->odt == FA_F32 && p->dt != FA_F32 ? 2.0 : 1.0;
    s->term_floor = or_eps(FA_F32) * o->oterm + out_flush(o);
}

/* Gradients: dS = P (dP - D) subtracts two dv-term dot products that cancel (exactly, for
   a row that sees one key), each accumulated in fp32 by every implementation, and dq/dk
   carry |scale| on top; so a gradient the naive happens to get exact still carries that
   fp32 noise. The reference magnitude is the largest |oracle| gradient of the call (dq of
   a single-key row is exactly 0 in exact arithmetic but is formed from O(1) terms), and
   the floor is one ulp of odt there (the result's own rounding) plus (2 + sqrt(d_v)) x
   max(1, |scale|) fp32 ulps there.
   dq and dk also carry the fp32 roundoff of the dP - D terms they are made of, at the
   magnitude of those terms, not of the result (or_backward_terms): where dP - D vanishes
   in exact arithmetic (a row whose softmax is one key, large logits) the reference
   magnitude is the size of what is left of other rows, and no fp32 implementation gets
   below the terms' noise. That floor is one fp32 rounding at the terms' magnitude (the
   terms of both dot products summed, so it grows with d_v and with the number of keys);
   it is part of the floor, so the fp32 1e-5 relative rule still caps the bound (lifted
   only for large logits, or_check). Each term also carries P_ij's own roundoff, added in
   quadrature over the pairs; dv carries only that, sqrt(sum_i (P_ij ep_ij |m_ij
   dout_ic|)^2). */
static void setting_grad(const or_oracle *o, or_tensor t, or_setting *s)
{
    const or_problem *p = &o->p;
    double gref = or_max_abs(o->dq, or_count(o, OR_DQ)), m;
    if ((m = or_max_abs(o->dk, or_count(o, OR_DK))) > gref) gref = m;
    if ((m = or_max_abs(o->dv, or_count(o, OR_DV))) > gref) gref = m;
    s->odt = p->odt; s->factor = 3.0; s->ref_mag = gref;
    s->floor_ulps = 1.0 + (2.0 + sqrt((double)p->dv)) * (fabs(p->scale) > 1.0 ? fabs(p->scale) : 1.0) *
                          or_eps(FA_F32) / or_eps(p->odt);
    double terms;
    if (t == OR_DQ) { s->orc = o->dq; s->naive = o->n_dq; terms = or_max_abs(o->t_q, or_count(o, OR_DQ)); }
    else if (t == OR_DK) { s->orc = o->dk; s->naive = o->n_dk; terms = or_max_abs(o->t_k, or_count(o, OR_DK)); }
    else { s->orc = o->dv; s->naive = o->n_dv; terms = sqrt(or_max_abs(o->t_v, or_count(o, OR_DV))); }
    s->term_floor = or_eps(FA_F32) * terms + grad_flush(o);
}

/* dsinks_h = -sum_i exp(sink_h - lse_i) D_i, D_i = dout_i . out_i: a sum of products that
   cancel, formed from out stored in odt and inputs in dt. Its noise scales with the terms,
   not with |dsinks|: the reference magnitude is ds_rss (problem.c), and the floor is one
   rounding at that magnitude in the data's precision. Plus the flush floor: each row's
   psink_i D_i term, psink_i below 2^-126 given as 0, |D_i| <= d_v max|dout| max|out|; and
   D_i itself formed from out whose P were flushed (psink_i <= 1): each out element off by
   at most out's flush floor. Plus the sum over rows: the backends add the terms in fp32,
   in an order of their own, while the naive model sums them in double; any order's
   rounding is at most (rows - 1) u sum_i |psink_i D_i| (ds_l1 bounds the sum). */
static void setting_dsinks(const or_oracle *o, or_setting *s)
{
    const or_problem *p = &o->p;
    const double nq = (double)p->nq;
    s->orc = o->ds; s->naive = o->n_ds; s->odt = or_coarser(p->dt, p->odt);
    s->factor = 3.0; s->ref_mag = o->ds_rss; s->floor_ulps = 1.0;
    const double dsflush = nq * (double)p->dv * o->domax *
                           (0x1p-126 * or_max_abs(o->out, or_count(o, OR_OUT)) + out_flush(o));
    const double dssum = (nq > 1 ? nq - 1 : 0) * 0x1p-24 * o->ds_l1;
    s->term_floor = dsflush + dssum;
}

/* The exact requirements: fully masked rows and unseen keys. Returns 1 if fine. */
static int check_exact(const or_oracle *o, or_tensor t, const double *ours, or_result *r)
{
    const or_problem *p = &o->p;
    int64_t n = or_count(o, t);
    for (int64_t x = 0; x < n; x++) {
        int bad = 0;
        double want = 0.0;
        switch (t) {
        case OR_OUT:
            bad = o->row_masked[x / (p->hq * p->dv)] && (ours[x] != 0.0 || signbit(ours[x]));
            break;
        case OR_LSE: {
            int64_t h = x / (p->nq > 0 ? p->nq : 1), row = x % (p->nq > 0 ? p->nq : 1);
            want = o->sinks ? o->sinks[h] : -INFINITY;
            bad = o->q_used[row] && o->row_masked[row] && ours[x] != want;
            break;
        }
        case OR_DQ: bad = o->row_masked[x / (p->hq * p->dqk)] && ours[x] != 0.0; break;
        case OR_DK: bad = o->key_unseen[x / (p->hkv * p->dqk)] && ours[x] != 0.0; break;
        case OR_DV: bad = o->key_unseen[x / (p->hkv * p->dv)] && ours[x] != 0.0; break;
        default: break;
        }
        if (bad) {
            r->pass = 0; r->exact = 1; r->worst = x; r->ours_w = ours[x]; r->orc_w = want;
            return 0;
        }
    }
    return 1;
}

/* Whether a sequence owns the row of element x of tensor t. */
static int used(const or_oracle *o, or_tensor t, int64_t x)
{
    const or_problem *p = &o->p;
    switch (t) {
    case OR_OUT: return o->q_used[x / (p->hq * p->dv)];
    case OR_LSE: return o->q_used[x % p->nq];
    case OR_DQ: return o->q_used[x / (p->hq * p->dqk)];
    case OR_DK: return o->k_used[x / (p->hkv * p->dqk)];
    case OR_DV: return o->k_used[x / (p->hkv * p->dv)];
    default: return 1;
    }
}

int or_check(const or_oracle *o, or_tensor t, const double *ours, or_result *r)
{
    const or_problem *p = &o->p;
    or_setting s;
    memset(r, 0, sizeof *r);
    r->worst = -1;
    switch (t) {
    case OR_OUT: setting_out(o, &s); break;
    case OR_LSE:
        /* term floor: one fp32 ulp of the largest score's terms (an lse dominated by one
           score carries that score's roundoff) */
        s.orc = o->lse; s.naive = o->n_lse; s.odt = FA_F32; s.factor = 2.0; s.ref_mag = 0.0;
        s.floor_ulps = 1.0; s.term_floor = or_eps(FA_F32) * o->sterm;
        break;
    case OR_DQ: case OR_DK: case OR_DV:
        if (!o->backward) return 0;
        setting_grad(o, t, &s);
        break;
    case OR_DSINKS:
        if (!o->backward || !o->sinks) return 0;
        setting_dsinks(o, &s);
        break;
    default: return 0;
    }
    const int64_t n = or_count(o, t);
    /* rows no sequence owns are not compared: they take the oracle's value (0) */
    double *mine = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!mine) return 0;
    for (int64_t x = 0; x < n; x++) mine[x] = used(o, t, x) ? ours[x] : s.orc[x];
    /* Large logits (|s| ~ 1e4): the score itself is rounded at magnitude |s| in any
       implementation, which moves P by ~|s| eps relative; the floor is the noise of one
       add at the magnitude of the logits, and the fp32 1e-5 rule (which no fp32
       implementation, the naive one included, can meet at |s| ~ 1e4) is not applied. */
    fa_dtype in_dt = p->dt;
    double ref_mag = s.ref_mag;
    if (o->smax > 1.0) {
        double m = or_max_abs(s.orc, n);
        if (ref_mag < m) ref_mag = m;
        ref_mag *= o->smax * or_eps(p->dt) / or_eps(s.odt);
        in_dt = FA_F16;
    }
    or_cmp c;
    r->pass = or_tol(mine, s.orc, s.naive, n, in_dt, s.odt, s.factor, ref_mag, s.floor_ulps,
                     s.term_floor, &c);
    r->err = c.err; r->bound = c.bound; r->factor = s.factor; r->nerr = c.nerr;
    r->mag = c.mag; r->term_floor = s.term_floor; r->worst = c.worst;
    r->ours_w = c.ours_w; r->orc_w = c.orc_w;
    if (r->pass && t != OR_DSINKS) check_exact(o, t, mine, r);
    free(mine);
    return r->pass;
}

void or_result_str(const or_result *r, or_tensor t, char *buf, size_t len)
{
    if (r->exact)
        snprintf(buf, len, "%s: element %lld = %.9g where the %s requires exactly %.9g",
                 or_tensor_name(t), (long long)r->worst, r->ours_w,
                 t == OR_DK || t == OR_DV ? "key seen by no query" : "fully masked row",
                 r->orc_w);
    else
        snprintf(buf, len, "%s: max|ours-oracle|=%.3e > bound %.3e (%.0fx max|naive-oracle|=%.3e "
                 "+ floor, max|oracle|=%.3e, term floor %.3e); worst element %lld: ours=%.9g "
                 "oracle=%.9g", or_tensor_name(t), r->err, r->bound, r->factor, r->nerr, r->mag,
                 r->term_floor, (long long)r->worst, r->ours_w, r->orc_w);
}
