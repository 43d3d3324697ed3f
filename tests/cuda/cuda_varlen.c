/* cuda_varlen.c - test_cuda's packed cases (see test_cuda.c): fa_forward_varlen,
 * fa_backward_varlen and fa_forward_kvcache on the CUDA backend against liboracle. */
#include <math.h>
#include <string.h>
#include "cuda_test.h"
#include "dtype.h"

/* The oracle of a varlen case: sequence b owns rows [cq[b], cq[b+1]) of q (TQ rows, H = 4
   heads) and [ck[b], ck[b+1]) of k and v (TK rows, 2 KV heads); dout NULL: forward only. */
static int varlen_oracle(fa_dtype t, int nseq, int d, fa_causal causal, const int32_t *cq,
                         const int32_t *ck, int TQ, int TK, const buf *q, const buf *k,
                         const buf *v, const buf *dout, int backward, or_oracle *o)
{
    const int H = 4, Hkv = 2;
    or_seq_data sd[64];
    memset(sd, 0, sizeof sd);
    for (int b = 0; b < nseq; b++) {
        or_seq_data *s = &sd[b];
        s->sq = cq[b + 1] - cq[b]; s->sk = ck[b + 1] - ck[b];
        s->q_row = cq[b]; s->k_row = ck[b]; s->drop_b = b;
        s->q = host_rows(q->h, t, TQ, H, d, 0, 0, cq[b], s->sq);
        s->k = host_rows(k->h, t, TK, Hkv, d, 0, 0, ck[b], s->sk);
        s->v = host_rows(v->h, t, TK, Hkv, d, 0, 0, ck[b], s->sk);
        s->dout = dout ? host_rows(dout->h, t, TQ, H, d, 0, 0, cq[b], s->sq) : NULL;
    }
    or_problem p;
    memset(&p, 0, sizeof p);
    p.nseq = nseq; p.nq = TQ; p.nk = TK; p.hq = H; p.hkv = Hkv; p.dqk = p.dv = d;
    p.dt = t; p.odt = t; p.scale = 1.0 / sqrt((double)d); p.causal = causal;
    p.wl = p.wr = -1; p.seqs = sd;
    int rc = or_compute(&p, backward, o);
    for (int b = 0; b < nseq; b++) {
        free((void *)sd[b].q); free((void *)sd[b].k); free((void *)sd[b].v); free((void *)sd[b].dout);
    }
    return rc;
}

/* The oracle problem of a KV-cache case, gathered before any append: sequence b sees the
   cache's first cs[b] rows (contiguous [B][cap] or through the block table) and then its
   snew new rows. kd[b] holds the gathered arrays (the caller frees q, k, v). */
static void kv_problem(fa_dtype t, int B, int Sq, int snew, int page, int cap, int d,
                       fa_causal causal, int H, int Hkv, const int32_t *cs, const int32_t *bt,
                       int maxp, const buf *kc, const buf *vc, const buf *kn, const buf *vn,
                       const buf *q, or_seq_data *kd, or_problem *p)
{
    int64_t krow = 0;
    const int64_t row = (int64_t)Hkv * d;
    for (int b = 0; b < B; b++) {
        or_seq_data *s = &kd[b];
        memset(s, 0, sizeof *s);
        s->sq = Sq; s->sk = cs[b] + snew; s->q_row = (int64_t)b * Sq; s->k_row = krow; s->drop_b = b;
        s->q = host_rows(q->h, t, Sq, H, d, 0, b, 0, Sq);
        double *kk = malloc(sizeof(double) * (size_t)(s->sk * row + 1));
        double *vv = malloc(sizeof(double) * (size_t)(s->sk * row + 1));
        if (!kk || !vv) { printf("out of memory\n"); exit(2); }
        for (int64_t j = 0; j < s->sk; j++) {
            const buf *sk = kc, *sv = vc;
            int64_t r;
            if (j >= cs[b]) { sk = kn; sv = vn; r = (int64_t)b * snew + (j - cs[b]); }
            else if (page) r = (int64_t)bt[b * maxp + j / page] * page + j % page;
            else r = (int64_t)b * cap + j;
            for (int64_t x = 0; x < row; x++) {
                kk[j * row + x] = fa_load(sk->h, t, r * row + x);
                vv[j * row + x] = fa_load(sv->h, t, r * row + x);
            }
        }
        s->k = kk; s->v = vv;
        krow += s->sk;
    }
    memset(p, 0, sizeof *p);
    p->nseq = B; p->nq = (int64_t)B * Sq; p->nk = krow; p->hq = H; p->hkv = Hkv; p->dqk = p->dv = d;
    p->dt = t; p->odt = t; p->scale = 1.0 / sqrt((double)d); p->causal = causal;
    p->wl = p->wr = -1; p->seqs = kd;
}

/* Varlen backward: sequences of random lengths, some empty; rows past cu_seqlens untouched.
   The reference forward gives the CUDA backward its out and lse. */
void run_varlen_bwd(fa_dtype t, int nseq, int d, fa_causal causal, int det)
{
    char name[128];
    snprintf(name, sizeof name, "bwd varlen %s nseq%d d%d c%d%s", dtname(t), nseq, d, (int)causal, det ? " det" : "");
    int32_t cq[64], ck[64];
    cq[0] = ck[0] = 0;
    int maxq = 0, maxk = 0;
    for (int b = 0; b < nseq; b++) {
        int lq = (b % 5 == 4 || b == nseq - 1) ? 0 : 1 + (int)((frand() + 1) * 120);
        int lk = (b % 5 == 4 || b == nseq - 1) ? 0 : 1 + (int)((frand() + 1) * 150);
        cq[b + 1] = cq[b] + lq; ck[b + 1] = ck[b] + lk;
        if (lq > maxq) maxq = lq;
        if (lk > maxk) maxk = lk;
    }
    int H = 4, Hkv = 2, TQ = cq[nseq] + 5, TK = ck[nseq] + 3;
    buf q = mk((size_t)TQ * H * d, t, 2.0), k = mk((size_t)TK * Hkv * d, t, 2.0), v = mk((size_t)TK * Hkv * d, t, 1.0);
    buf dout = mk((size_t)TQ * H * d, t, 1.0), o = mk_poison((size_t)TQ * H * d, FA_F32), l = mk_poison((size_t)H * TQ, FA_F32);
    buf dq = mk_poison((size_t)TQ * H * d, t), dk = mk_poison((size_t)TK * Hkv * d, t), dv = mk_poison((size_t)TK * Hkv * d, t);
    int32_t *dcq, *dck;
    CK(cudaMalloc((void **)&dcq, 4 * (nseq + 1))); CK(cudaMalloc((void **)&dck, 4 * (nseq + 1)));
    CK(cudaMemcpy(dcq, cq, 4 * (nseq + 1), cudaMemcpyHostToDevice)); CK(cudaMemcpy(dck, ck, 4 * (nseq + 1), cudaMemcpyHostToDevice));
    fa_options op = {0};
    op.causal = causal; op.deterministic = det;
    size_t nqe = (size_t)TQ * H * d, nke = (size_t)TK * Hkv * d;
    float *oref = calloc(nqe + 1, 4), *lref = calloc((size_t)H * TQ + 1, 4);
    fa_tensor hq = fa_tensor_contiguous(q.h, t, 1, TQ, H, d), hk = fa_tensor_contiguous(k.h, t, 1, TK, Hkv, d);
    fa_tensor hv = fa_tensor_contiguous(v.h, t, 1, TK, Hkv, d), ho = fa_tensor_contiguous(oref, FA_F32, 1, TQ, H, d);
    fa_status st = fa_forward_varlen(ref, &ho, lref, &hq, &hk, &hv, cq, ck, nseq, maxq, maxk, &op);
    if (st != FA_OK) { result(name, 0, "reference status %d", (int)st); printf("   %s\n", fa_last_error(ref)); goto done; }
    CK(cudaMemcpy(o.d, oref, nqe * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(l.d, lref, (size_t)H * TQ * 4, cudaMemcpyHostToDevice));
    {
        fa_tensor tq = fa_tensor_contiguous(q.d, t, 1, TQ, H, d), tk = fa_tensor_contiguous(k.d, t, 1, TK, Hkv, d);
        fa_tensor tv = fa_tensor_contiguous(v.d, t, 1, TK, Hkv, d), to = fa_tensor_contiguous(o.d, FA_F32, 1, TQ, H, d);
        fa_tensor tdo = fa_tensor_contiguous(dout.d, t, 1, TQ, H, d);
        fa_tensor tdq = fa_tensor_contiguous(dq.d, t, 1, TQ, H, d), tdk = fa_tensor_contiguous(dk.d, t, 1, TK, Hkv, d);
        fa_tensor tdv = fa_tensor_contiguous(dv.d, t, 1, TK, Hkv, d);
        st = fa_backward_varlen(cu, &tdq, &tdk, &tdv, NULL, &tdo, &tq, &tk, &tv, &to, (float *)l.d, dcq, dck, nseq, maxq, maxk, &op);
        CK(cudaDeviceSynchronize());
        if (st != FA_OK) { result(name, 0, "status %d", (int)st); printf("   %s\n", fa_last_error(cu)); goto done; }
        pull(&dq); pull(&dk); pull(&dv);
        size_t vq = (size_t)cq[nseq] * H * d, vk = (size_t)ck[nseq] * Hkv * d;
        int untouched = 1;
        for (size_t i = vq * esz(t); i < nqe * esz(t); i++) if (((unsigned char *)dq.h)[i] != 0xff) untouched = 0;
        for (size_t i = vk * esz(t); i < nke * esz(t); i++) if (((unsigned char *)dk.h)[i] != 0xff || ((unsigned char *)dv.h)[i] != 0xff) untouched = 0;
        double eq = 0, ek = 0, ev = 0;
        or_oracle orc;
        if (varlen_oracle(t, nseq, d, causal, cq, ck, TQ, TK, &q, &k, &v, &dout, 1, &orc)) { result(name, 0, "oracle: out of memory"); goto done; }
        double *g = host_all(&dq, nqe);
        int ok = oracle_ok(&orc, OR_DQ, g, &eq);
        free(g);
        g = host_all(&dk, nke);
        ok &= oracle_ok(&orc, OR_DK, g, &ek);
        free(g);
        g = host_all(&dv, nke);
        ok &= oracle_ok(&orc, OR_DV, g, &ev);
        free(g);
        or_free(&orc);
        result(name, ok && untouched, "err/bound dq %.2f dk %.2f dv %.2f%s", eq, ek, ev, untouched ? "" : " rows past cu_seqlens written");
    }
done:
    cudaFree(dcq); cudaFree(dck);
    free(oref); free(lref);
    fr(&q); fr(&k); fr(&v); fr(&dout); fr(&o); fr(&l); fr(&dq); fr(&dk); fr(&dv);
}

/* Varlen: every 5th sequence and the last are empty; total_q tensor has 5 extra rows that
   must stay untouched. */
void run_varlen(fa_dtype t, int nseq, int d, fa_causal causal)
{
    char name[128];
    snprintf(name, sizeof name, "varlen %s nseq%d d%d c%d", dtname(t), nseq, d, (int)causal);
    int32_t cq[64], ck[64];
    cq[0] = ck[0] = 0;
    int maxq = 0, maxk = 0;
    for (int b = 0; b < nseq; b++) {
        int lq = (b % 5 == 4 || b == nseq - 1) ? 0 : 1 + (int)((frand() + 1) * 150);
        int lk = (b % 5 == 4 || b == nseq - 1) ? 0 : 1 + (int)((frand() + 1) * 200);
        if (causal && lk < lq) lk = lq;
        cq[b + 1] = cq[b] + lq; ck[b + 1] = ck[b] + lk;
        if (lq > maxq) maxq = lq;
        if (lk > maxk) maxk = lk;
    }
    int H = 4, Hkv = 2, TQ = cq[nseq] + 5, TK = ck[nseq];
    buf q = mk((size_t)TQ * H * d, t, 2.0), k = mk((size_t)TK * Hkv * d, t, 2.0), v = mk((size_t)TK * Hkv * d, t, 1.0);
    buf o = mk_poison((size_t)TQ * H * d, t), l = mk_poison((size_t)H * TQ, FA_F32);
    int32_t *dcq, *dck;
    CK(cudaMalloc((void **)&dcq, 4 * (nseq + 1))); CK(cudaMalloc((void **)&dck, 4 * (nseq + 1)));
    CK(cudaMemcpy(dcq, cq, 4 * (nseq + 1), cudaMemcpyHostToDevice)); CK(cudaMemcpy(dck, ck, 4 * (nseq + 1), cudaMemcpyHostToDevice));
    fa_options op = {0};
    op.causal = causal;
    fa_tensor tq = fa_tensor_contiguous(q.d, t, 1, TQ, H, d), tk = fa_tensor_contiguous(k.d, t, 1, TK, Hkv, d);
    fa_tensor tv = fa_tensor_contiguous(v.d, t, 1, TK, Hkv, d), to = fa_tensor_contiguous(o.d, t, 1, TQ, H, d);
    fa_status st = fa_forward_varlen(cu, &to, (float *)l.d, &tq, &tk, &tv, dcq, dck, nseq, maxq, maxk, &op);
    CK(cudaDeviceSynchronize());
    if (st != FA_OK) { result(name, 0, "status %d", (int)st); printf("   %s\n", fa_last_error(cu)); goto done; }
    pull(&o); pull(&l);
    {
        size_t nv = (size_t)cq[nseq] * H * d;
        int untouched = 1;
        for (size_t i = nv * esz(t); i < (size_t)TQ * H * d * esz(t); i++) if (((unsigned char *)o.h)[i] != 0xff) untouched = 0;
        or_oracle orc;
        if (varlen_oracle(t, nseq, d, causal, cq, ck, TQ, TK, &q, &k, &v, NULL, 0, &orc)) { result(name, 0, "oracle: out of memory"); goto done; }
        /* rows past cu_seqlens[nseq] (poison) belong to no sequence: not compared; lse is
           [H][TQ], the oracle's layout */
        double *g = host_all(&o, (size_t)TQ * H * d), *gl = malloc(sizeof(double) * (size_t)H * TQ), eo = 0, el = 0;
        for (size_t i = 0; i < (size_t)H * TQ; i++) gl[i] = ((float *)l.h)[i];
        buf ov = o;
        ov.n = nv;   /* guard_ok looks past n: the extra rows (0xff) then the real guard band */
        int ok = oracle_ok(&orc, OR_OUT, g, &eo);
        ok &= oracle_ok(&orc, OR_LSE, gl, &el);
        result(name, ok && guard_ok(&ov), "err/bound out %.2f lse %.2f%s", eo, el, guard_ok(&ov) ? "" : " guard");
        char n2[160]; snprintf(n2, sizeof n2, "%s rows past cu_seqlens untouched", name);
        result(n2, untouched, "");
        free(g); free(gl);
        or_free(&orc);
    }
done:
    cudaFree(dcq); cudaFree(dck);
    fr(&q); fr(&k); fr(&v); fr(&o); fr(&l);
}

/* KV cache: contiguous (page = 0) or paged; with s_new new rows; cache_seqlens random with a 0. */
void run_kvcache(fa_dtype t, int B, int Sq, int snew, int page, int d, fa_causal causal, int H, int Hkv)
{
    char name[160];
    snprintf(name, sizeof name, "kvcache %s B%d Sq%d new%d page%d d%d c%d H%d/%d", dtname(t),
             B, Sq, snew, page, d, (int)causal, H, Hkv);
    int cap = 700, maxp = page ? (cap + page - 1) / page : 0;
    if (page) cap = maxp * page;
    int npages = page ? B * maxp + 3 : 0;
    int32_t cs[16], *bt = NULL;
    for (int b = 0; b < B; b++) cs[b] = b == 1 ? 0 : (int)((frand() + 1) * 0.5 * (cap - snew - 1));
    buf kc, vc;
    if (page) {
        kc = mk((size_t)npages * page * Hkv * d, t, 2.0); vc = mk((size_t)npages * page * Hkv * d, t, 1.0);
        bt = malloc(4 * B * maxp);
        /* a permutation of pages, reversed, so that pages are not in order */
        for (int i = 0; i < B * maxp; i++) bt[i] = npages - 1 - i;
    } else {
        kc = mk((size_t)B * cap * Hkv * d, t, 2.0); vc = mk((size_t)B * cap * Hkv * d, t, 1.0);
    }
    buf kn = mk((size_t)B * (snew ? snew : 1) * Hkv * d, t, 2.0), vn = mk((size_t)B * (snew ? snew : 1) * Hkv * d, t, 1.0);
    buf q = mk((size_t)B * Sq * H * d, t, 2.0), o = mk_poison((size_t)B * Sq * H * d, t), l = mk_poison((size_t)B * H * Sq, FA_F32);
    int32_t *dcs, *dbt = NULL;
    CK(cudaMalloc((void **)&dcs, 4 * B)); CK(cudaMemcpy(dcs, cs, 4 * B, cudaMemcpyHostToDevice));
    if (bt) { CK(cudaMalloc((void **)&dbt, 4 * B * maxp)); CK(cudaMemcpy(dbt, bt, 4 * B * maxp, cudaMemcpyHostToDevice)); }
    fa_options op = {0};
    op.causal = causal;
    int64_t S1 = page ? page : cap, N0 = page ? npages : B;
    fa_tensor tkc = fa_tensor_contiguous(kc.d, t, N0, S1, Hkv, d), tvc = fa_tensor_contiguous(vc.d, t, N0, S1, Hkv, d);
    fa_tensor tkn = fa_tensor_contiguous(kn.d, t, B, snew, Hkv, d), tvn = fa_tensor_contiguous(vn.d, t, B, snew, Hkv, d);
    fa_tensor tq = fa_tensor_contiguous(q.d, t, B, Sq, H, d), to = fa_tensor_contiguous(o.d, t, B, Sq, H, d);
    or_seq_data kd[16];
    or_problem kp;
    kv_problem(t, B, Sq, snew, page, cap, d, causal, H, Hkv, cs, bt, maxp, &kc, &vc, &kn, &vn, &q, kd, &kp);
    fa_status st = fa_forward_kvcache(cu, &to, (float *)l.d, &tq, &tkc, &tvc, snew ? &tkn : NULL, snew ? &tvn : NULL,
                                      dcs, dbt, maxp, &op);
    CK(cudaDeviceSynchronize());
    if (st != FA_OK) { result(name, 0, "status %d", (int)st); printf("   %s\n", fa_last_error(cu)); goto done; }
    pull(&o); pull(&l);
    {
        size_t nc = kc.n;
        or_oracle orc;
        if (or_compute(&kp, 0, &orc)) { result(name, 0, "oracle: out of memory"); goto done; }
        double *g = host_all(&o, (size_t)B * Sq * H * d), *gl = lse_bhs((float *)l.h, B, H, Sq), eo = 0, el = 0;
        int ok = oracle_ok(&orc, OR_OUT, g, &eo);
        ok &= oracle_ok(&orc, OR_LSE, gl, &el);
        result(name, ok && guard_ok(&o), "err/bound out %.2f lse %.2f%s", eo, el, guard_ok(&o) ? "" : " guard");
        free(g); free(gl);
        or_free(&orc);
        /* the caches after the append, against the reference backend's append */
        float *oref = malloc((size_t)B * Sq * H * d * 4), *lref = malloc((size_t)B * H * Sq * 4);
        fa_tensor hkc = fa_tensor_contiguous(kc.h, t, N0, S1, Hkv, d), hvc = fa_tensor_contiguous(vc.h, t, N0, S1, Hkv, d);
        fa_tensor hkn = fa_tensor_contiguous(kn.h, t, B, snew, Hkv, d), hvn = fa_tensor_contiguous(vn.h, t, B, snew, Hkv, d);
        fa_tensor hq = fa_tensor_contiguous(q.h, t, B, Sq, H, d), ho = fa_tensor_contiguous(oref, FA_F32, B, Sq, H, d);
        st = fa_forward_kvcache(ref, &ho, lref, &hq, &hkc, &hvc, snew ? &hkn : NULL, snew ? &hvn : NULL, cs, bt, maxp, &op);
        if (st != FA_OK) { result(name, 0, "reference status %d", (int)st); printf("   %s\n", fa_last_error(ref)); }
        else {
            size_t cb = nc * esz(t);
            void *kc2 = malloc(cb), *vc2 = malloc(cb);
            CK(cudaMemcpy(kc2, kc.d, cb, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(vc2, vc.d, cb, cudaMemcpyDeviceToHost));
            char n2[200]; snprintf(n2, sizeof n2, "%s cache after append", name);
            result(n2, !memcmp(kc2, kc.h, cb) && !memcmp(vc2, vc.h, cb), "");
            free(kc2); free(vc2);
        }
        free(oref); free(lref);
    }
done:
    for (int b = 0; b < B; b++) { free((void *)kd[b].q); free((void *)kd[b].k); free((void *)kd[b].v); }
    cudaFree(dcs); cudaFree(dbt); free(bt);
    fr(&kc); fr(&vc); fr(&kn); fr(&vn); fr(&q); fr(&o); fr(&l);
}
