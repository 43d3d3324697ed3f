/* stress_check.c - stress_cuda's checks of one run (see stress_cuda.c): every output
 * against liboracle's oracle of the case with its rule (tests/oracle/oracle.h), the same
 * rule as test_cuda's; a combine, which has no attention problem, against its exact sum
 * in double with the rule's or_tol (the reference backend's fp32 combine as the naive
 * model). Plus what the loop is about: every element written, untouched rows untouched,
 * guard bands intact, and a repeat bitwise equal to the case's first result. */
#include <math.h>
#include <string.h>
#include "stress_cuda.h"
#include "dtype.h"

/* n elements of dtype t at host bytes h (from element e0) as doubles; NULL when a is NULL */
static double *dbl(const void *h, fa_dtype t, size_t e0, size_t n)
{
    double *d = malloc(sizeof(double) * (n ? n : 1));
    if (!d) { printf("out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) d[i] = h ? fa_load(h, t, (int64_t)(e0 + i)) : 0.0;
    return d;
}
static double *arr_dbl(const scase *c, int slot, size_t e0, size_t n)
{
    const arr *a = c->ai[slot] >= 0 ? &c->a[c->ai[slot]] : NULL;
    return a ? dbl(a->init, a->t, e0, n) : NULL;
}

/* The KV-cache rows of sequence b after the append, [n][Hkv][d]: rows below
   cache_seqlens[b] from the cache as uploaded, the snew appended ones from k_new/v_new. */
static double *cache_rows(const scase *c, int cache, int fresh, int b, int n, int d)
{
    const int32_t *cs = (const int32_t *)c->a[c->ai[X_CS]].init;
    const int32_t *bt = c->page ? (const int32_t *)c->a[c->ai[X_BT]].init : NULL;
    const arr *ca = &c->a[c->ai[cache]], *fa = c->snew ? &c->a[c->ai[fresh]] : NULL;
    const size_t rowel = (size_t)c->Hkv * d;
    double *r = malloc(sizeof(double) * ((size_t)n * rowel + 1));
    for (int j = 0; j < n; j++) {
        size_t src;
        const arr *from = ca;
        if (j >= cs[b]) { from = fa; src = ((size_t)b * c->snew + (size_t)(j - cs[b])) * rowel; }
        else if (bt) src = ((size_t)bt[b * c->maxp + j / c->page] * c->page + (size_t)(j % c->page)) * rowel;
        else src = ((size_t)b * c->cap + (size_t)j) * rowel;
        for (size_t e = 0; e < rowel; e++) r[(size_t)j * rowel + e] = fa_load(from->init, from->t, (int64_t)(src + e));
    }
    return r;
}

/* The sequences of a case: dense batch entries, packed sequences or cache entries. */
static or_seq_data *case_seqs(const scase *c, or_problem *p)
{
    const int dense = c->kind == K_FWD || c->kind == K_BWD, varlen = c->kind == K_VARLEN || c->kind == K_VARLEN_BWD;
    const int bwd = c->kind == K_BWD || c->kind == K_VARLEN_BWD;
    const int nseq = varlen ? c->nseq : c->B;
    or_seq_data *sd = calloc((size_t)(nseq > 0 ? nseq : 1), sizeof *sd);
    double *bias = NULL;
    if (c->bias) {   /* [1, Sq, H, Sk] bf16, the same for every batch entry: [H][Sq][Sk] */
        const void *bi = c->a[c->ai[X_BI]].init;
        bias = malloc(sizeof(double) * ((size_t)c->H * c->Sq * c->Sk + 1));
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Sq; i++)
                for (int j = 0; j < c->Sk; j++)
                    bias[((size_t)h * c->Sq + i) * c->Sk + j] = fa_load(bi, FA_BF16, ((int64_t)i * c->H + h) * c->Sk + j);
    }
    int64_t qrow = 0, krow = 0;
    for (int b = 0; b < nseq; b++) {
        or_seq_data *s = &sd[b];
        if (varlen) { s->sq = c->cq[b + 1] - c->cq[b]; s->sk = c->ckk[b + 1] - c->ckk[b]; qrow = c->cq[b]; krow = c->ckk[b]; }
        else if (dense) { s->sq = c->Sq; s->sk = c->Sk; }
        else { s->sq = c->Sq; s->sk = ((const int32_t *)c->a[c->ai[X_CS]].init)[b] + c->snew; }
        s->q_row = qrow; s->k_row = krow; s->drop_b = b;
        s->q = arr_dbl(c, X_Q, (size_t)qrow * c->H * c->dqk, (size_t)s->sq * c->H * c->dqk);
        if (c->kind == K_KVCACHE) {
            s->k = cache_rows(c, X_K, X_KN, b, (int)s->sk, c->dqk);
            s->v = cache_rows(c, X_V, X_VN, b, (int)s->sk, c->dv);
        } else {
            s->k = arr_dbl(c, X_K, (size_t)krow * c->Hkv * c->dqk, (size_t)s->sk * c->Hkv * c->dqk);
            s->v = arr_dbl(c, X_V, (size_t)krow * c->Hkv * c->dv, (size_t)s->sk * c->Hkv * c->dv);
        }
        if (bwd) s->dout = arr_dbl(c, X_DO, (size_t)qrow * c->H * c->dv, (size_t)s->sq * c->H * c->dv);
        s->bias = bias;
        if (!varlen) { qrow += s->sq; krow += s->sk; }
    }
    memset(p, 0, sizeof *p);
    p->nseq = nseq;
    p->nq = varlen ? c->TQ : (int64_t)c->B * c->Sq;
    p->nk = varlen ? c->TK : krow;
    p->seqs = sd;
    return sd;
}

void case_oracle(scase *c)
{
    if (c->kind == K_COMBINE) return;
    const int bwd = c->kind == K_BWD || c->kind == K_VARLEN_BWD;
    or_problem p;
    or_seq_data *sd = case_seqs(c, &p);
    double al[8], sk[8];
    for (int h = 0; h < c->H && h < 8; h++) {
        al[h] = c->alibi ? ((const float *)c->a[c->ai[X_AL]].init)[h] : 0.0;
        sk[h] = c->sinks ? ((const float *)c->a[c->ai[X_SK]].init)[h] : 0.0;
    }
    p.hq = c->H; p.hkv = c->Hkv; p.dqk = c->dqk; p.dv = c->dv;
    p.dt = c->t; p.odt = c->out_f32 ? FA_F32 : c->t;
    p.scale = 1.0 / sqrt((double)c->dqk);
    p.causal = c->opt.causal; p.window = c->opt.window; p.wl = c->opt.window_left; p.wr = c->opt.window_right;
    p.softcap = c->opt.softcap;
    p.alibi = c->alibi ? al : NULL; p.sinks = c->sinks ? sk : NULL;
    p.dropout_p = c->opt.dropout_p; p.seed = c->opt.seed; p.offset = c->opt.offset;
    if (or_compute(&p, bwd, &c->orc)) { printf("oracle: out of memory\n"); exit(2); }
    c->has_orc = 1;
    for (int64_t b = 0; b < p.nseq; b++) {
        free((void *)sd[b].q); free((void *)sd[b].k); free((void *)sd[b].v); free((void *)sd[b].dout);
    }
    free((void *)(p.nseq > 0 ? sd[0].bias : NULL));
    free(sd);
}

size_t out_bytes(const scase *c)
{
    size_t b = 0;
    for (int i = 0; i < c->na; i++) if (c->a[i].role != A_IN) b += c->a[i].n * c->a[i].es + GUARD;
    return b;
}

int all_ff(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) if (p[i] != 0xff) return 0;
    return 1;
}

/* The exact combine in double of a K_COMBINE case: out [B][Sq][H][dv], lse [B][H][Sq]. */
static void combine_exact(const scase *c, double *out, double *lse)
{
    for (int b = 0; b < c->B; b++)
        for (int sq = 0; sq < c->Sq; sq++)
            for (int h = 0; h < c->H; h++) {
                const size_t li = ((size_t)b * c->H + h) * c->Sq + (size_t)sq, orow = (((size_t)b * c->Sq + sq) * c->H + h) * c->dv;
                double l[4], m = -INFINITY, tot = 0;
                for (int i = 0; i < c->nparts; i++) {
                    l[i] = ((const float *)c->a[c->ai[X_P0 + 4 + i]].init)[li];
                    if (l[i] > m) m = l[i];
                }
                for (int i = 0; i < c->nparts && m > -INFINITY; i++) tot += exp(l[i] - m);
                lse[li] = m > -INFINITY ? m + log(tot) : -INFINITY;
                for (int d = 0; d < c->dv; d++) {
                    double acc = 0;
                    for (int i = 0; i < c->nparts && m > -INFINITY; i++) {
                        const arr *pa = &c->a[c->ai[X_P0 + i]];
                        acc += exp(l[i] - m) / tot * fa_load(pa->init, pa->t, (int64_t)(orow + (size_t)d));
                    }
                    out[orow + (size_t)d] = acc;
                }
            }
}

/* The liboracle tensor of output array i. */
static or_tensor tensor_of(const scase *c, int i)
{
    const int role = c->a[i].role;
    if (role == A_OUT) return OR_OUT;
    if (role == A_LSE) return OR_LSE;
    if (role == A_DSINKS) return OR_DSINKS;
    return i == c->ai[X_DQ] ? OR_DQ : i == c->ai[X_DK] ? OR_DK : OR_DV;
}

/* Output array a's values at got as doubles in the oracle's layout: lse [B][H][Sq] (dense
   and KV cache) becomes [H][B Sq]; varlen's lse is [H][TQ] already. */
static double *gathered(const scase *c, const arr *a, const unsigned char *got)
{
    double *x = malloc(sizeof(double) * (a->n + 1));
    for (size_t j = 0; j < a->n; j++)
        x[j] = a->role == A_LSE || a->role == A_DSINKS ? ((const float *)got)[j] : fa_load(got, a->t, (int64_t)j);
    if (a->role == A_LSE && c->kind != K_VARLEN && c->kind != K_COMBINE) {
        double *y = malloc(sizeof(double) * (a->n + 1));
        for (int b = 0; b < c->B; b++)
            for (int h = 0; h < c->H; h++)
                for (int sq = 0; sq < c->Sq; sq++)
                    y[(size_t)h * c->B * c->Sq + (size_t)b * c->Sq + sq] = x[((size_t)b * c->H + h) * c->Sq + sq];
        free(x);
        x = y;
    }
    return x;
}

/* One output array against the oracle (or the exact combine ex) with the rule. */
static void check_values(const scase *c, int i, const unsigned char *got, const double *ex, const char *where)
{
    const arr *a = &c->a[i];
    double *x = gathered(c, a, got);
    char why[512];
    int ok;
    if (c->kind == K_COMBINE) {   /* the reference's fp32 combine is the naive model */
        double *naive = malloc(sizeof(double) * (a->n + 1));
        fa_dtype in_dt = FA_F32;
        for (int p = 0; p < c->nparts; p++) in_dt = or_coarser(in_dt, c->a[c->ai[X_P0 + p]].t);
        for (size_t j = 0; j < a->n; j++) naive[j] = a->oracle[j];
        or_cmp r;
        const int lse = a->role == A_LSE;
        ok = or_tol_plain(x, ex, naive, (int64_t)a->n, lse ? FA_F32 : in_dt, lse ? FA_F32 : a->t, 2.0, &r);
        snprintf(why, sizeof why, "%s: max|ours-exact|=%.3e > bound %.3e (2x max|naive-exact|=%.3e + floor); worst element %lld: "
                 "ours=%.9g exact=%.9g", a->nm, r.err, r.bound, r.nerr, (long long)r.worst, r.ours_w, r.orc_w);
        free(naive);
    } else {
        or_result r;
        const or_tensor t = tensor_of(c, i);
        ok = or_check(&c->orc, t, x, &r);
        or_result_str(&r, t, why, sizeof why);
    }
    if (!ok) failf("%s [%s]: %s", c->name, where, why);
    free(x);
}

void check_run(scase *c, const unsigned char *got, const char *where)
{
    double *ex_out = NULL, *ex_lse = NULL;
    if (c->kind == K_COMBINE) {
        const size_t rows = (size_t)c->B * c->Sq * c->H;
        ex_out = malloc(sizeof(double) * (rows * c->dv + 1));
        ex_lse = malloc(sizeof(double) * (rows + 1));
        combine_exact(c, ex_out, ex_lse);
    }
    const unsigned char *g = got;
    for (int i = 0; i < c->na; i++) {
        const arr *a = &c->a[i];
        if (a->role == A_IN) continue;
        size_t nb = a->n * a->es;
        if (!all_ff(g + nb, GUARD)) failf("%s [%s]: %s: the guard band past the end was written", c->name, where, a->nm);
        if (a->role == A_CACHE) {
            if (memcmp(g, a->oracle_bytes, nb) != 0) failf("%s [%s]: %s after the append differs from the reference's", c->name, where, a->nm);
        } else {
            size_t untouched_bad = 0;
            for (size_t j = 0; j < a->n; j++)
                if (a->live && !a->live[j] && !all_ff(g + j * a->es, a->es)) untouched_bad++;
            if (untouched_bad)
                failf("%s [%s]: %s: %zu elements that must stay untouched were written", c->name, where, a->nm, untouched_bad);
            check_values(c, i, g, a->role == A_LSE ? ex_lse : ex_out, where);
        }
        g += nb + GUARD;
    }
    free(ex_out); free(ex_lse);
    size_t ob = out_bytes(c);
    if (!c->first) {
        c->first = malloc(ob + 1);
        memcpy(c->first, got, ob);
    } else if (c->bitwise && memcmp(c->first, got, ob) != 0) {
        size_t k = 0;
        while (k < ob && c->first[k] == got[k]) k++;
        const char *nm = "?";
        size_t off = 0;
        for (int i = 0; i < c->na; i++) {
            if (c->a[i].role == A_IN) continue;
            size_t nb = c->a[i].n * c->a[i].es + GUARD;
            if (k < off + nb) { nm = c->a[i].nm; break; }
            off += nb;
        }
        failf("%s [%s]: not bitwise equal to the case's first result (first difference in %s, byte %zu)", c->name, where, nm, k - off);
    }
}
