/* cuda_dense.c - test_cuda's dense cases (see test_cuda.c): fa_forward and fa_backward on
 * the CUDA backend against liboracle, and the feature lists they run. */
#include <math.h>
#include <string.h>
#include "cuda_test.h"
#include "dtype.h"

/* The oracle of a dense case from the host copies of its inputs (dout NULL: forward
   only); ot: the dtype of the outputs checked (out, or dq/dk/dv). Returns or_compute's. */
static int dense_oracle(const dcase *c, const buf *q, const buf *k, const buf *v, const buf *dout,
                        const buf *al, const buf *sk, const buf *bi, fa_dtype ot, int backward,
                        or_oracle *o)
{
    const int64_t B = c->B, H = c->H, Sq = c->Sq, Sk = c->Sk;
    or_seq_data *sd = calloc((size_t)(B > 0 ? B : 1), sizeof *sd);
    double *bias = NULL, alibi[64], sinks[64];
    if (!sd || H > 64) { free(sd); return -1; }
    if (c->bias) {   /* [1, Sq, H, Sk] bf16, the same for every batch entry: [H][Sq][Sk] */
        bias = malloc(sizeof(double) * (size_t)(H * Sq * Sk > 0 ? H * Sq * Sk : 1));
        if (!bias) { free(sd); return -1; }
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t j = 0; j < Sk; j++)
                    bias[(h * Sq + i) * Sk + j] = fa_load(bi->h, FA_BF16, (i * H + h) * Sk + j);
    }
    for (int64_t h = 0; h < H; h++) {
        alibi[h] = ((float *)al->h)[h];
        sinks[h] = ((float *)sk->h)[h];
    }
    for (int64_t b = 0; b < B; b++) {
        or_seq_data *s = &sd[b];
        s->sq = Sq; s->sk = Sk; s->q_row = b * Sq; s->k_row = b * Sk; s->drop_b = b;
        s->q = host_rows(q->h, c->t, Sq, H, c->dqk, c->transposed, b, 0, Sq);
        s->k = host_rows(k->h, c->t, Sk, c->Hkv, c->dqk, c->transposed, b, 0, Sk);
        s->v = host_rows(v->h, c->t, Sk, c->Hkv, c->dv, c->transposed, b, 0, Sk);
        s->dout = dout ? host_rows(dout->h, c->t, Sq, H, c->dv, c->transposed, b, 0, Sq) : NULL;
        s->bias = bias;
    }
    or_problem p;
    memset(&p, 0, sizeof p);
    p.nseq = B; p.nq = B * Sq; p.nk = B * Sk; p.hq = H; p.hkv = c->Hkv; p.dqk = c->dqk; p.dv = c->dv;
    p.dt = c->t; p.odt = ot; p.scale = 1.0 / sqrt((double)c->dqk);
    p.causal = c->causal; p.window = c->window; p.wl = c->wl; p.wr = c->wr; p.softcap = c->softcap;
    p.alibi = c->alibi ? alibi : NULL; p.sinks = c->sinks ? sinks : NULL;
    p.dropout_p = c->dropout; p.seed = 42; p.offset = 7;
    p.seqs = sd;
    int rc = or_compute(&p, backward, o);
    for (int64_t b = 0; b < B; b++) {
        free((void *)sd[b].q); free((void *)sd[b].k); free((void *)sd[b].v); free((void *)sd[b].dout);
    }
    free(sd); free(bias);
    return rc;
}

void run_dense(const dcase *c)
{
    char name[160];
    snprintf(name, sizeof name, "%s %s B%d Sq%d Sk%d H%d/%d d%d/%d c%d", c->name, dtname(c->t),
             c->B, c->Sq, c->Sk, c->H, c->Hkv, c->dqk, c->dv, (int)c->causal);
    buf q = mk((size_t)c->B * c->Sq * c->H * c->dqk, c->t, 2.0);
    buf k = mk((size_t)c->B * c->Sk * c->Hkv * c->dqk, c->t, 2.0);
    buf v = mk((size_t)c->B * c->Sk * c->Hkv * c->dv, c->t, 1.0);
    fa_dtype ot = c->out_f32 ? FA_F32 : c->t;
    size_t no = (size_t)c->B * c->Sq * c->H * c->dv, nl = (size_t)c->B * c->H * c->Sq;
    buf o = mk_poison(no, ot), l = mk_poison(nl, FA_F32);
    buf al = mk(c->H, FA_F32, 0.5), sk = mk(c->H, FA_F32, 2.0);
    for (int h = 0; h < c->H; h++) ((float *)al.h)[h] = fabsf(((float *)al.h)[h]);
    CK(cudaMemcpy(al.d, al.h, c->H * 4, cudaMemcpyHostToDevice));
    buf bi = mk((size_t)c->Sq * c->Sk * c->H, FA_BF16, 1.0);   /* [1, Sq, H, Sk], batch broadcast */
    fa_tensor bt_h = fa_tensor_contiguous(bi.h, FA_BF16, c->B, c->Sq, c->H, c->Sk), bt_d;
    bt_h.stride[0] = 0;
    bt_d = bt_h; bt_d.data = bi.d;
    fa_options o1 = {0};
    o1.causal = c->causal; o1.window = c->window; o1.window_left = c->wl; o1.window_right = c->wr;
    o1.softcap = c->softcap; o1.dropout_p = c->dropout; o1.seed = 42; o1.offset = 7;
    fa_options od = o1;
    if (c->alibi) od.alibi_slopes = (float *)al.d;
    if (c->sinks) od.sinks = (float *)sk.d;
    if (c->bias) od.bias = &bt_d;
    fa_tensor tq = view(q.d, c->t, c->B, c->Sq, c->H, c->dqk, c->transposed);
    fa_tensor tk = view(k.d, c->t, c->B, c->Sk, c->Hkv, c->dqk, c->transposed);
    fa_tensor tv = view(v.d, c->t, c->B, c->Sk, c->Hkv, c->dv, c->transposed);
    fa_tensor to = view(o.d, ot, c->B, c->Sq, c->H, c->dv, 0);
    fa_status st = fa_forward(cu, &to, (float *)l.d, &tq, &tk, &tv, &od);
    CK(cudaDeviceSynchronize());
    if (st != FA_OK) { result(name, 0, "status %d", (int)st); printf("   %s\n", fa_last_error(cu)); goto done; }
    pull(&o); pull(&l);
    {
        or_oracle orc;
        if (dense_oracle(c, &q, &k, &v, NULL, &al, &sk, &bi, ot, 0, &orc)) { result(name, 0, "oracle: out of memory"); goto done; }
        double *g = host_all(&o, no), *gl = lse_bhs((float *)l.h, c->B, c->H, c->Sq), eo = 0, el = 0;
        int ok = oracle_ok(&orc, OR_OUT, g, &eo);
        ok &= oracle_ok(&orc, OR_LSE, gl, &el);
        result(name, ok && guard_ok(&o), "err/bound out %.2f lse %.2f%s", eo, el, guard_ok(&o) ? "" : " guard");
        free(g); free(gl);
        or_free(&orc);
        /* determinism: a second run is bitwise equal */
        if (!quick || c->dropout > 0) {
            buf o2 = mk_poison(no, ot);
            to.data = o2.d;
            fa_forward(cu, &to, NULL, &tq, &tk, &tv, &od);
            pull(&o2);
            char n2[200]; snprintf(n2, sizeof n2, "%s determinism", name);
            result(n2, !memcmp(o.h, o2.h, no * esz(ot)), "");
            fr(&o2);
        }
    }
done:
    fr(&q); fr(&k); fr(&v); fr(&o); fr(&l); fr(&al); fr(&sk); fr(&bi);
}

/* Backward: the reference forward gives out (fp32) and lse, the CUDA backward's inputs;
   dq, dk, dv (and dsinks) checked against liboracle's backward of the same inputs. det:
   deterministic=1 and a second run must be bitwise equal. */
void run_backward(const dcase *c, int det)
{
    char name[200];
    snprintf(name, sizeof name, "bwd %s %s B%d Sq%d Sk%d H%d/%d d%d/%d c%d%s", c->name, dtname(c->t),
             c->B, c->Sq, c->Sk, c->H, c->Hkv, c->dqk, c->dv, (int)c->causal, det ? " det" : "");
    buf q = mk((size_t)c->B * c->Sq * c->H * c->dqk, c->t, 2.0);
    buf k = mk((size_t)c->B * c->Sk * c->Hkv * c->dqk, c->t, 2.0);
    buf v = mk((size_t)c->B * c->Sk * c->Hkv * c->dv, c->t, 1.0);
    buf dout = mk((size_t)c->B * c->Sq * c->H * c->dv, c->t, 1.0);
    fa_dtype gt = c->out_f32 ? FA_F32 : c->t;
    size_t nq = (size_t)c->B * c->Sq * c->H * c->dqk, nk = (size_t)c->B * c->Sk * c->Hkv * c->dqk;
    size_t nv = (size_t)c->B * c->Sk * c->Hkv * c->dv, no = (size_t)c->B * c->Sq * c->H * c->dv, nl = (size_t)c->B * c->H * c->Sq;
    buf o = mk_poison(no, FA_F32), l = mk_poison(nl, FA_F32);
    buf dq = mk_poison(nq, gt), dk = mk_poison(nk, gt), dv = mk_poison(nv, gt), ds = mk_poison(c->H, FA_F32);
    buf al = mk(c->H, FA_F32, 0.5), sk = mk(c->H, FA_F32, 2.0);
    for (int h = 0; h < c->H; h++) ((float *)al.h)[h] = fabsf(((float *)al.h)[h]);
    CK(cudaMemcpy(al.d, al.h, c->H * 4, cudaMemcpyHostToDevice));
    buf bi = mk((size_t)c->Sq * c->Sk * c->H, FA_BF16, 1.0);
    fa_tensor bt_h = fa_tensor_contiguous(bi.h, FA_BF16, c->B, c->Sq, c->H, c->Sk), bt_d;
    bt_h.stride[0] = 0;
    bt_d = bt_h; bt_d.data = bi.d;
    fa_options o1 = {0};
    o1.causal = c->causal; o1.window = c->window; o1.window_left = c->wl; o1.window_right = c->wr;
    o1.softcap = c->softcap; o1.dropout_p = c->dropout; o1.seed = 42; o1.offset = 7; o1.deterministic = det;
    fa_options od = o1, oh = o1;
    if (c->alibi) { od.alibi_slopes = (float *)al.d; oh.alibi_slopes = (float *)al.h; }
    if (c->sinks) { od.sinks = (float *)sk.d; oh.sinks = (float *)sk.h; }
    if (c->bias) { od.bias = &bt_d; oh.bias = &bt_h; }
    float *oref = malloc(no * 4 + 4), *lref = malloc(nl * 4 + 4);
    fa_tensor hq = view(q.h, c->t, c->B, c->Sq, c->H, c->dqk, c->transposed);
    fa_tensor hk = view(k.h, c->t, c->B, c->Sk, c->Hkv, c->dqk, c->transposed);
    fa_tensor hv = view(v.h, c->t, c->B, c->Sk, c->Hkv, c->dv, c->transposed);
    fa_tensor ho = view(oref, FA_F32, c->B, c->Sq, c->H, c->dv, 0);
    fa_status st = fa_forward(ref, &ho, lref, &hq, &hk, &hv, &oh);
    if (st != FA_OK) { result(name, 0, "reference status %d", (int)st); printf("   %s\n", fa_last_error(ref)); goto done; }
    CK(cudaMemcpy(o.d, oref, no * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(l.d, lref, nl * 4, cudaMemcpyHostToDevice));
    {
        fa_tensor tq = view(q.d, c->t, c->B, c->Sq, c->H, c->dqk, c->transposed);
        fa_tensor tk = view(k.d, c->t, c->B, c->Sk, c->Hkv, c->dqk, c->transposed);
        fa_tensor tv = view(v.d, c->t, c->B, c->Sk, c->Hkv, c->dv, c->transposed);
        fa_tensor tdo = view(dout.d, c->t, c->B, c->Sq, c->H, c->dv, c->transposed);
        fa_tensor to = view(o.d, FA_F32, c->B, c->Sq, c->H, c->dv, 0);
        fa_tensor tdq = view(dq.d, gt, c->B, c->Sq, c->H, c->dqk, 0), tdk = view(dk.d, gt, c->B, c->Sk, c->Hkv, c->dqk, 0);
        fa_tensor tdv = view(dv.d, gt, c->B, c->Sk, c->Hkv, c->dv, 0);
        st = fa_backward(cu, &tdq, &tdk, &tdv, c->sinks ? (float *)ds.d : NULL, &tdo, &tq, &tk, &tv, &to, (float *)l.d, &od);
        CK(cudaDeviceSynchronize());
        if (st != FA_OK) { result(name, 0, "status %d", (int)st); printf("   %s\n", fa_last_error(cu)); goto done; }
        pull(&dq); pull(&dk); pull(&dv); pull(&ds);
        double eq = 0, ek = 0, ev = 0, es = 0;
        or_oracle orc;
        if (dense_oracle(c, &q, &k, &v, &dout, &al, &sk, &bi, gt, 1, &orc)) { result(name, 0, "oracle: out of memory"); goto done; }
        double *g = host_all(&dq, nq);
        int ok = oracle_ok(&orc, OR_DQ, g, &eq) && guard_ok(&dq);
        free(g);
        g = host_all(&dk, nk);
        ok &= oracle_ok(&orc, OR_DK, g, &ek) && guard_ok(&dk);
        free(g);
        g = host_all(&dv, nv);
        ok &= oracle_ok(&orc, OR_DV, g, &ev) && guard_ok(&dv);
        free(g);
        if (c->sinks) {
            g = host_all(&ds, (size_t)c->H);
            ok &= oracle_ok(&orc, OR_DSINKS, g, &es);
            free(g);
        }
        or_free(&orc);
        result(name, ok, "err/bound dq %.2f dk %.2f dv %.2f dsinks %.2f", eq, ek, ev, es);
        if (det) {
            buf dq2 = mk_poison(nq, gt), dk2 = mk_poison(nk, gt), dv2 = mk_poison(nv, gt);
            tdq.data = dq2.d; tdk.data = dk2.d; tdv.data = dv2.d;
            fa_backward(cu, &tdq, &tdk, &tdv, NULL, &tdo, &tq, &tk, &tv, &to, (float *)l.d, &od);
            pull(&dq2); pull(&dk2); pull(&dv2);
            char n2[240]; snprintf(n2, sizeof n2, "%s bitwise repeat", name);
            result(n2, !memcmp(dq.h, dq2.h, nq * esz(gt)) && !memcmp(dk.h, dk2.h, nk * esz(gt)) && !memcmp(dv.h, dv2.h, nv * esz(gt)), "");
            fr(&dq2); fr(&dk2); fr(&dv2);
        }
    }
done:
    free(oref); free(lref);
    fr(&q); fr(&k); fr(&v); fr(&dout); fr(&o); fr(&l); fr(&dq); fr(&dk); fr(&dv); fr(&ds); fr(&al); fr(&sk); fr(&bi);
}

/* The forward feature list at one dtype and head dim (d_qk = d_v = d). */
void features_fwd(fa_dtype t, int d)
{
    dcase base = { "", t, 2, 113, 203, 8, 8, d, d, FA_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    dcase c;
#define V(nm, stmt) do { c = base; c.name = nm; stmt; run_dense(&c); } while (0)
    V("window left", (c.window = 1, c.wl = 30, c.wr = -1));
    V("window right", (c.window = 1, c.wl = -1, c.wr = 20));
    V("window both", (c.window = 1, c.wl = 40, c.wr = 7));
    V("window+causal", (c.window = 1, c.wl = 40, c.wr = 7, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("causal Sq>Sk (masked rows)", (c.Sq = 300, c.Sk = 100, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("softcap", (c.softcap = 5.0f));
    V("alibi", (c.alibi = 1, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("sinks", (c.sinks = 1));
    V("sinks+masked rows", (c.sinks = 1, c.Sq = 300, c.Sk = 100, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("bias (batch-broadcast)", (c.bias = 1));
    V("dropout", (c.dropout = 0.2f));
    V("gqa 8:1", (c.Hkv = 1));
    V("gqa 4:2", (c.H = 4, c.Hkv = 2));
    V("transposed layout", (c.transposed = 1));
    if (t != FA_F32) V("out fp32", (c.out_f32 = 1));   /* fp32 inputs: out is fp32 in every case */
    V("everything", (c.alibi = 1, c.sinks = 1, c.bias = 1, c.softcap = 10, c.dropout = 0.1f, c.Hkv = 2,
                     c.causal = FA_CAUSAL_TOP_LEFT, c.window = 1, c.wl = 50));
#undef V
}

/* The backward feature list at one dtype and head dim. */
void features_bwd(fa_dtype t, int d)
{
    dcase base = { "", t, 2, 113, 203, 4, 4, d, d, FA_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    dcase c;
#define V(nm, det, stmt) do { c = base; c.name = nm; stmt; run_backward(&c, det); } while (0)
    V("window both", 0, (c.window = 1, c.wl = 40, c.wr = 7));
    V("window+causal", 0, (c.window = 1, c.wl = 40, c.wr = 7, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("causal Sq>Sk (masked rows)", 0, (c.Sq = 300, c.Sk = 100, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("softcap", 0, (c.softcap = 5.0f));
    V("alibi", 0, (c.alibi = 1, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("sinks+masked rows", 0, (c.sinks = 1, c.Sq = 300, c.Sk = 100, c.causal = FA_CAUSAL_BOTTOM_RIGHT));
    V("bias", 0, (c.bias = 1));
    V("dropout", 1, (c.dropout = 0.2f));
    V("gqa 4:1", 0, (c.Hkv = 1));
    V("transposed layout", 0, (c.transposed = 1));
    if (t != FA_F32) V("grads fp32", 0, (c.out_f32 = 1));   /* fp32 inputs: the gradients are fp32 anyway */
    V("deterministic", 1, (c.causal = FA_CAUSAL_BOTTOM_RIGHT, c.Hkv = 2, c.Sq = 300, c.Sk = 400));
    V("everything", 1, (c.alibi = 1, c.sinks = 1, c.bias = 1, c.softcap = 10, c.dropout = 0.1f, c.Hkv = 2,
                        c.causal = FA_CAUSAL_TOP_LEFT, c.window = 1, c.wl = 50));
#undef V
}
