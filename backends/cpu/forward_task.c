/* forward_task.c - one task of the forward: the rows of a Q block against a range of
 * KV tiles, in named phases (the arithmetic of each is its kernel set's):
 *
 *   task_rows     each row's head, query and visible keys; m, l, O start (sink)
 *   pack_q        Q^T for S^T = K Q^T: fp32, bf16 pairs or AMX pairs
 *   for each KV tile some row sees:
 *     load_kv     K and V tile -> the kernels' layout (or the thread's K/V cache)
 *     scores      S^T = K Q^T, over the pairs some row sees when partly masked
 *     prefetch    a share of the output rows and of the next Q block's rows (into L2)
 *     softmax     score pipeline, mask, online softmax update, dropout mask
 *     pv          O = alpha O + P V
 *   finish        AMX: O^T back to O rows
 *
 * Three layouts run through the same phases: fp32 kernels on converted tiles, bf16 dot
 * products (bf16 pairs, K->gemm_bf16_*) and AMX tiles (X). The kernel set and layout
 * never depend on the thread count, so neither do the numbers.
 */
#include "config.h"
#include <math.h>
#include <string.h>
#include "dtype.h"
#include "forward_task.h"
#include "masked.h"
#include "scores.h"
#include "scratch.h"
#include "state.h"
#include "vecops.h"

/* One KV tile of a task: keys j0 .. j0 + nk - 1, K and V in kc and vc (the layout of
   the call's kernels), vbad: V holds Inf/NaN, full: every row sees every key. */
typedef struct {
    int64_t kb, j0;
    int nk, vbad, full;
    float *kc, *vc;
} kv_tile;

fwd_geom fa_cpu_fwd_geom(const fa_context *ctx, const fa_problem *p, int bq, int bkv)
{
    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    int allbf = p->q.dtype == FA_BF16 && p->k.dtype == FA_BF16 && p->v.dtype == FA_BF16;
    fwd_geom g;
    g.p = p;
    g.K = st->k;
    g.X = fa_cpu_amx_for(st, p, 0);
    g.bfp = st->bf16dot && allbf && !g.X;
    g.slow = fa_cpu_slow_scores(p);
    g.sc = g.slow ? 1.0f : p->scale;
    g.bkv = bkv;
    g.dqk = p->dqk;
    g.dv = p->dv;
    g.dqp = (p->dqk + 1) / 2;
    g.ldq = fa_cpu_ld(bq);
    g.ldk = fa_cpu_ld(p->dqk);
    g.ldv = fa_cpu_ld(p->dv);
    /* AMX layouts (bf16 elements; k dimensions zero-padded to whole 32-wide tiles):
         Q^T pairs  qt[c][ldq] words, c < ldka/2      B of S^T = K Q^T
         K rows     [j][ldka], ldka = round_up(dqk, 32)   A of S^T
         V^T        per KV tile [ldv][ldvt], ldvt = round_up(bkv, 32)   A of O^T += V^T P^T
         P^T pairs  pp[j/2][ldq] words (amx to_pairs)  B of O^T
         O^T        ot[ldv][ldq] fp32, transposed into o at the end of the task */
    g.ldka = (p->dqk + 31) / 32 * 32;
    g.ldvt = ((int64_t)bkv + 31) / 32 * 32;
    return g;
}

/* Rows of block f: head, query, dropout row and visible keys of each; m, l and O start
   (the sink enters with split 0). The KV tiles [*kb0, *kb1) of this split that some row
   sees; 0 when there are none. */
static int task_rows(const fwd_geom *g, const fwd_block *f, const fa_seq *sq, int split,
                     int nsplit, fwd_scratch *w, float *o, float *m, float *l, int64_t *kb0,
                     int64_t *kb1)
{
    const fa_problem *p = g->p;
    int nr = (int)(f->nh * f->ni), bkv = g->bkv;
    int64_t blo = INT64_MAX, bhi = INT64_MIN;
    for (int r = 0; r < nr; r++) {
        w->hr[r] = f->h0 + r / f->ni;
        w->ir[r] = f->i0 + r % f->ni;
        w->idrop[r] = sq->drop_i0 + w->ir[r];
        fa_visible_range(p, sq, w->ir[r], &w->lo[r], &w->hi[r]);
        if (w->lo[r] < w->hi[r]) {
            if (w->lo[r] < blo) blo = w->lo[r];
            if (w->hi[r] > bhi) bhi = w->hi[r];
        }
    }
    for (int r = 0; r < g->ldq; r++) {
        int first = split == 0 && p->sinks && r < nr;
        m[r] = first ? p->sinks[w->hr[r]] : -INFINITY;
        l[r] = first ? 1.0f : 0.0f;
    }
    memset(o, 0, sizeof(float) * (size_t)(nr * g->ldv));

    int64_t nkb = (sq->sk + bkv - 1) / bkv;
    *kb0 = nkb * split / nsplit;
    *kb1 = nkb * (split + 1) / nsplit;
    if (blo >= bhi) return 0;
    if (*kb0 < blo / bkv) *kb0 = blo / bkv;
    if (*kb1 > (bhi + bkv - 1) / bkv) *kb1 = (bhi + bkv - 1) / bkv;
    return *kb0 < *kb1;
}

/* AMX: Q rows -> tmp [r][ldka] bf16 (0 past dqk) -> word transpose = Q^T pairs; O^T = 0. */
static void pack_q_amx(const fwd_geom *g, const fa_seq *sq, int nr, fwd_scratch *w)
{
    const fa_problem *p = g->p;
    uint16_t *t16 = (uint16_t *)w->tmp;
    for (int r = 0; r < nr; r++) {
        const uint16_t *qr = (const uint16_t *)p->q.data + fa_qrow(&p->q, sq, w->ir[r], w->hr[r]);
        memcpy(t16 + r * g->ldka, qr, sizeof(uint16_t) * (size_t)g->dqk);
        memset(t16 + r * g->ldka + g->dqk, 0, sizeof(uint16_t) * (size_t)(g->ldka - g->dqk));
    }
    g->X->tr32((uint32_t *)w->qt, g->ldq, (const uint32_t *)t16, g->ldka / 2, nr, (int)(g->ldka / 2));
    memset(w->ot, 0, sizeof(float) * (size_t)(g->ldv * g->ldq));
}

/* bf16 dot products: Q^T as bf16 pairs, word (c, r) = q[r][2c], q[r][2c+1] (0 past dqk). */
static void pack_q_pairs(const fwd_geom *g, const fa_seq *sq, int nr, fwd_scratch *w)
{
    const fa_problem *p = g->p;
    uint32_t *qp = (uint32_t *)w->qt;
    for (int r = 0; r < nr; r++) {
        const uint16_t *qr = (const uint16_t *)p->q.data + fa_qrow(&p->q, sq, w->ir[r], w->hr[r]);
        for (int64_t c = 0; c < g->dqp; c++) {
            uint32_t lo = qr[2 * c], hi = 2 * c + 1 < g->dqk ? qr[2 * c + 1] : 0;
            qp[c * g->ldq + r] = lo | (hi << 16);
        }
    }
}

/* First byte of row r of the block in q (w->ir, w->hr), qsz bytes per element. */
#define Q_SRC(p, sq, w, r, qsz) \
    ((const char *)(p)->q.data + fa_qrow(&(p)->q, sq, (w)->ir[r], (w)->hr[r]) * (int64_t)(qsz))

/* fp32: Q^T [dqk][ldq], 16 rows at a time converted into tmp [16][ldk], then transposed
   (fa_cpu_transpose_f32: the kernel set's 16 x 16 register transposes). The rows are H*dqk
   elements apart (one page each for large H*dqk, as K/V): each row's copy prefetches the
   row 16 ahead. */
static void pack_q_f32(const fwd_geom *g, const fa_seq *sq, int nr, fwd_scratch *w)
{
    const fa_problem *p = g->p;
    size_t qsz = fa_dtype_size(p->q.dtype);
    const int64_t qb = g->dqk * (int64_t)qsz;
    for (int r0 = 0; r0 < nr; r0 += 16) {
        int rn = nr - r0 < 16 ? nr - r0 : 16;
        for (int r = 0; r < rn; r++) {
            if (r0 + r + 16 < nr) {
                fa_cpu_prefetch_span(Q_SRC(p, sq, w, r0 + r + 16, qsz), qb, 0, 0);
            }
            g->K->cvt_in(w->tmp + r * g->ldk, Q_SRC(p, sq, w, r0 + r, qsz), g->dqk, p->q.dtype);
        }
        fa_cpu_transpose_f32(g->K, w->qt + r0, g->ldq, w->tmp, g->ldk, rn, g->dqk);
    }
}

/* AMX: K rows [j][ldka] (0 past dqk); V^T [c][ldvt] (0 past nk up to 32). 1: V has
   Inf/NaN. */
static int load_kv_amx(const fwd_geom *g, const fa_seq *sq, int64_t b, int64_t hk,
                       const kv_tile *t, fwd_scratch *w)
{
    const fa_problem *p = g->p;
    uint16_t *k16 = (uint16_t *)t->kc;
    for (int j = 0; j < t->nk; j++) {
        uint16_t *kr = k16 + j * g->ldka;
        const uint16_t *ks = (const uint16_t *)p->k.data + fa_krow(p, &p->k, sq, b, t->j0 + j, hk);
        memcpy(kr, ks, sizeof(uint16_t) * (size_t)g->dqk);
        memset(kr + g->dqk, 0, sizeof(uint16_t) * (size_t)(g->ldka - g->dqk));
        w->rp[j] = (const uint16_t *)p->v.data + fa_krow(p, &p->v, sq, b, t->j0 + j, hk);
    }
    /* V pairs [j/2][ldv] words (0 past nk up to 32 keys) -> V^T [c][ldvt] bf16 */
    int vbad = g->X->pair_rows((uint32_t *)w->tmp, g->ldv, w->rp, t->nk, (int)g->dv);
    g->X->tr32((uint32_t *)t->vc, g->ldvt / 2, (const uint32_t *)w->tmp, g->ldv,
               (t->nk + 31) / 32 * 16, (int)g->dv);
    return vbad;
}

/* bf16 dot products: K rows bf16 [j][ldk] (0 past dqk); V pairs [j/2][ldv][2]. 1: V has
   Inf/NaN. */
static int load_kv_pairs(const fwd_geom *g, const fa_seq *sq, int64_t b, int64_t hk,
                         const kv_tile *t)
{
    const fa_problem *p = g->p;
    const int64_t dqk = g->dqk, dv = g->dv;
    uint16_t *k16 = (uint16_t *)t->kc, *v16 = (uint16_t *)t->vc;
    int vbad = 0, nk = t->nk;
    for (int j = 0; j < nk + (nk & 1); j++) {
        uint16_t *kr = k16 + j * g->ldk;
        uint16_t *vp = v16 + 2 * ((j / 2) * g->ldv) + (j & 1);
        if (j == nk) {
            for (int64_t c = 0; c < dv; c++) vp[2 * c] = 0;
            continue;
        }
        const uint16_t *ks = (const uint16_t *)p->k.data + fa_krow(p, &p->k, sq, b, t->j0 + j, hk);
        const uint16_t *vs = (const uint16_t *)p->v.data + fa_krow(p, &p->v, sq, b, t->j0 + j, hk);
        memcpy(kr, ks, sizeof(uint16_t) * (size_t)dqk);
        if (dqk & 1) kr[dqk] = 0;
        for (int64_t c = 0; c < dv; c++) {
            vp[2 * c] = vs[c];
            if ((vs[c] & 0x7f80u) == 0x7f80u) vbad = 1;
        }
    }
    return vbad;
}

/* First byte of key j's row (KV head hk) in t (p->k or p->v), sz bytes per element: the
   address the fp32 K/V copy reads and, PF rows ahead, prefetches. */
#define KV_SRC(p, t, sq, b, j, hk, sz) \
    ((const char *)(t)->data + fa_krow(p, t, sq, b, j, hk) * (int64_t)(sz))

/* fp32: K rows [j][ldk], V rows [j][ldv], converted. 1: V has Inf/NaN.
   The source rows are a head's slice of [.., Sk, Hkv, d] rows, H*d elements apart: each
   on its own page for large H*d, where the hardware prefetchers do not follow. Rows PF
   ahead are prefetched into L2 (whole rows, one touch per 64-byte line; prefetcht1: the
   non-temporal hint, measured on one development VM, copied at 4.4 GB/s where plain
   copies ran at 11). */
static int load_kv_f32(const fwd_geom *g, const fa_seq *sq, int64_t b, int64_t hk,
                       const kv_tile *t)
{
    enum { PF = 8 };
    const fa_problem *p = g->p;
    const fa_cpu_kernels *K = g->K;
    const int64_t dqk = g->dqk, dv = g->dv, ldk = g->ldk, ldv = g->ldv, j0 = t->j0;
    size_t ksz = fa_dtype_size(p->k.dtype), vsz = fa_dtype_size(p->v.dtype);
    const int64_t kb_ = dqk * (int64_t)ksz, vb_ = dv * (int64_t)vsz;
    float *kc = t->kc, *vc = t->vc;
    int vbad = 0, nk = t->nk;
    for (int j = 0; j < nk; j++) {
        if (j + PF < nk) {
            const char *kp = KV_SRC(p, &p->k, sq, b, j0 + j + PF, hk, ksz);
            const char *vp = KV_SRC(p, &p->v, sq, b, j0 + j + PF, hk, vsz);
            fa_cpu_prefetch_span(kp, kb_, 0, 1);
            fa_cpu_prefetch_span(vp, vb_, 0, 1);
        }
        K->cvt_in(kc + j * ldk, KV_SRC(p, &p->k, sq, b, j0 + j, hk, ksz), dqk, p->k.dtype);
        K->cvt_in(vc + j * ldv, KV_SRC(p, &p->v, sq, b, j0 + j, hk, vsz), dv, p->v.dtype);
        if (fa_cpu_nonfinite(vc + j * ldv, 1, dv, ldv)) vbad = 1;
    }
    return vbad;
}

/* KV tile kb of block f's sequence in the kernels' layout: from the thread's K/V cache
   when it holds the tile (converted by an earlier task of the same head), else loaded
   (into the cache when there is one). */
static kv_tile load_kv(const fwd_geom *g, const fwd_block *f, const fa_seq *sq, int64_t kb,
                       fwd_scratch *w)
{
    const int64_t hk = f->h0 / g->p->group, ldk = g->ldk, ldv = g->ldv;
    kv_tile t;
    t.kb = kb;
    t.j0 = kb * g->bkv;
    t.nk = (int)(sq->sk - t.j0 < g->bkv ? sq->sk - t.j0 : g->bkv);
    t.kc = w->kc;
    t.vc = w->vc;
    if (w->kall) {
        if (w->cb != f->b || w->chk != hk) {
            memset(w->packed, 0, (size_t)((sq->sk + g->bkv - 1) / g->bkv));
            w->cb = f->b; w->chk = hk;
        }
        t.kc = g->bfp ? (float *)((uint16_t *)w->kall + t.j0 * ldk) : w->kall + t.j0 * ldk;
        t.vc = g->bfp ? (float *)((uint16_t *)w->vall + t.j0 * ldv) : w->vall + t.j0 * ldv;
        if (g->X) {
            t.kc = (float *)((uint16_t *)w->kall + t.j0 * g->ldka);
            t.vc = (float *)((uint16_t *)w->vall + kb * ldv * g->ldvt);
        }
    }
    if (!w->kall || !w->packed[kb]) {
        t.vbad = g->X ? load_kv_amx(g, sq, f->b, hk, &t, w)
               : g->bfp ? load_kv_pairs(g, sq, f->b, hk, &t)
               : load_kv_f32(g, sq, f->b, hk, &t);
        if (w->kall) w->packed[kb] = (unsigned char)(1 + t.vbad);
    } else {
        t.vbad = w->packed[kb] == 2;
    }
    t.full = 1;
    for (int r = 0; r < (int)(f->nh * f->ni) && t.full; r++)
        if (w->lo[r] > t.j0 || w->hi[r] < t.j0 + t.nk) t.full = 0;
    return t;
}

/* S^T = K Q^T into w->s: the whole tile, or only the pairs some row sees. */
static void scores(const fwd_geom *g, const kv_tile *t, int nr, fwd_scratch *w)
{
    const fa_cpu_kernels *K = g->K;
    const int64_t ldq = g->ldq, ldk = g->ldk;
    const int nk = t->nk;
    if (g->X && t->full)
        g->X->gemm(nk, nr, (int)(g->ldka / 32), (const uint16_t *)t->kc, g->ldka,
                   (const uint32_t *)w->qt, ldq, w->s, ldq, 0);
    else if (g->X)
        fa_cpu_amx_rowA_seen(g->X, nk, nr, (int)(g->ldka / 32), (const uint16_t *)t->kc, g->ldka,
                             (const uint32_t *)w->qt, ldq, w->s, ldq, t->j0, w->lo, w->hi);
    else if (g->bfp && t->full)
        K->gemm_bf16_rowA(nk, nr, (int)g->dqp, (const uint16_t *)t->kc, ldk,
                          (const uint16_t *)w->qt, ldq, w->s, ldq, 0);
    else if (g->bfp)
        fa_cpu_rowA_seen(K, 1, nk, nr, (int)g->dqp, t->kc, ldk, w->qt, ldq, w->s, ldq, t->j0,
                         w->lo, w->hi);
    else if (t->full)
        K->gemm_rowA(nk, nr, (int)g->dqk, t->kc, ldk, w->qt, ldq, w->s, ldq, 0);
    else
        fa_cpu_rowA_seen(K, 0, nk, nr, (int)g->dqk, t->kc, ldk, w->qt, ldq, w->s, ldq, t->j0,
                         w->lo, w->hi);
}

/* S^T -> P^T in place: the score pipeline (softcap, ALiBi, bias) when the call has one,
   the mask on a partly seen tile, the online softmax update of m, l and alpha, and the
   dropout keep mask (a 0/1 factor; l keeps the undropped P). */
static void softmax(const fwd_geom *g, const fa_seq *sq, int64_t b, const kv_tile *t, int nr,
                    fwd_scratch *w, float *m, float *l)
{
    const fa_problem *p = g->p;
    if (g->slow)
        fa_cpu_score_pass(p, sq, b, w->s, t->nk, nr, g->ldq, t->j0, w->hr, w->ir, NULL);
    if (!t->full) fa_cpu_mask_pass(w->s, t->nk, nr, g->ldq, t->j0, w->lo, w->hi);
    g->K->softmax_fwd(w->s, t->nk, nr, g->ldq, g->sc, m, l, w->alpha);
    if (p->dropout_p > 0.0f)
        fa_cpu_dropout_pass(p, b, t->nk, nr, g->ldq, t->j0, w->hr, w->idrop, 1.0f, w->s, NULL);
}

/* [*a, *e): row r's visible keys of the tile, relative to j0. */
static void row_keys(const fwd_scratch *w, const kv_tile *t, int r, int64_t *a, int64_t *e)
{
    *a = w->lo[r] > t->j0 ? w->lo[r] - t->j0 : 0;
    *e = w->hi[r] < t->j0 + t->nk ? w->hi[r] - t->j0 : t->nk;
}

/* AMX: O^T = alpha O^T + V^T P^T (P rounded to bf16). Non-finite V in a partly masked
   tile: each row sums only its keys, so NaN reaches exactly the rows that see it. */
static void pv_amx(const fwd_geom *g, const kv_tile *t, int nr, fwd_scratch *w)
{
    const fa_cpu_amx_kernels *X = g->X;
    const int64_t ldq = g->ldq, dv = g->dv;
    X->scale_cols(w->ot, ldq, (int)dv, nr, w->alpha);
    if (t->full || !t->vbad) {
        X->to_pairs((uint32_t *)w->pp, ldq, w->s, ldq, t->nk, nr);
        if (t->full)
            X->gemm((int)dv, nr, (t->nk + 31) / 32, (const uint16_t *)t->vc, g->ldvt,
                    (const uint32_t *)w->pp, ldq, w->ot, ldq, 1);
        else
            fa_cpu_amx_ot_seen(X, (int)dv, nr, t->nk, (const uint16_t *)t->vc, g->ldvt,
                               (const uint32_t *)w->pp, ldq, w->ot, ldq, t->j0, w->lo, w->hi);
        return;
    }
    const uint16_t *vt = (const uint16_t *)t->vc;
    for (int r = 0; r < nr; r++) {
        int64_t a, e;
        row_keys(w, t, r, &a, &e);
        for (int64_t j = a; j < e; j++) {
            float pj = fa_bf16_to_f32(fa_f32_to_bf16(w->s[j * ldq + r]));
            for (int64_t c = 0; c < dv; c++)
                w->ot[c * ldq + r] += pj * fa_bf16_to_f32(vt[c * g->ldvt + j]);
        }
    }
}

/* O rows *= alpha (rows whose max moved). */
static void rescale_o(const fwd_geom *g, int nr, const float *alpha, float *o)
{
    for (int r = 0; r < nr; r++) {
        float a = alpha[r];
        if (a != 1.0f) {
            float *orow = o + r * g->ldv;
            for (int64_t c = 0; c < g->dv; c++) orow[c] *= a;
        }
    }
}

/* bf16 dot products: O = alpha O + P V over P^T pairs and V pairs. Non-finite V in a
   partly masked tile: each row sums only its keys. */
static void pv_pairs(const fwd_geom *g, const kv_tile *t, int nr, fwd_scratch *w, float *o)
{
    const fa_cpu_kernels *K = g->K;
    const int64_t ldq = g->ldq, ldv = g->ldv, dv = g->dv;
    rescale_o(g, nr, w->alpha, o);
    if (t->full || !t->vbad) {
        K->to_pairs((uint16_t *)w->pp, ldq, w->s, ldq, t->nk, nr);
        if (t->full)
            K->gemm_bf16_colA(nr, (int)dv, (t->nk + 1) / 2, (const uint16_t *)w->pp, ldq,
                              (const uint16_t *)t->vc, ldv, o, ldv, 1);
        else
            fa_cpu_colA_rows_seen(K, 1, nr, (int)dv, t->nk, w->pp, ldq, t->vc, ldv, o, ldv,
                                  t->j0, w->lo, w->hi, NULL);
        return;
    }
    for (int r = 0; r < nr; r++) {
        int64_t a, e;
        row_keys(w, t, r, &a, &e);
        float *orow = o + r * ldv;
        for (int64_t j = a; j < e; j++) {
            float pj = w->s[j * ldq + r];
            const uint16_t *vp = (const uint16_t *)t->vc + 2 * ((j / 2) * ldv) + (j & 1);
            for (int64_t c = 0; c < dv; c++) orow[c] += pj * fa_bf16_to_f32(vp[2 * c]);
        }
    }
}

/* fp32: O = alpha O + P V, in one pass over O when the kernel set can (gemm_colA_scaled).
   Non-finite V in a partly masked tile (rare): each row sums only its keys, as the
   reference does, so NaN reaches exactly the rows that see it. */
static void pv_f32(const fwd_geom *g, const kv_tile *t, int nr, fwd_scratch *w, float *o)
{
    const fa_cpu_kernels *K = g->K;
    const int64_t ldq = g->ldq, ldv = g->ldv, dv = g->dv;
    const int nk = t->nk;
    int fused = (t->full || !t->vbad) && K->gemm_colA_scaled;
    if (!fused) rescale_o(g, nr, w->alpha, o);
    if (fused && t->full) {
        K->gemm_colA_scaled(nr, (int)dv, nk, w->s, ldq, t->vc, ldv, o, ldv, w->alpha);
    } else if (fused) {
        fa_cpu_colA_rows_seen(K, 0, nr, (int)dv, nk, w->s, ldq, t->vc, ldv, o, ldv, t->j0,
                              w->lo, w->hi, w->alpha);
    } else if (t->full) {
        K->gemm_colA(nr, (int)dv, nk, w->s, ldq, t->vc, ldv, o, ldv, 1);
    } else if (!t->vbad) {
        fa_cpu_colA_rows_seen(K, 0, nr, (int)dv, nk, w->s, ldq, t->vc, ldv, o, ldv, t->j0,
                              w->lo, w->hi, NULL);
    } else {
        for (int r = 0; r < nr; r++) {
            int64_t a, e;
            row_keys(w, t, r, &a, &e);
            float *orow = o + r * ldv;
            for (int64_t j = a; j < e; j++) {
                float pj = w->s[j * ldq + r];
                const float *vr = t->vc + j * ldv;
                for (int64_t c = 0; c < dv; c++) orow[c] += pj * vr[c];
            }
        }
    }
}

/* Share `step` of `nstep` of the rows that the task's neighbours touch, prefetched into
   L2 between the products of a KV tile, where the misses overlap the arithmetic: the
   block's output rows (written when it finishes; only without splits) and the rows of
   the Q block below it in the same heads (the one the dynamic schedule's chunk most
   likely hands this thread next). Both are rows H*d elements apart, a page each for
   large H*d, which the hardware prefetchers do not follow. */
static void prefetch_neighbours(const fwd_geom *g, const fwd_block *f, const fa_seq *sq,
                                const fwd_scratch *w, int nr, int64_t step, int64_t nstep,
                                int nsplit)
{
    const fa_problem *p = g->p;
    int r0 = (int)(nr * step / nstep), r1 = (int)(nr * (step + 1) / nstep);
    int64_t osz = fa_dtype_size(p->out.dtype), qsz = fa_dtype_size(p->q.dtype);
    for (int r = r0; r < r1; r++) {
        if (nsplit == 1)
            fa_cpu_prefetch_span((const char *)p->out.data +
                           fa_qrow(&p->out, sq, w->ir[r], w->hr[r]) * osz, g->dv * osz, 1, 1);
        if (f->nh == 1 && f->i0 - 1 - r >= 0)
            fa_cpu_prefetch_span((const char *)p->q.data + fa_qrow(&p->q, sq, f->i0 - 1 - r, f->h0) * qsz,
                           g->dqk * qsz, 0, 1);
    }
}

void fa_cpu_fwd_task(const fwd_geom *g, const fwd_block *f, int split, int nsplit,
                     fwd_scratch *w, float *o, float *m, float *l)
{
    fa_seq sq = fa_problem_seq(g->p, f->b);
    int nr = (int)(f->nh * f->ni);
    int64_t kb0, kb1;
    if (!task_rows(g, f, &sq, split, nsplit, w, o, m, l, &kb0, &kb1)) return;
    if (g->X) pack_q_amx(g, &sq, nr, w);
    else if (g->bfp) pack_q_pairs(g, &sq, nr, w);
    else pack_q_f32(g, &sq, nr, w);
    for (int64_t kb = kb0; kb < kb1; kb++) {
        kv_tile t = load_kv(g, f, &sq, kb, w);
        scores(g, &t, nr, w);
        prefetch_neighbours(g, f, &sq, w, nr, kb - kb0, kb1 - kb0, nsplit);
        softmax(g, &sq, f->b, &t, nr, w, m, l);
        if (g->X) pv_amx(g, &t, nr, w);
        else if (g->bfp) pv_pairs(g, &t, nr, w, o);
        else pv_f32(g, &t, nr, w, o);
    }
    if (g->X) g->X->tr32((uint32_t *)o, g->ldv, (const uint32_t *)w->ot, g->ldq, (int)g->dv, nr);
}
