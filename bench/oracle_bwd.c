/* oracle_bwd.c - the oracle check of fa_backward on a subset, in double precision.
 *
 * The textbook gradients of out = softmax(scale * q k^T) v, for query head h of KV head hk:
 *   P_ij  = exp(s_ij - lse_i)          dP_ij = dO_i . v_j        D_i = dO_i . O_i
 *   dS_ij = P_ij * (dP_ij - D_i)
 *   dQ_i  = scale * sum_j dS_ij k_j
 *   dK_j  = scale * sum_{h in group} sum_i dS_ij q_i
 *   dV_j  =         sum_{h in group} sum_i P_ij dO_i
 * lse and D need every row of the head, so the check picks at most two KV heads, computes
 * lse_i and O_i for all their query rows (O(Sq Sk d) each), then checks `nrows` rows of dq
 * and of dk, dv. The tolerance is TESTING.md's: 3 x the error of the same computation in
 * float with P, dS and the results rounded to the storage dtype, plus one add's rounding.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

typedef struct {
    double *lse, *D;         /* [grp][Sq] */
    float  *lsef, *Df;
} head_stats;


static int64_t visible_end(const bench_shape *sh, int64_t i)
{
    int64_t e = sh->causal ? i + (sh->Sk - sh->Sq) + 1 : sh->Sk;
    return e < 0 ? 0 : e > sh->Sk ? sh->Sk : e;
}

/* lse and D for every query row of the heads of KV head (b, hk). */
static int head_stats_compute(const bench_problem *p, int64_t b, int64_t hk, head_stats *hs)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, Sq = sh->Sq;
    size_t n = (size_t)(grp * Sq);
    hs->lse = malloc(n * sizeof(double));
    hs->D = malloc(n * sizeof(double));
    hs->lsef = malloc(n * sizeof(float));
    hs->Df = malloc(n * sizeof(float));
    if (!hs->lse || !hs->D || !hs->lsef || !hs->Df) return -1;
    int fail = 0;
#pragma omp parallel
    {
        double *s = malloc((size_t)sh->Sk * sizeof(double)), *o = malloc((size_t)d * sizeof(double));
        float *sf = malloc((size_t)sh->Sk * sizeof(float)), *of = malloc((size_t)d * sizeof(float));
        if (!s || !o || !sf || !of) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for schedule(dynamic, 8)
        for (int64_t gi = 0; gi < grp * Sq; gi++) {
            if (!s || !o || !sf || !of) continue;
            int64_t h = hk * grp + gi / Sq, i = gi % Sq, je = visible_end(sh, i);
            const float *dO = p->doutf + ((b * Sq + i) * sh->H + h) * d;
            oracle_row rr;
            bench_oracle_row(p, b, h, i, je, s, sf, o, of, &rr);
            const double m = rr.m, l = rr.l;
            const float mf = rr.mf, lf = rr.lf;
            double D = 0;
            float Df = 0;
            for (int64_t x = 0; x < d; x++) {
                D += je ? dO[x] * (o[x] / l) : 0;
                Df += je ? dO[x] * bp_round(sh->dtype, of[x] / lf) : 0;
            }
            hs->lse[gi] = je ? m + log(l) : -INFINITY;
            hs->lsef[gi] = je ? mf + logf(lf) : -INFINITY;
            hs->D[gi] = D;
            hs->Df[gi] = Df;
        }
        free(s); free(o); free(sf); free(of);
    }
    return fail ? -1 : 0;
}

static void head_stats_free(head_stats *hs)
{
    free(hs->lse); free(hs->D); free(hs->lsef); free(hs->Df);
}

/* dS_ij (double and same-precision float) for query (h, i) and key j. */
static void dscore(const bench_problem *p, const head_stats *hs, int64_t b, int64_t hk,
                   int64_t g, int64_t i, int64_t j, double *P, double *dS, float *Pf,
                   float *dSf)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, h = hk * grp + g;
    const double scale = bp_scale(sh);
    const float *q = p->qf + ((b * sh->Sq + i) * sh->H + h) * d;
    const float *dO = p->doutf + ((b * sh->Sq + i) * sh->H + h) * d;
    const float *k = p->kf + ((b * sh->Sk + j) * sh->Hkv + hk) * d;
    const float *v = p->vf + ((b * sh->Sk + j) * sh->Hkv + hk) * d;
    double a = 0, dp = 0;
    float af = 0, dpf = 0;
    for (int64_t x = 0; x < d; x++) {
        a += (double)q[x] * k[x], af += q[x] * k[x];
        dp += (double)dO[x] * v[x], dpf += dO[x] * v[x];
    }
    size_t gi = (size_t)(g * sh->Sq + i);
    *P = exp(a * scale - hs->lse[gi]);
    *dS = *P * (dp - hs->D[gi]);
    *Pf = bp_round(sh->dtype, expf(bp_round(sh->dtype, af * (float)scale) - hs->lsef[gi]));
    *dSf = bp_round(sh->dtype, *Pf * (dpf - hs->Df[gi]));
}

static void acc_err(double got, double ref, double sp, double *err, double *err_sp,
                    double *mx, int *nan)
{
    if (got != got) *nan = 1;
    if (fabs(got - ref) > *err) *err = fabs(got - ref);
    if (fabs(sp - ref) > *err_sp) *err_sp = fabs(sp - ref);
    if (fabs(ref) > *mx) *mx = fabs(ref);
}

int check_backward(const bench_problem *p, int nrows, bench_check *c)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv;
    const double scale = bp_scale(sh);
    const fa_dtype dt = sh->dtype;
    double err = 0, err_sp = 0, mx = 0;
    int nan = 0, rows = 0;
    int nheads = sh->B * sh->Hkv > 1 ? 2 : 1;
    double *acc = malloc((size_t)d * 2 * sizeof(double));
    float *accf = malloc((size_t)d * 2 * sizeof(float));
    memset(c, 0, sizeof *c);
    if (!acc || !accf) goto oom;
    for (int hh = 0; hh < nheads; hh++) {
        /* the first and the last KV head */
        int64_t t = hh == 0 ? 0 : sh->B * sh->Hkv - 1, b = t / sh->Hkv, hk = t % sh->Hkv;
        head_stats hs = { 0 };
        if (head_stats_compute(p, b, hk, &hs)) {
            head_stats_free(&hs);
            goto oom;
        }
        int per = nrows / (2 * nheads) > 0 ? nrows / (2 * nheads) : 1;
        /* dq rows of the group, spread over (g, i) */
        for (int r = 0; r < per; r++) {
            int64_t gi = per == 1 ? 0 : (int64_t)((double)r * (double)(grp * sh->Sq - 1) / (per - 1));
            int64_t g = gi / sh->Sq, i = gi % sh->Sq, h = hk * grp + g, je = visible_end(sh, i);
            memset(acc, 0, (size_t)d * sizeof(double));
            memset(accf, 0, (size_t)d * sizeof(float));
            for (int64_t j = 0; j < je; j++) {
                double P, dS;
                float Pf, dSf;
                dscore(p, &hs, b, hk, g, i, j, &P, &dS, &Pf, &dSf);
                const float *k = p->kf + ((b * sh->Sk + j) * sh->Hkv + hk) * d;
                for (int64_t x = 0; x < d; x++) acc[x] += dS * k[x], accf[x] += dSf * k[x];
            }
            size_t base = (size_t)(((b * sh->Sq + i) * sh->H + h) * d);
            for (int64_t x = 0; x < d; x++)
                acc_err(bp_load(p->dq, dt, base + (size_t)x), scale * acc[x],
                        bp_round(dt, (float)scale * accf[x]), &err, &err_sp, &mx, &nan);
            rows++;
        }
        /* dk, dv rows of this KV head */
        for (int r = 0; r < per; r++) {
            int64_t j = per == 1 ? 0 : (int64_t)((double)r * (double)(sh->Sk - 1) / (per - 1));
            memset(acc, 0, (size_t)d * 2 * sizeof(double));
            memset(accf, 0, (size_t)d * 2 * sizeof(float));
            for (int64_t g = 0; g < grp; g++)
                for (int64_t i = 0; i < sh->Sq; i++) {
                    if (j >= visible_end(sh, i)) continue;
                    double P, dS;
                    float Pf, dSf;
                    dscore(p, &hs, b, hk, g, i, j, &P, &dS, &Pf, &dSf);
                    int64_t h = hk * grp + g;
                    const float *q = p->qf + ((b * sh->Sq + i) * sh->H + h) * d;
                    const float *dO = p->doutf + ((b * sh->Sq + i) * sh->H + h) * d;
                    for (int64_t x = 0; x < d; x++) {
                        acc[x] += dS * q[x], accf[x] += dSf * q[x];
                        acc[d + x] += P * dO[x], accf[d + x] += Pf * dO[x];
                    }
                }
            size_t base = (size_t)(((b * sh->Sk + j) * sh->Hkv + hk) * d);
            for (int64_t x = 0; x < d; x++) {
                acc_err(bp_load(p->dk, dt, base + (size_t)x), scale * acc[x],
                        bp_round(dt, (float)scale * accf[x]), &err, &err_sp, &mx, &nan);
                acc_err(bp_load(p->dv, dt, base + (size_t)x), acc[d + x],
                        bp_round(dt, accf[d + x]), &err, &err_sp, &mx, &nan);
            }
            rows++;
        }
        head_stats_free(&hs);
    }
    free(acc);
    free(accf);
    c->err = err;
    c->ref_max = mx;
    c->rows = rows;
    c->nan = nan;
    c->tol = 3 * err_sp + (dt == FA_F32 ? ldexp(1, -24) : dt == FA_F16 ? ldexp(1, -11)
                                                                       : ldexp(1, -8)) * mx;
    return !nan && err <= c->tol;
oom:
    free(acc);
    free(accf);
    c->nan = 1;
    return 0;
}
