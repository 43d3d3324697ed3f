/* backward.c - the backward loop nest (recomputation), written once for every kernel set.
 *
 * Forward lines differentiated (per query i, key j; s = scale q.k, softcap, + bias, mask):
 *   P = exp(S - lse)            ->  dS = P * (dP - D),  D = rowsum(dO * O)
 *   O = (P * keep * ks) V       ->  dV += (P*keep*ks)^T dO ;  dP = (dO V^T) * keep * ks
 *   S = cap tanh(s / cap)       ->  dS_pre = dS * (1 - tanh^2)
 *   s = scale q.k               ->  dQ = scale dS K ;  dK = scale dS^T Q
 *   lse includes exp(sink)      ->  dsinks[h] = -sum_i exp(sink - lse_i) D_i
 *
 *   phase 1  parallel over (b, h): D per row, dsink partial per (b, h)
 *   phase 1b zero the dQ partials; when C >= 4, pack the Q side of every (b, h, Q block)
 *            once into a shared buffer (else each task packs its head per thread)
 *   phase 2  parallel over tasks (b, KV head, chunk c of KV tiles)   [dynamic]
 *              for each KV tile of the chunk (K, V -> fp32 rows, dK, dV accumulators):
 *                for each query head of the group, each Q block that sees the tile:
 *                  S^T = K Q^T, P^T = exp(S^T - lse)          gemm_rowA, exp_sub
 *                  dP^T = V dO^T                              gemm_rowA
 *                  dV += P_drop^T dO                          gemm_rowA
 *                  dS^T = P^T (dP^T - D)                      ds
 *                  dK += dS^T Q                               gemm_rowA
 *                  dQpart[c] += dS K                          gemm_colA
 *              write dK (x scale), dV: each KV tile belongs to exactly one task.
 *   phase 3  dQ = scale * sum_c dQpart[c] in fixed c order; dsinks summed in fixed b order.
 * dQ strategy: one fp32 dQ partial per KV chunk, chunks fixed by shapes
 *   (C = ceil(32 / (B*Hkv)) capped by 16 and the KV tile count), reduced in fixed order:
 *   bitwise identical for any thread count, always (deterministic = 1 costs nothing),
 *   with C * Sq * H * dqk * 4 bytes of scratch (O(S) per head).
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "scratch.h"

#define CHUNK_TARGET 32    /* 128 measured 5-20% slower at 1 thread (B*H=16, S=1k): bench/NOTES.md */
#define Q_SHARED_MIN_C 4   /* shared Q-side pack when each head is split in >= this many chunks */
#define Q_CACHE_MAX ((int64_t)64 << 20)   /* bytes per thread (fallback cache) */
#define Q_SHARED_MAX ((int64_t)1 << 30)   /* bytes of the shared Q-side pack */

int fa_cpu_bwd_chunks(const fa_problem *p, int bkv)
{
    int64_t bh = p->batch * p->hkv;
    if (bh < 1) bh = 1;
    int64_t c = (CHUNK_TARGET + bh - 1) / bh;
    int64_t nkb = fa_sz_ceil_div(p->max_sk, bkv);
    if (c > nkb) c = nkb;
    if (c > 16) c = 16;
    return c < 1 ? 1 : (int)c;
}

typedef struct {
    float *kc, *vc, *dk, *dv, *qt, *qc, *dot, *doc, *s, *dp, *pd, *t, *lse, *d, *row, *row2, *qcache;
    unsigned char *qflag;
    int64_t *hr, *ir, *idrop, *lo, *hi;
} bwd_scratch;

static const void *qptr(const fa_tensor *t, const fa_seq *s, int64_t i, int64_t h)
{
    return (const char *)t->data + fa_qrow(t, s, i, h) * (int64_t)fa_dtype_size(t->dtype);
}

/* Pack row r of a Q-side block: Q (row-major qc, transposed qt), dO (doc, dot), lse and D.
   A fully masked row (lse = -inf) contributes nothing: its Q, dO and D are packed as zeros
   (exact, since its P is 0), so a NaN it holds cannot reach dK/dV through 0 * NaN. */
static void pack_q_row(const fa_problem *p, const fa_cpu_kernels *K, const fa_seq *sq,
                       int64_t b, int64_t h, int64_t i, int r, int64_t ldq, int64_t ldk,
                       int64_t ldv, const float *D, float *qt, float *qc, float *dot,
                       float *doc, float *lsev, float *dd)
{
    const int64_t dqk = p->dqk, dv = p->dv;
    int64_t li = fa_lse_index(p, sq, b, h, i);
    float lv = p->lse_in[li];
    if (lv == -INFINITY) {
        for (int64_t c = 0; c < dqk; c++) qc[r * ldk + c] = 0.0f;
        for (int64_t c = 0; c < dv; c++) doc[r * ldv + c] = 0.0f;
    } else {
        K->cvt_in(qc + r * ldk, qptr(&p->q, sq, i, h), dqk, p->q.dtype);
        K->cvt_in(doc + r * ldv, qptr(&p->dout, sq, i, h), dv, p->dout.dtype);
    }
    for (int64_t c = 0; c < dqk; c++) qt[c * ldq + r] = qc[r * ldk + c];
    for (int64_t c = 0; c < dv; c++) dot[c * ldq + r] = doc[r * ldv + c];
    lsev[r] = lv == -INFINITY ? INFINITY : lv;
    dd[r] = lv == -INFINITY ? 0.0f : D[li];
}

/* T[j][r] = 0 for the pairs outside row r's visible keys [lo[r], hi[r]) (tile at key j0). */
static void zero_masked(float *t, int nk, int nq, int64_t ld, int64_t j0, const int64_t *lo,
                        const int64_t *hi)
{
    for (int j = 0; j < nk; j++)
        for (int r = 0; r < nq; r++)
            if (j0 + j < lo[r] || j0 + j >= hi[r]) t[j * ld + r] = 0.0f;
}

/* C[j][0:n] += sum over the rows r that see key j0 + j of A[j][r] B[r][0:n]: gemm_rowA
   restricted to visible pairs, for a B row holding Inf/NaN. */
static void visible_rowA(const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                         int64_t ldc, int nk, int nq, int n, int64_t j0, const int64_t *lo,
                         const int64_t *hi)
{
    for (int j = 0; j < nk; j++)
        for (int r = 0; r < nq; r++) {
            if (j0 + j < lo[r] || j0 + j >= hi[r]) continue;
            float a = A[j * lda + r];
            for (int x = 0; x < n; x++) C[j * ldc + x] += a * B[r * ldb + x];
        }
}

/* The backward of a call without query rows (Sq = 0 or no query heads) but with key rows:
   nothing reaches any key, so dk = dv = 0 and dsinks = 0. Sizes here come from dk/dv,
   which exist in memory; the query side (hq, Sq) may be anything and sizes nothing. */
static fa_status bwd_no_queries(fa_context *ctx, const fa_problem *p)
{
    const fa_cpu_kernels *K = ((const fa_cpu_state *)ctx->impl)->k;
    int ovf = 0;
    int64_t n = fa_sz_pad(p->dqk > p->dv ? p->dqk : p->dv, &ovf);
    float *zero = ovf ? NULL : fa_cpu_alloc(n);
    if (!zero)
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: cannot allocate a zero row of %lld floats",
                            (long long)(p->dqk > p->dv ? p->dqk : p->dv));
    for (int64_t b = 0; b < p->batch; b++) {
        fa_seq sq = fa_problem_seq(p, b);
        for (int64_t j = 0; j < sq.sk; j++)
            for (int64_t hk = 0; hk < p->hkv; hk++) {
                K->cvt_out((char *)p->grad_k.data + fa_krow(p, &p->grad_k, &sq, b, j, hk) *
                           (int64_t)fa_dtype_size(p->grad_k.dtype), p->grad_k.dtype, zero, p->dqk, 1.0f);
                K->cvt_out((char *)p->grad_v.data + fa_krow(p, &p->grad_v, &sq, b, j, hk) *
                           (int64_t)fa_dtype_size(p->grad_v.dtype), p->grad_v.dtype, zero, p->dv, 1.0f);
            }
    }
    if (p->dsinks)
        for (int64_t h = 0; h < p->hq; h++) p->dsinks[h] = 0.0f;
    free(zero);
    return FA_OK;
}

fa_status fa_cpu_backward(fa_context *ctx, const fa_problem *p)
{
    /* Nothing to write but dsinks (0: no row contributes): return before anything is
       sized from the dims, which are unbounded when a dimension is 0. */
    if (fa_backward_is_empty(p)) {
        if (p->dsinks)
            for (int64_t h = 0; h < p->hq; h++) p->dsinks[h] = 0.0f;
        return FA_OK;
    }
    if (p->hq == 0 || fa_problem_q_rows(p) == 0) return bwd_no_queries(ctx, p);

    const fa_cpu_kernels *K = ((const fa_cpu_state *)ctx->impl)->k;
    int bq, bkv;
    fa_cpu_tiles(ctx, 1, p->dqk, p->dv, &bq, &bkv, NULL, 0);
    int C = fa_cpu_bwd_chunks(p, bkv);
    int nt = fa_cpu_threads(ctx);
    int64_t dqk = p->dqk, dv = p->dv;
    int slow = fa_cpu_slow_scores(p);
    int drop = p->dropout_p > 0.0f;

    /* Scratch sizes, overflow-checked (scratch.h). With query rows present, dq, dk and dv
       are outputs that exist in memory, which bounds every dimension; the checks make
       that an explicit NO_MEMORY instead of a wrapped size. */
    int ovf = 0;
    int64_t ldq = fa_cpu_ld(bq), ldk = fa_sz_ld(dqk, &ovf), ldv = fa_sz_ld(dv, &ovf);
    int64_t dmax = dqk > dv ? dqk : dv;
    int64_t dmaxp = ldk > ldv ? ldk : ldv;
    int64_t qrows = fa_sz_mul(p->q.shape[0], p->q.shape[1], &ovf);   /* dense B*Sq, varlen total */
    int64_t nbh = fa_sz_mul(p->batch, p->hq, &ovf);
    int64_t nlse = p->layout == FA_LAYOUT_VARLEN ? fa_sz_mul(p->hq, p->q.shape[1], &ovf)
                                                 : fa_sz_mul(nbh, p->q.shape[1], &ovf);
    int64_t ntask = fa_sz_mul(fa_sz_mul(p->batch, p->hkv, &ovf), C, &ovf);

    /* kc, vc, dk, dv [bkv x ld]; qt [dqk x ldq]; qc [ldq x ldk]; dot [dv x ldq];
       doc [ldq x ldv]; s, dp, pd, t [bkv x ldq]; lse, d; row, row2; 5 int64 arrays */
    int64_t per = fa_sz_mul(2 * (int64_t)bkv, fa_sz_add(ldk, ldv, &ovf), &ovf);
    per = fa_sz_add(per, fa_sz_mul(dqk, ldq, &ovf), &ovf);
    per = fa_sz_add(per, fa_sz_mul(ldq, ldk, &ovf), &ovf);
    per = fa_sz_add(per, fa_sz_mul(dv, ldq, &ovf), &ovf);
    per = fa_sz_add(per, fa_sz_mul(ldq, ldv, &ovf), &ovf);
    per = fa_sz_add(per, fa_sz_mul(2, dmaxp, &ovf), &ovf);
    per = fa_sz_add(per, 4 * (int64_t)bkv * ldq + 2 * ldq + 5 * ldq * 2, &ovf);
    per = fa_sz_pad(per, &ovf);
    int64_t scrsz = fa_sz_mul(per, nt, &ovf);
    /* dQ partials [C][hq][qrows][lddq]: the rows of one head contiguous, so the dQ
       gemm's C block is a compact 2-D tile (bench/NOTES.md item 11) */
    int64_t lddq = fa_sz_ld(dqk, &ovf);
    int64_t ndqp = fa_sz_mul(fa_sz_mul(C, qrows, &ovf), fa_sz_mul(p->hq, lddq, &ovf), &ovf);
    /* per-thread Q-side cache of one (b, KV head): every Q block of every head in the
       group, packed once per task instead of once per KV tile */
    int64_t nqbmax = fa_sz_ceil_div(p->max_sq, bq);
    int64_t qblk = fa_sz_add(fa_sz_mul(fa_sz_add(dqk, dv, &ovf), ldq, &ovf),
                             fa_sz_mul(ldq, fa_sz_add(ldk, ldv, &ovf), &ovf), &ovf);
    qblk = fa_sz_add(qblk, 2 * ldq, &ovf);
    int qovf = 0;   /* the caches are optional: one that does not fit is not used */
    int64_t qcper = fa_sz_pad(fa_sz_mul(fa_sz_mul(nqbmax, p->group, &qovf), qblk, &qovf), &qovf);
    /* shared Q-side pack (C >= 4, i.e. B*Hkv <= 8): every (b, head, Q block) packed once,
       in a parallel phase, and only read by the tasks, so the C chunks of one head no
       longer pack it C times; else the per-thread cache, packed once per task (cheaper
       at small C: it stays warm in L2; the shared pack measured ~5% slower at C = 2) */
    int sovf = 0;
    int64_t nqsh = fa_sz_mul(nbh, nqbmax, &sovf);
    int64_t nqshf = fa_sz_mul(nqsh, qblk, &sovf);
    if (ovf)
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: the backward's scratch for head dims %lld/%lld "
                            "does not fit in 64 bits", (long long)dqk, (long long)dv);

    /* scratch zeroed inside the parallel region (each thread its slice, first touch
       in parallel) instead of by one thread here */
    float *scr = fa_cpu_alloc_raw(scrsz);
    float *dqp = fa_cpu_alloc_raw(ndqp);
    float *D = fa_cpu_alloc(nlse);
    float *dsp = fa_cpu_alloc(nbh);
    float *qsh = NULL;
    if (!sovf && C >= Q_SHARED_MIN_C && nqbmax > 0 && nqshf <= Q_SHARED_MAX / 4)
        qsh = fa_cpu_alloc_raw(nqshf);
    float *qcache = NULL;
    unsigned char *qflags = NULL;
    if (!qsh && !qovf && qcper <= Q_CACHE_MAX / 4 && nqbmax > 0) {
        qcache = fa_cpu_alloc_raw(qcper * nt);
        qflags = (unsigned char *)calloc((size_t)(nqbmax * p->group * nt), 1);
        if (!qcache || !qflags) { free(qcache); free(qflags); qcache = NULL; qflags = NULL; }
    }
    if (!scr || !dqp || !D || !dsp) {
        free(qcache); free(qflags); free(qsh);
        free(scr); free(dqp); free(D); free(dsp);
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: cannot allocate the backward's scratch (%lld + %lld "
                            "floats: per-thread tiles and the dQ partials)", (long long)scrsz,
                            (long long)ndqp);
    }

#pragma omp parallel num_threads(nt)
    {
        bwd_scratch w;
        float *base = scr + per * fa_cpu_tid();
        memset(base, 0, sizeof(float) * (size_t)per);
        if (qcache) memset(qcache + qcper * fa_cpu_tid(), 0, sizeof(float) * (size_t)qcper);
        w.kc = base; base += (int64_t)bkv * ldk;
        w.vc = base; base += (int64_t)bkv * ldv;
        w.dk = base; base += (int64_t)bkv * ldk;
        w.dv = base; base += (int64_t)bkv * ldv;
        w.qt = base; base += dqk * ldq;
        w.qc = base; base += ldq * ldk;
        w.dot = base; base += dv * ldq;
        w.doc = base; base += ldq * ldv;
        w.s = base; base += (int64_t)bkv * ldq;
        w.dp = base; base += (int64_t)bkv * ldq;
        w.pd = base; base += (int64_t)bkv * ldq;
        w.t = base; base += (int64_t)bkv * ldq;
        w.lse = base; base += ldq;
        w.d = base; base += ldq;
        w.row = base; base += fa_cpu_pad(dmax);
        w.row2 = base; base += fa_cpu_pad(dmax);
        int64_t *ib = (int64_t *)base;
        w.hr = ib; w.ir = ib + ldq; w.idrop = ib + 2 * ldq; w.lo = ib + 3 * ldq; w.hi = ib + 4 * ldq;
        w.qcache = qcache ? qcache + qcper * fa_cpu_tid() : NULL;
        w.qflag = qflags ? qflags + nqbmax * p->group * fa_cpu_tid() : NULL;

        /* phase 1: D = rowsum(dO * O); dsink partials */
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < p->batch * p->hq; bh++) {
            int64_t b = bh / p->hq, h = bh % p->hq;
            fa_seq sq = fa_problem_seq(p, b);
            float dsum = 0.0f;
            for (int64_t i = 0; i < sq.sq; i++) {
                K->cvt_in(w.row, qptr(&p->dout, &sq, i, h), dv, p->dout.dtype);
                K->cvt_in(w.row2, qptr(&p->out, &sq, i, h), dv, p->out.dtype);
                float acc = 0.0f;
                for (int64_t c = 0; c < dv; c++) acc += w.row[c] * w.row2[c];
                int64_t li = fa_lse_index(p, &sq, b, h, i);
                D[li] = acc;
                if (p->sinks && p->lse_in[li] != -INFINITY)
                    dsum += -expf(p->sinks[h] - p->lse_in[li]) * acc;
            }
            dsp[bh] = dsum;
        }

        /* phase 1b: zero the dQ partials; pack the shared Q side (needs D: after the
           barrier of phase 1) */
#pragma omp for schedule(static)
        for (int64_t z = 0; z < (ndqp + 4095) / 4096; z++) {
            int64_t z1 = (z + 1) * 4096 < ndqp ? (z + 1) * 4096 : ndqp;
            memset(dqp + z * 4096, 0, sizeof(float) * (size_t)(z1 - z * 4096));
        }
        if (qsh) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t x = 0; x < nqsh; x++) {
                int64_t b = x / (p->hq * nqbmax), h = (x / nqbmax) % p->hq, qb = x % nqbmax;
                fa_seq sq = fa_problem_seq(p, b);
                int64_t i0 = qb * bq;
                float *qt = qsh + x * qblk, *qc = qt + dqk * ldq, *dot = qc + ldq * ldk;
                float *doc = dot + dv * ldq, *lsev = doc + ldq * ldv, *dd = lsev + ldq;
                memset(qt, 0, sizeof(float) * (size_t)qblk);
                if (i0 >= sq.sq) continue;
                int ni = (int)(sq.sq - i0 < bq ? sq.sq - i0 : bq);
                for (int r = 0; r < ni; r++)
                    pack_q_row(p, K, &sq, b, h, i0 + r, r, ldq, ldk, ldv, D, qt, qc, dot, doc,
                               lsev, dd);
            }
        }

        /* phase 2 */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++) {
            int64_t b = t / (p->hkv * C), hk = (t / C) % p->hkv;
            int c = (int)(t % C);
            fa_seq sq = fa_problem_seq(p, b);
            int64_t nkb = (sq.sk + bkv - 1) / bkv;
            int64_t kb0 = nkb * c / C, kb1 = nkb * (c + 1) / C;
            float *dqc = dqp + (int64_t)c * qrows * p->hq * lddq;
            int64_t qbase = sq.tb * p->q.shape[1] + sq.q0;
            if (qcache) memset(w.qflag, 0, (size_t)(nqbmax * p->group));
            for (int64_t kb = kb0; kb < kb1; kb++) {
                int64_t j0 = kb * bkv;
                int nk = (int)(sq.sk - j0 < bkv ? sq.sk - j0 : bkv);
                for (int j = 0; j < nk; j++) {
                    K->cvt_in(w.kc + j * ldk, (const char *)p->k.data +
                              fa_krow(p, &p->k, &sq, b, j0 + j, hk) * (int64_t)fa_dtype_size(p->k.dtype),
                              dqk, p->k.dtype);
                    K->cvt_in(w.vc + j * ldv, (const char *)p->v.data +
                              fa_krow(p, &p->v, &sq, b, j0 + j, hk) * (int64_t)fa_dtype_size(p->v.dtype),
                              dv, p->v.dtype);
                }
                /* Non-finite K or V in the tile: in a partly masked pair (below) a masked
                   dS = 0 must not multiply them (0 * NaN = NaN would reach rows that cannot
                   see the key). */
                int kbad = fa_cpu_nonfinite(w.kc, nk, dqk, ldk);
                int kvbad = kbad || fa_cpu_nonfinite(w.vc, nk, dv, ldv);
                memset(w.dk, 0, sizeof(float) * (size_t)(nk * ldk));
                memset(w.dv, 0, sizeof(float) * (size_t)(nk * ldv));
                for (int64_t h = hk * p->group; h < (hk + 1) * p->group; h++) {
                    for (int64_t i0 = 0; i0 < sq.sq; i0 += bq) {
                        int ni = (int)(sq.sq - i0 < bq ? sq.sq - i0 : bq);
                        int64_t lo0, hi0, lo1, hi1;
                        fa_visible_range(p, &sq, i0, &lo0, &hi0);
                        fa_visible_range(p, &sq, i0 + ni - 1, &lo1, &hi1);
                        if (lo0 >= j0 + nk || hi1 <= j0) continue;  /* no row sees the tile */
                        int any = 0, full = 1;
                        for (int r = 0; r < ni; r++) {
                            int64_t i = i0 + r;
                            w.hr[r] = h; w.ir[r] = i; w.idrop[r] = sq.drop_i0 + i;
                            fa_visible_range(p, &sq, i, &w.lo[r], &w.hi[r]);
                            if (w.lo[r] < j0 + nk && w.hi[r] > j0 && w.lo[r] < w.hi[r]) any = 1;
                            if (w.lo[r] > j0 || w.hi[r] < j0 + nk) full = 0;
                        }
                        if (!any) continue;
                        /* Q-side block: Q^T, Q, dO^T, dO, lse, D (cached per thread for the
                           whole (b, KV head) when it fits, else packed here) */
                        float *qt = w.qt, *qc = w.qc, *dot = w.dot, *doc = w.doc, *lsev = w.lse, *dd = w.d;
                        int64_t qb = i0 / bq;
                        unsigned char *flag = NULL;
                        if (qsh) {
                            qt = qsh + ((b * p->hq + h) * nqbmax + qb) * qblk;
                            qc = qt + dqk * ldq; dot = qc + ldq * ldk; doc = dot + dv * ldq;
                            lsev = doc + ldq * ldv; dd = lsev + ldq;
                        } else if (qcache) {
                            float *blk = w.qcache + ((h - hk * p->group) * nqbmax + qb) * qblk;
                            qt = blk; qc = qt + dqk * ldq; dot = qc + ldq * ldk; doc = dot + dv * ldq;
                            lsev = doc + ldq * ldv; dd = lsev + ldq;
                            flag = &w.qflag[(h - hk * p->group) * nqbmax + qb];
                        }
                        if (!qsh && (!flag || !*flag)) {
                            for (int r = 0; r < ni; r++)
                                pack_q_row(p, K, &sq, b, h, i0 + r, r, ldq, ldk, ldv, D, qt, qc,
                                           dot, doc, lsev, dd);
                            if (flag) *flag = 1;
                        }
                        /* A partly masked pair whose data holds Inf/NaN (rare): K or V of the
                           tile, Q or dO of a row, or a row's lse or D (NaN when its own inputs
                           reached it). Masked products are then made 0 by a select, not by
                           exp(-inf) or a multiply by 0 (exp(-inf - NaN) and 0 * NaN are NaN),
                           and dK, dV, dQ sum only the visible pairs of the non-finite operand,
                           so NaN reaches exactly what the reference's visible-only loops
                           reach (API.md item 15). */
                        int qbad = 0, dobad = 0, lbad = 0;
                        if (!full) {
                            for (int r = 0; r < ni; r++)
                                if (isnan(lsev[r]) || isnan(dd[r])) lbad = 1;
                            qbad = fa_cpu_nonfinite(qc, ni, dqk, ldk);
                            dobad = fa_cpu_nonfinite(doc, ni, dv, ldv);
                        }
                        const int sel = !full && (kvbad || qbad || dobad || lbad);
                        K->gemm_rowA(nk, ni, (int)dqk, w.kc, ldk, qt, ldq, w.s, ldq, 0);
                        if (slow)
                            fa_cpu_score_pass(p, &sq, b, w.s, nk, ni, ldq, j0, w.hr, w.ir,
                                              p->softcap > 0.0f ? w.t : NULL);
                        if (!full) fa_cpu_mask_pass(w.s, nk, ni, ldq, j0, w.lo, w.hi);
                        K->exp_sub(w.s, nk, ni, ldq, slow ? 1.0f : p->scale, lsev);
                        if (sel) zero_masked(w.s, nk, ni, ldq, j0, w.lo, w.hi);
                        K->gemm_rowA(nk, ni, (int)dv, w.vc, ldv, dot, ldq, w.dp, ldq, 0);
                        const float *pv = w.s;
                        if (drop) {
                            for (int j = 0; j < nk; j++)
                                memcpy(w.pd + j * ldq, w.s + j * ldq, sizeof(float) * (size_t)ni);
                            fa_cpu_dropout_pass(p, b, nk, ni, ldq, j0, w.hr, w.idrop, p->drop.keep_scale,
                                                w.pd, w.dp);
                            pv = w.pd;
                        }
                        if (sel && dobad)
                            visible_rowA(pv, ldq, doc, ldv, w.dv, ldv, nk, ni, (int)dv, j0, w.lo, w.hi);
                        else
                            K->gemm_rowA(nk, (int)dv, ni, pv, ldq, doc, ldv, w.dv, ldv, 1);
                        K->ds(w.dp, w.s, nk, ni, ldq, dd);
                        if (p->softcap > 0.0f)
                            for (int j = 0; j < nk; j++)
                                for (int r = 0; r < ni; r++) {
                                    float th = w.t[j * ldq + r];
                                    w.dp[j * ldq + r] *= 1.0f - th * th;
                                }
                        if (sel) zero_masked(w.dp, nk, ni, ldq, j0, w.lo, w.hi);
                        if (sel && qbad)
                            visible_rowA(w.dp, ldq, qc, ldk, w.dk, ldk, nk, ni, (int)dqk, j0, w.lo, w.hi);
                        else
                            K->gemm_rowA(nk, (int)dqk, ni, w.dp, ldq, qc, ldk, w.dk, ldk, 1);
                        float *dqb = dqc + (h * qrows + qbase + i0) * lddq;
                        if (sel && kbad) {
                            for (int r = 0; r < ni; r++)
                                for (int j = 0; j < nk; j++) {
                                    if (j0 + j < w.lo[r] || j0 + j >= w.hi[r]) continue;
                                    float g = w.dp[j * ldq + r];
                                    for (int64_t x = 0; x < dqk; x++)
                                        dqb[r * lddq + x] += g * w.kc[j * ldk + x];
                                }
                        } else {
                            K->gemm_colA(ni, (int)dqk, nk, w.dp, ldq, w.kc, ldk, dqb, lddq, 1);
                        }
                    }
                }
                for (int j = 0; j < nk; j++) {
                    K->cvt_out((char *)p->grad_k.data + fa_krow(p, &p->grad_k, &sq, b, j0 + j, hk) *
                               (int64_t)fa_dtype_size(p->grad_k.dtype), p->grad_k.dtype, w.dk + j * ldk, dqk, p->scale);
                    K->cvt_out((char *)p->grad_v.data + fa_krow(p, &p->grad_v, &sq, b, j0 + j, hk) *
                               (int64_t)fa_dtype_size(p->grad_v.dtype), p->grad_v.dtype, w.dv + j * ldv, dv, 1.0f);
                }
            }
        }

        /* phase 3: dQ = scale * sum_c partial_c, fixed order */
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < p->batch * p->hq; bh++) {
            int64_t b = bh / p->hq, h = bh % p->hq;
            fa_seq sq = fa_problem_seq(p, b);
            int64_t qbase = sq.tb * p->q.shape[1] + sq.q0;
            for (int64_t i = 0; i < sq.sq; i++) {
                const float *src = dqp + (h * qrows + qbase + i) * lddq;
                if (C > 1) {
                    memcpy(w.row, src, sizeof(float) * (size_t)dqk);
                    for (int c = 1; c < C; c++) {
                        const float *pc = src + (int64_t)c * qrows * p->hq * lddq;
                        for (int64_t x = 0; x < dqk; x++) w.row[x] += pc[x];
                    }
                    src = w.row;
                }
                K->cvt_out((char *)p->grad_q.data + fa_qrow(&p->grad_q, &sq, i, h) *
                           (int64_t)fa_dtype_size(p->grad_q.dtype), p->grad_q.dtype, src, dqk, p->scale);
            }
        }
    }
    if (p->dsinks)
        for (int64_t h = 0; h < p->hq; h++) {
            float s = 0.0f;
            for (int64_t b = 0; b < p->batch; b++) s += dsp[b * p->hq + h];
            p->dsinks[h] = s;
        }
    free(scr); free(dqp); free(D); free(dsp); free(qcache); free(qflags); free(qsh);
    return FA_OK;
}
