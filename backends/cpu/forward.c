/* forward.c - the forward loop nest, written once for every kernel set (kernels.h):
 * the Q blocks, the KV splits, the scratch and the parallel loop over the tasks; one
 * task (a Q block against its KV tiles) is forward_task.c.
 *
 *   parallel over tasks = (Q block, KV split)        [OpenMP, dynamic, heaviest first]
 *     Q block = Br rows of one head, or (decode, Sq < Br with GQA) the rows of several
 *               query heads that share one KV head (so K/V tiles are read once for all)
 *     pack Q^T [dqk][Br] fp32                        (L2, reused across the KV loop)
 *     for each KV tile of Bc keys that some row sees (whole masked tiles skipped):
 *       K, V tile -> fp32 rows [Bc][d]               (L2; V panel of NR columns in L1)
 *       S^T = K Q^T                                  gemm_rowA
 *       score pipeline (softcap, ALiBi, bias), mask  only when the call needs them
 *       online softmax: m, l, alpha per query        softmax_fwd (vector exp2)
 *       dropout on P (a 0/1 mask), l uses undropped P; keep_scale joins 1/l at the end
 *       O = alpha O + P V                             gemm_colA_scaled (one pass over O)
 *     out = O / l, lse = m + log l                    (split: partials merged as fa_combine)
 *
 * Shapes: q [.., Sq, H, dqk], k/v [.., Sk, Hkv, d], out [.., Sq, H, dv] (problem.h).
 * Every decision (blocks, splits) depends on shapes and tiles only, so the result is
 * bitwise identical for any thread count.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "decode.h"
#include "forward.h"
#include "forward_task.h"
#include "scratch.h"
#include "state.h"
#include "threads.h"
#include "tiles.h"
#include "vecops.h"

#define SPLIT_TARGET 32   /* split KV when fewer Q blocks than this (decode) */

static int64_t heads_per_block(const fa_problem *p, int64_t sq, int bq)
{
    if (sq >= bq || p->group <= 1) return 1;   /* group 0: no query heads (empty problem) */
    int64_t g = bq / (sq > 0 ? sq : 1);
    if (g > p->group) g = p->group;
    while (p->group % g) g--;          /* blocks never straddle two KV heads */
    return g < 1 ? 1 : g;
}

/* Q blocks of one sequence of sq rows: ceil(H / g) head groups x ceil(sq / Br). */
static int64_t seq_blocks(const fa_problem *p, int64_t sq, int bq)
{
    if (sq <= 0 || p->hq <= 0) return 0;
    int64_t g = heads_per_block(p, sq, bq);
    return ((p->hq + g - 1) / g) * ((sq + bq - 1) / bq);
}

/* The Q blocks of the call; out (when not NULL) receives them. Counting alone is O(1)
   for the dense and KV-cache layouts (every sequence has Sq rows) and O(batch) for varlen,
   so fa_query answers at once for any shape; the fill walks the blocks, which exist only
   when out holds that many rows. Fits int64: at most B * H * Sq blocks. */
static int64_t count_blocks(const fa_problem *p, int bq, fwd_block *out)
{
    int64_t n = 0;
    if (!out) {
        if (p->batch <= 0) return 0;
        if (p->layout != FA_LAYOUT_VARLEN) return p->batch * seq_blocks(p, p->q.shape[1], bq);
        for (int64_t b = 0; b < p->batch; b++) n += seq_blocks(p, p->cu_q[b + 1] - p->cu_q[b], bq);
        return n;
    }
    for (int64_t b = 0; b < p->batch; b++) {
        fa_seq s = fa_problem_seq(p, b);
        if (s.sq <= 0) continue;
        int64_t g = heads_per_block(p, s.sq, bq);
        for (int64_t h = 0; h < p->hq; h += g)
            for (int64_t i0 = 0; i0 < s.sq; i0 += bq) {
                if (out) {
                    fwd_block *f = &out[n];
                    f->b = b; f->h0 = h; f->nh = g; f->i0 = i0;
                    f->ni = s.sq - i0 < bq ? s.sq - i0 : bq;
                }
                n++;
            }
    }
    return n;
}

int fa_cpu_fwd_splits(const fa_problem *p, int bq, int bkv, int64_t *rows, int64_t *hpb)
{
    int64_t nb = count_blocks(p, bq, NULL);
    if (rows) *rows = p->max_sq < bq ? p->max_sq : bq;
    if (hpb) *hpb = heads_per_block(p, p->max_sq, bq);
    if (nb == 0 || nb >= SPLIT_TARGET || p->max_sk < 4 * (int64_t)bkv) return 1;
    int64_t s = (SPLIT_TARGET + nb - 1) / nb;
    int64_t maxs = p->max_sk / (2 * (int64_t)bkv);
    if (s > maxs) s = maxs;
    if (s > 16) s = 16;
    return s < 1 ? 1 : (int)s;
}

/* Bytes of per-thread K/V cache; above this the per-tile path is used. */
#define KV_CACHE_MAX ((int64_t)64 << 20)

/* Write row r of a finished block: out = o / l, lse = m + log l. With dropout, o holds
   sum_j keep_j P_j V_j (the dropout pass is a 0/1 mask) and the keep scale 1/(1-p) is
   applied here, as flash-attention does: multiplying it into P before the bf16 rounding
   of the P V product would round keep_scale * 1 (the row maximum's P) to bf16 in every
   row, a bias of up to 2^-9 relative on the dominant term. */
static void fwd_store_row(const fa_cpu_kernels *K, const fa_problem *p, const fa_seq *sq,
                          int64_t b, int64_t h, int64_t i, const float *orow, float m,
                          float l, float *zero)
{
    void *dst = (char *)p->out.data + fa_qrow(&p->out, sq, i, h) * (int64_t)fa_dtype_size(p->out.dtype);
    float lse;
    if (l == 0.0f) {
        K->cvt_out(dst, p->out.dtype, zero, p->dv, 1.0f);
        lse = -INFINITY;
    } else {
        float ks = p->dropout_p > 0.0f ? p->drop.keep_scale : 1.0f;
        K->cvt_out(dst, p->out.dtype, orow, p->dv, ks / l);
        lse = m + logf(l);
    }
    if (p->lse) p->lse[fa_lse_index(p, sq, b, h, i)] = lse;
}

/* The call's scratch: per-thread slices of `per` floats (tiles, rows, packing temp), the
   optional per-thread K/V caches, the split partials and the Q blocks. */
typedef struct {
    int64_t per, tmpsz, scrsz, partsz, partall, blkbytes;
    int64_t nkbmax, kvrows, kvper;   /* K/V cache: tiles, rows and floats per thread */
    fwd_block *blocks;
    float *scr, *kvall, *parts, *zero;
    unsigned char *packed;
} fwd_buffers;

/* Scratch sizes, overflow-checked (scratch.h): the tiles are bounded, the head dims and
   the longest key sequence are not (a stride-0 k/v, varlen's max_seqlen_k bound).
   Returns 1 when a size does not fit int64. */
static int fwd_sizes(const fa_problem *p, int bq, int bkv, int nt, int nsplit, int64_t nb,
                     fwd_buffers *bf)
{
    int ovf = 0;
    int64_t ldq = fa_cpu_ld(bq);
    int64_t ldk = fa_sz_ld(p->dqk, &ovf), ldv = fa_sz_ld(p->dv, &ovf);
    int64_t dmaxp = ldk > ldv ? ldk : ldv;
    int64_t bmax = ldq > bkv ? ldq : bkv;
    /* packing temp (words): AMX Q rows [ldq][ldka/2] or V pairs [round_up(bkv,32)/2][ldv]
       (ldq is a multiple of FA_CPU_PAD, so ldq/2 * x = ldq * x / 2); fp32 Q rows [16][ldk] */
    int64_t tmpsz = fa_sz_add(fa_sz_mul(ldq / 2, fa_sz_add(ldk, 16, &ovf), &ovf),
                              fa_sz_mul((int64_t)bkv / 2 + 16, ldv, &ovf), &ovf);
    tmpsz = fa_sz_add(tmpsz, fa_sz_mul(16, ldk, &ovf), &ovf);   /* fp32: 16 Q rows */
    /* qt [(dqk+16) x ldq], s, kc, vc, o, m/l/alpha, row, 5 int64 arrays of ldq (2 floats
       each), P pairs, O^T (AMX), AMX tmp, row pointers */
    int64_t small = (int64_t)bkv * ldq + 3 * ldq + 5 * ldq * 2 + ((int64_t)bkv / 2 + 16) * ldq +
                    2 * bmax;
    int64_t per = fa_sz_mul(fa_sz_add(p->dqk, 16, &ovf), ldq, &ovf);
    per = fa_sz_add(per, fa_sz_mul(bkv, fa_sz_add(ldk, ldv, &ovf), &ovf), &ovf);
    per = fa_sz_add(per, fa_sz_mul(2 * ldq, ldv, &ovf), &ovf);
    per = fa_sz_add(per, dmaxp, &ovf);
    per = fa_sz_add(per, tmpsz, &ovf);
    bf->per = fa_sz_pad(fa_sz_add(per, small, &ovf), &ovf);
    bf->tmpsz = tmpsz;
    bf->scrsz = fa_sz_mul(bf->per, nt, &ovf);
    bf->partsz = fa_sz_add(fa_sz_mul(ldq, ldv, &ovf), 2 * ldq, &ovf);
    bf->partall = nsplit > 1 ? fa_sz_mul(bf->partsz, fa_sz_mul(nb, nsplit, &ovf), &ovf) : 0;
    bf->blkbytes = fa_sz_mul(nb, (int64_t)sizeof(fwd_block), &ovf);
    return ovf;
}

/* The call's own buffers freed; the kept ones (scr, kvall) stay with the context unless
   past FA_CPU_KEPT_MAX. */
static void fwd_free(fa_cpu_state *st, fwd_buffers *bf)
{
    free(bf->blocks); free(bf->parts); free(bf->zero); free(bf->packed);
    fa_cpu_kept_end(&st->kept[FA_CPU_KEPT_SCR], 0);
    fa_cpu_kept_end(&st->kept[FA_CPU_KEPT_BIG], 0);
}

/* The buffers of fwd_sizes. Per-thread scratch and K/V caches are zeroed by their thread
   inside the parallel region (fwd_scratch_at: parallel first touch; one thread zeroing
   nt slices cost ~20 MB of serial memset per call at 16 threads). The K/V cache (whole
   sequences of one KV head) is optional: only when its size fits int64 and
   KV_CACHE_MAX; else the per-tile path. Returns 0 when a required buffer is missing. */
static int fwd_alloc(fa_cpu_state *st, const fwd_geom *g, int nt, int nsplit, fwd_buffers *bf)
{
    const fa_problem *p = g->p;
    bf->blocks = (fwd_block *)malloc((size_t)bf->blkbytes);
    bf->scr = fa_cpu_kept_get(&st->kept[FA_CPU_KEPT_SCR], bf->scrsz);
    int kovf = 0;
    bf->nkbmax = fa_sz_ceil_div(p->max_sk, g->bkv);
    bf->kvrows = fa_sz_mul(bf->nkbmax, g->bkv, &kovf);
    bf->kvper = fa_sz_mul(bf->kvrows, fa_sz_add(g->ldk, g->ldv, &kovf), &kovf);
    bf->kvall = NULL;
    bf->packed = NULL;
    if (!kovf && bf->kvper <= KV_CACHE_MAX / 4 && bf->nkbmax > 0) {
        bf->kvall = fa_cpu_kept_get(&st->kept[FA_CPU_KEPT_BIG], bf->kvper * nt);
        bf->packed = (unsigned char *)calloc((size_t)(bf->nkbmax * nt), 1);
        if (!bf->kvall || !bf->packed) {
            free(bf->packed);
            bf->kvall = NULL; bf->packed = NULL;
        }
    }
    bf->parts = NULL;
    bf->zero = fa_cpu_alloc(g->ldv);
    if (nsplit > 1) bf->parts = fa_cpu_alloc(bf->partall);
    return bf->blocks && bf->scr && bf->zero && (nsplit == 1 || bf->parts);
}

/* Thread tid's scratch, zeroed by the calling thread. */
static fwd_scratch fwd_scratch_at(const fwd_geom *g, const fwd_buffers *bf, int tid)
{
    const int64_t ldq = g->ldq, ldk = g->ldk, ldv = g->ldv, bkv = g->bkv;
    const int64_t dmax = g->dqk > g->dv ? g->dqk : g->dv;
    fwd_scratch w;
    float *base = bf->scr + bf->per * tid;
    memset(base, 0, sizeof(float) * (size_t)bf->per);
    if (bf->kvall) memset(bf->kvall + bf->kvper * tid, 0, sizeof(float) * (size_t)bf->kvper);
    w.qt = base; base += (g->dqk + 16) * ldq;
    w.s = base; base += bkv * ldq;
    w.kc = base; base += bkv * ldk;
    w.vc = base; base += bkv * ldv;
    w.o = base; base += ldq * ldv;
    w.m = base; base += ldq;
    w.l = base; base += ldq;
    w.alpha = base; base += ldq;
    w.row = base; base += fa_cpu_pad(dmax);
    w.pp = base; base += (bkv / 2 + 16) * ldq;
    w.ot = base; base += ldq * ldv;
    w.tmp = base; base += bf->tmpsz;
    w.rp = (const uint16_t **)base; base += 2 * (ldq > bkv ? ldq : bkv);
    int64_t *ib = (int64_t *)base;
    w.hr = ib; w.ir = ib + ldq; w.idrop = ib + 2 * ldq; w.lo = ib + 3 * ldq; w.hi = ib + 4 * ldq;
    w.kall = bf->kvall ? bf->kvall + bf->kvper * tid : NULL;
    w.vall = bf->kvall ? w.kall + bf->kvrows * ldk : NULL;
    w.packed = bf->packed ? bf->packed + bf->nkbmax * tid : NULL;
    w.cb = -1; w.chk = -1;
    return w;
}

/* Block bi's rows from its nsplit partials (O, m, l each), merged in fixed order with
   fa_combine's math, then written; row is a temp of dv floats. */
static void merge_splits(const fwd_geom *g, const fwd_buffers *bf,
                         int64_t bi, int nsplit, float *row)
{
    const fa_problem *p = g->p;
    const int64_t ldq = g->ldq, ldv = g->ldv;
    const fwd_block *f = &bf->blocks[bi];
    fa_seq sq = fa_problem_seq(p, f->b);
    for (int r = 0; r < f->nh * f->ni; r++) {
        float M = -INFINITY;
        for (int s = 0; s < nsplit; s++) {
            const float *pt = bf->parts + bf->partsz * (bi * nsplit + s);
            if (pt[ldq * ldv + ldq + r] != 0.0f && pt[ldq * ldv + r] > M)
                M = pt[ldq * ldv + r];
        }
        float L = 0.0f;
        memset(row, 0, sizeof(float) * (size_t)p->dv);
        for (int s = 0; s < nsplit; s++) {
            const float *pt = bf->parts + bf->partsz * (bi * nsplit + s);
            float ls = pt[ldq * ldv + ldq + r];
            if (ls == 0.0f) continue;
            float e = expf(pt[ldq * ldv + r] - M);
            L += ls * e;
            const float *orow = pt + r * ldv;
            for (int64_t c = 0; c < p->dv; c++) row[c] += e * orow[c];
        }
        fwd_store_row(g->K, p, &sq, f->b, f->h0 + r / f->ni, f->i0 + r % f->ni, row, M, L,
                      bf->zero);
    }
}

/* Output rows are H*dv elements apart, each on its own page for large H*dv, where the
   hardware prefetchers stop: the rows OUT_PF ahead of the one being written are
   prefetched for writing, so that their misses overlap instead of stalling each store. */
#define OUT_PF 8

static void prefetch_out_row(const fa_problem *p, const fa_seq *sq, int64_t h, int64_t i)
{
    const char *dst = (const char *)p->out.data +
                      fa_qrow(&p->out, sq, i, h) * (int64_t)fa_dtype_size(p->out.dtype);
    fa_cpu_prefetch_span(dst, p->dv * (int64_t)fa_dtype_size(p->out.dtype), 1, 0);
}

/* Task t (of nb * nsplit, heaviest first): one split of one block. Without splits the
   block's rows are finished and written at once; with them the partial goes to parts. */
static void run_task(const fwd_geom *g, const fwd_buffers *bf,
                     int64_t ntask, int nsplit, int64_t t, fwd_scratch *w)
{
    int64_t tt = ntask - 1 - t;               /* heaviest (last Q blocks) first */
    const fwd_block *f = &bf->blocks[tt / nsplit];
    int split = (int)(tt % nsplit);
    if (nsplit == 1) {
        fa_cpu_fwd_task(g, f, 0, 1, w, w->o, w->m, w->l);
        fa_seq sq = fa_problem_seq(g->p, f->b);
        int nr = (int)(f->nh * f->ni);
        for (int r = 0; r < OUT_PF && r < nr; r++) prefetch_out_row(g->p, &sq, w->hr[r], w->ir[r]);
        for (int r = 0; r < nr; r++) {
            if (r + OUT_PF < nr) prefetch_out_row(g->p, &sq, w->hr[r + OUT_PF], w->ir[r + OUT_PF]);
            fwd_store_row(g->K, g->p, &sq, f->b, w->hr[r], w->ir[r], w->o + r * g->ldv, w->m[r],
                          w->l[r], bf->zero);
        }
    } else {
        const int64_t ldq = g->ldq, ldv = g->ldv;
        float *pt = bf->parts + bf->partsz * tt;
        fa_cpu_fwd_task(g, f, split, nsplit, w, pt, pt + ldq * ldv, pt + ldq * ldv + ldq);
    }
}

fa_status fa_cpu_forward(fa_context *ctx, const fa_problem *p)
{
    /* No row of out or lse: nothing to write. Return before anything is sized from the
       head dims or lengths, which are unbounded when a dimension is 0. */
    if (fa_forward_is_empty(p)) return FA_OK;
    if (fa_cpu_decode_why(p) == FA_CPU_DECODE_OK) return fa_cpu_decode(ctx, p);
    int bq, bkv;
    fa_cpu_tiles(ctx, 0, p->dqk, p->dv, &bq, &bkv, NULL, 0);
    int64_t nb = count_blocks(p, bq, NULL);
    if (nb == 0) return FA_OK;
    int nsplit = fa_cpu_fwd_splits(p, bq, bkv, NULL, NULL);
    int nt = fa_cpu_threads(ctx);
    int64_t ntask = nb * nsplit;   /* nb <= B*H*Sq / 16, nsplit <= 16 */
    if (ntask < nt) nt = (int)ntask;

    fwd_buffers bf;
    if (fwd_sizes(p, bq, bkv, nt, nsplit, nb, &bf))
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: the forward's scratch for head dims %lld/%lld "
                            "(%lld Q blocks) does not fit in 64 bits", (long long)p->dqk,
                            (long long)p->dv, (long long)nb);
    /* the head dims fit: the call's constants are now computed without overflow */
    const fwd_geom g = fa_cpu_fwd_geom(ctx, p, bq, bkv);
    fa_cpu_state *st = (fa_cpu_state *)ctx->impl;
    if (!fwd_alloc(st, &g, nt, nsplit, &bf)) {
        fwd_free(st, &bf);
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: cannot allocate the forward's scratch (%lld floats "
                            "for %d threads, head dims %lld/%lld)", (long long)bf.scrsz, nt,
                            (long long)p->dqk, (long long)p->dv);
    }
    count_blocks(p, bq, bf.blocks);
    int64_t per_head = fa_sz_ceil_div(p->max_sq, bq);   /* Q blocks of one head */
    int64_t chunk = ntask / (4 * (int64_t)nt);
    if (chunk / nsplit >= per_head) chunk = per_head * nsplit;   /* no overflow */
    if (chunk < 1) chunk = 1;

#pragma omp parallel num_threads(nt)
    {
        fwd_scratch w = fwd_scratch_at(&g, &bf, fa_cpu_tid());
        /* Chunks of consecutive tasks (one head's Q blocks): each thread then converts a
           head's K/V once instead of every thread converting every head (2 threads,
           S=4096: 1.75x faster). Scheduling never changes the numbers. */
#pragma omp for schedule(dynamic, chunk)
        for (int64_t t = 0; t < ntask; t++) run_task(&g, &bf, ntask, nsplit, t, &w);
        if (nsplit > 1) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t bi = 0; bi < nb; bi++) merge_splits(&g, &bf, bi, nsplit, w.row);
        }
    }
    fwd_free(st, &bf);
    return FA_OK;
}
