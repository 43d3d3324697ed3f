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
#include "backward.h"
#include "masked.h"
#include "scores.h"
#include "scratch.h"
#include "state.h"
#include "threads.h"
#include "tiles.h"
#include "vecops.h"

#define CHUNK_TARGET 32    /* 128 measured 5-20% slower at 1 thread (B*H=16, S=1k) */
#define Q_SHARED_MIN_C 4   /* shared Q-side pack when each head is split in >= this many chunks */
#define Q_CACHE_MAX ((int64_t)64 << 20)   /* bytes per thread (fallback cache) */
#define Q_SHARED_MAX ((int64_t)1 << 30)   /* bytes of the shared Q-side pack */

/* dQ chunks of a backward call (shapes only). */
static int bwd_chunks(const fa_problem *p, int bkv)
{
    int64_t bh = p->batch * p->hkv;
    if (bh < 1) bh = 1;
    int64_t c = (CHUNK_TARGET + bh - 1) / bh;
    int64_t nkb = fa_sz_ceil_div(p->max_sk, bkv);
    if (c > nkb) c = nkb;
    if (c > 16) c = 16;
    return c < 1 ? 1 : (int)c;
}

/* One Q block's operands (the "Q side"), packed once and read for every KV tile:
   fp32 Q^T [dqk][ldq], Q [ldq][ldk], dO^T [dv][ldq], dO [ldq][ldv], lse and D [ldq];
   with AMX (bf16 q, k, v, dout) also the bf16 B operands of four products, in 32-bit words
   of two bf16 (kernels.h, fa_cpu_amx_kernels):
     qtp  Q^T pairs over d   [round_up(dqk, 32)/2][ldq]   S^T = K Q^T
     dotp dO^T pairs over d  [round_up(dv, 32)/2][ldq]    dP^T = V dO^T
     dop  dO pairs over rows [lqp][ldv]                   dV += P^T dO
     qp   Q pairs over rows  [lqp][ldk]                   dK += dS^T Q     */
typedef struct {
    int64_t dqk, dv, ldq, ldk, ldv, kq32, kv32, lqp;
    int amx;
} qgeom;

typedef struct {
    float *qt, *qc, *dot, *doc, *lse, *d;
    uint32_t *qtp, *dotp, *dop, *qp;
} qside;

/* Floats of one Q-side block; 0 and *ovf set when it does not fit int64. */
static int64_t qside_size(const qgeom *g, int *ovf)
{
    int64_t n = fa_sz_mul(fa_sz_add(g->dqk, g->dv, ovf), g->ldq, ovf);
    n = fa_sz_add(n, fa_sz_mul(g->ldq, fa_sz_add(g->ldk, g->ldv, ovf), ovf), ovf);
    n = fa_sz_add(n, 2 * g->ldq, ovf);
    if (g->amx) {
        n = fa_sz_add(n, fa_sz_mul(16 * (g->kq32 + g->kv32), g->ldq, ovf), ovf);
        n = fa_sz_add(n, fa_sz_mul(g->lqp, fa_sz_add(g->ldk, g->ldv, ovf), ovf), ovf);
    }
    return n;
}

static qside qside_at(float *blk, const qgeom *g)
{
    qside q;
    q.qt = blk;
    q.qc = q.qt + g->dqk * g->ldq;
    q.dot = q.qc + g->ldq * g->ldk;
    q.doc = q.dot + g->dv * g->ldq;
    q.lse = q.doc + g->ldq * g->ldv;
    q.d = q.lse + g->ldq;
    float *e = q.d + g->ldq;
    q.qtp = q.dotp = q.dop = q.qp = NULL;
    if (g->amx) {
        q.qtp = (uint32_t *)e;
        q.dotp = q.qtp + 16 * g->kq32 * g->ldq;
        q.dop = q.dotp + 16 * g->kv32 * g->ldq;
        q.qp = q.dop + g->lqp * g->ldv;
    }
    return q;
}

typedef struct {
    float *kc, *vc, *dk, *dv, *s, *dp, *pd, *t, *row, *row2, *qcache;
    float *qblock;   /* this thread's Q side when there is no cache */
    unsigned char *qflag;
    int64_t *hr, *ir, *idrop, *lo, *hi;
    /* AMX: K, V rows bf16 [bkv][ldka|ldva]; K pairs over keys [lkp][ldk] words; P^T or
       dS^T rows bf16 [bkv][ldpa]; dS^T pairs [lkp][ldq] words; dS rows bf16 [ldq][ldsa];
       a bf16 row temp [ldq][ldt]; a dQ tile [ldq][lddq] for a block of rows not a
       multiple of 16 (the tile gemm writes whole 16-row tiles) */
    uint16_t *kb, *vb, *pb, *dsb, *t16;
    uint32_t *kp, *tp;
    float *dqt;
} bwd_scratch;

/* Leading dimension (bf16 elements) of an AMX A operand with k = n: whole 32-element
   steps, an odd number of 64-byte lines (as fa_cpu_ld, for the tile loads' L1 sets). */
static int64_t amx_ld(int64_t n)
{
    int64_t r = (n + 31) / 32 * 32;
    return (r / 32) % 2 == 0 ? r + 32 : r;
}

/* The AMX parts of a Q-side block from its fp32 parts (rows r < ni; exact: the fp32
   rows hold bf16 values, fully masked rows zeros). Columns ni .. round_up(ni, 16) of the
   transposed operands are zeros, so the score and dP tiles' padding columns stay finite. */
static void pack_q_amx(const fa_cpu_amx_kernels *X, const fa_cpu_kernels *K, const qgeom *g,
                       const qside *q, int ni, uint16_t *t16, int64_t ldt)
{
    int rend = (ni + 15) / 16 * 16;
    for (int pass = 0; pass < 2; pass++) {
        const float *src = pass ? q->doc : q->qc;
        int64_t n = pass ? g->dv : g->dqk, lds = pass ? g->ldv : g->ldk;
        int64_t k32 = pass ? g->kv32 : g->kq32;
        for (int r = 0; r < rend; r++) {
            uint16_t *d = t16 + r * ldt;
            if (r < ni) {
                K->cvt_out(d, FA_BF16, src + r * lds, n, 1.0f);
                memset(d + n, 0, sizeof(uint16_t) * (size_t)(32 * k32 - n));
            } else {
                memset(d, 0, sizeof(uint16_t) * (size_t)(32 * k32));
            }
        }
        X->tr32(pass ? q->dotp : q->qtp, g->ldq, (const uint32_t *)t16, ldt / 2, rend, (int)(16 * k32));
    }
    X->to_pairs(q->dop, g->ldv, q->doc, g->ldv, ni, (int)g->dv);
    X->to_pairs(q->qp, g->ldk, q->qc, g->ldk, ni, (int)g->dqk);
}

static const void *qptr(const fa_tensor *t, const fa_seq *s, int64_t i, int64_t h)
{
    return (const char *)t->data + fa_qrow(t, s, i, h) * (int64_t)fa_dtype_size(t->dtype);
}

/* Pack row r of a Q-side block: Q (row-major qc), dO (doc), lse and D (the transposed or
   AMX operands follow per block, pack_q_block).
   A fully masked row (lse = -inf) contributes nothing: its Q, dO and D are packed as zeros
   (exact, since its P is 0), so a NaN it holds cannot reach dK/dV through 0 * NaN. */
static void pack_q_row(const fa_problem *p, const fa_cpu_kernels *K, const fa_seq *sq,
                       int64_t b, int64_t h, int64_t i, int r, int64_t ldk, int64_t ldv,
                       const float *D, float *qc, float *doc, float *lsev, float *dd)
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
    lsev[r] = lv == -INFINITY ? INFINITY : lv;
    dd[r] = lv == -INFINITY ? 0.0f : D[li];
}

/* The fp32 kernels' transposed operands of a Q-side block, Q^T and dO^T, into qt and dot
   (the block's own, or another block's when the Q side must not be written). */
static void pack_q_transposed(const fa_cpu_kernels *K, const qgeom *g, const qside *q, int ni,
                              float *qt, float *dot)
{
    fa_cpu_transpose_f32(K, qt, g->ldq, q->qc, g->ldk, ni, g->dqk);
    fa_cpu_transpose_f32(K, dot, g->ldq, q->doc, g->ldv, ni, g->dv);
}

/* A whole Q-side block: rows i0 .. i0 + ni of head h, then Q^T and dO^T for the fp32
   kernels, or, with AMX, the tile operands (Q^T and dO^T are then made only for a pair
   that takes the fp32 path, pack_q_transposed). */
static void pack_q_block(const fa_problem *p, const fa_cpu_kernels *K, const fa_cpu_amx_kernels *X,
                         const qgeom *g, const qside *q, const fa_seq *sq, int64_t b, int64_t h,
                         int64_t i0, int ni, const float *D, uint16_t *t16, int64_t ldt)
{
    for (int r = 0; r < ni; r++)
        pack_q_row(p, K, sq, b, h, i0 + r, r, g->ldk, g->ldv, D, q->qc, q->doc, q->lse, q->d);
    if (X) pack_q_amx(X, K, g, q, ni, t16, ldt);
    else pack_q_transposed(K, g, q, ni, q->qt, q->dot);
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
    int C = bwd_chunks(p, bkv);
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

    /* AMX products for bf16 q, k, v and dout (kernels_amx.c): P and dS rounded to bf16
       as the same-precision reference rounds them, fp32 accumulation */
    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    const fa_cpu_amx_kernels *X = fa_cpu_amx_for(st, p, 1);
    qgeom g;
    g.dqk = dqk; g.dv = dv; g.ldq = ldq; g.ldk = ldk; g.ldv = ldv; g.amx = X != NULL;
    g.kq32 = fa_sz_add(dqk, 31, &ovf) / 32; g.kv32 = fa_sz_add(dv, 31, &ovf) / 32;
    g.lqp = (ldq + 31) / 32 * 16;
    int64_t qblk = fa_sz_pad(qside_size(&g, &ovf), &ovf);
    int64_t ldka = X ? amx_ld(32 * g.kq32) : 0, ldva = X ? amx_ld(32 * g.kv32) : 0;
    int64_t ldpa = X ? amx_ld(ldq) : 0, ldsa = X ? amx_ld(bkv) : 0;
    int64_t ldt = ldka > ldva ? ldka : ldva, lkp = ((int64_t)bkv + 31) / 32 * 16;
    /* kc, vc, dk, dv [bkv x ld]; a Q-side block; s, dp, pd, t [bkv x ldq]; row, row2;
       5 int64 arrays [ldq]; AMX buffers (bwd_scratch), in floats */
    int64_t per = fa_sz_mul(2 * (int64_t)bkv, fa_sz_add(ldk, ldv, &ovf), &ovf);
    per = fa_sz_add(per, qblk, &ovf);
    per = fa_sz_add(per, fa_sz_mul(2, dmaxp, &ovf), &ovf);
    per = fa_sz_add(per, 4 * (int64_t)bkv * ldq + 5 * ldq * 2, &ovf);
    if (X) {   /* the eight pieces bwd_scratch takes, each rounded up to 16 floats */
        int64_t amxper = fa_sz_mul(bkv, fa_sz_add(ldka, ldva, &ovf), &ovf) / 2;
        amxper = fa_sz_add(amxper, fa_sz_mul(lkp, fa_sz_add(ldk, ldq, &ovf), &ovf), &ovf);
        amxper = fa_sz_add(amxper, fa_sz_mul(bkv, ldpa, &ovf) / 2, &ovf);
        amxper = fa_sz_add(amxper, fa_sz_mul(ldq, fa_sz_add(ldsa, ldt, &ovf), &ovf) / 2, &ovf);
        amxper = fa_sz_add(amxper, fa_sz_mul(ldq, fa_sz_ld(dqk, &ovf), &ovf), &ovf);
        per = fa_sz_add(per, fa_sz_add(amxper, 8 * 16, &ovf), &ovf);
    }
    per = fa_sz_pad(per, &ovf);
    int64_t scrsz = fa_sz_mul(per, nt, &ovf);
    /* dQ partials [C][hq][qrows][lddq]: the rows of one head contiguous, so the dQ
       gemm's C block is a compact 2-D tile */
    int64_t lddq = fa_sz_ld(dqk, &ovf);
    int64_t ndqp = fa_sz_mul(fa_sz_mul(C, qrows, &ovf), fa_sz_mul(p->hq, lddq, &ovf), &ovf);
    /* per-thread Q-side cache of one (b, KV head): every Q block of every head in the
       group, packed once per task instead of once per KV tile */
    int64_t nqbmax = fa_sz_ceil_div(p->max_sq, bq);
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
        w.qblock = base; base += qblk;
        w.s = base; base += (int64_t)bkv * ldq;
        w.dp = base; base += (int64_t)bkv * ldq;
        w.pd = base; base += (int64_t)bkv * ldq;
        w.t = base; base += (int64_t)bkv * ldq;
        w.row = base; base += fa_cpu_pad(dmax);
        w.row2 = base; base += fa_cpu_pad(dmax);
        int64_t *ib = (int64_t *)base;
        w.hr = ib; w.ir = ib + ldq; w.idrop = ib + 2 * ldq; w.lo = ib + 3 * ldq; w.hi = ib + 4 * ldq;
        base += 10 * ldq;
        w.kb = w.vb = w.pb = w.dsb = w.t16 = NULL;
        w.kp = w.tp = NULL;
        w.dqt = NULL;
        if (X) {   /* 64-byte aligned pieces (each size rounded up to 16 floats) */
#define AMX_TAKE(ptr, type, nfl) do { ptr = (type *)base; base += ((nfl) + 15) / 16 * 16; } while (0)
            AMX_TAKE(w.kb, uint16_t, bkv * ldka / 2);
            AMX_TAKE(w.vb, uint16_t, bkv * ldva / 2);
            AMX_TAKE(w.kp, uint32_t, lkp * ldk);
            AMX_TAKE(w.tp, uint32_t, lkp * ldq);
            AMX_TAKE(w.pb, uint16_t, bkv * ldpa / 2);
            AMX_TAKE(w.dsb, uint16_t, ldq * ldsa / 2);
            AMX_TAKE(w.t16, uint16_t, ldq * ldt / 2);
            AMX_TAKE(w.dqt, float, ldq * lddq);
#undef AMX_TAKE
        }
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
                const float acc = fa_cpu_dot(w.row, w.row2, dv);
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
                qside q = qside_at(qsh + x * qblk, &g);
                memset(q.qt, 0, sizeof(float) * (size_t)qblk);
                if (i0 >= sq.sq) continue;
                int ni = (int)(sq.sq - i0 < bq ? sq.sq - i0 : bq);
                pack_q_block(p, K, X, &g, &q, &sq, b, h, i0, ni, D, w.t16, ldt);
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
                if (X) {   /* K, V rows bf16 (A of S^T, dP^T); K pairs over keys (B of dQ) */
                    X->to_rows(w.kb, ldka, w.kc, ldk, nk, (int)dqk);
                    X->to_rows(w.vb, ldva, w.vc, ldv, nk, (int)dv);
                    X->to_pairs(w.kp, ldk, w.kc, ldk, nk, (int)dqk);
                }
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
                        int64_t qb = i0 / bq;
                        unsigned char *flag = NULL;
                        float *blk = w.qblock;
                        if (qsh) {
                            blk = qsh + ((b * p->hq + h) * nqbmax + qb) * qblk;
                        } else if (qcache) {
                            blk = w.qcache + ((h - hk * p->group) * nqbmax + qb) * qblk;
                            flag = &w.qflag[(h - hk * p->group) * nqbmax + qb];
                        }
                        qside q = qside_at(blk, &g);
                        float *qt = q.qt, *qc = q.qc, *dot = q.dot, *doc = q.doc, *lsev = q.lse, *dd = q.d;
                        if (!qsh && (!flag || !*flag)) {
                            pack_q_block(p, K, X, &g, &q, &sq, b, h, i0, ni, D, w.t16, ldt);
                            if (flag) *flag = 1;
                        }
                        /* A partly masked pair whose data holds Inf/NaN (rare): K or V of the
                           tile, Q or dO of a row, or a row's lse (NaN) or D (NaN or infinite,
                           when its own inputs reached it or dO . O overflowed). Masked
                           products are then made 0 by a select, not by exp(-inf) or a
                           multiply by 0 (exp(-inf - NaN) and 0 * NaN are NaN), and dK, dV,
                           dQ sum only the visible pairs of the non-finite operand, so NaN
                           reaches exactly what the reference's visible-only loops reach
                           (NaN in inputs: docs/api.md). */
                        int qbad = 0, dobad = 0, lbad = 0;
                        if (!full) {
                            /* D infinite with finite inputs (an overflowing dO . O)
                               too: 0 * (dP - D) at a masked pair would be NaN */
                            for (int r = 0; r < ni; r++)
                                if (isnan(lsev[r]) || !isfinite(dd[r])) lbad = 1;
                            qbad = fa_cpu_nonfinite(qc, ni, dqk, ldk);
                            dobad = fa_cpu_nonfinite(doc, ni, dv, ldv);
                        }
                        const int sel = !full && (kvbad || qbad || dobad || lbad);
                        /* AMX tiles unless a select is needed (the fp32 path below does it) */
                        const int amx = X && !sel;
                        const int k32q = (ni + 31) / 32;
                        if (X && !amx) {
                            /* rare (see above): Q^T and dO^T into this thread's own block,
                               since the Q side may be the shared pack, which other chunks'
                               tasks read in this phase */
                            qside tq = qside_at(w.qblock, &g);
                            qt = tq.qt;
                            dot = tq.dot;
                            pack_q_transposed(K, &g, &q, ni, qt, dot);
                        }
                        /* a partly masked pair of finite data: the fp32 products only over
                           the pairs some row sees (scratch.h) */
                        const int seen = !full && !sel;
                        if (amx && seen)
                            fa_cpu_amx_rowA_seen(X, nk, ni, (int)g.kq32, w.kb, ldka, q.qtp, ldq,
                                                 w.s, ldq, j0, w.lo, w.hi);
                        else if (amx)
                            X->gemm(nk, ni, (int)g.kq32, w.kb, ldka, q.qtp, ldq, w.s, ldq, 0);
                        else if (seen)
                            fa_cpu_rowA_seen(K, 0, nk, ni, (int)dqk, w.kc, ldk, qt, ldq, w.s, ldq,
                                             j0, w.lo, w.hi);
                        else
                            K->gemm_rowA(nk, ni, (int)dqk, w.kc, ldk, qt, ldq, w.s, ldq, 0);
                        if (slow)
                            fa_cpu_score_pass(p, &sq, b, w.s, nk, ni, ldq, j0, w.hr, w.ir,
                                              p->softcap > 0.0f ? w.t : NULL);
                        if (!full) fa_cpu_mask_pass(w.s, nk, ni, ldq, j0, w.lo, w.hi);
                        K->exp_sub(w.s, nk, ni, ldq, slow ? 1.0f : p->scale, lsev);
                        if (sel) zero_masked(w.s, nk, ni, ldq, j0, w.lo, w.hi);
                        if (amx && seen)
                            fa_cpu_amx_rowA_seen(X, nk, ni, (int)g.kv32, w.vb, ldva, q.dotp, ldq,
                                                 w.dp, ldq, j0, w.lo, w.hi);
                        else if (amx)
                            X->gemm(nk, ni, (int)g.kv32, w.vb, ldva, q.dotp, ldq, w.dp, ldq, 0);
                        else if (seen)
                            fa_cpu_rowA_seen(K, 0, nk, ni, (int)dv, w.vc, ldv, dot, ldq, w.dp, ldq,
                                             j0, w.lo, w.hi);
                        else
                            K->gemm_rowA(nk, ni, (int)dv, w.vc, ldv, dot, ldq, w.dp, ldq, 0);
                        const float *pv = w.s;
                        if (drop) {
                            for (int j = 0; j < nk; j++)
                                memcpy(w.pd + j * ldq, w.s + j * ldq, sizeof(float) * (size_t)ni);
                            fa_cpu_dropout_pass(p, b, nk, ni, ldq, j0, w.hr, w.idrop, p->drop.keep_scale,
                                                w.pd, w.dp);
                            pv = w.pd;
                        }
                        if (amx) {
                            X->to_rows(w.pb, ldpa, pv, ldq, nk, ni);
                            if (seen)
                                fa_cpu_amx_acc_seen(X, 1, nk, (int)dv, ni, w.pb, ldpa, q.dop, ldv,
                                                    w.dv, ldv, j0, w.lo, w.hi);
                            else
                                X->gemm(nk, (int)dv, k32q, w.pb, ldpa, q.dop, ldv, w.dv, ldv, 1);
                        } else if (sel && dobad)
                            visible_rowA(pv, ldq, doc, ldv, w.dv, ldv, nk, ni, (int)dv, j0, w.lo, w.hi);
                        else if (seen)
                            fa_cpu_rowA_keys_seen(K, nk, (int)dv, ni, pv, ldq, doc, ldv, w.dv, ldv,
                                                  j0, w.lo, w.hi);
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
                        if (amx) {
                            X->to_rows(w.pb, ldpa, w.dp, ldq, nk, ni);
                            if (seen)
                                fa_cpu_amx_acc_seen(X, 1, nk, (int)dqk, ni, w.pb, ldpa, q.qp, ldk,
                                                    w.dk, ldk, j0, w.lo, w.hi);
                            else
                                X->gemm(nk, (int)dqk, k32q, w.pb, ldpa, q.qp, ldk, w.dk, ldk, 1);
                        } else if (sel && qbad)
                            visible_rowA(w.dp, ldq, qc, ldk, w.dk, ldk, nk, ni, (int)dqk, j0, w.lo, w.hi);
                        else if (seen)
                            fa_cpu_rowA_keys_seen(K, nk, (int)dqk, ni, w.dp, ldq, qc, ldk, w.dk, ldk,
                                                  j0, w.lo, w.hi);
                        else
                            K->gemm_rowA(nk, (int)dqk, ni, w.dp, ldq, qc, ldk, w.dk, ldk, 1);
                        float *dqb = dqc + (h * qrows + qbase + i0) * lddq;
                        if (amx) {
                            /* dS rows bf16 = word transpose of the dS^T pairs over keys; the
                               tile gemm writes whole 16-row tiles, so a block whose rows are
                               not a multiple of 16 goes through a tile of its own */
                            int kp32 = (nk + 31) / 32, rq = (ni + 15) / 16 * 16;
                            X->to_pairs(w.tp, ldq, w.dp, ldq, nk, ni);
                            X->tr32((uint32_t *)w.dsb, ldsa / 2, w.tp, ldq, 16 * kp32, rq);
                            float *dqo = rq == ni ? dqb : w.dqt;
                            if (rq != ni)
                                for (int r = 0; r < ni; r++)
                                    memcpy(w.dqt + r * lddq, dqb + r * lddq, sizeof(float) * (size_t)dqk);
                            if (seen)
                                fa_cpu_amx_acc_seen(X, 0, ni, (int)dqk, nk, w.dsb, ldsa, w.kp, ldk,
                                                    dqo, lddq, j0, w.lo, w.hi);
                            else
                                X->gemm(ni, (int)dqk, kp32, w.dsb, ldsa, w.kp, ldk, dqo, lddq, 1);
                            if (rq != ni) {
                                for (int r = 0; r < ni; r++)
                                    memcpy(dqb + r * lddq, w.dqt + r * lddq, sizeof(float) * (size_t)dqk);
                            }
                        } else if (sel && kbad) {
                            for (int r = 0; r < ni; r++)
                                for (int j = 0; j < nk; j++) {
                                    if (j0 + j < w.lo[r] || j0 + j >= w.hi[r]) continue;
                                    float gr = w.dp[j * ldq + r];
                                    for (int64_t x = 0; x < dqk; x++)
                                        dqb[r * lddq + x] += gr * w.kc[j * ldk + x];
                                }
                        } else if (seen) {
                            fa_cpu_colA_rows_seen(K, 0, ni, (int)dqk, nk, w.dp, ldq, w.kc, ldk, dqb,
                                                  lddq, j0, w.lo, w.hi, NULL);
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
                if (C > 1) {   /* ((p0 + p1) + p2) + ...: the same order for any C */
                    for (int c = 1; c < C; c++)
                        fa_cpu_add_f32(w.row, c == 1 ? src : w.row,
                                       src + (int64_t)c * qrows * p->hq * lddq, dqk);
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
