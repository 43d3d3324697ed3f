/* check.c - the check column: part of a bench_problem handed to liboracle
 * (tests/oracle/oracle.h), the project's one oracle and tolerance rule, the same that the
 * test suites apply.
 *
 * Forward: `nrows` query rows spread evenly over (b, h, i), first and last included. Each
 * row is a sequence of one query against the keys it sees (bottom-right causal: the first
 * i + Sk - Sq + 1), so the oracle costs O(Sk d) per row at any length.
 * Backward: dk and dv of a key need every query row of its heads, so the check takes the
 * first and the last KV head (b, hk) whole, with their query heads: dq, dk and dv of
 * those heads, O(Sq Sk d) per head and model.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "oracle.h"

/* The fp32 copies of rows [0, n) of head h of a [B, n, heads, d] array, entry b, in
   doubles ([n][1][d]). */
static double *head_rows(const float *x, int64_t b, int64_t n, int64_t heads, int64_t h,
                         int64_t d)
{
    double *y = malloc(sizeof(double) * (size_t)(n * d > 0 ? n * d : 1));
    if (!y) return NULL;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < d; c++) y[i * d + c] = x[((b * n + i) * heads + h) * d + c];
    return y;
}

static void problem_base(const bench_shape *sh, fa_dtype odt, or_problem *p)
{
    memset(p, 0, sizeof *p);
    p->dqk = p->dv = sh->d;
    p->dt = sh->dtype;
    p->odt = odt;
    p->scale = bp_scale(sh);
    p->wl = p->wr = -1;
}

/* Keep in c the result that is worst against its bound (a failed one before any that
   passed). st: 0 nothing kept yet, 1 a pass kept, 2 a failure kept. */
static void note(bench_check *c, const or_result *r, int *st)
{
    double q = r->bound > 0 ? r->err / r->bound : r->err > 0 ? INFINITY : 0;
    double qc = c->tol > 0 ? c->err / c->tol : c->err > 0 ? INFINITY : 0;
    int take = *st == 0 || (!r->pass && *st == 1) || ((!r->pass) == (*st == 2) && q > qc);
    if (!take) return;
    c->err = r->err;
    c->tol = r->bound;
    c->ref_max = r->mag;
    c->nan = !isfinite(r->err);
    *st = r->pass ? 1 : 2;
}

int check_forward(const bench_problem *p, const void *out, fa_dtype odt, int nrows,
                  bench_check *c)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, total = sh->B * sh->H * sh->Sq;
    const int n = nrows < total ? nrows : (int)total;
    memset(c, 0, sizeof *c);
    if (n <= 0) return 1;
    int ok = 0;
    or_problem pr;
    problem_base(sh, odt, &pr);
    or_seq_data *sd = calloc((size_t)n, sizeof *sd);
    double **kv = calloc((size_t)(2 * sh->B * sh->Hkv), sizeof *kv);   /* per (b, hk) */
    double *qd = malloc(sizeof(double) * (size_t)(n * d)), *ours = malloc(sizeof(double) * (size_t)(n * d));
    or_oracle o;
    int have_o = 0;
    if (!sd || !kv || !qd || !ours) goto done;
    for (int r = 0; r < n; r++) {
        int64_t t = n == 1 ? 0 : (int64_t)((double)r * (double)(total - 1) / (n - 1));
        int64_t b = t / (sh->H * sh->Sq), h = (t / sh->Sq) % sh->H, i = t % sh->Sq;
        int64_t hk = h / grp, je = sh->causal ? i + sh->Sk - sh->Sq + 1 : sh->Sk;
        je = je < 0 ? 0 : je > sh->Sk ? sh->Sk : je;
        double **kh = &kv[2 * (b * sh->Hkv + hk)];
        if (!kh[0]) {
            kh[0] = head_rows(p->kf, b, sh->Sk, sh->Hkv, hk, d);
            kh[1] = head_rows(p->vf, b, sh->Sk, sh->Hkv, hk, d);
            if (!kh[0] || !kh[1]) goto done;
        }
        size_t base = (size_t)(((b * sh->Sq + i) * sh->H + h) * d);
        for (int64_t x = 0; x < d; x++) {
            qd[r * d + x] = p->qf[base + (size_t)x];
            ours[r * d + x] = bp_load(out, odt, base + (size_t)x);
        }
        or_seq_data *s = &sd[r];
        s->q = qd + r * d; s->k = kh[0]; s->v = kh[1];
        s->sq = 1; s->sk = je; s->q_row = r; s->k_row = 0; s->drop_b = b;
    }
    /* one query head and its KV head per sequence; the key rows are shared (forward) */
    pr.nseq = n; pr.nq = n; pr.nk = sh->Sk; pr.hq = pr.hkv = 1;
    pr.seqs = sd;
    if (or_compute(&pr, 0, &o)) goto done;
    have_o = 1;
    or_result res;
    int st = 0;
    ok = or_check(&o, OR_OUT, ours, &res);
    note(c, &res, &st);
    c->rows = n;
done:
    if (have_o) or_free(&o);
    if (kv) for (int64_t x = 0; x < 2 * sh->B * sh->Hkv; x++) free(kv[x]);
    free(kv); free(sd); free(qd); free(ours);
    return ok;
}

/* dq, dk, dv of KV head (b, hk) with its query heads, against liboracle. */
static int check_head(const bench_problem *p, int64_t b, int64_t hk, bench_check *c,
                      int *st)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, Sq = sh->Sq, Sk = sh->Sk;
    const fa_dtype dt = sh->dtype;
    int ok = 0;
    size_t nq = (size_t)(Sq * grp * d), nk = (size_t)(Sk * d);
    double *q = malloc(sizeof(double) * (nq + 1)), *dout = malloc(sizeof(double) * (nq + 1));
    double *gq = malloc(sizeof(double) * (nq + 1)), *gk = malloc(sizeof(double) * (nk + 1));
    double *gv = malloc(sizeof(double) * (nk + 1));
    double *k = head_rows(p->kf, b, Sk, sh->Hkv, hk, d), *v = head_rows(p->vf, b, Sk, sh->Hkv, hk, d);
    or_oracle o;
    if (!q || !dout || !gq || !gk || !gv || !k || !v) goto done;
    for (int64_t i = 0; i < Sq; i++)
        for (int64_t g = 0; g < grp; g++)
            for (int64_t x = 0; x < d; x++) {
                size_t src = (size_t)(((b * Sq + i) * sh->H + hk * grp + g) * d + x);
                size_t dst = (size_t)((i * grp + g) * d + x);
                q[dst] = p->qf[src];
                dout[dst] = p->doutf[src];
                gq[dst] = bp_load(p->dq, dt, src);
            }
    for (int64_t j = 0; j < Sk; j++)
        for (int64_t x = 0; x < d; x++) {
            size_t src = (size_t)(((b * Sk + j) * sh->Hkv + hk) * d + x);
            gk[j * d + x] = bp_load(p->dk, dt, src);
            gv[j * d + x] = bp_load(p->dv, dt, src);
        }
    or_seq_data s = { .q = q, .k = k, .v = v, .dout = dout, .sq = Sq, .sk = Sk, .drop_b = b };
    or_problem pr;
    problem_base(sh, dt, &pr);
    pr.nseq = 1; pr.nq = Sq; pr.nk = Sk; pr.hq = grp; pr.hkv = 1;
    pr.causal = sh->causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    pr.seqs = &s;
    if (or_compute(&pr, 1, &o)) goto done;
    const or_tensor ts[3] = { OR_DQ, OR_DK, OR_DV };
    const double *ours[3] = { gq, gk, gv };
    ok = 1;
    for (int x = 0; x < 3; x++) {
        or_result r;
        ok &= or_check(&o, ts[x], ours[x], &r);
        note(c, &r, st);
    }
    or_free(&o);
done:
    free(q); free(dout); free(gq); free(gk); free(gv); free(k); free(v);
    return ok;
}

int check_backward(const bench_problem *p, int nrows, bench_check *c)
{
    const bench_shape *sh = &p->sh;
    (void)nrows;
    memset(c, 0, sizeof *c);
    int nheads = sh->B * sh->Hkv > 1 ? 2 : 1, ok = 1, st = 0;
    for (int hh = 0; hh < nheads; hh++) {
        int64_t t = hh == 0 ? 0 : sh->B * sh->Hkv - 1;
        ok &= check_head(p, t / sh->Hkv, t % sh->Hkv, c, &st);
        c->rows += (int)(sh->Sq * (sh->H / sh->Hkv) + sh->Sk);
    }
    return ok;
}
