/* models.c - naive attention in double (the oracle) and in "same precision" (float with
 * storage-dtype rounding of S, P and the results), one sequence at a time. See models.h.
 *
 * Written from the API contract (docs/api.md): s = scale*q.k ; softcap ; + ALiBi + bias ; mask ; softmax with the
 * sink logit in the denominator ; dropout on the probabilities (kept ones * 1/(1-p)).
 * Nothing here is blocked or online: the full row of scores is materialized.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"
#include "philox.h"
#include "dtype.h"

static int64_t or_off(const or_seq *s)
{
    return s->causal == FA_CAUSAL_TOP_LEFT ? 0 : s->sk - s->sq;
}

int or_visible(const or_seq *s, int64_t i, int64_t j)
{
    if (j < 0 || j >= s->sk || i < 0 || i >= s->sq) return 0;
    int64_t pos = i + or_off(s);
    int64_t wl = -1, wr = -1;
    if (s->window) { wl = s->wl; wr = s->wr; }
    if (s->causal != FA_CAUSAL_NONE) wr = 0;
    if (wl >= 0 && j < pos - wl) return 0;
    if (wr >= 0 && j > pos + wr) return 0;
    return 1;
}

double or_dropout_mult(const or_seq *s, int64_t h, int64_t i, int64_t j)
{
    if (!(s->dropout_p > 0.0f)) return 1.0;
    fa_dropout_key key = fa_dropout_make_key(s->seed, s->offset, s->dropout_p);
    if (!fa_dropout_keep(&key, s->drop_b, s->drop_h0 + h, s->drop_i0 + i, j)) return 0.0;
    return 1.0 / (1.0 - (double)s->dropout_p);
}

/* Everything added to the capped score: ALiBi and bias. */
static double or_addend(const or_seq *s, int64_t h, int64_t i, int64_t j)
{
    double a = 0.0;
    if (s->alibi) {
        int64_t dist = i + or_off(s) - j;
        if (dist < 0) dist = -dist;
        a -= s->alibi[h] * (double)dist;
    }
    if (s->bias) a += s->bias[(h * s->sq + i) * s->sk + j];
    return a;
}

/* Score of (h, i, j) in double; *dcap = d(capped)/d(scaled) (1 without softcap). */
static double or_score(const or_seq *s, const double *q, const double *k, int64_t h,
                       int64_t i, int64_t j, double *dcap)
{
    int64_t hk = h / (s->hq / s->hkv);
    const double *qi = q + (i * s->hq + h) * s->dqk;
    const double *kj = k + (j * s->hkv + hk) * s->dqk;
    double dot = 0.0;
    for (int64_t c = 0; c < s->dqk; c++) dot += qi[c] * kj[c];
    double x = s->scale * dot;
    *dcap = 1.0;
    if (s->softcap > 0.0) {
        double t = tanh(x / s->softcap);
        x = s->softcap * t;
        *dcap = 1.0 - t * t;
    }
    return x + or_addend(s, h, i, j);
}

/* Probabilities of row (h, i) in double: p[j] (0 for invisible keys); returns lse and
   sets *psink = exp(sink - lse) (0 without sinks). dcap[j] filled when non-NULL. */
static double or_row_probs(const or_seq *s, const double *q, const double *k, int64_t h,
                           int64_t i, double *p, double *dcap, double *psink)
{
    double m = -INFINITY;
    int any = 0, nan = 0;
    for (int64_t j = 0; j < s->sk; j++) {
        if (!or_visible(s, i, j)) { p[j] = 0.0; if (dcap) dcap[j] = 0.0; continue; }
        double dc;
        double x = or_score(s, q, k, h, i, j, &dc);
        p[j] = x;
        if (dcap) dcap[j] = dc;
        if (isnan(x)) nan = 1;
        if (!any || x > m) m = x;
        any = 1;
    }
    if (s->sinks) {
        double sk = s->sinks[h];
        if (!any || sk > m) m = sk;
        any = 1;
    }
    *psink = 0.0;
    if (!any) {
        return -INFINITY;
    }
    if (nan) m = NAN;
    double sum = 0.0;
    for (int64_t j = 0; j < s->sk; j++)
        if (or_visible(s, i, j)) sum += exp(p[j] - m);
    if (s->sinks) sum += exp(s->sinks[h] - m);
    double lse = m + log(sum);
    for (int64_t j = 0; j < s->sk; j++)
        p[j] = or_visible(s, i, j) ? exp(p[j] - lse) : 0.0;
    if (s->sinks) *psink = exp(s->sinks[h] - lse);
    return lse;
}

void or_forward(const or_seq *s, const double *q, const double *k, const double *v,
                double *out, double *lse)
{
    double *p = malloc(sizeof(double) * (size_t)(s->sk > 0 ? s->sk : 1));
    int64_t group = s->hkv > 0 ? s->hq / s->hkv : 1;
    for (int64_t h = 0; h < s->hq; h++) {
        int64_t hk = h / group;
        for (int64_t i = 0; i < s->sq; i++) {
            double psink;
            double l = or_row_probs(s, q, k, h, i, p, NULL, &psink);
            if (lse) lse[h * s->sq + i] = l;
            double *o = out + (i * s->hq + h) * s->dv;
            for (int64_t c = 0; c < s->dv; c++) o[c] = 0.0;
            if (l == -INFINITY) continue;           /* fully masked, no sink */
            for (int64_t j = 0; j < s->sk; j++) {
                if (!or_visible(s, i, j)) continue;
                double pd = p[j] * or_dropout_mult(s, h, i, j);
                const double *vj = v + (j * s->hkv + hk) * s->dv;
                for (int64_t c = 0; c < s->dv; c++) o[c] += pd * vj[c];
            }
        }
    }
    free(p);
}

void or_backward(const or_seq *s, const double *q, const double *k, const double *v,
                 const double *dout, double *dq, double *dk, double *dv, double *dsinks)
{
    int64_t n = s->sk > 0 ? s->sk : 1;
    double *p = malloc(sizeof(double) * (size_t)n);
    double *dc = malloc(sizeof(double) * (size_t)n);
    double *dp = malloc(sizeof(double) * (size_t)n);
    int64_t group = s->hkv > 0 ? s->hq / s->hkv : 1;
    memset(dq, 0, sizeof(double) * (size_t)(s->sq * s->hq * s->dqk));
    memset(dk, 0, sizeof(double) * (size_t)(s->sk * s->hkv * s->dqk));
    memset(dv, 0, sizeof(double) * (size_t)(s->sk * s->hkv * s->dv));
    for (int64_t h = 0; h < s->hq; h++) {
        int64_t hk = h / group;
        for (int64_t i = 0; i < s->sq; i++) {
            double psink;
            double l = or_row_probs(s, q, k, h, i, p, dc, &psink);
            if (l == -INFINITY) continue;
            const double *doi = dout + (i * s->hq + h) * s->dv;
            const double *qi = q + (i * s->hq + h) * s->dqk;
            double *dqi = dq + (i * s->hq + h) * s->dqk;
            double D = 0.0;
            for (int64_t j = 0; j < s->sk; j++) {
                dp[j] = 0.0;
                if (!or_visible(s, i, j)) continue;
                double mult = or_dropout_mult(s, h, i, j);
                const double *vj = v + (j * s->hkv + hk) * s->dv;
                double *dvj = dv + (j * s->hkv + hk) * s->dv;
                double dpd = 0.0;
                for (int64_t c = 0; c < s->dv; c++) {
                    dpd += doi[c] * vj[c];
                    dvj[c] += p[j] * mult * doi[c];
                }
                dp[j] = dpd * mult;
                D += p[j] * dp[j];
            }
            if (dsinks && s->sinks) dsinks[h] += -psink * D;
            for (int64_t j = 0; j < s->sk; j++) {
                if (!or_visible(s, i, j)) continue;
                double ds = p[j] * (dp[j] - D) * dc[j] * s->scale;
                const double *kj = k + (j * s->hkv + hk) * s->dqk;
                double *dkj = dk + (j * s->hkv + hk) * s->dqk;
                for (int64_t c = 0; c < s->dqk; c++) {
                    dqi[c] += ds * kj[c];
                    dkj[c] += ds * qi[c];
                }
            }
        }
    }
    free(p); free(dc); free(dp);
}

/* Calls row(s, h, i, p, dc, arg) for every row (h, i) whose probabilities are finite
   (rows of NaN inputs and fully masked rows are skipped), with p[j] = P_ij (0 where
   invisible), dc[j] the softcap derivative and arg->lse the row's lse. The term-size
   helpers below walk this. */
typedef struct {
    const double *q, *k, *v, *out, *dout;
    double *t1, *t2, *t3, *t4, *t5;
    const double *tl;      /* lse's score roundoff per row, [hq][sq] (bwd_terms_row) */
    double d_weight;       /* weight of D's terms (bwd_terms_row) */
    double lse;            /* the row's lse, set by or_each_row before each row */
} or_terms_arg;

typedef void (*or_row_fn)(const or_seq *s, int64_t h, int64_t i, const double *p,
                          const double *dc, void *arg);
static void or_each_row(const or_seq *s, const double *q, const double *k, or_row_fn row,
                        or_terms_arg *arg)
{
    int64_t n = s->sk > 0 ? s->sk : 1;
    double *p = malloc(sizeof(double) * (size_t)n);
    double *dc = malloc(sizeof(double) * (size_t)n);
    for (int64_t h = 0; h < s->hq; h++)
        for (int64_t i = 0; i < s->sq; i++) {
            double psink;
            arg->lse = or_row_probs(s, q, k, h, i, p, dc, &psink);
            if (isfinite(arg->lse)) row(s, h, i, p, dc, arg);
        }
    free(p); free(dc);
}

/* The walk both term helpers share: row (h, i)'s KV head and rows of q and out, then each
   visible key j in turn with its rows of k and v, its weight g = P_ij |dcap_ij scale| and
   its dropout multiplier. */
typedef struct {
    const or_seq *s;
    const or_terms_arg *x;
    const double *p, *dc;
    int64_t h, i, hk, j;
    const double *qi, *oi;  /* rows (i, h) of q and out */
    const double *kj, *vj;  /* rows (j, hk) of k and v */
    double g, mult;
} or_key_walk;

static or_key_walk or_walk_row(const or_seq *s, int64_t h, int64_t i, const double *p,
                               const double *dc, const or_terms_arg *x)
{
    or_key_walk w = { .s = s, .x = x, .p = p, .dc = dc, .h = h, .i = i,
                      .hk = h / (s->hq / s->hkv), .j = -1,
                      .qi = x->q + (i * s->hq + h) * s->dqk,
                      .oi = x->out + (i * s->hq + h) * s->dv };
    return w;
}

/* Steps to the next visible key; 0 past the last. */
static int or_walk_next(or_key_walk *w)
{
    const or_seq *s = w->s;
    while (++w->j < s->sk) {
        if (!or_visible(s, w->i, w->j)) continue;
        w->kj = w->x->k + (w->j * s->hkv + w->hk) * s->dqk;
        w->vj = w->x->v + (w->j * s->hkv + w->hk) * s->dv;
        w->g = w->p[w->j] * fabs(w->dc[w->j] * s->scale);
        w->mult = or_dropout_mult(s, w->h, w->i, w->j);
        return 1;
    }
    return 0;
}

/* The fp32 roundoff of score s_ij in units of fp32 eps, e_ij: the dot product's, at the
   size of its terms (|dcap_ij scale| sum_c |q_ic k_jc|), and the steps after it, which
   round at the score's own size (a fuzz_diff case with ALiBi, bias, softcap and split-KV
   over small tiles was 3.2 fp32 ulps off without them): the softcap, ALiBi and bias steps at
   about |s_ij| (two of them counted), the exponent argument s_ij - m at |s_ij - m| <=
   |ln P_ij| + ln(1 + Sk) (m the running or merged max, lse - m in [0, ln(1 + Sk)]), and
   exp itself once; s_ij = ln P_ij + lse_i. Not finite (Inf or NaN) where the inputs are
   not; every caller checks. */
static double score_err(const or_key_walk *w, double lse)
{
    const or_seq *s = w->s;
    double a = 0.0;
    for (int64_t c = 0; c < s->dqk; c++) a += fabs(w->qi[c] * w->kj[c]);
    double e = fabs(w->dc[w->j] * s->scale) * a;
    const double pj = w->p[w->j];
    if (pj > 0.0) {
        const double lp = log(pj);
        e += 2.0 * fabs(lp + lse) + fabs(lp) + log1p((double)s->sk) + 1.0;
    }
    return e;
}

static void bwd_terms_row(const or_seq *s, int64_t h, int64_t i, const double *p,
                          const double *dc, void *arg)
{
    const or_terms_arg *x = arg;
    or_key_walk w = or_walk_row(s, h, i, p, dc, x);
    const double *doi = x->dout + (i * s->hq + h) * s->dv;
    double *tqi = x->t1 + (i * s->hq + h) * s->dqk;
    const double tl = x->tl[h * s->sq + i];
    double *tqi2 = x->t4 + (i * s->hq + h) * s->dqk;
    double d1 = 0.0, dd = 0.0;
    for (int64_t c = 0; c < s->dv; c++) {
        d1 += fabs(doi[c] * w.oi[c]);
        dd += doi[c] * w.oi[c];
    }
    while (or_walk_next(&w)) {
        double a = 0.0, dp = 0.0;
        for (int64_t c = 0; c < s->dv; c++) {
            a += fabs(doi[c] * w.vj[c]);
            dp += doi[c] * w.vj[c];
        }
        const double t = w.g * (fabs(w.mult) * a + x->d_weight * d1);
        /* P_ij itself is off by eps (e_ij + tl) relative: its score's roundoff and
           lse's, which a backward that recomputes s_ij in another order than the forward
           did does not cancel. In dv that is P_ij ep_ij |m_ij dout_ic|, in dS_ij
           P_ij ep_ij |m_ij dP'_ij - D_i| (the exact difference). Each (i, j) rounds on
           its own: dv's and dk's shares add in squares over rows, dq's over keys. */
        const double ep = score_err(&w, x->lse) + tl;
        double *tvj = x->t3 + (w.j * s->hkv + w.hk) * s->dv;
        for (int64_t c = 0; c < s->dv; c++) {
            const double u = w.p[w.j] * ep * fabs(w.mult * doi[c]);
            if (isfinite(u)) tvj[c] += u * u;
        }
        const double u = w.g * ep * fabs(w.mult * dp - dd);
        double *tkj2 = x->t5 + (w.j * s->hkv + w.hk) * s->dqk;
        if (isfinite(u))
            for (int64_t c = 0; c < s->dqk; c++) {
                const double uq = u * fabs(w.kj[c]), uk = u * fabs(w.qi[c]);
                if (isfinite(uq)) tqi2[c] += uq * uq;
                if (isfinite(uk)) tkj2[c] += uk * uk;
            }
        if (!isfinite(t)) continue;
        double *tkj = x->t2 + (w.j * s->hkv + w.hk) * s->dqk;
        for (int64_t c = 0; c < s->dqk; c++) {
            if (isfinite(w.kj[c])) tqi[c] += t * fabs(w.kj[c]);
            if (isfinite(w.qi[c])) tkj[c] += t * fabs(w.qi[c]);
        }
    }
}

/* Magnitude of the terms of dq and dk (double; only used to size the tolerance). dS_ij =
   P_ij (dP_ij - D_i) dcap_ij scale subtracts D_i = sum_c dout_ic out_ic from dP_ij =
   m_ij sum_c dout_ic v_jc; both are dv-term dot products that every implementation
   accumulates in fp32, so their difference carries fp32 roundoff of the size of their
   terms, a_ij = |m_ij| sum_c |dout_ic v_jc| + sum_c |dout_ic out_ic|, even where the
   difference itself vanishes (a row whose softmax is one key). Fills
   tq[i][h][c] += sum_j P_ij |dcap_ij scale| a_ij |k_jc| and
   tk[j][hkv][c] += sum_i P_ij |dcap_ij scale| a_ij |q_ic|; rows whose probabilities are
   not finite (NaN inputs) add nothing. out: [sq][hq][dv], the oracle's. d_weight
   multiplies D's part of a_ij: D is formed from out as stored, so where out is rounded
   coarser than fp32 (a bf16 out) its terms carry that rounding (a one-hot softmax with
   a bf16 out and large logits shows it in dq).
   P_ij also carries eps ep_ij relative error of its own, ep_ij = e_ij + tlse_i (score_err:
   its score's roundoff; tlse: lse's, sum_j' P_ij' e_ij', as or_forward_terms gives it).
   Its shares, in squares (each (i, j) rounds on its own; the caller takes the roots):
   tv[j][hkv][c] += sum_i (P_ij ep_ij |m_ij dout_ic|)^2,
   tq2[i][h][c] += sum_j (P_ij |dcap_ij scale| ep_ij |m_ij dP'_ij - D_i| |k_jc|)^2 and
   tk2[j][hkv][c] += sum_i (the same with |q_ic|)^2, dP'_ij = sum_c dout_ic v_jc and the
   difference exact. */
void or_backward_terms(const or_seq *s, const double *q, const double *k, const double *v,
                       const double *out, const double *dout, const double *tlse,
                       double d_weight, double *tq, double *tk, double *tv, double *tq2,
                       double *tk2)
{
    or_terms_arg x = { q, k, v, out, dout, tq, tk, tv, tq2, tk2, tlse, d_weight, 0.0 };
    or_each_row(s, q, k, bwd_terms_row, &x);
}

static void fwd_terms_row(const or_seq *s, int64_t h, int64_t i, const double *p,
                          const double *dc, void *arg)
{
    const or_terms_arg *x = arg;
    or_key_walk w = or_walk_row(s, h, i, p, dc, x);
    double *ti = x->t1 + (i * s->hq + h) * s->dv;
    while (or_walk_next(&w)) {
        const double wt = w.p[w.j] * score_err(&w, x->lse);
        if (!isfinite(wt)) continue;
        if (x->t2) x->t2[h * s->sq + i] += wt;   /* lse moves by P_ij per unit of s_ij */
        for (int64_t c = 0; c < s->dv; c++) {
            double t = wt * fabs(w.mult * w.vj[c] - w.oi[c]);
            if (isfinite(t)) ti[c] += t;
        }
    }
}

/* Magnitude of out's sensitivity to the roundoff of its scores: tout[i][h][c] +=
   sum_j (P_ij |dcap_ij scale| (sum_x |q_ix k_jx|) + P_ij r_ij) |m_ij v_jc - out_ic|. A
   score is an fp32 dot product whose roundoff scales with sum_x |q_ix k_jx|, then the
   steps after it round at the score's own size, r_ij = 2 |s_ij| + |ln P_ij| + ln(1 + Sk)
   + 1 (fwd_terms_row), and out_ic moves by P_ij (m_ij v_jc - out_ic) per unit of s_ij
   (m_ij: the dropout multiplier). tlse (may be NULL): the same per-key weights summed
   over the row, tlse[h][i] += sum_j (P_ij |dcap_ij scale| (sum_x |q_ix k_jx|) + P_ij
   r_ij), lse's sensitivity to that roundoff (lse moves by P_ij per unit of s_ij). */
void or_forward_terms(const or_seq *s, const double *q, const double *k, const double *v,
                      const double *out, double *tout, double *tlse)
{
    or_terms_arg x = { q, k, v, out, NULL, tout, tlse, NULL, NULL, NULL, NULL, 1.0, 0.0 };
    or_each_row(s, q, k, fwd_terms_row, &x);
}

/* ------------------------------------------------------------------------------------ */
/* Same-precision naive                                                                 */
/* ------------------------------------------------------------------------------------ */

static float rnd(fa_dtype t, float x) { return fa_round_to(t, x); }

/* Row (h, i) as a plain low-precision implementation computes it. p[j] is P rounded to dt
   (0 when invisible); returns lse (float math); *psink. dcap[j]: softcap derivative.
   With rowsum non-NULL, the row is a flash-style implementation's: scores in fp32, p[j]
   is exp(s_ij - m) rounded to dt, unnormalized (its P for the P V product), and *rowsum
   is the row's sum l. */
static float sp_row_probs(const or_seq *s, fa_dtype dt, const double *q, const double *k,
                          int64_t h, int64_t i, float *p, float *dcap, float *psink,
                          float *rowsum)
{
    int64_t hk = h / (s->hq / s->hkv);
    int64_t off = or_off(s);
    const fa_dtype st = rowsum ? FA_F32 : dt;   /* the scores' precision */
    float m = -INFINITY;
    int any = 0, nan = 0;
    for (int64_t j = 0; j < s->sk; j++) {
        p[j] = 0.0f;
        if (dcap) dcap[j] = 0.0f;
        if (!or_visible(s, i, j)) continue;
        const double *qi = q + (i * s->hq + h) * s->dqk;
        const double *kj = k + (j * s->hkv + hk) * s->dqk;
        float dot = 0.0f;
        for (int64_t c = 0; c < s->dqk; c++) dot += (float)qi[c] * (float)kj[c];
        float x = rnd(st, rnd(st, dot) * (float)s->scale);
        float dc = 1.0f;
        if (s->softcap > 0.0) {
            float cap = (float)s->softcap;
            float t = rnd(st, tanhf(x / cap));
            x = rnd(st, cap * t);
            dc = rnd(st, 1.0f - t * t);
        }
        if (s->alibi) {
            int64_t dist = i + off - j;
            if (dist < 0) dist = -dist;
            x = rnd(st, x - (float)s->alibi[h] * (float)dist);
        }
        if (s->bias) x = rnd(st, x + (float)s->bias[(h * s->sq + i) * s->sk + j]);
        p[j] = x;
        if (dcap) dcap[j] = dc;
        if (isnan(x)) nan = 1;
        if (!any || x > m) m = x;
        any = 1;
    }
    if (s->sinks) {
        float sk = (float)s->sinks[h];
        if (!any || sk > m) m = sk;
        any = 1;
    }
    *psink = 0.0f;
    if (!any) return -INFINITY;
    if (nan) m = NAN;
    float sum = 0.0f;
    for (int64_t j = 0; j < s->sk; j++)
        if (or_visible(s, i, j)) sum += expf(p[j] - m);
    if (s->sinks) sum += expf((float)s->sinks[h] - m);
    for (int64_t j = 0; j < s->sk; j++)
        if (or_visible(s, i, j)) p[j] = rowsum ? rnd(dt, expf(p[j] - m)) : rnd(dt, expf(p[j] - m) / sum);
    if (rowsum) *rowsum = sum;
    if (s->sinks) *psink = expf((float)s->sinks[h] - m) / sum;
    return m + logf(sum);
}

static void sp_forward(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                       const double *k, const double *v, double *out, double *lse, int flash)
{
    float *p = malloc(sizeof(float) * (size_t)(s->sk > 0 ? s->sk : 1));
    float *acc = malloc(sizeof(float) * (size_t)(s->dv > 0 ? s->dv : 1));
    int64_t group = s->hkv > 0 ? s->hq / s->hkv : 1;
    for (int64_t h = 0; h < s->hq; h++) {
        int64_t hk = h / group;
        for (int64_t i = 0; i < s->sq; i++) {
            float psink, sum = 1.0f;
            float l = sp_row_probs(s, dt, q, k, h, i, p, NULL, &psink, flash ? &sum : NULL);
            if (lse) lse[h * s->sq + i] = l;
            for (int64_t c = 0; c < s->dv; c++) acc[c] = 0.0f;
            if (l != -INFINITY) {
                for (int64_t j = 0; j < s->sk; j++) {
                    if (!or_visible(s, i, j)) continue;
                    float mult = (float)or_dropout_mult(s, h, i, j);
                    /* flash: the dropout mask is 0/1 here, 1/(1-p) joins 1/l at the end */
                    if (flash && mult != 0.0f) mult = 1.0f;
                    float pd = rnd(dt, p[j] * mult);
                    const double *vj = v + (j * s->hkv + hk) * s->dv;
                    for (int64_t c = 0; c < s->dv; c++) acc[c] += pd * (float)vj[c];
                }
            }
            if (flash) {
                float keep = s->dropout_p > 0.0f ? (float)(1.0 / (1.0 - (double)s->dropout_p)) : 1.0f;
                float r = keep / sum;
                for (int64_t c = 0; c < s->dv; c++) acc[c] *= r;
            }
            double *o = out + (i * s->hq + h) * s->dv;
            for (int64_t c = 0; c < s->dv; c++) o[c] = rnd(odt, acc[c]);
        }
    }
    free(p); free(acc);
}

void or_forward_sp(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                   const double *k, const double *v, double *out, double *lse)
{
    sp_forward(s, dt, odt, q, k, v, out, lse, 0);
}

void or_forward_sp_flash(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                         const double *k, const double *v, double *out, double *lse)
{
    sp_forward(s, dt, odt, q, k, v, out, lse, 1);
}

static void sp_backward(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                        const double *k, const double *v, const double *out,
                        const double *dout, double *dq, double *dk, double *dv,
                        double *dsinks, int flash, fa_dtype opdt)
{
    int64_t n = s->sk > 0 ? s->sk : 1;
    int64_t nq = s->sq * s->hq * s->dqk, nk = s->sk * s->hkv * s->dqk;
    int64_t nv = s->sk * s->hkv * s->dv;
    float *p = malloc(sizeof(float) * (size_t)n), *dc = malloc(sizeof(float) * (size_t)n);
    float *dp = malloc(sizeof(float) * (size_t)n);
    float *fq = calloc((size_t)(nq > 0 ? nq : 1), sizeof(float));
    float *fk = calloc((size_t)(nk > 0 ? nk : 1), sizeof(float));
    float *fv = calloc((size_t)(nv > 0 ? nv : 1), sizeof(float));
    int64_t group = s->hkv > 0 ? s->hq / s->hkv : 1;
    for (int64_t h = 0; h < s->hq; h++) {
        int64_t hk = h / group;
        for (int64_t i = 0; i < s->sq; i++) {
            float psink, sum = 1.0f;
            /* flash: scores and P in fp32 (recomputed from them), P and dS rounded to
               opdt only as the operands of the products */
            float l = sp_row_probs(s, flash ? FA_F32 : dt, q, k, h, i, p, dc, &psink,
                                   flash ? &sum : NULL);
            if (l == -INFINITY) continue;
            if (flash)
                for (int64_t j = 0; j < s->sk; j++) p[j] /= sum;
            const double *doi = dout + (i * s->hq + h) * s->dv;
            const double *qi = q + (i * s->hq + h) * s->dqk;
            float *dqi = fq + (i * s->hq + h) * s->dqk;
            const double *oi = out + (i * s->hq + h) * s->dv;
            float D = 0.0f;
            for (int64_t c = 0; c < s->dv; c++) D += (float)doi[c] * (float)oi[c];
            for (int64_t j = 0; j < s->sk; j++) {
                dp[j] = 0.0f;
                if (!or_visible(s, i, j)) continue;
                float mult = (float)or_dropout_mult(s, h, i, j);
                float pd = rnd(opdt, p[j] * mult);
                const double *vj = v + (j * s->hkv + hk) * s->dv;
                float *dvj = fv + (j * s->hkv + hk) * s->dv;
                float dpd = 0.0f;
                for (int64_t c = 0; c < s->dv; c++) {
                    dpd += (float)doi[c] * (float)vj[c];
                    dvj[c] += pd * (float)doi[c];
                }
                dp[j] = (flash ? dpd : rnd(dt, dpd)) * mult;
            }
            if (dsinks && s->sinks) dsinks[h] += -(double)psink * (double)D;
            for (int64_t j = 0; j < s->sk; j++) {
                if (!or_visible(s, i, j)) continue;
                float ds = rnd(opdt, p[j] * (dp[j] - D));
                if (s->softcap > 0.0) ds = rnd(opdt, ds * dc[j]);
                const double *kj = k + (j * s->hkv + hk) * s->dqk;
                float *dkj = fk + (j * s->hkv + hk) * s->dqk;
                for (int64_t c = 0; c < s->dqk; c++) {
                    dqi[c] += ds * (float)kj[c];
                    dkj[c] += ds * (float)qi[c];
                }
            }
        }
    }
    float sc = (float)s->scale;
    for (int64_t x = 0; x < nq; x++) dq[x] = rnd(odt, fq[x] * sc);
    for (int64_t x = 0; x < nk; x++) dk[x] = rnd(odt, fk[x] * sc);
    for (int64_t x = 0; x < nv; x++) dv[x] = rnd(odt, fv[x]);
    free(p); free(dc); free(dp); free(fq); free(fk); free(fv);
}

void or_backward_sp(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                    const double *k, const double *v, const double *out, const double *dout,
                    double *dq, double *dk, double *dv, double *dsinks)
{
    sp_backward(s, dt, odt, q, k, v, out, dout, dq, dk, dv, dsinks, 0, dt);
}

void or_backward_sp_flash(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                          const double *k, const double *v, const double *out,
                          const double *dout, double *dq, double *dk, double *dv,
                          double *dsinks, int fp32_operands)
{
    sp_backward(s, dt, odt, q, k, v, out, dout, dq, dk, dv, dsinks, 1,
                fp32_operands ? FA_F32 : dt);
}

void or_combine(int n, int64_t rows, int64_t d, const double *const *parts,
                const double *const *lse_parts, double *out, double *lse)
{
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY;
        for (int i = 0; i < n; i++)
            if (lse_parts[i][r] > m) m = lse_parts[i][r];
        double *o = out + r * d;
        for (int64_t c = 0; c < d; c++) o[c] = 0.0;
        if (m == -INFINITY) { if (lse) lse[r] = -INFINITY; continue; }
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += exp(lse_parts[i][r] - m);
        double L = m + log(sum);
        if (lse) lse[r] = L;
        for (int i = 0; i < n; i++) {
            double w = exp(lse_parts[i][r] - L);
            if (w == 0.0) continue;
            for (int64_t c = 0; c < d; c++) o[c] += w * parts[i][r * d + c];
        }
    }
}
