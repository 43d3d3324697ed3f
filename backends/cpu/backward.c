/* backward.c - the backward loop nest (recomputation), written once for every kernel set:
 * the scratch, the parallel phases, D, the dQ reduction and dsinks; one phase-2 task is
 * backward_task.c, the Q side it reads backward_qside.c.
 *
 * Forward lines differentiated (per query i, key j; s = scale q.k, softcap, + bias, mask):
 *   P = exp(S - lse)            ->  dS = P * (dP - D),  D = rowsum(dO * O)
 *   O = (P * keep * ks) V       ->  dV += (P*keep*ks)^T dO ;  dP = (dO V^T) * keep * ks
 *   S = cap tanh(s / cap)       ->  dS_pre = dS * (1 - tanh^2)
 *   s = scale q.k               ->  dQ = scale dS K ;  dK = scale dS^T Q
 *   lse includes exp(sink)      ->  dsinks[h] = -sum_i exp(sink - lse_i) D_i
 *
 *   phase 1  parallel over (b, h): D per row, dsink partial per (b, h)
 *   phase 1b zero the dQ partials; when each head is split in T >= 4 tasks, pack the Q
 *            side of every (b, h, Q block) once into a shared buffer (else each task
 *            packs its head per thread)
 *   phase 2  parallel over tasks (span u of T, b, KV head)   [dynamic, fa_cpu_bwd_task;
 *            span-major: the causal-heavy first spans start first]
 *              for each chunk c of the span, each KV tile of the chunk (K, V -> fp32
 *              rows, dK, dV accumulators):
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
 *   with C * Sq * H * dqk * 4 bytes of scratch (O(S) per head). The thread count only
 *   groups whole chunks into tasks (T per head, bwd_spans): fewer threads, fewer and
 *   longer tasks, each packing its head's Q side once.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backward.h"
#include "backward_qside.h"
#include "backward_task.h"
#include "scores.h"
#include "scratch.h"
#include "state.h"
#include "threads.h"
#include "tiles.h"
#include "vecops.h"

#define CHUNK_TARGET 32    /* 128 measured 5-20% slower at 1 thread (B*H=16, S=1k) */
#define Q_SHARED_MIN_C 4   /* shared Q-side pack when each head is split in >= this many tasks */
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


/* Tasks per (batch, KV head): enough for two per thread, at most C. A task spans whole
   chunks (each keeps its own dQ partial, summed in the same order), so T changes only who
   computes what: the numbers stay the same for any thread count. One task per head packs
   the head's Q side once instead of once per chunk (1 thread, H16 S1k: C = 2 -> T = 1). */
static int bwd_spans(const fa_problem *p, int C, int nt)
{
    int64_t bh = p->batch * p->hkv;
    if (bh < 1) bh = 1;
    int64_t t = (2 * (int64_t)nt + bh - 1) / bh;
    if (t > C) t = C;
    return t < 1 ? 1 : (int)t;
}

/* Leading dimension (bf16 elements) of an AMX A operand with k = n: whole 32-element
   steps, an odd number of 64-byte lines (as fa_cpu_ld, for the tile loads' L1 sets). */
static int64_t amx_ld(int64_t n)
{
    int64_t r = (n + 31) / 32 * 32;
    return (r / 32) % 2 == 0 ? r + 32 : r;
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

/* The call's sizes (floats) and buffers: per-thread scratch slices of `per`, the dQ
   partials, D and the dsink partials, and one of the two Q-side stores (the shared pack
   or the per-thread caches) when it fits. */
typedef struct {
    int64_t per, scrsz, ndqp, nlse, nbh, ntask, lkp, dmax;
    int64_t qcper, nqsh, nqshf;
    int qovf, sovf;   /* the Q-side cache / shared pack does not fit int64 */
    float *scr, *dqp, *D, *dsp, *qsh, *qcache;
    unsigned char *qflags;
} bwd_buffers;

/* The call's constants (no buffers yet): tiles, chunks, leading dims, the Q side's shape
   and the AMX operands' leading dims. *ovf set when a size does not fit int64. */
static void bwd_geom_of(const fa_context *ctx, const fa_problem *p, bwd_geom *g, int *ovf)
{
    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    int bq, bkv;
    fa_cpu_tiles(ctx, 1, p->dqk, p->dv, &bq, &bkv, NULL, 0);
    const int64_t dqk = p->dqk, dv = p->dv;
    int64_t ldq = fa_cpu_ld(bq), ldk = fa_sz_ld(dqk, ovf), ldv = fa_sz_ld(dv, ovf);
    g->p = p;
    g->K = st->k;
    g->bq = bq; g->bkv = bkv; g->C = bwd_chunks(p, bkv);
    g->slow = fa_cpu_slow_scores(p);
    g->drop = p->dropout_p > 0.0f;
    g->dqk = dqk; g->dv = dv; g->ldq = ldq; g->ldk = ldk; g->ldv = ldv;
    g->qrows = fa_sz_mul(p->q.shape[0], p->q.shape[1], ovf);   /* dense B*Sq, varlen total */
    /* dQ partials [C][hq][qrows][lddq]: the rows of one head contiguous, so the dQ
       gemm's C block is a compact 2-D tile */
    g->lddq = fa_sz_ld(dqk, ovf);
    g->nqbmax = fa_sz_ceil_div(p->max_sq, bq);
    /* AMX products for bf16 q, k, v and dout (kernels_amx.c): P and dS rounded to bf16
       as the same-precision reference rounds them, fp32 accumulation */
    const fa_cpu_amx_kernels *X = fa_cpu_amx_for(st, p, 1);
    g->X = X;
    qgeom *qg = &g->qg;
    qg->dqk = dqk; qg->dv = dv; qg->ldq = ldq; qg->ldk = ldk; qg->ldv = ldv; qg->amx = X != NULL;
    qg->kq32 = fa_sz_add(dqk, 31, ovf) / 32; qg->kv32 = fa_sz_add(dv, 31, ovf) / 32;
    qg->lqp = (ldq + 31) / 32 * 16;
    g->qblk = fa_sz_pad(fa_cpu_qside_size(qg, ovf), ovf);
    g->ldka = X ? amx_ld(32 * qg->kq32) : 0;
    g->ldva = X ? amx_ld(32 * qg->kv32) : 0;
    g->ldpa = X ? amx_ld(ldq) : 0;
    g->ldsa = X ? amx_ld(bkv) : 0;
    g->ldt = g->ldka > g->ldva ? g->ldka : g->ldva;
}

/* The buffers' sizes, overflow-checked (scratch.h). With query rows present, dq, dk and
   dv are outputs that exist in memory, which bounds every dimension; the checks make that
   an explicit NO_MEMORY instead of a wrapped size. *ovf set when a required size does not
   fit int64 (the optional Q-side stores have their own flags). */
static void bwd_sizes(const bwd_geom *g, int nt, bwd_buffers *bf, int *ovf)
{
    const fa_problem *p = g->p;
    const int64_t bkv = g->bkv, ldq = g->ldq, ldk = g->ldk, ldv = g->ldv, qblk = g->qblk;
    int64_t dmaxp = ldk > ldv ? ldk : ldv;
    bf->dmax = g->dqk > g->dv ? g->dqk : g->dv;
    bf->nbh = fa_sz_mul(p->batch, p->hq, ovf);
    bf->nlse = p->layout == FA_LAYOUT_VARLEN ? fa_sz_mul(p->hq, p->q.shape[1], ovf)
                                             : fa_sz_mul(bf->nbh, p->q.shape[1], ovf);
    bf->ntask = fa_sz_mul(fa_sz_mul(p->batch, p->hkv, ovf), g->T, ovf);
    bf->lkp = (bkv + 31) / 32 * 16;
    /* kc, vc, dk, dv [bkv x ld]; a Q-side block; s, dp, pd, t [bkv x ldq]; row, row2;
       5 int64 arrays [ldq]; AMX buffers (bwd_scratch), in floats */
    int64_t per = fa_sz_mul(2 * bkv, fa_sz_add(ldk, ldv, ovf), ovf);
    per = fa_sz_add(per, qblk, ovf);
    per = fa_sz_add(per, fa_sz_mul(2, dmaxp, ovf), ovf);
    per = fa_sz_add(per, 4 * bkv * ldq + 5 * ldq * 2, ovf);
    if (g->X) {   /* the eight pieces bwd_scratch takes, each rounded up to 16 floats */
        int64_t amxper = fa_sz_mul(bkv, fa_sz_add(g->ldka, g->ldva, ovf), ovf) / 2;
        amxper = fa_sz_add(amxper, fa_sz_mul(bf->lkp, fa_sz_add(ldk, ldq, ovf), ovf), ovf);
        amxper = fa_sz_add(amxper, fa_sz_mul(bkv, g->ldpa, ovf) / 2, ovf);
        amxper = fa_sz_add(amxper, fa_sz_mul(ldq, fa_sz_add(g->ldsa, g->ldt, ovf), ovf) / 2, ovf);
        amxper = fa_sz_add(amxper, fa_sz_mul(ldq, fa_sz_ld(g->dqk, ovf), ovf), ovf);
        per = fa_sz_add(per, fa_sz_add(amxper, 8 * 16, ovf), ovf);
    }
    bf->per = fa_sz_pad(per, ovf);
    bf->scrsz = fa_sz_mul(bf->per, nt, ovf);
    bf->ndqp = fa_sz_mul(fa_sz_mul(g->C, g->qrows, ovf), fa_sz_mul(p->hq, g->lddq, ovf), ovf);
    /* per-thread Q-side cache of one (b, KV head): every Q block of every head in the
       group, packed once per task instead of once per KV tile */
    bf->qovf = 0;   /* the caches are optional: one that does not fit is not used */
    bf->qcper = fa_sz_pad(fa_sz_mul(fa_sz_mul(g->nqbmax, p->group, &bf->qovf), qblk, &bf->qovf),
                          &bf->qovf);
    /* shared Q-side pack (T >= 4 tasks per head, so C >= 4 and B*Hkv <= 8; or C >= 4 and
       the per-thread cache does not fit): every (b, head, Q block) packed once, in a
       parallel phase, and only read by the tasks, so the T tasks of one head no longer
       pack it T times; else the per-thread cache, packed once per task (cheaper at small
       T: it stays warm in L2; the shared pack measured ~5% slower at C = 2) */
    bf->sovf = 0;
    bf->nqsh = fa_sz_mul(bf->nbh, g->nqbmax, &bf->sovf);
    bf->nqshf = fa_sz_mul(bf->nqsh, qblk, &bf->sovf);
}

/* The call's own buffers freed; the kept ones (scr, dqp, qsh or qcache) stay with the
   context unless past FA_CPU_KEPT_MAX. */
static void bwd_free(fa_cpu_state *st, bwd_buffers *bf)
{
    free(bf->D); free(bf->dsp); free(bf->qflags);
    for (int i = 0; i < 3; i++) fa_cpu_kept_end(&st->kept[i], 0);
}

/* The buffers of bwd_sizes; scratch is zeroed inside the parallel region (each thread its
   slice, first touch in parallel) instead of by one thread here. Returns 0 when a
   required buffer is missing. */
static int bwd_alloc(fa_cpu_state *st, const bwd_geom *g, int nt, bwd_buffers *bf)
{
    const fa_problem *p = g->p;
    bf->scr = fa_cpu_kept_get(&st->kept[FA_CPU_KEPT_SCR], bf->scrsz);
    bf->dqp = fa_cpu_kept_get(&st->kept[FA_CPU_KEPT_BIG], bf->ndqp);
    bf->D = fa_cpu_alloc(bf->nlse);
    bf->dsp = fa_cpu_alloc(bf->nbh);
    bf->qsh = NULL;
    int cache_fits = !bf->qovf && bf->qcper <= Q_CACHE_MAX / 4;
    if (!bf->sovf && g->C >= Q_SHARED_MIN_C && (g->T >= Q_SHARED_MIN_C || !cache_fits) &&
        g->nqbmax > 0 && bf->nqshf <= Q_SHARED_MAX / 4)
        bf->qsh = fa_cpu_kept_get(&st->kept[FA_CPU_KEPT_QSIDE], bf->nqshf);
    bf->qcache = NULL;
    bf->qflags = NULL;
    if (!bf->qsh && cache_fits && g->nqbmax > 0) {
        bf->qcache = fa_cpu_kept_get(&st->kept[FA_CPU_KEPT_QSIDE], bf->qcper * nt);
        bf->qflags = (unsigned char *)calloc((size_t)(g->nqbmax * p->group * nt), 1);
        if (!bf->qcache || !bf->qflags) {
            free(bf->qflags);
            bf->qcache = NULL; bf->qflags = NULL;
        }
    }
    return bf->scr && bf->dqp && bf->D && bf->dsp;
}

/* Thread tid's scratch, zeroed by the calling thread (its Q-side cache blocks are zeroed
   one by one just before their pack, pair_qside). */
static bwd_scratch bwd_scratch_at(const bwd_geom *g, const bwd_buffers *bf, int tid)
{
    const int64_t bkv = g->bkv, ldq = g->ldq, ldk = g->ldk, ldv = g->ldv;
    bwd_scratch w;
    float *base = bf->scr + bf->per * tid;
    memset(base, 0, sizeof(float) * (size_t)bf->per);
    w.kc = base; base += bkv * ldk;
    w.vc = base; base += bkv * ldv;
    w.dk = base; base += bkv * ldk;
    w.dv = base; base += bkv * ldv;
    w.qblock = base; base += g->qblk;
    w.s = base; base += bkv * ldq;
    w.dp = base; base += bkv * ldq;
    w.pd = base; base += bkv * ldq;
    w.t = base; base += bkv * ldq;
    w.row = base; base += fa_cpu_pad(bf->dmax);
    w.row2 = base; base += fa_cpu_pad(bf->dmax);
    int64_t *ib = (int64_t *)base;
    w.hr = ib; w.ir = ib + ldq; w.idrop = ib + 2 * ldq; w.lo = ib + 3 * ldq; w.hi = ib + 4 * ldq;
    base += 10 * ldq;
    w.kb = w.vb = w.pb = w.dsb = w.t16 = NULL;
    w.kp = w.tp = NULL;
    w.dqt = NULL;
    if (g->X) {   /* 64-byte aligned pieces (each size rounded up to 16 floats) */
#define AMX_TAKE(ptr, type, nfl) do { ptr = (type *)base; base += ((nfl) + 15) / 16 * 16; } while (0)
        AMX_TAKE(w.kb, uint16_t, bkv * g->ldka / 2);
        AMX_TAKE(w.vb, uint16_t, bkv * g->ldva / 2);
        AMX_TAKE(w.kp, uint32_t, bf->lkp * ldk);
        AMX_TAKE(w.tp, uint32_t, bf->lkp * ldq);
        AMX_TAKE(w.pb, uint16_t, bkv * g->ldpa / 2);
        AMX_TAKE(w.dsb, uint16_t, ldq * g->ldsa / 2);
        AMX_TAKE(w.t16, uint16_t, ldq * g->ldt / 2);
        AMX_TAKE(w.dqt, float, ldq * g->lddq);
#undef AMX_TAKE
    }
    w.qcache = bf->qcache ? bf->qcache + bf->qcper * tid : NULL;
    w.qflag = bf->qflags ? bf->qflags + g->nqbmax * g->p->group * tid : NULL;
    return w;
}

/* Phase 1 for (batch, head) bh: D = rowsum(dO * O) of each row, and the head's dsink
   partial -sum_i exp(sink - lse_i) D_i. */
static void rows_d(const bwd_geom *g, const bwd_buffers *bf, int64_t bh, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const int64_t dv = g->dv;
    int64_t b = bh / p->hq, h = bh % p->hq;
    fa_seq sq = fa_problem_seq(p, b);
    float dsum = 0.0f;
    for (int64_t i = 0; i < sq.sq; i++) {
        g->K->cvt_in(w->row, fa_cpu_qrow_ptr(&p->dout, &sq, i, h), dv, p->dout.dtype);
        g->K->cvt_in(w->row2, fa_cpu_qrow_ptr(&p->out, &sq, i, h), dv, p->out.dtype);
        const float acc = fa_cpu_dot(w->row, w->row2, dv);
        int64_t li = fa_lse_index(p, &sq, b, h, i);
        bf->D[li] = acc;
        if (p->sinks && p->lse_in[li] != -INFINITY)
            dsum += -expf(p->sinks[h] - p->lse_in[li]) * acc;
    }
    bf->dsp[bh] = dsum;
}

/* Phase 1b, block x of the shared Q-side pack: (batch, head, Q block) packed once (needs
   D: after phase 1's barrier); a block past its sequence stays zeros. */
static void pack_shared(const bwd_geom *g, const bwd_buffers *bf, int64_t x, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const int64_t nqbmax = g->nqbmax;
    int64_t b = x / (p->hq * nqbmax), h = (x / nqbmax) % p->hq, qb = x % nqbmax;
    fa_seq sq = fa_problem_seq(p, b);
    int64_t i0 = qb * g->bq;
    qside q = fa_cpu_qside_at(bf->qsh + x * g->qblk, &g->qg);
    memset(q.qt, 0, sizeof(float) * (size_t)g->qblk);
    if (i0 >= sq.sq) return;
    int ni = (int)(sq.sq - i0 < g->bq ? sq.sq - i0 : g->bq);
    fa_cpu_pack_q_block(p, g->K, g->X, &g->qg, &q, &sq, b, h, i0, ni, bf->D, w->t16, g->ldt);
}

/* Phase 3 for (batch, head) bh: dQ = scale * sum_c partial_c, ((p0 + p1) + p2) + ...: the
   same order for any thread count. */
static void reduce_dq(const bwd_geom *g, int64_t bh, bwd_scratch *w)
{
    const fa_problem *p = g->p;
    const int64_t lddq = g->lddq, qrows = g->qrows;
    int64_t b = bh / p->hq, h = bh % p->hq;
    fa_seq sq = fa_problem_seq(p, b);
    int64_t qbase = sq.tb * p->q.shape[1] + sq.q0;
    for (int64_t i = 0; i < sq.sq; i++) {
        const float *src = g->dqp + (h * qrows + qbase + i) * lddq;
        if (g->C > 1) {
            for (int c = 1; c < g->C; c++)
                fa_cpu_add_f32(w->row, c == 1 ? src : w->row,
                               src + (int64_t)c * qrows * p->hq * lddq, g->dqk);
            src = w->row;
        }
        g->K->cvt_out((char *)p->grad_q.data + fa_qrow(&p->grad_q, &sq, i, h) *
                      (int64_t)fa_dtype_size(p->grad_q.dtype), p->grad_q.dtype, src, g->dqk,
                      p->scale);
    }
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

    int nt = fa_cpu_threads(ctx);
    bwd_geom g;
    bwd_buffers bf;
    int ovf = 0;
    bwd_geom_of(ctx, p, &g, &ovf);
    g.T = bwd_spans(p, g.C, nt);
    bwd_sizes(&g, nt, &bf, &ovf);
    if (ovf)
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: the backward's scratch for head dims %lld/%lld "
                            "does not fit in 64 bits", (long long)p->dqk, (long long)p->dv);
    fa_cpu_state *st = (fa_cpu_state *)ctx->impl;
    if (!bwd_alloc(st, &g, nt, &bf)) {
        bwd_free(st, &bf);
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: cannot allocate the backward's scratch (%lld + %lld "
                            "floats: per-thread tiles and the dQ partials)", (long long)bf.scrsz,
                            (long long)bf.ndqp);
    }
    g.D = bf.D;
    g.dqp = bf.dqp;
    g.qsh = bf.qsh;

#pragma omp parallel num_threads(nt)
    {
        bwd_scratch w = bwd_scratch_at(&g, &bf, fa_cpu_tid());
        /* phase 1: D = rowsum(dO * O); dsink partials */
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < p->batch * p->hq; bh++) rows_d(&g, &bf, bh, &w);
        /* phase 1b: zero the dQ partials; pack the shared Q side */
#pragma omp for schedule(static)
        for (int64_t z = 0; z < (bf.ndqp + 4095) / 4096; z++) {
            int64_t z1 = (z + 1) * 4096 < bf.ndqp ? (z + 1) * 4096 : bf.ndqp;
            memset(bf.dqp + z * 4096, 0, sizeof(float) * (size_t)(z1 - z * 4096));
        }
        if (bf.qsh) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t x = 0; x < bf.nqsh; x++) pack_shared(&g, &bf, x, &w);
        }
        /* phase 2: the tasks (span, batch, KV head) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < bf.ntask; t++) fa_cpu_bwd_task(&g, t, &w);
        /* phase 3: dQ = scale * sum_c partial_c, fixed order */
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < p->batch * p->hq; bh++) reduce_dq(&g, bh, &w);
    }
    if (p->dsinks)
        for (int64_t h = 0; h < p->hq; h++) {
            float s = 0.0f;
            for (int64_t b = 0; b < p->batch; b++) s += bf.dsp[b * p->hq + h];
            p->dsinks[h] = s;
        }
    bwd_free(st, &bf);
    return FA_OK;
}
