/* ring_backward.c - fa_ring_backward: the forward's ring again, recomputing each block
 * with fa_backward from the saved global lse.
 *
 * dq stays on this rank (fp32, summed over the blocks in step order). A block's dk/dv
 * travel behind its K/V: at step t this rank adds its contribution to the accumulator
 * that rank r - 1 sent (the block's owner o starts it at t = 0), and sends it on to
 * r + 1; after R steps the accumulator has visited o, o+1, ..., o+R-1 and arrives back
 * at o. Three accumulator buffers let the receive for the next step be posted before
 * this step's compute, so the transfer hides behind it. dsinks: each rank's rows with a
 * key-less fa_backward call (only the sink term), gathered and summed in rank order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ring_internal.h"
#include "ring_device.h"

typedef struct {
    int64_t nq;
    float *dq, *dqp;          /* [B, nq, H, d_qk]: the sum, one call's part              */
    float *lse;               /* [B, H, nq]: one call's rows of the global lse           */
    float *dkc, *dvc;         /* one call's dk [B, nk', Hkv, d_qk] and dv                 */
    float *part;              /* this step's dk then dv of the block                     */
    float *acc[3];            /* travelling dk then dv accumulators                      */
    void *kv[2];
    float *ds_all;            /* [R][H]                                                  */
    float *bias;              /* [H][nk_max]: a split-ALiBi call's key terms             */
} bwd_scratch;

static void bwd_free(bwd_scratch *w)
{
    free(w->dq); free(w->dqp); free(w->lse); free(w->dkc); free(w->dvc); free(w->part);
    for (int i = 0; i < 3; i++) free(w->acc[i]);
    free(w->kv[0]); free(w->kv[1]); free(w->ds_all); free(w->bias);
}

static size_t dkv_bytes(const ring_geom *g, int64_t nk)
{
    return ring_round64(sizeof(float) * (size_t)(g->B * nk * g->Hkv * (g->dqk + g->dv)));
}

static fa_tensor dk_view(const ring_geom *g, float *buf, int64_t nk)
{
    return fa_tensor_contiguous(buf, FA_F32, g->B, nk, g->Hkv, g->dqk);
}

static fa_tensor dv_view(const ring_geom *g, float *buf, int64_t nk)
{
    return fa_tensor_contiguous(buf + g->B * nk * g->Hkv * g->dqk, FA_F32, g->B, nk, g->Hkv,
                                g->dv);
}

static void bwd_alloc(ring_status *s, const ring_geom *g, int64_t nq, bwd_scratch *w)
{
    memset(w, 0, sizeof *w);
    w->nq = nq;
    if (!g->qlen || s->st != FA_OK) return;   /* ring_setup already failed */
    size_t qrows = sizeof(float) * (size_t)(g->B * nq * g->H * g->dqk);
    size_t blk = dkv_bytes(g, g->max_nk);
    w->dq = ring_alloc(s, qrows, "dq");
    w->dqp = ring_alloc(s, qrows, "a partial dq");
    w->lse = ring_alloc(s, sizeof(float) * (size_t)(g->B * g->H * nq), "lse rows");
    w->dkc = ring_alloc(s, sizeof(float) * (size_t)(g->B * g->max_nk * g->Hkv * g->dqk), "dk");
    w->dvc = ring_alloc(s, sizeof(float) * (size_t)(g->B * g->max_nk * g->Hkv * g->dv), "dv");
    w->part = ring_alloc(s, blk, "a block's dk/dv");
    for (int i = 0; i < 3; i++) w->acc[i] = ring_alloc(s, blk, "dk/dv in flight");
    for (int i = 0; i < 2; i++) w->kv[i] = ring_alloc(s, ring_kv_bytes(g, g->max_nk), "K/V");
    w->ds_all = ring_alloc(s, sizeof(float) * (size_t)(g->R * g->H), "dsinks");
    if (g->alibi)
        w->bias = ring_alloc(s, sizeof(float) * (size_t)(g->H * g->max_nk), "ALiBi terms");
    if (s->st == FA_OK) memset(w->dq, 0, qrows);
}

typedef struct {
    const fa_tensor *dout, *q, *out;
    const float *lse;
    fa_options base;
} bwd_inputs;

/* This rank's contribution to the block of rank `owner` (in buf): dq into w->dq, the
 * block's dk/dv into w->part. rq: the step's messages, tested between calls. */
static void backward_block(ring_rt *rt, ring_status *s, const ring_geom *g, int owner,
                           void *buf, const bwd_inputs *in, bwd_scratch *w, MPI_Request *rq,
                           int nrq)
{
    ring_call c[RING_MAX_CALLS];
    int n = ring_calls(g, g->rank, owner, c);
    int64_t nk = g->kvlen[2 * owner] + g->kvlen[2 * owner + 1];
    memset(w->part, 0, dkv_bytes(g, nk));
    fa_tensor kb = ring_block_k(g, buf, nk), vb = ring_block_v(g, buf, nk);
    fa_tensor dkp = dk_view(g, w->part, nk), dvp = dv_view(g, w->part, nk);
    fa_tensor dqs = fa_tensor_contiguous(w->dq, FA_F32, g->B, w->nq, g->H, g->dqk);
    fa_tensor dqp = fa_tensor_contiguous(w->dqp, FA_F32, g->B, w->nq, g->H, g->dqk);
    for (int i = 0; i < n; i++) {
        int64_t q0 = c[i].q0, nq = c[i].nq;
        fa_tensor qv = ring_rows(in->q, q0, nq), ov = ring_rows(in->out, q0, nq);
        fa_tensor dov = ring_rows(in->dout, q0, nq), dqc = ring_rows(&dqp, q0, nq);
        fa_tensor kv = ring_rows(&kb, c[i].k0, c[i].nk), vv = ring_rows(&vb, c[i].k0, c[i].nk);
        fa_tensor dkc = dk_view(g, w->dkc, c[i].nk), dvc = fa_tensor_contiguous(
            w->dvc, FA_F32, g->B, c[i].nk, g->Hkv, g->dv);
        ring_lse_gather(w->lse, in->lse, g->B, g->H, w->nq, q0, nq);
        ring_call_shift_lse(g, &c[i], in->base.alibi_slopes, w->lse, -1);
        fa_tensor bias;
        fa_options o = ring_call_options(g, &c[i], &in->base, w->bias, &bias);
        char m[256];
        fa_status st = ring_rt_backward(rt, &dqc, &dkc, &dvc, &dov, &qv, &kv, &vv, &ov, w->lse,
                                        &o, m, sizeof m);
        if (st != FA_OK) { ring_fail(s, st, "%s", m); return; }
        fa_tensor dqr = ring_rows(&dqs, q0, nq);
        ring_add(&dqr, &dqc);
        fa_tensor dkr = ring_rows(&dkp, c[i].k0, c[i].nk), dvr = ring_rows(&dvp, c[i].k0, c[i].nk);
        ring_add(&dkr, &dkc);
        ring_add(&dvr, &dvc);
        int done;   /* progress (of every message) for MPIs that move data only in calls */
        MPI_Testall(nrq, rq, &done, MPI_STATUSES_IGNORE);
    }
}

/* This rank's part of dsinks (its query rows), into ds[H]. */
static void local_dsinks(fa_context *ctx, ring_status *s, const ring_geom *g,
                         const bwd_inputs *in, const float *sinks, float *ds, bwd_scratch *w)
{
    memset(ds, 0, sizeof(float) * (size_t)g->H);
    if (w->nq == 0 || s->st != FA_OK) return;
    fa_tensor dqp = fa_tensor_contiguous(w->dqp, FA_F32, g->B, w->nq, g->H, g->dqk);
    fa_tensor dk0 = dk_view(g, w->dkc, 0), dv0 = fa_tensor_contiguous(w->dvc, FA_F32, g->B, 0,
                                                                      g->Hkv, g->dv);
    fa_tensor k0 = ring_block_k(g, w->kv[0], 0), v0 = ring_block_v(g, w->kv[0], 0);
    fa_options o = in->base;
    o.causal = FA_CAUSAL_NONE;
    o.sinks = sinks;
    fa_status st = fa_backward(ctx, &dqp, &dk0, &dv0, ds, in->dout, in->q, &k0, &v0, in->out,
                               in->lse, &o);
    if (st != FA_OK) ring_fail_ctx(s, st, ctx, "fa_backward for dsinks");
}

static void check_args(fa_context *ctx, ring_status *s, const char *fn, fa_tensor *dq,
                       fa_tensor *dk, fa_tensor *dv, float *dsinks, const fa_tensor *dout,
                       const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                       const fa_tensor *out, const float *lse, const fa_ring_layout *layout,
                       const fa_options *opt, ring_args *a)
{
    ring_check_common(ctx, s, fn, q, k, v, layout, opt, a);
    a->dsinks_null = dsinks == NULL;
    if (s->st != FA_OK) return;
    fa_options o = opt ? *opt : (fa_options){ 0 };
    o.bias = NULL;   /* a bias is UNSUPPORTED below, whatever its shape */
    const char *name;
    fa_status st = fa_query_backward(ctx, &name, dq, dk, dv, dsinks, dout, q, k, v, out, lse,
                                     &o);
    if (st != FA_OK) { ring_fail_ctx(s, st, ctx, fn); return; }
    ring_check_unsupported(s, fn, opt);
}

static int64_t block_len(const ring_geom *g, int r) { return g->kvlen[2 * r] + g->kvlen[2 * r + 1]; }

/* The R steps: dq into w->dq; returns this rank's own dk/dv accumulator, back from its
   round. */
static float *backward_steps(ring_rt *rt, MPI_Comm comm, ring_status *s, const ring_geom *g,
                             bwd_scratch *w, const bwd_inputs *in, const fa_tensor *k,
                             const fa_tensor *v, fa_ring_stats *st)
{
    int R = g->R, next = (g->rank + 1) % R, prev = (g->rank + R - 1) % R;
    MPI_Request kvrq[2], dkrecv = MPI_REQUEST_NULL, dksend[3] = { MPI_REQUEST_NULL,
        MPI_REQUEST_NULL, MPI_REQUEST_NULL };
    ring_pack_kv(g, w->kv[0], k, v);
    for (int t = 0; t < R; t++) {
        int owner = (g->rank + R - t) % R, incoming = (owner + R - 1) % R;
        void *cur = w->kv[t & 1];
        int nkv = 0;
        double w0 = ring_now();
        MPI_Request this_recv = dkrecv;   /* posted at step t - 1 (none at t = 0) */
        if (R > 1) {   /* the accumulator of step t+1 (t+1 = R: this rank's own, final) */
            MPI_Wait(&dksend[(t + 1) % 3], MPI_STATUS_IGNORE);
            ring_irecv(comm, w->acc[(t + 1) % 3], dkv_bytes(g, block_len(g, incoming)),
                       prev, RING_TAG_DKV, &dkrecv);
        }
        if (t < R - 1) {
            size_t outb = ring_kv_bytes(g, block_len(g, owner));
            if (ring_needed_after(g, incoming, t))   /* as in the forward */
                ring_irecv(comm, w->kv[(t + 1) & 1], ring_kv_bytes(g, block_len(g, incoming)),
                           prev, RING_TAG_KV, &kvrq[nkv++]);
            if (ring_needed_after(g, owner, t)) {
                ring_isend(comm, cur, outb, next, RING_TAG_KV, &kvrq[nkv++]);
                st->bytes_sent += (int64_t)outb;
            }
        }
        double c0 = ring_now();
        st->wait_s += c0 - w0;
        if (s->st == FA_OK) backward_block(rt, s, g, owner, cur, in, w, kvrq, nkv);
        double c1 = ring_now();
        st->compute_s += c1 - c0;
        MPI_Wait(&this_recv, MPI_STATUS_IGNORE);
        double c2 = ring_now();
        float *acc = w->acc[t % 3];
        size_t nf = (size_t)(g->B * block_len(g, owner) * g->Hkv * (g->dqk + g->dv));
        if (t == 0) memcpy(acc, w->part, sizeof(float) * nf);
        else for (size_t i = 0; i < nf; i++) acc[i] += w->part[i];
        if (R > 1) {
            size_t b = dkv_bytes(g, block_len(g, owner));
            ring_isend(comm, acc, b, next, RING_TAG_DKV, &dksend[t % 3]);
            st->bytes_sent += (int64_t)b;
        }
        double c3 = ring_now();
        st->compute_s += c3 - c2;
        MPI_Waitall(nkv, kvrq, MPI_STATUSES_IGNORE);
        st->wait_s += (c2 - c1) + (ring_now() - c3);
    }
    double w0 = ring_now();
    if (R > 1) MPI_Wait(&dkrecv, MPI_STATUS_IGNORE);
    MPI_Waitall(3, dksend, MPI_STATUSES_IGNORE);
    st->wait_s += ring_now() - w0;
    return w->acc[R > 1 ? R % 3 : 0];
}

/* The tensors as the ring reads and writes them: the caller's, or (a CUDA context) host
   stand-ins, the inputs copied from the device. */
typedef struct {
    fa_tensor dq, dk, dv, dout, q, k, v, out;
    const float *lse, *dsinks;
    fa_options opt;
} bwd_args;

static void stage_backward(ring_rt *rt, ring_stage *sg, ring_status *s, int64_t H,
                           bwd_args *h)
{
    char m[200] = "";
    fa_status st = FA_OK;
    fa_tensor *in[5] = { &h->dout, &h->q, &h->k, &h->v, &h->out };
    fa_tensor *outs[3] = { &h->dq, &h->dk, &h->dv };
    for (int i = 0; i < 5 && st == FA_OK; i++) st = ring_stage_tensor(sg, in[i], 1, m, sizeof m);
    for (int i = 0; i < 3 && st == FA_OK; i++) st = ring_stage_tensor(sg, outs[i], 0, m, sizeof m);
    int64_t nl = h->q.shape[0] * H * h->q.shape[1];
    if (st == FA_OK) st = ring_stage_array(sg, &h->lse, nl, 1, m, sizeof m);
    if (st == FA_OK) st = ring_stage_array(sg, &h->dsinks, H, 0, m, sizeof m);
    if (st == FA_OK) st = ring_stage_array(sg, &h->opt.sinks, H, 1, m, sizeof m);
    if (st == FA_OK && h->opt.alibi_slopes) {
        st = ring_stage_array(sg, &h->opt.alibi_slopes, H, 1, m, sizeof m);
        if (st == FA_OK) st = ring_rt_set_slopes(rt, h->opt.alibi_slopes, H, m, sizeof m);
    }
    if (st != FA_OK) ring_fail(s, st, "staging the CUDA tensors: %s", m);
}

/* The staged gradients onto the device ones, agreed once more. */
static void unstage_backward(MPI_Comm comm, ring_status *s, fa_tensor *dq, fa_tensor *dk,
                             fa_tensor *dv, float *dsinks, const bwd_args *h)
{
    char m[200] = "";
    fa_status st = ring_rt_copy_view(dq, &h->dq, m, sizeof m);
    if (st == FA_OK) st = ring_rt_copy_view(dk, &h->dk, m, sizeof m);
    if (st == FA_OK) st = ring_rt_copy_view(dv, &h->dv, m, sizeof m);
    if (st == FA_OK && dsinks)
        st = ring_rt_copy(dsinks, h->dsinks, sizeof(float) * (size_t)dq->shape[2], m, sizeof m);
    if (st != FA_OK) ring_fail(s, st, "copying the gradients to the device: %s", m);
    ring_agree(comm, s);
}

FA_API fa_status fa_ring_backward(fa_context *ctx, MPI_Comm comm, fa_tensor *dq,
                                  fa_tensor *dk, fa_tensor *dv, float *dsinks,
                                  const fa_tensor *dout, const fa_tensor *q,
                                  const fa_tensor *k, const fa_tensor *v,
                                  const fa_tensor *out, const float *lse,
                                  const fa_ring_layout *layout, const fa_options *opt)
{
    const char *fn = "fa_ring_backward";
    double t0 = ring_now();
    fa_ring_stats st = { 0 };
    ring_status s = { FA_OK, "" };
    ring_args a;
    check_args(ctx, &s, fn, dq, dk, dv, dsinks, dout, q, k, v, out, lse, layout, opt, &a);
    ring_rt rt;
    char m[200] = "";
    fa_status os = ring_rt_open(&rt, s.st == FA_OK ? ctx : NULL, s.st == FA_OK ? q->data : NULL,
                                m, sizeof m);
    if (os != FA_OK) ring_fail(&s, os, "%s: %s", fn, m);
    bwd_args h = { .opt = opt ? *opt : (fa_options){ 0 } };
    ring_stage sg = { { 0 }, 0 };
    if (s.st == FA_OK) {
        h.dq = *dq; h.dk = *dk; h.dv = *dv; h.dout = *dout; h.q = *q; h.k = *k; h.v = *v;
        h.out = *out; h.lse = lse; h.dsinks = dsinks;
        if (rt.on) stage_backward(&rt, &sg, &s, q->shape[2], &h);
    }
    ring_geom g = { 0 };
    bwd_scratch w = { 0 };
    if (ring_agree(comm, &s) != FA_OK) goto done;
    if (ring_setup(comm, fn, &s, &g, &a) != FA_OK) goto done;
    bwd_alloc(&s, &g, q->shape[1], &w);
    if (ring_agree(comm, &s) != FA_OK) goto done;

    bwd_inputs in = { &h.dout, &h.q, &h.out, h.lse, h.opt };
    in.base.sinks = NULL;
    float *mine = backward_steps(&rt, comm, &s, &g, &w, &in, &h.k, &h.v, &st);
    if (dsinks) {   /* each rank's part in its row of ds_all, gathered in place */
        double c0 = ring_now();
        local_dsinks(rt.host, &s, &g, &in, h.opt.sinks, w.ds_all + g.rank * g.H, &w);
        st.compute_s += ring_now() - c0;
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, w.ds_all, (int)g.H, MPI_FLOAT, comm);
    }
    if (ring_agree(comm, &s) == FA_OK) {
        int64_t nk = block_len(&g, g.rank);
        fa_tensor dqs = fa_tensor_contiguous(w.dq, FA_F32, g.B, w.nq, g.H, g.dqk);
        fa_tensor dks = dk_view(&g, mine, nk), dvs = dv_view(&g, mine, nk);
        ring_store(&h.dq, &dqs);
        ring_store(&h.dk, &dks);
        ring_store(&h.dv, &dvs);
        if (dsinks)
            for (int64_t hh = 0; hh < g.H; hh++) {
                float sum = 0.0f;
                for (int r = 0; r < g.R; r++) sum += w.ds_all[r * g.H + hh];
                ((float *)h.dsinks)[hh] = sum;
            }
        if (rt.on) unstage_backward(comm, &s, dq, dk, dv, dsinks, &h);
    }
    if (s.st == FA_OK) {
        st.steps = g.R;
        st.total_s = ring_now() - t0;
        ring_set_stats(&st);
        ring_set_error("");
    }
done:
    bwd_free(&w);
    ring_geom_free(&g);
    ring_stage_free(&sg);
    ring_rt_close(&rt);
    return s.st;
}
