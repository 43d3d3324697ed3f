/* ring_forward.c - fa_ring_forward: this rank's queries against every rank's K/V block as
 * the blocks travel around the ring, partial results merged with fa_combine.
 *
 * Step t (0 .. R-1) holds the block of rank r - t. While fa_forward runs on it, the block
 * is already on its way to rank r + 1 and the next one is arriving from rank r - 1 (two
 * buffers). The running result lives in fp32 (acc_out [B, nq, H, d_v], acc_lse [B, H, nq]);
 * each call's partial is merged into it with fa_combine on the call's rows.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ring_internal.h"
#include "ring_device.h"

typedef struct {
    int64_t nq;
    float *acc, *part, *cmb;            /* [B, nq, H, d_v] fp32 each                      */
    float *acc_lse, *plse, *alse, *clse; /* [B, H, nq] each                                */
    void *kv[2];                         /* two K/V block buffers                          */
    float *bias;                         /* [H][nk_max]: a split-ALiBi call's key terms    */
    fa_tensor accv, partv, cmbv;         /* views of acc, part, cmb                        */
} fwd_scratch;

static void fwd_free(fwd_scratch *w)
{
    free(w->acc); free(w->part); free(w->cmb);
    free(w->acc_lse); free(w->plse); free(w->alse); free(w->clse);
    free(w->kv[0]); free(w->kv[1]); free(w->bias);
}

static void fwd_alloc(ring_status *s, const ring_geom *g, int64_t nq, fwd_scratch *w)
{
    memset(w, 0, sizeof *w);
    w->nq = nq;
    if (!g->qlen || s->st != FA_OK) return;   /* ring_setup already failed */
    size_t rows = sizeof(float) * (size_t)(g->B * nq * g->H * g->dv);
    size_t lses = sizeof(float) * (size_t)(g->B * g->H * nq);
    w->acc = ring_alloc(s, rows, "the running output");
    w->part = ring_alloc(s, rows, "a partial output");
    w->cmb = ring_alloc(s, rows, "a merged output");
    w->acc_lse = ring_alloc(s, lses, "the running lse");
    w->plse = ring_alloc(s, lses, "a partial lse");
    w->alse = ring_alloc(s, lses, "a partial lse");
    w->clse = ring_alloc(s, lses, "a merged lse");
    for (int i = 0; i < 2; i++) w->kv[i] = ring_alloc(s, ring_kv_bytes(g, g->max_nk), "K/V");
    if (g->alibi)
        w->bias = ring_alloc(s, sizeof(float) * (size_t)(g->H * g->max_nk), "ALiBi terms");
    if (s->st != FA_OK) return;
    memset(w->acc, 0, rows);
    for (int64_t i = 0; i < g->B * g->H * nq; i++) w->acc_lse[i] = -INFINITY;
    w->accv = fa_tensor_contiguous(w->acc, FA_F32, g->B, nq, g->H, g->dv);
    w->partv = fa_tensor_contiguous(w->part, FA_F32, g->B, nq, g->H, g->dv);
    w->cmbv = fa_tensor_contiguous(w->cmb, FA_F32, g->B, nq, g->H, g->dv);
}

/* Merges the partial (part rows [r0, r0+n), lse plse [B, H, n]) into the running result. */
static fa_status merge_rows(fa_context *ctx, const ring_geom *g, fwd_scratch *w, int64_t r0,
                            int64_t n)
{
    ring_lse_gather(w->alse, w->acc_lse, g->B, g->H, w->nq, r0, n);
    fa_tensor parts[2] = { ring_rows(&w->accv, r0, n), ring_rows(&w->partv, r0, n) };
    const float *lp[2] = { w->alse, w->plse };
    fa_tensor co = ring_rows(&w->cmbv, r0, n);
    fa_status st = fa_combine(ctx, &co, w->clse, parts, lp, 2);
    if (st != FA_OK) return st;
    ring_store(&parts[0], &co);
    ring_lse_scatter(w->acc_lse, w->clse, g->B, g->H, w->nq, r0, n);
    return FA_OK;
}

/* This rank's queries against the block of rank `owner` held in buf. Between calls,
 * MPI_Testall on the step's messages (rq) lets an MPI library that moves data only
 * inside its calls progress them. */
static void forward_block(ring_rt *rt, ring_status *s, const ring_geom *g, int owner,
                          void *buf, const fa_tensor *q, const fa_options *base,
                          fwd_scratch *w, MPI_Request *rq, int nrq)
{
    ring_call c[RING_MAX_CALLS];
    int n = ring_calls(g, g->rank, owner, c);
    int64_t nk = g->kvlen[2 * owner] + g->kvlen[2 * owner + 1];
    fa_tensor kb = ring_block_k(g, buf, nk), vb = ring_block_v(g, buf, nk);
    char m[256];
    for (int i = 0; i < n; i++) {
        fa_tensor qv = ring_rows(q, c[i].q0, c[i].nq);
        fa_tensor kv = ring_rows(&kb, c[i].k0, c[i].nk), vv = ring_rows(&vb, c[i].k0, c[i].nk);
        fa_tensor po = ring_rows(&w->partv, c[i].q0, c[i].nq);
        fa_tensor bias;
        fa_options o = ring_call_options(g, &c[i], base, w->bias, &bias);
        fa_status st = ring_rt_forward(rt, &po, w->plse, &qv, &kv, &vv, &o, m, sizeof m);
        if (st != FA_OK) { ring_fail(s, st, "%s", m); return; }
        ring_call_shift_lse(g, &c[i], base->alibi_slopes, w->plse, +1);
        st = merge_rows(rt->host, g, w, c[i].q0, c[i].nq);
        if (st != FA_OK) { ring_fail_ctx(s, st, rt->host, "fa_combine of a block"); return; }
        int done;
        MPI_Testall(nrq, rq, &done, MPI_STATUSES_IGNORE);
    }
}

/* Merges the sink logits as one more partial with no value rows; the result is in cmb. */
static void merge_sinks(fa_context *ctx, ring_status *s, const ring_geom *g,
                        const float *sinks, fwd_scratch *w)
{
    int64_t nq = w->nq;
    if (!sinks || nq == 0) {
        memcpy(w->cmb, w->acc, sizeof(float) * (size_t)(g->B * nq * g->H * g->dv));
        memcpy(w->clse, w->acc_lse, sizeof(float) * (size_t)(g->B * g->H * nq));
        return;
    }
    memset(w->part, 0, sizeof(float) * (size_t)(g->B * nq * g->H * g->dv));
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t h = 0; h < g->H; h++)
            for (int64_t i = 0; i < nq; i++) w->plse[(b * g->H + h) * nq + i] = sinks[h];
    fa_tensor parts[2] = { w->accv, w->partv };
    const float *lp[2] = { w->acc_lse, w->plse };
    fa_status st = fa_combine(ctx, &w->cmbv, w->clse, parts, lp, 2);
    if (st != FA_OK) ring_fail_ctx(s, st, ctx, "fa_combine of the sinks");
}

static void check_args(fa_context *ctx, ring_status *s, const char *fn, fa_tensor *out,
                       float *lse, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                       const fa_ring_layout *layout, const fa_options *opt, ring_args *a)
{
    ring_check_common(ctx, s, fn, q, k, v, layout, opt, a);
    if (s->st != FA_OK) return;
    if (!out) { ring_fail(s, FA_ERR_INVALID_ARG, "%s: out is NULL", fn); return; }
    fa_options o = opt ? *opt : (fa_options){ 0 };
    o.bias = NULL;   /* a bias is UNSUPPORTED below, whatever its shape */
    const char *name;
    fa_status st = fa_query(ctx, &name, out, lse, q, k, v, &o);
    if (st != FA_OK) { ring_fail_ctx(s, st, ctx, fn); return; }
    ring_check_unsupported(s, fn, opt);
}

/* A CUDA context: q, k, v, the sinks and slopes copied to host memory, out and lse given
   host stand-ins (copied to the device at the end). */
static void stage_forward(ring_rt *rt, ring_stage *sg, ring_status *s, int64_t H,
                          fa_tensor *q, fa_tensor *k, fa_tensor *v, fa_tensor *out,
                          float **lse, fa_options *o)
{
    char m[200] = "";
    fa_status st = FA_OK;
    fa_tensor *in[3] = { q, k, v };
    for (int i = 0; i < 3 && st == FA_OK; i++) st = ring_stage_tensor(sg, in[i], 1, m, sizeof m);
    const float *l = *lse;
    if (st == FA_OK) st = ring_stage_array(sg, &l, out->shape[0] * H * out->shape[1], 0, m,
                                           sizeof m);
    *lse = (float *)l;
    if (st == FA_OK) st = ring_stage_tensor(sg, out, 0, m, sizeof m);
    if (st == FA_OK) st = ring_stage_array(sg, &o->sinks, H, 1, m, sizeof m);
    if (st == FA_OK && o->alibi_slopes) {
        st = ring_stage_array(sg, &o->alibi_slopes, H, 1, m, sizeof m);
        if (st == FA_OK) st = ring_rt_set_slopes(rt, o->alibi_slopes, H, m, sizeof m);
    }
    if (st != FA_OK) ring_fail(s, st, "staging the CUDA tensors: %s", m);
}

/* The staged out and lse onto the device ones, agreed once more. */
static void unstage_forward(MPI_Comm comm, ring_status *s, fa_tensor *out, float *lse,
                            const fa_tensor *hout, const float *hlse)
{
    char m[200] = "";
    fa_status st = ring_rt_copy_view(out, hout, m, sizeof m);
    if (st == FA_OK && lse)
        st = ring_rt_copy(lse, hlse, sizeof(float) * (size_t)(out->shape[0] * out->shape[1] *
                                                             out->shape[2]), m, sizeof m);
    if (st != FA_OK) ring_fail(s, st, "copying the results to the device: %s", m);
    ring_agree(comm, s);
}

static void ring_forward_steps(ring_rt *rt, MPI_Comm comm, ring_status *s, const ring_geom *g,
                               fwd_scratch *w, const fa_tensor *q, const fa_tensor *k,
                               const fa_tensor *v, const fa_options *opt, fa_ring_stats *st)
{
    fa_options base = *opt;
    base.sinks = NULL;
    int R = g->R, next = (g->rank + 1) % R, prev = (g->rank + R - 1) % R;
    ring_pack_kv(g, w->kv[0], k, v);
    for (int t = 0; t < R; t++) {
        int owner = (g->rank + R - t) % R;
        void *cur = w->kv[t & 1];
        MPI_Request rq[2];
        int nrq = 0;
        if (t < R - 1) {
            int incoming = (owner + R - 1) % R;
            size_t in = ring_kv_bytes(g, g->kvlen[2 * incoming] + g->kvlen[2 * incoming + 1]);
            size_t outb = ring_kv_bytes(g, g->kvlen[2 * owner] + g->kvlen[2 * owner + 1]);
            /* a block goes on only while a rank ahead has a call on it (windows) */
            if (ring_needed_after(g, incoming, t))
                ring_irecv(comm, w->kv[(t + 1) & 1], in, prev, RING_TAG_KV, &rq[nrq++]);
            if (ring_needed_after(g, owner, t)) {
                ring_isend(comm, cur, outb, next, RING_TAG_KV, &rq[nrq++]);
                st->bytes_sent += (int64_t)outb;
            }
        }
        double c0 = ring_now();
        if (s->st == FA_OK) forward_block(rt, s, g, owner, cur, q, &base, w, rq, nrq);
        double c1 = ring_now();
        MPI_Waitall(nrq, rq, MPI_STATUSES_IGNORE);
        st->compute_s += c1 - c0;
        st->wait_s += ring_now() - c1;
    }
    double c0 = ring_now();
    if (s->st == FA_OK) merge_sinks(rt->host, s, g, opt->sinks, w);
    st->compute_s += ring_now() - c0;
}

FA_API fa_status fa_ring_forward(fa_context *ctx, MPI_Comm comm, fa_tensor *out, float *lse,
                                 const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                 const fa_ring_layout *layout, const fa_options *opt)
{
    const char *fn = "fa_ring_forward";
    double t0 = ring_now();
    fa_ring_stats st = { 0 };
    ring_status s = { FA_OK, "" };
    ring_args a;
    check_args(ctx, &s, fn, out, lse, q, k, v, layout, opt, &a);
    ring_rt rt;
    char m[200] = "";
    fa_status os = ring_rt_open(&rt, s.st == FA_OK ? ctx : NULL, s.st == FA_OK ? q->data : NULL,
                                m, sizeof m);
    if (os != FA_OK) ring_fail(&s, os, "%s: %s", fn, m);
    /* the arguments as the ring reads them: host memory (staged for a CUDA context) */
    fa_tensor hq = { 0 }, hk = { 0 }, hv = { 0 }, hout = { 0 };
    float *hlse = lse;
    fa_options hopt = opt ? *opt : (fa_options){ 0 };
    ring_stage sg = { { 0 }, 0 };
    if (s.st == FA_OK) {
        hq = *q; hk = *k; hv = *v; hout = *out;
        if (rt.on) stage_forward(&rt, &sg, &s, q->shape[2], &hq, &hk, &hv, &hout, &hlse, &hopt);
    }
    ring_geom g = { 0 };
    fwd_scratch w = { 0 };
    if (ring_agree(comm, &s) != FA_OK) goto done;
    if (ring_setup(comm, fn, &s, &g, &a) != FA_OK) goto done;
    fwd_alloc(&s, &g, q->shape[1], &w);
    if (ring_agree(comm, &s) != FA_OK) goto done;
    ring_forward_steps(&rt, comm, &s, &g, &w, &hq, &hk, &hv, &hopt, &st);
    if (ring_agree(comm, &s) == FA_OK) {
        ring_store(&hout, &w.cmbv);
        if (hlse) memcpy(hlse, w.clse, sizeof(float) * (size_t)(g.B * g.H * w.nq));
        if (rt.on) unstage_forward(comm, &s, out, lse, &hout, hlse);
    }
    if (s.st == FA_OK) {
        st.steps = g.R;
        st.total_s = ring_now() - t0;
        ring_set_stats(&st);
        ring_set_error("");
    }
done:
    fwd_free(&w);
    ring_geom_free(&g);
    ring_stage_free(&sg);
    ring_rt_close(&rt);
    return s.st;
}
