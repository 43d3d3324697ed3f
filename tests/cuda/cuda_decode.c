/* cuda_decode.c - test_cuda's decode cases (see test_cuda.c): fa_forward_kvcache with 1-16
 * new tokens on the CUDA backend, served by the decode kernel, against liboracle: page
 * sizes 1, 3, 16, 256 and contiguous caches, GQA groups 1, 4, 8, both causal alignments,
 * windows, softcap, ALiBi, sinks, lse or none, head dims 64/128/256 and d_qk != d_v,
 * cache_seqlens of 0 and 1, the append of k_new/v_new (the caches after it compared
 * byte for byte with the append done on the host), KV splits from 1 to 32 (the planner's
 * own, and forced by the FA_CUDA_DECODE_SPLITS test hook), and fa_query naming the decode
 * kernel where it serves the shape and the reason where it does not. */
#include <math.h>
#include <string.h>
#include "cuda_test.h"
#include "dtype.h"

typedef struct {
    fa_dtype t;
    int B, Sq, snew, page, cap, H, Hkv, dqk, dv;
    fa_causal causal; int window; int64_t wl, wr;
    float softcap; int alibi, sinks, lse;
    int cs_mode;        /* 0: random lengths with a 0 and a 1; 1: every sequence full */
    int splits;         /* 0: the planner's; n: FA_CUDA_DECODE_SPLITS=n               */
} deccase;

/* The oracle problem: sequence b sees the first cs[b] cache rows (contiguous or through bt)
   then its snew new rows. kd[b] gets the gathered arrays (freed by the caller). */
static void dec_problem(const deccase *c, const int32_t *cs, const int32_t *bt, int maxp, const buf *kc,
                        const buf *vc, const buf *kn, const buf *vn, const buf *q, const double *alibi,
                        const double *sinks, or_seq_data *kd, or_problem *p)
{
    int64_t krow = 0;
    const int64_t rk = (int64_t)c->Hkv * c->dqk, rv = (int64_t)c->Hkv * c->dv;
    for (int b = 0; b < c->B; b++) {
        or_seq_data *s = &kd[b];
        memset(s, 0, sizeof *s);
        s->sq = c->Sq; s->sk = cs[b] + c->snew; s->q_row = (int64_t)b * c->Sq; s->k_row = krow; s->drop_b = b;
        s->q = host_rows(q->h, c->t, c->Sq, c->H, c->dqk, 0, b, 0, c->Sq);
        double *kk = malloc(sizeof(double) * (size_t)(s->sk * rk + 1)), *vv = malloc(sizeof(double) * (size_t)(s->sk * rv + 1));
        if (!kk || !vv) { printf("out of memory\n"); exit(2); }
        for (int64_t j = 0; j < s->sk; j++) {
            const buf *sk = kc, *sv = vc;
            int64_t r;
            if (j >= cs[b]) { sk = kn; sv = vn; r = (int64_t)b * c->snew + (j - cs[b]); }
            else if (c->page) r = (int64_t)bt[b * maxp + j / c->page] * c->page + j % c->page;
            else r = (int64_t)b * c->cap + j;
            for (int64_t x = 0; x < rk; x++) kk[j * rk + x] = fa_load(sk->h, c->t, r * rk + x);
            for (int64_t x = 0; x < rv; x++) vv[j * rv + x] = fa_load(sv->h, c->t, r * rv + x);
        }
        s->k = kk; s->v = vv;
        krow += s->sk;
    }
    memset(p, 0, sizeof *p);
    p->nseq = c->B; p->nq = (int64_t)c->B * c->Sq; p->nk = krow; p->hq = c->H; p->hkv = c->Hkv;
    p->dqk = c->dqk; p->dv = c->dv; p->dt = c->t; p->odt = c->t; p->scale = 1.0 / sqrt((double)c->dqk);
    p->causal = c->causal; p->window = c->window; p->wl = c->wl; p->wr = c->wr; p->softcap = c->softcap;
    p->alibi = c->alibi ? alibi : NULL; p->sinks = c->sinks ? sinks : NULL;
    p->seqs = kd;
}

/* fa_query on the call's dense form (q against [B, cap, Hkv, d] k/v: the same plan). */
static const char *dec_query(const deccase *c, const fa_options *op)
{
    fa_tensor q = fa_tensor_contiguous(NULL, c->t, c->B, c->Sq, c->H, c->dqk);
    fa_tensor k = fa_tensor_contiguous(NULL, c->t, c->B, c->cap, c->Hkv, c->dqk);
    fa_tensor v = fa_tensor_contiguous(NULL, c->t, c->B, c->cap, c->Hkv, c->dv);
    fa_tensor o = fa_tensor_contiguous(NULL, c->t, c->B, c->Sq, c->H, c->dv);
    const char *name = NULL;
    if (fa_query(cu, &name, &o, NULL, &q, &k, &v, op) != FA_OK || !name) return "(fa_query failed)";
    return name;
}

static void run_decode(const deccase *c)
{
    char name[200], sp[16] = "";
    if (c->splits) snprintf(sp, sizeof sp, " splits%d", c->splits);
    snprintf(name, sizeof name, "decode %s B%d new%d/%d page%d cap%d H%d/%d d%d/%d c%d w%lld,%lld sc%g al%d sk%d lse%d%s",
             dtname(c->t), c->B, c->Sq, c->snew, c->page, c->cap, c->H, c->Hkv, c->dqk, c->dv, (int)c->causal,
             c->window ? (long long)c->wl : -2LL, c->window ? (long long)c->wr : -2LL, c->softcap, c->alibi, c->sinks, c->lse, sp);
    const fa_dtype t = c->t;
    const int B = c->B, maxp = c->page ? (c->cap + c->page - 1) / c->page : 0, cap = c->page ? maxp * c->page : c->cap;
    const int npages = c->page ? B * maxp + 3 : 0;
    int32_t *cs = malloc(4 * (size_t)B), *bt = NULL;
    for (int b = 0; b < B; b++)
        cs[b] = c->cs_mode ? cap - c->snew
                : b == 1 ? 0 : b == 2 ? 1 : (int)((frand() + 1) * 0.5 * (cap - c->snew));
    const int64_t rows = c->page ? (int64_t)npages * c->page : (int64_t)B * cap;
    buf kc = mk((size_t)rows * c->Hkv * c->dqk, t, 2.0), vc = mk((size_t)rows * c->Hkv * c->dv, t, 1.0);
    if (c->page) {   /* pages in a shuffled order */
        bt = malloc(4 * (size_t)B * maxp);
        for (int i = 0; i < B * maxp; i++) bt[i] = i;
        for (int i = B * maxp - 1; i > 0; i--) {
            int j = (int)((frand() + 1) * 0.5 * (i + 1));
            if (j > i) j = i;
            int32_t x = bt[i]; bt[i] = bt[j]; bt[j] = x;
        }
    }
    const int sn = c->snew ? c->snew : 1;
    buf kn = mk((size_t)B * sn * c->Hkv * c->dqk, t, 2.0), vn = mk((size_t)B * sn * c->Hkv * c->dv, t, 1.0);
    buf q = mk((size_t)B * c->Sq * c->H * c->dqk, t, 2.0), o = mk_poison((size_t)B * c->Sq * c->H * c->dv, t);
    buf l = mk_poison((size_t)B * c->H * c->Sq, FA_F32);
    buf al = mk_zero(c->H, FA_F32), sk = mk_zero(c->H, FA_F32);
    double alibi[64], sinks[64];
    for (int h = 0; h < c->H; h++) {
        ((float *)al.h)[h] = (float)(0.5 / (h + 1));
        ((float *)sk.h)[h] = (float)(2.0 * frand());
        alibi[h] = ((float *)al.h)[h]; sinks[h] = ((float *)sk.h)[h];
    }
    CK(cudaMemcpy(al.d, al.h, 4 * (size_t)c->H, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sk.d, sk.h, 4 * (size_t)c->H, cudaMemcpyHostToDevice));
    int32_t *dcs, *dbt = NULL;
    CK(cudaMalloc((void **)&dcs, 4 * (size_t)B)); CK(cudaMemcpy(dcs, cs, 4 * (size_t)B, cudaMemcpyHostToDevice));
    if (bt) { CK(cudaMalloc((void **)&dbt, 4 * (size_t)B * maxp)); CK(cudaMemcpy(dbt, bt, 4 * (size_t)B * maxp, cudaMemcpyHostToDevice)); }
    fa_options op = {0};
    op.causal = c->causal; op.window = c->window; op.window_left = c->wl; op.window_right = c->wr; op.softcap = c->softcap;
    if (c->alibi) op.alibi_slopes = (float *)al.d;
    if (c->sinks) op.sinks = (float *)sk.d;
    const int64_t S1 = c->page ? c->page : cap, N0 = c->page ? npages : B;
    fa_tensor tkc = fa_tensor_contiguous(kc.d, t, N0, S1, c->Hkv, c->dqk), tvc = fa_tensor_contiguous(vc.d, t, N0, S1, c->Hkv, c->dv);
    fa_tensor tkn = fa_tensor_contiguous(kn.d, t, B, c->snew, c->Hkv, c->dqk), tvn = fa_tensor_contiguous(vn.d, t, B, c->snew, c->Hkv, c->dv);
    fa_tensor tq = fa_tensor_contiguous(q.d, t, B, c->Sq, c->H, c->dqk), to = fa_tensor_contiguous(o.d, t, B, c->Sq, c->H, c->dv);
    or_seq_data kd[64];
    or_problem kp;
    dec_problem(c, cs, bt, maxp, &kc, &vc, &kn, &vn, &q, alibi, sinks, kd, &kp);
    char sbuf[32];
    if (c->splits) { snprintf(sbuf, sizeof sbuf, "%d", c->splits); setenv("FA_CUDA_DECODE_SPLITS", sbuf, 1); }
    /* the decode kernel serves the call, with the forced split count */
    const char *qn = dec_query(c, &op);
    int chosen = strstr(qn, "cuda/decode") != NULL;
    if (c->splits > 1) { snprintf(sbuf, sizeof sbuf, "split-kv %d", c->splits); chosen &= strstr(qn, sbuf) != NULL; }
    if (c->splits == 1) chosen &= strstr(qn, "split-kv") == NULL;
    /* KV heads of d <= 64 go two to a block when their rows fit and the pairs, split at
       most min(32, chunks / 2) ways, fill a wave (SMs x the pair kernel's resident blocks,
       1 or 2): paired from 3 x SMs such blocks, never below SMs */
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int64_t smax = (cap + 63) / 64 / 2 < 32 ? (cap + 63) / 64 / 2 : 32;
    const int pairable = c->dqk <= 64 && c->dv <= 64 && c->Hkv % 2 == 0 && 2 * (c->H / c->Hkv) * c->Sq <= 64;
    const int64_t pblocks = (int64_t)B * c->Hkv / 2 * smax;
    if (pairable && pblocks >= 3 * sms) chosen &= strstr(qn, "2 KV heads") != NULL;
    if (!pairable || pblocks < sms) chosen &= strstr(qn, "2 KV heads") == NULL;
    fa_status st = fa_forward_kvcache(cu, &to, c->lse ? (float *)l.d : NULL, &tq, &tkc, &tvc, c->snew ? &tkn : NULL,
                                      c->snew ? &tvn : NULL, dcs, dbt, maxp, &op);
    CK(cudaDeviceSynchronize());
    unsetenv("FA_CUDA_DECODE_SPLITS");
    if (st != FA_OK) { result(name, 0, "status %d", (int)st); printf("   %s\n", fa_last_error(cu)); goto done; }
    pull(&o); pull(&l);
    {
        or_oracle orc;
        if (or_compute(&kp, 0, &orc)) { result(name, 0, "oracle: out of memory"); goto done; }
        double *g = host_all(&o, (size_t)B * c->Sq * c->H * c->dv), *gl = lse_bhs((float *)l.h, B, c->H, c->Sq), eo = 0, el = 0;
        int ok = oracle_ok(&orc, OR_OUT, g, &eo);
        if (c->lse) ok &= oracle_ok(&orc, OR_LSE, gl, &el);
        const int lse_untouched = c->lse || ((uint32_t *)l.h)[0] == 0xffffffffu;
        result(name, ok && guard_ok(&o) && (!c->lse || guard_ok(&l)) && lse_untouched && chosen,
               "err/bound out %.2f lse %.2f%s%s [%s]", eo, el, guard_ok(&o) ? "" : " guard", chosen ? "" : " NOT the decode kernel", qn);
        free(g); free(gl);
        or_free(&orc);
    }
    if (c->snew) {   /* the caches after the append, against the append on the host */
        const int64_t rk = (int64_t)c->Hkv * c->dqk * esz(t), rv = (int64_t)c->Hkv * c->dv * esz(t);
        for (int b = 0; b < B; b++)
            for (int x = 0; x < c->snew; x++) {
                const int64_t j = cs[b] + x, r = c->page ? (int64_t)bt[b * maxp + j / c->page] * c->page + j % c->page : (int64_t)b * cap + j;
                memcpy((char *)kc.h + r * rk, (char *)kn.h + ((int64_t)b * c->snew + x) * rk, (size_t)rk);
                memcpy((char *)vc.h + r * rv, (char *)vn.h + ((int64_t)b * c->snew + x) * rv, (size_t)rv);
            }
        void *k2 = malloc(kc.n * esz(t)), *v2 = malloc(vc.n * esz(t));
        CK(cudaMemcpy(k2, kc.d, kc.n * esz(t), cudaMemcpyDeviceToHost)); CK(cudaMemcpy(v2, vc.d, vc.n * esz(t), cudaMemcpyDeviceToHost));
        char n2[240]; snprintf(n2, sizeof n2, "%s cache after append", name);
        result(n2, !memcmp(k2, kc.h, kc.n * esz(t)) && !memcmp(v2, vc.h, vc.n * esz(t)), "");
        free(k2); free(v2);
    }
done:
    for (int b = 0; b < B; b++) { free((void *)kd[b].q); free((void *)kd[b].k); free((void *)kd[b].v); }
    cudaFree(dcs); cudaFree(dbt); free(bt); free(cs);
    fr(&kc); fr(&vc); fr(&kn); fr(&vn); fr(&q); fr(&o); fr(&l); fr(&al); fr(&sk);
}

/* Shapes the decode kernel leaves to the other kernels: fa_query says why. */
static void decode_refusals(void)
{
    static const struct { int Sq, H, Hkv; fa_dtype t; int bias; const char *why; } r[] = {
        { 17, 4, 4, FA_BF16, 0, "Sq > 16" }, { 16, 8, 1, FA_BF16, 0, "group x Sq > 64" },
        { 1, 4, 1, FA_F32, 0, "fp32" }, { 1, 4, 1, FA_F16, 1, "bias" },
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        fa_tensor q = fa_tensor_contiguous(NULL, r[i].t, 2, r[i].Sq, r[i].H, 128);
        fa_tensor k = fa_tensor_contiguous(NULL, r[i].t, 2, 1000, r[i].Hkv, 128), v = k;
        fa_tensor o = fa_tensor_contiguous(NULL, r[i].t, 2, r[i].Sq, r[i].H, 128);
        fa_tensor bias = fa_tensor_contiguous(NULL, FA_F32, 1, r[i].Sq, 1, 1000);
        fa_options op = {0};
        if (r[i].bias) op.bias = &bias;
        const char *nm = NULL;
        fa_status st = fa_query(cu, &nm, &o, NULL, &q, &k, &v, &op);
        char name[160];
        snprintf(name, sizeof name, "decode refused: %s", r[i].why);
        result(name, st == FA_OK && nm && !strstr(nm, "cuda/decode") && strstr(nm, r[i].why), "[%s]", nm ? nm : fa_last_error(cu));
    }
}

/* For compute-sanitizer (test_cuda san): a paged cache of 3-row pages with an append,
   sinks, ALiBi and forced splits; 64 packed rows (4 row groups) on a contiguous cache;
   the same paged case at d64 with KV heads in pairs. */
void run_decode_san(void)
{
    deccase a = { FA_BF16, 3, 2, 2, 3, 400, 8, 2, 128, 128, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 1, 1, 1, 0, 3 };
    run_decode(&a);
    deccase b = { FA_F16, 2, 16, 16, 0, 300, 8, 2, 64, 64, FA_CAUSAL_TOP_LEFT, 0, -1, -1, 0.f, 0, 0, 1, 0, 0 };
    run_decode(&b);
    deccase c = { FA_BF16, 48, 4, 4, 3, 640, 32, 8, 64, 64, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 1, 1, 1, 0, 3 };
    run_decode(&c);   /* KV-head pairs */
}

void run_decode_suite(void)
{
    const fa_dtype dts[2] = { FA_BF16, FA_F16 };
    static const int pages[] = { 0, 1, 3, 16, 256 };
    static const int groups[][2] = { {8, 8}, {8, 2}, {16, 2} };   /* groups 1, 4, 8 */
    static const int news[] = { 1, 2, 4, 16 };
    int n = 0;
    /* pages x groups x new tokens, append on and off, causal alignments alternating */
    for (int pi = 0; pi < 5; pi++)
        for (int gi = 0; gi < 3; gi++)
            for (int ni = 0; ni < 4; ni++, n++) {
                if (quick && (n % 3)) continue;
                const int sq = news[ni];
                if (groups[gi][0] / groups[gi][1] * sq > 64) continue;
                deccase c = { dts[n % 2], 4, sq, n % 2 ? sq : 0, pages[pi], 700, groups[gi][0], groups[gi][1], 128, 128,
                              (fa_causal)(n % 3), 0, -1, -1, 0.f, 0, 0, 1, 0, 0 };
                run_decode(&c);
            }
    /* the features, each at d64/128/256 and on a paged cache of 3-row pages */
    for (int di = 0; di < 3; di++) {
        const int d = 64 << di;
        for (int f = 0; f < 8; f++) {
            if (quick && f % 2) continue;
            deccase c = { dts[(di + f) % 2], 3, 4, 4, f % 2 ? 3 : 0, 600, 8, 2, d, d, FA_CAUSAL_BOTTOM_RIGHT,
                          0, -1, -1, 0.f, 0, 0, 1, 0, 0 };
            switch (f) {
            case 0: c.causal = FA_CAUSAL_TOP_LEFT; c.Sq = 16; c.snew = 16; break;   /* rows before their keys */
            case 1: c.window = 1; c.wl = 100; c.wr = 0; break;
            case 2: c.window = 1; c.wl = 37; c.wr = 5; c.causal = FA_CAUSAL_NONE; break;
            case 3: c.softcap = 5.f; break;
            case 4: c.alibi = 1; break;
            case 5: c.sinks = 1; c.lse = 1; break;
            case 6: c.sinks = 1; c.softcap = 10.f; c.alibi = 1; c.window = 1; c.wl = 64; c.wr = 0; c.splits = 7; break;
            case 7: c.lse = 0; c.dqk = d; c.dv = d / 2; break;
            }
            run_decode(&c);
        }
    }
    /* d_qk != d_v both ways, head dims that are not a class */
    { deccase c = { FA_BF16, 2, 1, 1, 16, 500, 32, 8, 192, 128, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 0, 1, 0, 0 }; run_decode(&c); }
    { deccase c = { FA_F16, 2, 2, 0, 0, 500, 4, 4, 64, 256, FA_CAUSAL_NONE, 0, -1, -1, 0.f, 0, 0, 1, 0, 0 }; run_decode(&c); }
    { deccase c = { FA_BF16, 3, 1, 1, 0, 300, 8, 1, 80, 80, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 1, 1, 0, 0 }; run_decode(&c); }
    /* split counts: the planner's (B = 1 and 2 over long caches: many splits), then forced
       1 .. 32, against full caches and caches of 0 and 1 rows */
    { deccase c = { FA_BF16, 1, 1, 1, 0, 8192, 32, 8, 128, 128, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 0, 1, 1, 0 }; run_decode(&c); }
    { deccase c = { FA_F16, 2, 4, 4, 256, 4096, 16, 2, 64, 64, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 1, 1, 1, 0 }; run_decode(&c); }
    /* one token over long caches at every class, contiguous and paged: each block walks
       many chunks through its ring (the copies of one chunk must all land before any warp
       reads it, whichever copy path the class takes) */
    { deccase c = { FA_BF16, 2, 1, 1, 0, 8192, 32, 8, 64, 64, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 0, 1, 1, 0 }; run_decode(&c); }
    { deccase c = { FA_F16, 2, 1, 0, 16, 6000, 32, 8, 256, 256, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 0, 1, 1, 0 }; run_decode(&c); }
    { deccase c = { FA_BF16, 3, 1, 1, 256, 8192, 32, 8, 128, 128, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 1, 1, 0, 0 }; run_decode(&c); }
    { deccase c = { FA_BF16, 40, 1, 0, 16, 2048, 16, 8, 64, 64, FA_CAUSAL_BOTTOM_RIGHT, 0, -1, -1, 0.f, 0, 0, 1, 1, 0 }; run_decode(&c); }
    /* KV-head pairs at d64 (enough pairs for every SM): the features, 16 packed rows per
       head, MHA, d_qk != d_v, a head dim below the class */
    for (int f = 0; f < 8; f++) {
        if (quick && f % 2) continue;
        deccase c = { dts[f % 2], 48, 4, 4, f % 2 ? 3 : 0, 640, 32, 8, 64, 64, FA_CAUSAL_BOTTOM_RIGHT,
                      0, -1, -1, 0.f, 0, 0, 1, 0, 0 };
        switch (f) {
        case 0: c.causal = FA_CAUSAL_TOP_LEFT; c.Sq = 16; c.snew = 16; c.H = 16; break;
        case 1: c.window = 1; c.wl = 100; c.wr = 0; c.splits = 3; break;
        case 2: c.window = 1; c.wl = 37; c.wr = 5; c.causal = FA_CAUSAL_NONE; break;
        case 3: c.softcap = 5.f; c.alibi = 1; c.lse = 1; break;
        case 4: c.sinks = 1; c.lse = 1; c.splits = 7; break;
        case 5: c.H = c.Hkv = 8; c.Sq = 16; c.snew = 0; break;
        case 6: c.dv = 32; break;
        case 7: c.dqk = c.dv = 40; c.page = 16; break;
        }
        run_decode(&c);
    }
    static const int forced[] = { 1, 2, 3, 5, 8, 13, 32 };
    for (int si = 0; si < 7; si++) {
        if (quick && si % 2) continue;
        deccase c = { dts[si % 2], 5, si % 3 ? 1 : 4, si % 2, si % 2 ? 16 : 0, 1500, 8, 2, 128, 128,
                      (fa_causal)(1 + si % 2), 0, -1, -1, 0.f, 0, si % 3 == 0, 1, 0, forced[si] };
        run_decode(&c);
    }
    /* cache_seqlens 0 with no append: rows that see no key (out 0, lse -inf or the sink) */
    { deccase c = { FA_BF16, 3, 1, 0, 16, 200, 8, 2, 128, 128, FA_CAUSAL_NONE, 0, -1, -1, 0.f, 0, 1, 1, 0, 4 }; run_decode(&c); }
    decode_refusals();
}
