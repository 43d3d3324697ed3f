/* stress_cases.c - stress_cuda's cases (see stress_cuda.c): the pool's random shapes and
 * options, their arrays (inputs rounded to the storage dtype once), the call of each kind,
 * and the reference backend's run of each case. */
#include <math.h>
#include <string.h>
#include "stress_cuda.h"
#include "dtype.h"

const char *const kind_name[K_NKINDS] = { "fwd", "bwd", "varlen", "varlen-bwd", "kvcache", "combine" };

void *hmalloc(size_t bytes)
{
    void *p = NULL;
    CK(cudaMallocHost(&p, bytes ? bytes : 16));
    return p;
}

static int add_arr(scase *c, int slot, const char *nm, int role, fa_dtype t, size_t n, size_t es)
{
    arr *a = &c->a[c->na];
    memset(a, 0, sizeof *a);
    a->nm = nm; a->role = role; a->t = t; a->n = n; a->es = es;
    if (role == A_IN || role == A_CACHE) a->init = hmalloc(n * es);
    if (slot >= 0) c->ai[slot] = c->na;
    return c->na++;
}
static arr *A(scase *c, int slot) { return c->ai[slot] >= 0 ? &c->a[c->ai[slot]] : NULL; }

/* random values rounded to dtype t */
static void fill(arr *a, fa_dtype t, double amp)
{
    for (size_t i = 0; i < a->n; i++) fa_store(a->init, t, (int64_t)i, (float)(amp * frand()));
}

static fa_tensor view(void *data, fa_dtype t, int64_t B, int64_t S, int64_t H, int64_t D)
{
    fa_tensor x = fa_tensor_contiguous(data, t, B, S, H, D);
    if (S == 0) x.stride[0] = H * D;
    return x;
}

fa_status call(const scase *c, fa_context *ctx, void **p, int ref)
{
    const int *x = c->ai;
#define P(s) (x[s] >= 0 ? p[x[s]] : NULL)
    fa_options o = c->opt;
    if (c->alibi) o.alibi_slopes = (const float *)P(X_AL);
    if (c->sinks) o.sinks = (const float *)P(X_SK);
    fa_tensor bt;
    if (c->bias) {
        bt = fa_tensor_contiguous(P(X_BI), FA_BF16, c->B, c->Sq, c->H, c->Sk);
        bt.stride[0] = 0;   /* batch broadcast */
        o.bias = &bt;
    }
    fa_dtype ot = ref ? FA_F32 : c->out_f32 ? FA_F32 : c->t;
    switch (c->kind) {
    case K_FWD: {
        fa_tensor q = view(P(X_Q), c->t, c->B, c->Sq, c->H, c->dqk), k = view(P(X_K), c->t, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, c->B, c->Sk, c->Hkv, c->dv), out = view(P(X_O), ot, c->B, c->Sq, c->H, c->dv);
        return fa_forward(ctx, &out, (float *)P(X_L), &q, &k, &v, &o);
    }
    case K_BWD: {
        fa_tensor q = view(P(X_Q), c->t, c->B, c->Sq, c->H, c->dqk), k = view(P(X_K), c->t, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, c->B, c->Sk, c->Hkv, c->dv), out = view(P(X_O), FA_F32, c->B, c->Sq, c->H, c->dv);
        fa_tensor dout = view(P(X_DO), c->t, c->B, c->Sq, c->H, c->dv);
        fa_tensor dq = view(P(X_DQ), ot, c->B, c->Sq, c->H, c->dqk), dk = view(P(X_DK), ot, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor dv = view(P(X_DV), ot, c->B, c->Sk, c->Hkv, c->dv);
        return fa_backward(ctx, &dq, &dk, &dv, (float *)P(X_DS), &dout, &q, &k, &v, &out, (const float *)P(X_L), &o);
    }
    case K_VARLEN: {
        fa_tensor q = view(P(X_Q), c->t, 1, c->TQ, c->H, c->dqk), k = view(P(X_K), c->t, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, 1, c->TK, c->Hkv, c->dv), out = view(P(X_O), ot, 1, c->TQ, c->H, c->dv);
        return fa_forward_varlen(ctx, &out, (float *)P(X_L), &q, &k, &v, (const int32_t *)P(X_CQ), (const int32_t *)P(X_CK),
                                 c->nseq, c->maxq, c->maxk, &o);
    }
    case K_VARLEN_BWD: {
        fa_tensor q = view(P(X_Q), c->t, 1, c->TQ, c->H, c->dqk), k = view(P(X_K), c->t, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, 1, c->TK, c->Hkv, c->dv), out = view(P(X_O), FA_F32, 1, c->TQ, c->H, c->dv);
        fa_tensor dout = view(P(X_DO), c->t, 1, c->TQ, c->H, c->dv);
        fa_tensor dq = view(P(X_DQ), ot, 1, c->TQ, c->H, c->dqk), dk = view(P(X_DK), ot, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor dv = view(P(X_DV), ot, 1, c->TK, c->Hkv, c->dv);
        return fa_backward_varlen(ctx, &dq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, (const float *)P(X_L),
                                  (const int32_t *)P(X_CQ), (const int32_t *)P(X_CK), c->nseq, c->maxq, c->maxk, &o);
    }
    case K_KVCACHE: {
        int64_t N0 = c->page ? c->npages : c->B, S1 = c->page ? c->page : c->cap;
        fa_tensor q = view(P(X_Q), c->t, c->B, c->Sq, c->H, c->dqk), out = view(P(X_O), ot, c->B, c->Sq, c->H, c->dv);
        fa_tensor kc = view(P(X_K), c->t, N0, S1, c->Hkv, c->dqk), vc = view(P(X_V), c->t, N0, S1, c->Hkv, c->dv);
        fa_tensor kn = view(P(X_KN), c->t, c->B, c->snew, c->Hkv, c->dqk), vn = view(P(X_VN), c->t, c->B, c->snew, c->Hkv, c->dv);
        return fa_forward_kvcache(ctx, &out, (float *)P(X_L), &q, &kc, &vc, c->snew ? &kn : NULL, c->snew ? &vn : NULL,
                                  (const int32_t *)P(X_CS), (const int32_t *)P(X_BT), c->maxp, &o);
    }
    default: {   /* K_COMBINE */
        fa_tensor parts[4];
        const float *lp[4];
        for (int i = 0; i < c->nparts; i++) {
            parts[i] = view(P(X_P0 + i), c->a[x[X_P0 + i]].t, c->B, c->Sq, c->H, c->dv);
            lp[i] = (const float *)P(X_P0 + 4 + i);
        }
        fa_tensor out = view(P(X_O), ot, c->B, c->Sq, c->H, c->dv);
        return fa_combine(ctx, &out, (float *)P(X_L), parts, lp, c->nparts);
    }
    }
#undef P
}

fa_context *refctx;

/* The reference backend's run of a case (fp32 outputs): the caches after an append (checked
   bytewise), which rows it leaves unwritten (they must stay untouched), and for a combine
   the naive model of the rule. Then liboracle's oracle (stress_check.c). */
static void reference_run(scase *c)
{
    void *p[MAXA];
    void *cache_copy[MAXA] = { 0 };
    for (int i = 0; i < c->na; i++) {
        arr *a = &c->a[i];
        if (a->role == A_IN) p[i] = a->init;
        else if (a->role == A_CACHE) {
            a->oracle_bytes = malloc(a->n * a->es + 1);
            memcpy(a->oracle_bytes, a->init, a->n * a->es);
            p[i] = cache_copy[i] = a->oracle_bytes;
        } else {
            a->oracle = malloc(a->n * 4 + 4);
            for (size_t j = 0; j < a->n; j++) a->oracle[j] = NAN;
            p[i] = a->oracle;
        }
    }
    fa_status st = call(c, refctx, p, 1);
    if (st != FA_OK) failf("%s: the reference refused the case: %s", c->name, fa_last_error(refctx));
    /* rows the reference did not write are not live (varlen rows past cu_seqlens) */
    for (int i = 0; i < c->na; i++) {
        arr *a = &c->a[i];
        if (a->role == A_IN || a->role == A_CACHE) continue;
        for (size_t j = 0; j < a->n; j++)
            if (isnan(a->oracle[j])) {
                if (!a->live) { a->live = malloc(a->n); memset(a->live, 1, a->n); }
                a->live[j] = 0;
            }
    }
    c->bytes = 0;
    for (int i = 0; i < c->na; i++) c->bytes += c->a[i].n * c->a[i].es + GUARD;
    case_oracle(c);
}


static const int dims[][2] = { {64, 64}, {128, 128}, {256, 256}, {32, 32}, {8, 8}, {96, 96}, {80, 80},
                               {192, 128}, {64, 32}, {160, 160}, {128, 128}, {64, 64} };

static void rand_shape(scase *c, int maxprod)
{
    const int *d = dims[irand(sizeof dims / sizeof dims[0])];
    c->dqk = d[0]; c->dv = d[1];
    c->t = irand(2) ? FA_BF16 : FA_F16;
    static const int hk[][2] = { {1, 1}, {2, 2}, {3, 3}, {4, 2}, {4, 1}, {2, 1}, {4, 4} };
    const int *h = hk[irand(7)];
    c->H = h[0]; c->Hkv = h[1];
    c->B = 1 + irand(3);
    do {
        static const int lens[] = { 0, 1, 2, 5, 17, 64, 65, 100, 128, 129, 200, 255, 256, 300, 400 };
        c->Sq = lens[irand(15)]; c->Sk = lens[irand(15)];
        if (irand(8) == 0) { c->Sq = 1 + irand(4); c->Sk = 256 + irand(500); c->B = 1; }   /* decode: split-KV */
    } while ((long)c->B * c->H * c->Sq * c->Sk * (c->dqk + c->dv) > maxprod);
}

static void rand_opts(scase *c, int general)
{
    memset(&c->opt, 0, sizeof c->opt);
    c->opt.causal = (fa_causal)irand(3);
    if (irand(4) == 0) { c->opt.window = 1; c->opt.window_left = irand(3) ? irand(80) : -1; c->opt.window_right = irand(2) ? irand(30) : -1; }
    c->sinks = irand(5) == 0;
    c->out_f32 = irand(4) == 0;
    if (general) {   /* a feature the fast kernel does not serve */
        switch (irand(4)) {
        case 0: c->alibi = 1; break;
        case 1: c->opt.softcap = 5.0f + 10.0f * (float)irand(2); break;
        case 2: c->opt.dropout_p = 0.15f; c->opt.seed = rnext(); c->opt.offset = rnext() % 1000; break;
        default: c->bias = 1; break;
        }
    }
}

static void add_feature_arrays(scase *c)
{
    if (c->alibi) {
        arr *a = &c->a[add_arr(c, X_AL, "alibi", A_IN, FA_F32, c->H, 4)];
        for (int h = 0; h < c->H; h++) ((float *)a->init)[h] = (float)(0.05 + 0.5 * fabs(frand()));
    }
    if (c->sinks) fill(&c->a[add_arr(c, X_SK, "sinks", A_IN, FA_F32, c->H, 4)], FA_F32, 2.0);
    if (c->bias) fill(&c->a[add_arr(c, X_BI, "bias", A_IN, FA_BF16, (size_t)c->Sq * c->H * c->Sk, 2)], FA_BF16, 1.0);
}

static void varlen_lengths(scase *c, int maxlen)
{
    c->nseq = 1 + irand(8);
    c->cq[0] = c->ckk[0] = 0; c->maxq = c->maxk = 0;
    for (int b = 0; b < c->nseq; b++) {
        int lq = (b % 5 == 4 || b == c->nseq - 1) ? 0 : 1 + irand(maxlen);
        int lk = (b % 5 == 4 || b == c->nseq - 1) ? 0 : 1 + irand(maxlen + 40);
        c->cq[b + 1] = c->cq[b] + lq; c->ckk[b + 1] = c->ckk[b] + lk;
        if (lq > c->maxq) c->maxq = lq;
        if (lk > c->maxk) c->maxk = lk;
    }
    c->TQ = c->cq[c->nseq] + 5; c->TK = c->ckk[c->nseq] + 3;
    arr *a = &c->a[add_arr(c, X_CQ, "cu_seqlens_q", A_IN, FA_F32, c->nseq + 1, 4)];
    memcpy(a->init, c->cq, 4 * (c->nseq + 1));
    a = &c->a[add_arr(c, X_CK, "cu_seqlens_k", A_IN, FA_F32, c->nseq + 1, 4)];
    memcpy(a->init, c->ckk, 4 * (c->nseq + 1));
}

/* The reference forward's fp32 out and lse as inputs of a backward case. */
static void bwd_inputs(scase *c, int varlen)
{
    size_t nq = varlen ? (size_t)c->TQ * c->H : (size_t)c->B * c->Sq * c->H;
    arr *o = &c->a[add_arr(c, X_O, "out", A_IN, FA_F32, nq * c->dv, 4)];
    arr *l = &c->a[add_arr(c, X_L, "lse", A_IN, FA_F32, nq, 4)];
    for (size_t i = 0; i < o->n; i++) ((float *)o->init)[i] = 0;
    for (size_t i = 0; i < l->n; i++) ((float *)l->init)[i] = 0;
    fa_options op = c->opt;
    if (c->alibi) op.alibi_slopes = (const float *)A(c, X_AL)->init;
    if (c->sinks) op.sinks = (const float *)A(c, X_SK)->init;
    fa_tensor bt;
    if (c->bias) { bt = fa_tensor_contiguous(A(c, X_BI)->init, FA_BF16, c->B, c->Sq, c->H, c->Sk); bt.stride[0] = 0; op.bias = &bt; }
    fa_status st;
    if (varlen) {
        fa_tensor q = view(A(c, X_Q)->init, c->t, 1, c->TQ, c->H, c->dqk), k = view(A(c, X_K)->init, c->t, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor v = view(A(c, X_V)->init, c->t, 1, c->TK, c->Hkv, c->dv), out = view(o->init, FA_F32, 1, c->TQ, c->H, c->dv);
        st = fa_forward_varlen(refctx, &out, (float *)l->init, &q, &k, &v, c->cq, c->ckk, c->nseq, c->maxq, c->maxk, &op);
    } else {
        fa_tensor q = view(A(c, X_Q)->init, c->t, c->B, c->Sq, c->H, c->dqk), k = view(A(c, X_K)->init, c->t, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor v = view(A(c, X_V)->init, c->t, c->B, c->Sk, c->Hkv, c->dv), out = view(o->init, FA_F32, c->B, c->Sq, c->H, c->dv);
        st = fa_forward(refctx, &out, (float *)l->init, &q, &k, &v, &op);
    }
    if (st != FA_OK) failf("%s: reference forward: %s", c->name, fa_last_error(refctx));
}

scase *new_case(int id)
{
    scase *c = calloc(1, sizeof *c);
    for (int i = 0; i < 32; i++) c->ai[i] = -1;
    /* weights: fwd 5, bwd 3, varlen 2, varlen-bwd 1, kvcache 3, combine 2 */
    static const int wk[] = { K_FWD, K_FWD, K_FWD, K_FWD, K_FWD, K_BWD, K_BWD, K_BWD, K_VARLEN, K_VARLEN,
                              K_VARLEN_BWD, K_KVCACHE, K_KVCACHE, K_KVCACHE, K_COMBINE, K_COMBINE };
    c->kind = wk[irand(16)];
    c->bitwise = 1;
    const char *extra = "";
    switch (c->kind) {
    case K_FWD:
    case K_BWD: {
        int bwd = c->kind == K_BWD;
        rand_shape(c, bwd ? 1 << 22 : 1 << 24);
        int general = irand(2);
        rand_opts(c, general);
        if (bwd) { c->det = irand(4) != 0; c->opt.deterministic = c->det; c->bitwise = c->det; }
        size_t nq = (size_t)c->B * c->Sq * c->H, nk = (size_t)c->B * c->Sk * c->Hkv;
        fill(&c->a[add_arr(c, X_Q, "q", A_IN, c->t, nq * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_K, "k", A_IN, c->t, nk * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_V, "v", A_IN, c->t, nk * c->dv, 2)], c->t, 1.0);
        add_feature_arrays(c);
        fa_dtype ot = c->out_f32 ? FA_F32 : c->t;
        if (!bwd) {
            add_arr(c, X_O, "out", A_OUT, ot, nq * c->dv, esz(ot));
            if (irand(4)) add_arr(c, X_L, "lse", A_LSE, FA_F32, nq, 4);
            extra = general ? " general" : "";
        } else {
            fill(&c->a[add_arr(c, X_DO, "dout", A_IN, c->t, nq * c->dv, 2)], c->t, 1.0);
            bwd_inputs(c, 0);
            add_arr(c, X_DQ, "dq", A_GRAD, ot, nq * c->dqk, esz(ot));
            add_arr(c, X_DK, "dk", A_GRAD, ot, nk * c->dqk, esz(ot));
            add_arr(c, X_DV, "dv", A_GRAD, ot, nk * c->dv, esz(ot));
            if (c->sinks) add_arr(c, X_DS, "dsinks", A_DSINKS, FA_F32, c->H, 4);
            extra = c->det ? " det" : " nondet";
        }
        snprintf(c->name, sizeof c->name, "#%d %s %s B%d Sq%d Sk%d H%d/%d d%d/%d c%d%s%s%s%s%s%s%s%s%s", id, kind_name[c->kind],
                 dtn(c->t), c->B, c->Sq, c->Sk, c->H, c->Hkv, c->dqk, c->dv, (int)c->opt.causal, extra,
                 c->opt.window ? " window" : "", c->alibi ? " alibi" : "", c->opt.softcap > 0 ? " softcap" : "",
                 c->opt.dropout_p > 0 ? " dropout" : "", c->bias ? " bias" : "", c->sinks ? " sinks" : "",
                 c->out_f32 ? " f32out" : "", c->ai[X_L] < 0 && !bwd ? " nolse" : "");
        break;
    }
    case K_VARLEN:
    case K_VARLEN_BWD: {
        int bwd = c->kind == K_VARLEN_BWD;
        const int *d = dims[irand(10)];
        c->dqk = d[0]; c->dv = d[1];
        c->t = irand(2) ? FA_BF16 : FA_F16;
        c->H = 4; c->Hkv = irand(2) ? 2 : 4;
        memset(&c->opt, 0, sizeof c->opt);
        c->opt.causal = (fa_causal)irand(3);
        if (bwd) { c->det = 1; c->opt.deterministic = 1; }
        c->out_f32 = irand(4) == 0;
        varlen_lengths(c, bwd ? 100 : 160);
        size_t nq = (size_t)c->TQ * c->H, nk = (size_t)c->TK * c->Hkv;
        fill(&c->a[add_arr(c, X_Q, "q", A_IN, c->t, nq * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_K, "k", A_IN, c->t, nk * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_V, "v", A_IN, c->t, nk * c->dv, 2)], c->t, 1.0);
        fa_dtype ot = c->out_f32 ? FA_F32 : c->t;
        if (!bwd) {
            add_arr(c, X_O, "out", A_OUT, ot, nq * c->dv, esz(ot));
            add_arr(c, X_L, "lse", A_LSE, FA_F32, nq, 4);
        } else {
            fill(&c->a[add_arr(c, X_DO, "dout", A_IN, c->t, nq * c->dv, 2)], c->t, 1.0);
            bwd_inputs(c, 1);
            add_arr(c, X_DQ, "dq", A_GRAD, ot, nq * c->dqk, esz(ot));
            add_arr(c, X_DK, "dk", A_GRAD, ot, nk * c->dqk, esz(ot));
            add_arr(c, X_DV, "dv", A_GRAD, ot, nk * c->dv, esz(ot));
        }
        snprintf(c->name, sizeof c->name, "#%d %s %s nseq%d total %d/%d H%d/%d d%d/%d c%d%s", id, kind_name[c->kind], dtn(c->t),
                 c->nseq, c->cq[c->nseq], c->ckk[c->nseq], c->H, c->Hkv, c->dqk, c->dv, (int)c->opt.causal,
                 c->out_f32 ? " f32out" : "");
        break;
    }
    case K_KVCACHE: {
        static const int pages[] = { 0, 0, 1, 7, 16, 64, 256 };
        c->page = pages[irand(7)];
        const int *d = dims[irand(3)];
        c->dqk = d[0]; c->dv = d[1];
        c->t = irand(2) ? FA_BF16 : FA_F16;
        c->B = 1 + irand(3);
        c->H = 4; c->Hkv = irand(2) ? 1 : 2;
        c->Sq = irand(2) ? 1 : 1 + irand(20);
        c->snew = irand(3) ? (irand(2) ? 1 : c->Sq) : 0;
        c->cap = 64 + irand(400);
        c->maxp = c->page ? (c->cap + c->page - 1) / c->page : 0;
        if (c->page) c->cap = c->maxp * c->page;
        c->npages = c->page ? c->B * c->maxp + 3 : 0;
        memset(&c->opt, 0, sizeof c->opt);
        c->opt.causal = irand(2) ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
        size_t ncache = c->page ? (size_t)c->npages * c->page : (size_t)c->B * c->cap;
        fill(&c->a[add_arr(c, X_Q, "q", A_IN, c->t, (size_t)c->B * c->Sq * c->H * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_K, "k_cache", A_CACHE, c->t, ncache * c->Hkv * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_V, "v_cache", A_CACHE, c->t, ncache * c->Hkv * c->dv, 2)], c->t, 1.0);
        if (c->snew) {
            fill(&c->a[add_arr(c, X_KN, "k_new", A_IN, c->t, (size_t)c->B * c->snew * c->Hkv * c->dqk, 2)], c->t, 2.0);
            fill(&c->a[add_arr(c, X_VN, "v_new", A_IN, c->t, (size_t)c->B * c->snew * c->Hkv * c->dv, 2)], c->t, 1.0);
        }
        arr *cs = &c->a[add_arr(c, X_CS, "cache_seqlens", A_IN, FA_F32, c->B, 4)];
        for (int b = 0; b < c->B; b++) ((int32_t *)cs->init)[b] = b == 1 ? 0 : irand(c->cap - c->snew + 1);
        if (c->page) {
            arr *bt = &c->a[add_arr(c, X_BT, "block_table", A_IN, FA_F32, (size_t)c->B * c->maxp, 4)];
            for (int i = 0; i < c->B * c->maxp; i++) ((int32_t *)bt->init)[i] = c->npages - 1 - i;   /* reversed */
        }
        fa_dtype ot = irand(4) == 0 ? FA_F32 : c->t;
        c->out_f32 = ot == FA_F32;
        add_arr(c, X_O, "out", A_OUT, ot, (size_t)c->B * c->Sq * c->H * c->dv, esz(ot));
        add_arr(c, X_L, "lse", A_LSE, FA_F32, (size_t)c->B * c->Sq * c->H, 4);
        snprintf(c->name, sizeof c->name, "#%d kvcache %s B%d Sq%d new%d page%d cap%d H%d/%d d%d c%d%s", id, dtn(c->t), c->B,
                 c->Sq, c->snew, c->page, c->cap, c->H, c->Hkv, c->dqk, (int)c->opt.causal, c->out_f32 ? " f32out" : "");
        break;
    }
    default: {   /* K_COMBINE */
        c->nparts = 1 + irand(4);
        c->B = 1 + irand(2); c->Sq = 1 + irand(150); c->H = 1 + irand(4);
        c->dv = 8 * (1 + irand(32));
        size_t rows = (size_t)c->B * c->Sq * c->H;
        for (int i = 0; i < c->nparts; i++) {
            fa_dtype pt = (fa_dtype)irand(3);
            fill(&c->a[add_arr(c, X_P0 + i, "out_part", A_IN, pt, rows * c->dv, esz(pt))], pt, 1.0);
        }
        for (int i = 0; i < c->nparts; i++) {
            arr *l = &c->a[add_arr(c, X_P0 + 4 + i, "lse_part", A_IN, FA_F32, rows, 4)];
            for (size_t r = 0; r < rows; r++)
                /* rows 3, 10, ...: every part empty (out 0, lse -inf); others: some parts empty */
                ((float *)l->init)[r] = r % 7 == 3 || (r + (size_t)i) % 5 == 0 ? -INFINITY : (float)(3.0 * frand());
        }
        fa_dtype ot = (fa_dtype)irand(3);
        c->t = ot;
        add_arr(c, X_O, "out", A_OUT, ot, rows * c->dv, esz(ot));
        if (irand(4)) add_arr(c, X_L, "lse", A_LSE, FA_F32, rows, 4);
        snprintf(c->name, sizeof c->name, "#%d combine %d parts B%d S%d H%d d%d out %s", id, c->nparts, c->B, c->Sq, c->H, c->dv, dtn(ot));
        break;
    }
    }
    reference_run(c);
    return c;
}
