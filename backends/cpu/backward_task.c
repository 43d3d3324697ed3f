/* backward_task.c - one task of the backward: the KV tiles of one chunk of a (batch, KV
 * head), in named phases (the arithmetic of each is its kernel set's):
 *
 *   for each KV tile of the chunk:
 *     load_kv        K, V -> fp32 rows (AMX: bf16 rows and K pairs too); dK = dV = 0
 *     for each query head of the group, each Q block that sees the tile (a pair):
 *       pair_rows    each row's visible keys; the Q side (shared, cached or packed)
 *       pair_select  Inf/NaN in a partly masked pair: masked terms made 0 by a select
 *       recompute_p  S^T = K Q^T, score pipeline, mask, P^T = exp(S^T - lse)
 *       dp_product   dP^T = V dO^T
 *       dropout      P_drop^T = P^T * keep * ks, dP^T * keep * ks
 *       dv_product   dV += P_drop^T dO
 *       ds           dS^T = P^T (dP^T - D) (times the softcap slope)
 *       dk_product   dK += dS^T Q
 *       dq_product   dQ partial of the chunk += dS K
 *     store_dkdv     dK * scale, dV in the outputs' dtype
 *
 * Each KV tile belongs to exactly one task and the chunks are fixed by the shapes, so
 * every sum runs in the same order for any thread count.
 */
#include "config.h"
#include <math.h>
#include <string.h>
#include "backward_task.h"
#include "masked.h"
#include "scores.h"
#include "scratch.h"
#include "vecops.h"

/* One (KV tile, Q block) pair: keys j0 .. j0 + nk - 1 against ni rows from i0 of head
   h. full: every row sees every key; sel: a partly masked pair with Inf/NaN (the select
   path, fp32 kernels); seen: a partly masked pair of finite data (products over the pairs
   some row sees); amx: the AMX tiles run it. qt/dot: the Q^T and dO^T the fp32 products
   read (the Q side's, or the thread's own on the select path of an AMX call). */
typedef struct {
    const fa_seq *sq;
    int64_t b, h, i0, j0;
    int nk, ni, full, sel, seen, amx;
    int kbad, qbad, dobad;
    qside q;
    float *qt, *dot;
    float *dqb;   /* the rows' dQ partial [ni][lddq] */
} bwd_pair;

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

/* K, V rows of the tile as fp32 (AMX: also bf16 rows, the A of S^T and dP^T, and K pairs
   over keys, the B of dQ). *kbad: K holds Inf/NaN; returns 1 when K or V does (in a
   partly masked pair a masked dS = 0 must not multiply them: 0 * NaN = NaN would reach
   rows that cannot see the key). */
static int load_kv(const bwd_geom *g, const fa_seq *sq, int64_t b, int64_t hk, int64_t j0,
                   int nk, bwd_scratch *w, int *kbad)
{
    const fa_problem *p = g->p;
    const fa_cpu_kernels *K = g->K;
    const int64_t dqk = g->dqk, dv = g->dv, ldk = g->ldk, ldv = g->ldv;
    for (int j = 0; j < nk; j++) {
        K->cvt_in(w->kc + j * ldk, (const char *)p->k.data +
                  fa_krow(p, &p->k, sq, b, j0 + j, hk) * (int64_t)fa_dtype_size(p->k.dtype),
                  dqk, p->k.dtype);
        K->cvt_in(w->vc + j * ldv, (const char *)p->v.data +
                  fa_krow(p, &p->v, sq, b, j0 + j, hk) * (int64_t)fa_dtype_size(p->v.dtype),
                  dv, p->v.dtype);
    }
    *kbad = fa_cpu_nonfinite(w->kc, nk, dqk, ldk);
    int kvbad = *kbad || fa_cpu_nonfinite(w->vc, nk, dv, ldv);
    if (g->X) {
        g->X->to_rows(w->kb, g->ldka, w->kc, ldk, nk, (int)dqk);
        g->X->to_rows(w->vb, g->ldva, w->vc, ldv, nk, (int)dv);
        g->X->to_pairs(w->kp, ldk, w->kc, ldk, nk, (int)dqk);
    }
    return kvbad;
}

/* Rows of the pair's Q block: head, query, dropout row and visible keys into w; sets
   pr->full. 0 when no row sees a key of the tile. */
static int pair_rows(const bwd_geom *g, bwd_pair *pr, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const fa_seq *sq = pr->sq;
    const int64_t j0 = pr->j0, i0 = pr->i0;
    const int nk = pr->nk, ni = pr->ni;
    int64_t lo0, hi0, lo1, hi1;
    fa_visible_range(p, sq, i0, &lo0, &hi0);
    fa_visible_range(p, sq, i0 + ni - 1, &lo1, &hi1);
    if (lo0 >= j0 + nk || hi1 <= j0) return 0;  /* no row sees the tile */
    int any = 0;
    pr->full = 1;
    for (int r = 0; r < ni; r++) {
        int64_t i = i0 + r;
        w->hr[r] = pr->h; w->ir[r] = i; w->idrop[r] = sq->drop_i0 + i;
        fa_visible_range(p, sq, i, &w->lo[r], &w->hi[r]);
        if (w->lo[r] < j0 + nk && w->hi[r] > j0 && w->lo[r] < w->hi[r]) any = 1;
        if (w->lo[r] > j0 || w->hi[r] < j0 + nk) pr->full = 0;
    }
    return any;
}

/* The pair's Q side: Q^T, Q, dO^T, dO, lse, D. From the shared pack when the call made
   one, else from the thread's cache of the whole (batch, KV head) when it fits (packed on
   first use), else packed here into the thread's own block. */
static void pair_qside(const bwd_geom *g, bwd_pair *pr, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    int64_t hk = pr->h / p->group, qb = pr->i0 / g->bq;
    unsigned char *flag = NULL;
    float *blk = w->qblock;
    if (g->qsh) {
        blk = (float *)g->qsh + ((pr->b * p->hq + pr->h) * g->nqbmax + qb) * g->qblk;
    } else if (w->qcache) {
        blk = w->qcache + ((pr->h - hk * p->group) * g->nqbmax + qb) * g->qblk;
        flag = &w->qflag[(pr->h - hk * p->group) * g->nqbmax + qb];
    }
    pr->q = fa_cpu_qside_at(blk, &g->qg);
    if (!g->qsh && (!flag || !*flag)) {
        /* a cache block is zeroed here, not with the thread's scratch: the pack then
           writes lines the zeroing just brought into L2 instead of the whole cache being
           zeroed out to memory first (as the shared pack, pack_shared) */
        if (flag) memset(blk, 0, sizeof(float) * (size_t)g->qblk);
        fa_cpu_pack_q_block(p, g->K, g->X, &g->qg, &pr->q, pr->sq, pr->b, pr->h, pr->i0, pr->ni,
                            g->D, w->t16, g->ldt);
        if (flag) *flag = 1;
    }
    pr->qt = pr->q.qt;
    pr->dot = pr->q.dot;
}

/* A partly masked pair whose data holds Inf/NaN (rare): K or V of the tile, Q or dO of a
   row, or a row's lse (NaN) or D (NaN or infinite, when its own inputs reached it or
   dO . O overflowed). Masked products are then made 0 by a select, not by exp(-inf) or a
   multiply by 0 (exp(-inf - NaN) and 0 * NaN are NaN), and dK, dV, dQ sum only the
   visible pairs of the non-finite operand, so NaN reaches exactly what the reference's
   visible-only loops reach (NaN in inputs: docs/api.md). Sets sel, amx, seen, and on the
   select path of an AMX call makes the fp32 Q^T and dO^T in the thread's own block (the
   Q side may be the shared pack, which other chunks' tasks read in this phase). */
static void pair_select(const bwd_geom *g, bwd_pair *pr, int kvbad, bwd_scratch *w)
{
    const int ni = pr->ni;
    int lbad = 0;
    pr->qbad = pr->dobad = 0;
    if (!pr->full) {
        /* D infinite with finite inputs (an overflowing dO . O) too: 0 * (dP - D) at a
           masked pair would be NaN */
        for (int r = 0; r < ni; r++)
            if (isnan(pr->q.lse[r]) || !isfinite(pr->q.d[r])) lbad = 1;
        pr->qbad = fa_cpu_nonfinite(pr->q.qc, ni, g->dqk, g->ldk);
        pr->dobad = fa_cpu_nonfinite(pr->q.doc, ni, g->dv, g->ldv);
    }
    pr->sel = !pr->full && (kvbad || pr->qbad || pr->dobad || lbad);
    pr->amx = g->X && !pr->sel;   /* AMX tiles unless a select is needed */
    if (g->X && !pr->amx) {
        qside tq = fa_cpu_qside_at(w->qblock, &g->qg);
        pr->qt = tq.qt;
        pr->dot = tq.dot;
        fa_cpu_pack_q_transposed(g->K, &g->qg, &pr->q, ni, pr->qt, pr->dot);
    }
    pr->seen = !pr->full && !pr->sel;
}

/* P^T into w->s: S^T = K Q^T, the score pipeline (w->t: the softcap's tanh), the mask,
   P^T = exp(S^T - lse), masked pairs 0 on the select path. */
static void recompute_p(const bwd_geom *g, const bwd_pair *pr, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const fa_cpu_kernels *K = g->K;
    const int64_t ldq = g->ldq, j0 = pr->j0;
    const int nk = pr->nk, ni = pr->ni;
    if (pr->amx && pr->seen)
        fa_cpu_amx_rowA_seen(g->X, nk, ni, (int)g->qg.kq32, w->kb, g->ldka, pr->q.qtp, ldq,
                             w->s, ldq, j0, w->lo, w->hi);
    else if (pr->amx)
        g->X->gemm(nk, ni, (int)g->qg.kq32, w->kb, g->ldka, pr->q.qtp, ldq, w->s, ldq, 0);
    else if (pr->seen)
        fa_cpu_rowA_seen(K, 0, nk, ni, (int)g->dqk, w->kc, g->ldk, pr->qt, ldq, w->s, ldq,
                         j0, w->lo, w->hi);
    else
        K->gemm_rowA(nk, ni, (int)g->dqk, w->kc, g->ldk, pr->qt, ldq, w->s, ldq, 0);
    if (g->slow)
        fa_cpu_score_pass(p, pr->sq, pr->b, w->s, nk, ni, ldq, j0, w->hr, w->ir,
                          p->softcap > 0.0f ? w->t : NULL);
    if (!pr->full) fa_cpu_mask_pass(w->s, nk, ni, ldq, j0, w->lo, w->hi);
    K->exp_sub(w->s, nk, ni, ldq, g->slow ? 1.0f : p->scale, pr->q.lse);
    if (pr->sel) zero_masked(w->s, nk, ni, ldq, j0, w->lo, w->hi);
}

/* dP^T = V dO^T into w->dp. */
static void dp_product(const bwd_geom *g, const bwd_pair *pr, bwd_scratch *w)
{
    const int64_t ldq = g->ldq, j0 = pr->j0;
    const int nk = pr->nk, ni = pr->ni;
    if (pr->amx && pr->seen)
        fa_cpu_amx_rowA_seen(g->X, nk, ni, (int)g->qg.kv32, w->vb, g->ldva, pr->q.dotp, ldq,
                             w->dp, ldq, j0, w->lo, w->hi);
    else if (pr->amx)
        g->X->gemm(nk, ni, (int)g->qg.kv32, w->vb, g->ldva, pr->q.dotp, ldq, w->dp, ldq, 0);
    else if (pr->seen)
        fa_cpu_rowA_seen(g->K, 0, nk, ni, (int)g->dv, w->vc, g->ldv, pr->dot, ldq, w->dp, ldq,
                         j0, w->lo, w->hi);
    else
        g->K->gemm_rowA(nk, ni, (int)g->dv, w->vc, g->ldv, pr->dot, ldq, w->dp, ldq, 0);
}

/* With dropout, P_drop^T = P^T * keep * ks into w->pd and dP^T *= keep * ks; returns the
   P^T that multiplies dO (w->pd, or w->s without dropout). */
static const float *dropout(const bwd_geom *g, const bwd_pair *pr, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    if (!g->drop) return w->s;
    for (int j = 0; j < pr->nk; j++)
        memcpy(w->pd + j * g->ldq, w->s + j * g->ldq, sizeof(float) * (size_t)pr->ni);
    fa_cpu_dropout_pass(p, pr->b, pr->nk, pr->ni, g->ldq, pr->j0, w->hr, w->idrop,
                        p->drop.keep_scale, w->pd, w->dp);
    return w->pd;
}

/* dV += P_drop^T dO. */
static void dv_product(const bwd_geom *g, const bwd_pair *pr, const float *pv, bwd_scratch *w)
{
    const int64_t ldq = g->ldq, ldv = g->ldv, j0 = pr->j0;
    const int nk = pr->nk, ni = pr->ni;
    if (pr->amx) {
        g->X->to_rows(w->pb, g->ldpa, pv, ldq, nk, ni);
        if (pr->seen)
            fa_cpu_amx_acc_seen(g->X, 1, nk, (int)g->dv, ni, w->pb, g->ldpa, pr->q.dop, ldv,
                                w->dv, ldv, j0, w->lo, w->hi);
        else
            g->X->gemm(nk, (int)g->dv, (ni + 31) / 32, w->pb, g->ldpa, pr->q.dop, ldv, w->dv,
                       ldv, 1);
    } else if (pr->sel && pr->dobad)
        visible_rowA(pv, ldq, pr->q.doc, ldv, w->dv, ldv, nk, ni, (int)g->dv, j0, w->lo, w->hi);
    else if (pr->seen)
        fa_cpu_rowA_keys_seen(g->K, nk, (int)g->dv, ni, pv, ldq, pr->q.doc, ldv, w->dv, ldv,
                              j0, w->lo, w->hi);
    else
        g->K->gemm_rowA(nk, (int)g->dv, ni, pv, ldq, pr->q.doc, ldv, w->dv, ldv, 1);
}

/* dS^T = P^T (dP^T - D) in w->dp, times the softcap slope 1 - tanh^2; masked pairs 0 on
   the select path. */
static void ds(const bwd_geom *g, const bwd_pair *pr, bwd_scratch *w)
{
    const int64_t ldq = g->ldq;
    const int nk = pr->nk, ni = pr->ni;
    g->K->ds(w->dp, w->s, nk, ni, ldq, pr->q.d);
    if (g->p->softcap > 0.0f)
        for (int j = 0; j < nk; j++)
            for (int r = 0; r < ni; r++) {
                float th = w->t[j * ldq + r];
                w->dp[j * ldq + r] *= 1.0f - th * th;
            }
    if (pr->sel) zero_masked(w->dp, nk, ni, ldq, pr->j0, w->lo, w->hi);
}

/* dK += dS^T Q. */
static void dk_product(const bwd_geom *g, const bwd_pair *pr, bwd_scratch *w)
{
    const int64_t ldq = g->ldq, ldk = g->ldk, j0 = pr->j0;
    const int nk = pr->nk, ni = pr->ni;
    if (pr->amx) {
        g->X->to_rows(w->pb, g->ldpa, w->dp, ldq, nk, ni);
        if (pr->seen)
            fa_cpu_amx_acc_seen(g->X, 1, nk, (int)g->dqk, ni, w->pb, g->ldpa, pr->q.qp, ldk,
                                w->dk, ldk, j0, w->lo, w->hi);
        else
            g->X->gemm(nk, (int)g->dqk, (ni + 31) / 32, w->pb, g->ldpa, pr->q.qp, ldk, w->dk,
                       ldk, 1);
    } else if (pr->sel && pr->qbad)
        visible_rowA(w->dp, ldq, pr->q.qc, ldk, w->dk, ldk, nk, ni, (int)g->dqk, j0, w->lo, w->hi);
    else if (pr->seen)
        fa_cpu_rowA_keys_seen(g->K, nk, (int)g->dqk, ni, w->dp, ldq, pr->q.qc, ldk, w->dk, ldk,
                              j0, w->lo, w->hi);
    else
        g->K->gemm_rowA(nk, (int)g->dqk, ni, w->dp, ldq, pr->q.qc, ldk, w->dk, ldk, 1);
}

/* AMX: dQ partial += dS K. dS rows bf16 = word transpose of the dS^T pairs over keys;
   the tile gemm writes whole 16-row tiles, so a block whose rows are not a multiple of
   16 goes through a tile of its own. */
static void dq_amx(const bwd_geom *g, const bwd_pair *pr, bwd_scratch *w)
{
    const fa_cpu_amx_kernels *X = g->X;
    const int64_t ldq = g->ldq, lddq = g->lddq, dqk = g->dqk;
    const int nk = pr->nk, ni = pr->ni;
    float *dqb = pr->dqb;
    int kp32 = (nk + 31) / 32, rq = (ni + 15) / 16 * 16;
    X->to_pairs(w->tp, ldq, w->dp, ldq, nk, ni);
    X->tr32((uint32_t *)w->dsb, g->ldsa / 2, w->tp, ldq, 16 * kp32, rq);
    float *dqo = rq == ni ? dqb : w->dqt;
    if (rq != ni)
        for (int r = 0; r < ni; r++)
            memcpy(w->dqt + r * lddq, dqb + r * lddq, sizeof(float) * (size_t)dqk);
    if (pr->seen)
        fa_cpu_amx_acc_seen(X, 0, ni, (int)dqk, nk, w->dsb, g->ldsa, w->kp, g->ldk, dqo, lddq,
                            pr->j0, w->lo, w->hi);
    else
        X->gemm(ni, (int)dqk, kp32, w->dsb, g->ldsa, w->kp, g->ldk, dqo, lddq, 1);
    if (rq != ni) {
        for (int r = 0; r < ni; r++)
            memcpy(dqb + r * lddq, w->dqt + r * lddq, sizeof(float) * (size_t)dqk);
    }
}

/* dQ partial of the chunk += dS K (visible pairs only when K holds Inf/NaN). */
static void dq_product(const bwd_geom *g, const bwd_pair *pr, bwd_scratch *w)
{
    const int64_t ldq = g->ldq, ldk = g->ldk, lddq = g->lddq, j0 = pr->j0;
    const int nk = pr->nk, ni = pr->ni;
    float *dqb = pr->dqb;
    if (pr->amx) {
        dq_amx(g, pr, w);
    } else if (pr->sel && pr->kbad) {
        for (int r = 0; r < ni; r++)
            for (int j = 0; j < nk; j++) {
                if (j0 + j < w->lo[r] || j0 + j >= w->hi[r]) continue;
                float gr = w->dp[j * ldq + r];
                for (int64_t x = 0; x < g->dqk; x++)
                    dqb[r * lddq + x] += gr * w->kc[j * ldk + x];
            }
    } else if (pr->seen) {
        fa_cpu_colA_rows_seen(g->K, 0, ni, (int)g->dqk, nk, w->dp, ldq, w->kc, ldk, dqb, lddq,
                              j0, w->lo, w->hi, NULL);
    } else {
        g->K->gemm_colA(ni, (int)g->dqk, nk, w->dp, ldq, w->kc, ldk, dqb, lddq, 1);
    }
}

/* dK * scale and dV of the tile's keys, in the outputs' dtype. */
static void store_dkdv(const bwd_geom *g, const fa_seq *sq, int64_t b, int64_t hk, int64_t j0,
                       int nk, const bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const fa_cpu_kernels *K = g->K;
    for (int j = 0; j < nk; j++) {
        K->cvt_out((char *)p->grad_k.data + fa_krow(p, &p->grad_k, sq, b, j0 + j, hk) *
                   (int64_t)fa_dtype_size(p->grad_k.dtype), p->grad_k.dtype, w->dk + j * g->ldk,
                   g->dqk, p->scale);
        K->cvt_out((char *)p->grad_v.data + fa_krow(p, &p->grad_v, sq, b, j0 + j, hk) *
                   (int64_t)fa_dtype_size(p->grad_v.dtype), p->grad_v.dtype, w->dv + j * g->ldv,
                   g->dv, 1.0f);
    }
}

/* KV tile kb of (batch b, KV head hk) against every Q block of the group's heads that sees
   it; dQ into the chunk's partial dqc, dK and dV written. */
static void bwd_tile(const bwd_geom *g, const fa_seq *sq, int64_t b, int64_t hk, int64_t kb,
                     float *dqc, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const int bkv = g->bkv, bq = g->bq;
    const int64_t qbase = sq->tb * p->q.shape[1] + sq->q0;
    bwd_pair pr;
    pr.sq = sq;
    pr.b = b;
    pr.j0 = kb * bkv;
    pr.nk = (int)(sq->sk - pr.j0 < bkv ? sq->sk - pr.j0 : bkv);
    int kvbad = load_kv(g, sq, b, hk, pr.j0, pr.nk, w, &pr.kbad);
    memset(w->dk, 0, sizeof(float) * (size_t)(pr.nk * g->ldk));
    memset(w->dv, 0, sizeof(float) * (size_t)(pr.nk * g->ldv));
    for (pr.h = hk * p->group; pr.h < (hk + 1) * p->group; pr.h++) {
        for (pr.i0 = 0; pr.i0 < sq->sq; pr.i0 += bq) {
            pr.ni = (int)(sq->sq - pr.i0 < bq ? sq->sq - pr.i0 : bq);
            if (!pair_rows(g, &pr, w)) continue;
            pair_qside(g, &pr, w);
            pair_select(g, &pr, kvbad, w);
            pr.dqb = dqc + (pr.h * g->qrows + qbase + pr.i0) * g->lddq;
            recompute_p(g, &pr, w);
            dp_product(g, &pr, w);
            const float *pv = dropout(g, &pr, w);
            dv_product(g, &pr, pv, w);
            ds(g, &pr, w);
            dk_product(g, &pr, w);
            dq_product(g, &pr, w);
        }
    }
    store_dkdv(g, sq, b, hk, pr.j0, pr.nk, w);
}

void fa_cpu_bwd_task(const bwd_geom *g, int64_t t, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const int C = g->C, T = g->T;
    const int64_t nbh = p->batch * p->hkv;
    int u = (int)(t / nbh);
    int64_t b = t % nbh / p->hkv, hk = t % p->hkv;
    fa_seq sq = fa_problem_seq(p, b);
    int64_t nkb = (sq.sk + g->bkv - 1) / g->bkv;
    if (w->qcache) memset(w->qflag, 0, (size_t)(g->nqbmax * p->group));
    /* chunks C u / T .. C (u + 1) / T, each into its own dQ partial */
    for (int c = C * u / T; c < C * (u + 1) / T; c++) {
        float *dqc = g->dqp + (int64_t)c * g->qrows * p->hq * g->lddq;
        for (int64_t kb = nkb * c / C; kb < nkb * (c + 1) / C; kb++)
            bwd_tile(g, &sq, b, hk, kb, dqc, w);
    }
}
