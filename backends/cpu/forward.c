/* forward.c - the forward loop nest, written once for every kernel set (kernels.h).
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
#include "forward.h"
#include "masked.h"
#include "scores.h"
#include "scratch.h"
#include "state.h"
#include "threads.h"
#include "tiles.h"
#include "vecops.h"

#define SPLIT_TARGET 32   /* split KV when fewer Q blocks than this (decode) */

typedef struct { int64_t b, h0, nh, i0, ni; } fwd_block;   /* row r: h0 + r/ni, i0 + r%ni */

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

typedef struct {
    float *qt, *s, *kc, *vc, *o, *m, *l, *alpha, *row, *pp, *ot, *tmp;
    const uint16_t **rp;   /* AMX packing: row pointers, max(bkv, ldq) */
    int64_t *hr, *ir, *idrop, *lo, *hi;
    /* K/V cache: fp32 rows of the whole sequence of KV head (cb, chk), tile kb packed when
       packed[kb]; kept across the consecutive tasks a thread gets from the dynamic
       schedule (they share the head), so each K/V tile is converted and made
       contiguous once per thread and head instead of once per Q block. NULL: per-tile. */
    float *kall, *vall;
    unsigned char *packed;
    int64_t cb, chk;
} fwd_scratch;

/* Bytes of per-thread K/V cache; above this the per-tile path is used. */
#define KV_CACHE_MAX ((int64_t)64 << 20)

/* First byte of key j's row (KV head hk) in t (p->k or p->v), sz bytes per element: the
   address the fp32 K/V copy reads and, PF rows ahead, prefetches. A macro: as a static
   inline function GCC schedules fwd_task differently (same instructions, other order). */
#define KV_SRC(p, t, sq, b, j, hk, sz) \
    ((const char *)(t)->data + fa_krow(p, t, sq, b, j, hk) * (int64_t)(sz))

/* One task: rows of block f against KV tiles [kb0, kb1) of its sequence. Leaves the
   unnormalised O, m, l in o/m/l (ldo = ldv). */
static void fwd_task(const fa_context *ctx, const fa_problem *p, const fwd_block *f,
                     int split, int nsplit, int bq, int bkv, fwd_scratch *w, float *o,
                     float *m, float *l)
{
    const fa_cpu_kernels *K = ((const fa_cpu_state *)ctx->impl)->k;
    fa_seq sq = fa_problem_seq(p, f->b);
    int64_t dqk = p->dqk, dv = p->dv;
    int64_t ldq = fa_cpu_ld(bq), ldk = fa_cpu_ld(dqk), ldv = fa_cpu_ld(dv);
    int nr = (int)(f->nh * f->ni);
    int64_t hk = f->h0 / p->group;
    int slow = fa_cpu_slow_scores(p);

    /* rows */
    int64_t blo = INT64_MAX, bhi = INT64_MIN;
    for (int r = 0; r < nr; r++) {
        w->hr[r] = f->h0 + r / f->ni;
        w->ir[r] = f->i0 + r % f->ni;
        w->idrop[r] = sq.drop_i0 + w->ir[r];
        fa_visible_range(p, &sq, w->ir[r], &w->lo[r], &w->hi[r]);
        if (w->lo[r] < w->hi[r]) {
            if (w->lo[r] < blo) blo = w->lo[r];
            if (w->hi[r] > bhi) bhi = w->hi[r];
        }
    }
    for (int r = 0; r < ldq; r++) {
        int first = split == 0 && p->sinks && r < nr;
        m[r] = first ? p->sinks[w->hr[r]] : -INFINITY;
        l[r] = first ? 1.0f : 0.0f;
    }
    memset(o, 0, sizeof(float) * (size_t)(nr * ldv));

    int64_t nkb = (sq.sk + bkv - 1) / bkv;
    int64_t kb0 = nkb * split / nsplit, kb1 = nkb * (split + 1) / nsplit;
    if (blo >= bhi) return;
    if (kb0 < blo / bkv) kb0 = blo / bkv;
    if (kb1 > (bhi + bkv - 1) / bkv) kb1 = (bhi + bkv - 1) / bkv;
    if (kb0 >= kb1) return;

    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    int allbf = p->q.dtype == FA_BF16 && p->k.dtype == FA_BF16 && p->v.dtype == FA_BF16;
    const fa_cpu_amx_kernels *X = fa_cpu_amx_for(st, p, 0);
    int bfp = st->bf16dot && allbf && !X;
    int64_t dqp = (dqk + 1) / 2;
    /* AMX layouts (bf16 elements; k dimensions zero-padded to whole 32-wide tiles):
         Q^T pairs  qt[c][ldq] words, c < ldka/2      B of S^T = K Q^T
         K rows     [j][ldka], ldka = round_up(dqk, 32)   A of S^T
         V^T        per KV tile [ldv][ldvt], ldvt = round_up(bkv, 32)   A of O^T += V^T P^T
         P^T pairs  pp[j/2][ldq] words (amx to_pairs)  B of O^T
         O^T        ot[ldv][ldq] fp32, transposed into o at the end of the task */
    int64_t ldka = (dqk + 31) / 32 * 32, ldvt = ((int64_t)bkv + 31) / 32 * 32;
    if (X) {
        /* Q rows -> tmp [r][ldka] bf16 (0 past dqk) -> word transpose = Q^T pairs */
        uint16_t *t16 = (uint16_t *)w->tmp;
        for (int r = 0; r < nr; r++) {
            const uint16_t *qr = (const uint16_t *)p->q.data + fa_qrow(&p->q, &sq, w->ir[r], w->hr[r]);
            memcpy(t16 + r * ldka, qr, sizeof(uint16_t) * (size_t)dqk);
            memset(t16 + r * ldka + dqk, 0, sizeof(uint16_t) * (size_t)(ldka - dqk));
        }
        X->tr32((uint32_t *)w->qt, ldq, (const uint32_t *)t16, ldka / 2, nr, (int)(ldka / 2));
        memset(w->ot, 0, sizeof(float) * (size_t)(ldv * ldq));
    }
    if (bfp) {
        /* Q^T as bf16 pairs: word (c, r) = q[r][2c], q[r][2c+1] (0 past dqk) */
        uint32_t *qp = (uint32_t *)w->qt;
        for (int r = 0; r < nr; r++) {
            const uint16_t *qr = (const uint16_t *)p->q.data + fa_qrow(&p->q, &sq, w->ir[r], w->hr[r]);
            for (int64_t c = 0; c < dqp; c++) {
                uint32_t lo = qr[2 * c], hi = 2 * c + 1 < dqk ? qr[2 * c + 1] : 0;
                qp[c * ldq + r] = lo | (hi << 16);
            }
        }
    }
    /* Q^T [dqk][ldq]: 16 rows at a time converted into tmp [16][ldk], then transposed
       (fa_cpu_transpose_f32: the kernel set's 16 x 16 register transposes) */
    size_t qsz = fa_dtype_size(p->q.dtype), ksz = fa_dtype_size(p->k.dtype), vsz = fa_dtype_size(p->v.dtype);
    for (int r0 = 0; r0 < nr && !bfp && !X; r0 += 16) {
        int rn = nr - r0 < 16 ? nr - r0 : 16;
        for (int r = 0; r < rn; r++)
            K->cvt_in(w->tmp + r * ldk, (const char *)p->q.data +
                      fa_qrow(&p->q, &sq, w->ir[r0 + r], w->hr[r0 + r]) * (int64_t)qsz, dqk,
                      p->q.dtype);
        fa_cpu_transpose_f32(K, w->qt + r0, ldq, w->tmp, ldk, rn, dqk);
    }
    float sc = slow ? 1.0f : p->scale;
    for (int64_t kb = kb0; kb < kb1; kb++) {
        int64_t j0 = kb * bkv;
        int nk = (int)(sq.sk - j0 < bkv ? sq.sk - j0 : bkv);
        float *kc = w->kc, *vc = w->vc;
        if (w->kall) {
            if (w->cb != f->b || w->chk != hk) {
                memset(w->packed, 0, (size_t)nkb);
                w->cb = f->b; w->chk = hk;
            }
            kc = bfp ? (float *)((uint16_t *)w->kall + j0 * ldk) : w->kall + j0 * ldk;
            vc = bfp ? (float *)((uint16_t *)w->vall + j0 * ldv) : w->vall + j0 * ldv;
            if (X) {
                kc = (float *)((uint16_t *)w->kall + j0 * ldka);
                vc = (float *)((uint16_t *)w->vall + kb * ldv * ldvt);
            }
        }
        int vbad = 0;   /* V tile holds Inf/NaN: masked P = 0 must not multiply it */
        if (!w->kall || !w->packed[kb]) {
            if (X) {
                /* K rows [j][ldka] (0 past dqk); V^T [c][ldvt] (0 past nk up to 32) */
                uint16_t *k16 = (uint16_t *)kc;
                for (int j = 0; j < nk; j++) {
                    uint16_t *kr = k16 + j * ldka;
                    const uint16_t *ks = (const uint16_t *)p->k.data + fa_krow(p, &p->k, &sq, f->b, j0 + j, hk);
                    memcpy(kr, ks, sizeof(uint16_t) * (size_t)dqk);
                    memset(kr + dqk, 0, sizeof(uint16_t) * (size_t)(ldka - dqk));
                    w->rp[j] = (const uint16_t *)p->v.data + fa_krow(p, &p->v, &sq, f->b, j0 + j, hk);
                }
                /* V pairs [j/2][ldv] words (0 past nk up to 32 keys) -> V^T [c][ldvt] bf16 */
                vbad = X->pair_rows((uint32_t *)w->tmp, ldv, w->rp, nk, (int)dv);
                X->tr32((uint32_t *)vc, ldvt / 2, (const uint32_t *)w->tmp, ldv, (nk + 31) / 32 * 16, (int)dv);
            } else if (bfp) {
                /* K rows bf16 [j][ldk] (0 past dqk); V pairs [j/2][ldv][2] */
                uint16_t *k16 = (uint16_t *)kc, *v16 = (uint16_t *)vc;
                for (int j = 0; j < nk + (nk & 1); j++) {
                    uint16_t *kr = k16 + j * ldk;
                    uint16_t *vp = v16 + 2 * ((j / 2) * ldv) + (j & 1);
                    if (j == nk) {
                        for (int64_t c = 0; c < dv; c++) vp[2 * c] = 0;
                        continue;
                    }
                    const uint16_t *ks = (const uint16_t *)p->k.data + fa_krow(p, &p->k, &sq, f->b, j0 + j, hk);
                    const uint16_t *vs = (const uint16_t *)p->v.data + fa_krow(p, &p->v, &sq, f->b, j0 + j, hk);
                    memcpy(kr, ks, sizeof(uint16_t) * (size_t)dqk);
                    if (dqk & 1) kr[dqk] = 0;
                    for (int64_t c = 0; c < dv; c++) {
                        vp[2 * c] = vs[c];
                        if ((vs[c] & 0x7f80u) == 0x7f80u) vbad = 1;
                    }
                }
            } else {
                /* The source rows are a head's slice of [.., Sk, Hkv, d] rows, H*d elements
                   apart: each on its own page for large H*d, where the hardware prefetchers
                   do not follow. Rows PF ahead are prefetched into L2 (whole rows, one
                   touch per 64-byte line; prefetcht1: the non-temporal hint, measured on
                   one development VM, copied at 4.4 GB/s where plain copies ran at 11). */
                enum { PF = 8 };
                const int64_t kb_ = dqk * (int64_t)ksz, vb_ = dv * (int64_t)vsz;
                for (int j = 0; j < nk; j++) {
                    if (j + PF < nk) {
                        const char *kp = KV_SRC(p, &p->k, &sq, f->b, j0 + j + PF, hk, ksz);
                        const char *vp = KV_SRC(p, &p->v, &sq, f->b, j0 + j + PF, hk, vsz);
                        for (int64_t x = 0; x < kb_; x += 64) __builtin_prefetch(kp + x, 0, 2);
                        for (int64_t x = 0; x < vb_; x += 64) __builtin_prefetch(vp + x, 0, 2);
                    }
                    K->cvt_in(kc + j * ldk, KV_SRC(p, &p->k, &sq, f->b, j0 + j, hk, ksz), dqk,
                              p->k.dtype);
                    K->cvt_in(vc + j * ldv, KV_SRC(p, &p->v, &sq, f->b, j0 + j, hk, vsz), dv,
                              p->v.dtype);
                    if (fa_cpu_nonfinite(vc + j * ldv, 1, dv, ldv)) vbad = 1;
                }
            }
            if (w->kall) w->packed[kb] = (unsigned char)(1 + vbad);
        } else {
            vbad = w->packed[kb] == 2;
        }
        int full = 1;
        for (int r = 0; r < nr && full; r++)
            if (w->lo[r] > j0 || w->hi[r] < j0 + nk) full = 0;
        if (X && full)
            X->gemm(nk, nr, (int)(ldka / 32), (const uint16_t *)kc, ldka,
                    (const uint32_t *)w->qt, ldq, w->s, ldq, 0);
        else if (X)
            fa_cpu_amx_rowA_seen(X, nk, nr, (int)(ldka / 32), (const uint16_t *)kc, ldka,
                                 (const uint32_t *)w->qt, ldq, w->s, ldq, j0, w->lo, w->hi);
        else if (bfp && full)
            K->gemm_bf16_rowA(nk, nr, (int)dqp, (const uint16_t *)kc, ldk,
                              (const uint16_t *)w->qt, ldq, w->s, ldq, 0);
        else if (bfp)
            fa_cpu_rowA_seen(K, 1, nk, nr, (int)dqp, kc, ldk, w->qt, ldq, w->s, ldq, j0, w->lo,
                             w->hi);
        else if (full)
            K->gemm_rowA(nk, nr, (int)dqk, kc, ldk, w->qt, ldq, w->s, ldq, 0);
        else
            fa_cpu_rowA_seen(K, 0, nk, nr, (int)dqk, kc, ldk, w->qt, ldq, w->s, ldq, j0, w->lo,
                             w->hi);
        if (slow)
            fa_cpu_score_pass(p, &sq, f->b, w->s, nk, nr, ldq, j0, w->hr, w->ir, NULL);
        if (!full) fa_cpu_mask_pass(w->s, nk, nr, ldq, j0, w->lo, w->hi);
        K->softmax_fwd(w->s, nk, nr, ldq, sc, m, l, w->alpha);
        if (p->dropout_p > 0.0f)
            fa_cpu_dropout_pass(p, f->b, nk, nr, ldq, j0, w->hr, w->idrop, 1.0f, w->s, NULL);
        if (X) X->scale_cols(w->ot, ldq, (int)dv, nr, w->alpha);
        /* fp32 tiles: O = alpha O + P V in one pass when the kernel set can */
        int fused = !X && !bfp && (full || !vbad) && K->gemm_colA_scaled;
        for (int r = 0; r < nr && !X && !fused; r++) {
            float a = w->alpha[r];
            if (a != 1.0f) {
                float *orow = o + r * ldv;
                for (int64_t c = 0; c < dv; c++) orow[c] *= a;
            }
        }
        if (X && (full || !vbad)) {
            X->to_pairs((uint32_t *)w->pp, ldq, w->s, ldq, nk, nr);
            if (full)
                X->gemm((int)dv, nr, (nk + 31) / 32, (const uint16_t *)vc, ldvt,
                        (const uint32_t *)w->pp, ldq, w->ot, ldq, 1);
            else
                fa_cpu_amx_ot_seen(X, (int)dv, nr, nk, (const uint16_t *)vc, ldvt,
                                   (const uint32_t *)w->pp, ldq, w->ot, ldq, j0, w->lo, w->hi);
        } else if (X) {
            /* non-finite V in a partly masked tile: each row sums only its keys; P is
               rounded to bf16 as on the tile path */
            const uint16_t *vt = (const uint16_t *)vc;
            for (int r = 0; r < nr; r++) {
                int64_t a = w->lo[r] > j0 ? w->lo[r] - j0 : 0;
                int64_t e = w->hi[r] < j0 + nk ? w->hi[r] - j0 : nk;
                for (int64_t j = a; j < e; j++) {
                    float pj = fa_bf16_to_f32(fa_f32_to_bf16(w->s[j * ldq + r]));
                    for (int64_t c = 0; c < dv; c++)
                        w->ot[c * ldq + r] += pj * fa_bf16_to_f32(vt[c * ldvt + j]);
                }
            }
        } else if (bfp && (full || !vbad)) {
            K->to_pairs((uint16_t *)w->pp, ldq, w->s, ldq, nk, nr);
            if (full)
                K->gemm_bf16_colA(nr, (int)dv, (nk + 1) / 2, (const uint16_t *)w->pp, ldq,
                                  (const uint16_t *)vc, ldv, o, ldv, 1);
            else
                fa_cpu_colA_rows_seen(K, 1, nr, (int)dv, nk, w->pp, ldq, vc, ldv, o, ldv, j0,
                                      w->lo, w->hi, NULL);
        } else if (fused && full) {
            K->gemm_colA_scaled(nr, (int)dv, nk, w->s, ldq, vc, ldv, o, ldv, w->alpha);
        } else if (fused) {
            fa_cpu_colA_rows_seen(K, 0, nr, (int)dv, nk, w->s, ldq, vc, ldv, o, ldv, j0, w->lo,
                                  w->hi, w->alpha);
        } else if (full) {
            K->gemm_colA(nr, (int)dv, nk, w->s, ldq, vc, ldv, o, ldv, 1);
        } else if (!vbad) {
            fa_cpu_colA_rows_seen(K, 0, nr, (int)dv, nk, w->s, ldq, vc, ldv, o, ldv, j0, w->lo,
                                  w->hi, NULL);
        } else {
            /* rare: non-finite V in a partly masked tile; each row sums only its keys,
               as the reference does, so NaN reaches exactly the rows that see it */
            for (int r = 0; r < nr; r++) {
                int64_t a = w->lo[r] > j0 ? w->lo[r] - j0 : 0;
                int64_t e = w->hi[r] < j0 + nk ? w->hi[r] - j0 : nk;
                float *orow = o + r * ldv;
                for (int64_t j = a; j < e; j++) {
                    float pj = w->s[j * ldq + r];
                    if (bfp) {
                        const uint16_t *vp = (const uint16_t *)vc + 2 * ((j / 2) * ldv) + (j & 1);
                        for (int64_t c = 0; c < dv; c++) orow[c] += pj * fa_bf16_to_f32(vp[2 * c]);
                    } else {
                        const float *vr = vc + j * ldv;
                        for (int64_t c = 0; c < dv; c++) orow[c] += pj * vr[c];
                    }
                }
            }
        }
    }
    if (X) X->tr32((uint32_t *)o, ldv, (const uint32_t *)w->ot, ldq, (int)dv, nr);
}

/* Write row r of a finished block: out = o / l, lse = m + log l. With dropout, o holds
   sum_j keep_j P_j V_j (the dropout pass is a 0/1 mask) and the keep scale 1/(1-p) is
   applied here, as flash-attention does: multiplying it into P before the bf16 rounding
   of the P V product would round keep_scale * 1 (the row maximum's P) to bf16 in every
   row, a bias of up to 2^-9 relative on the dominant term. */
static void fwd_store_row(const fa_context *ctx, const fa_problem *p, const fa_seq *sq,
                          int64_t b, int64_t h, int64_t i, const float *orow, float m,
                          float l, float *zero)
{
    const fa_cpu_kernels *K = ((const fa_cpu_state *)ctx->impl)->k;
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

fa_status fa_cpu_forward(fa_context *ctx, const fa_problem *p)
{
    /* No row of out or lse: nothing to write. Return before anything is sized from the
       head dims or lengths, which are unbounded when a dimension is 0. */
    if (fa_forward_is_empty(p)) return FA_OK;
    int bq, bkv;
    fa_cpu_tiles(ctx, 0, p->dqk, p->dv, &bq, &bkv, NULL, 0);
    int64_t nb = count_blocks(p, bq, NULL);
    if (nb == 0) return FA_OK;
    int nsplit = fa_cpu_fwd_splits(p, bq, bkv, NULL, NULL);
    int nt = fa_cpu_threads(ctx);
    int64_t ntask = nb * nsplit;   /* nb <= B*H*Sq / 16, nsplit <= 16 */
    if (ntask < nt) nt = (int)ntask;

    /* Scratch sizes, overflow-checked (scratch.h): the tiles are bounded, the head dims and
       the longest key sequence are not (a stride-0 k/v, varlen's max_seqlen_k bound). */
    int ovf = 0;
    int64_t ldq = fa_cpu_ld(bq);
    int64_t ldk = fa_sz_ld(p->dqk, &ovf), ldv = fa_sz_ld(p->dv, &ovf);
    int64_t dmax = p->dqk > p->dv ? p->dqk : p->dv, dmaxp = ldk > ldv ? ldk : ldv;
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
    per = fa_sz_pad(fa_sz_add(per, small, &ovf), &ovf);
    int64_t scrsz = fa_sz_mul(per, nt, &ovf);
    int64_t partsz = fa_sz_add(fa_sz_mul(ldq, ldv, &ovf), 2 * ldq, &ovf);
    int64_t partall = nsplit > 1 ? fa_sz_mul(partsz, ntask, &ovf) : 0;
    int64_t blkbytes = fa_sz_mul(nb, (int64_t)sizeof(fwd_block), &ovf);
    if (ovf)
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: the forward's scratch for head dims %lld/%lld "
                            "(%lld Q blocks) does not fit in 64 bits", (long long)p->dqk,
                            (long long)p->dv, (long long)nb);

    fwd_block *blocks = (fwd_block *)malloc((size_t)blkbytes);
    /* per-thread scratch and K/V caches are zeroed by their thread inside the parallel
       region (parallel first touch; one thread zeroing nt slices cost ~20 MB of serial
       memset per call at 16 threads) */
    float *scr = fa_cpu_alloc_raw(scrsz);
    /* The optional per-thread K/V cache (whole sequences of one KV head): only when its
       size fits int64 and KV_CACHE_MAX; else the per-tile path. */
    int kovf = 0;
    int64_t nkbmax = fa_sz_ceil_div(p->max_sk, bkv);
    int64_t kvrows = fa_sz_mul(nkbmax, bkv, &kovf);
    int64_t kvper = fa_sz_mul(kvrows, fa_sz_add(ldk, ldv, &kovf), &kovf);
    float *kvall = NULL;
    unsigned char *packed = NULL;
    if (!kovf && kvper <= KV_CACHE_MAX / 4 && nkbmax > 0) {
        kvall = fa_cpu_alloc_raw(kvper * nt);
        packed = (unsigned char *)calloc((size_t)(nkbmax * nt), 1);
        if (!kvall || !packed) { free(kvall); free(packed); kvall = NULL; packed = NULL; }
    }
    float *parts = NULL, *zero = fa_cpu_alloc(ldv);
    if (nsplit > 1) parts = fa_cpu_alloc(partall);
    if (!blocks || !scr || !zero || (nsplit > 1 && !parts)) {
        free(blocks); free(scr); free(parts); free(zero); free(kvall); free(packed);
        return fa_set_error(ctx, FA_ERR_NO_MEMORY,
                            "cpu backend: cannot allocate the forward's scratch (%lld floats "
                            "for %d threads, head dims %lld/%lld)", (long long)scrsz, nt,
                            (long long)p->dqk, (long long)p->dv);
    }
    count_blocks(p, bq, blocks);
    int64_t per_head = fa_sz_ceil_div(p->max_sq, bq);   /* Q blocks of one head */
    int64_t chunk = ntask / (4 * (int64_t)nt);
    if (chunk / nsplit >= per_head) chunk = per_head * nsplit;   /* no overflow */
    if (chunk < 1) chunk = 1;

#pragma omp parallel num_threads(nt)
    {
        fwd_scratch w;
        float *base = scr + per * fa_cpu_tid();
        memset(base, 0, sizeof(float) * (size_t)per);
        if (kvall) memset(kvall + kvper * fa_cpu_tid(), 0, sizeof(float) * (size_t)kvper);
        w.qt = base; base += (p->dqk + 16) * ldq;
        w.s = base; base += (int64_t)bkv * ldq;
        w.kc = base; base += (int64_t)bkv * ldk;
        w.vc = base; base += (int64_t)bkv * ldv;
        w.o = base; base += ldq * ldv;
        w.m = base; base += ldq;
        w.l = base; base += ldq;
        w.alpha = base; base += ldq;
        w.row = base; base += fa_cpu_pad(dmax);
        w.pp = base; base += ((int64_t)bkv / 2 + 16) * ldq;
        w.ot = base; base += ldq * ldv;
        w.tmp = base; base += tmpsz;
        w.rp = (const uint16_t **)base; base += 2 * (ldq > bkv ? ldq : bkv);
        int64_t *ib = (int64_t *)base;
        w.hr = ib; w.ir = ib + ldq; w.idrop = ib + 2 * ldq; w.lo = ib + 3 * ldq; w.hi = ib + 4 * ldq;
        w.kall = kvall ? kvall + kvper * fa_cpu_tid() : NULL;
        w.vall = kvall ? w.kall + kvrows * ldk : NULL;
        w.packed = packed ? packed + nkbmax * fa_cpu_tid() : NULL;
        w.cb = -1; w.chk = -1;

        /* Chunks of consecutive tasks (one head's Q blocks): each thread then converts a
           head's K/V once instead of every thread converting every head (2 threads,
           S=4096: 1.75x faster). Scheduling never changes the numbers. */
#pragma omp for schedule(dynamic, chunk)
        for (int64_t t = 0; t < ntask; t++) {
            int64_t tt = ntask - 1 - t;               /* heaviest (last Q blocks) first */
            const fwd_block *f = &blocks[tt / nsplit];
            int split = (int)(tt % nsplit);
            if (nsplit == 1) {
                fwd_task(ctx, p, f, 0, 1, bq, bkv, &w, w.o, w.m, w.l);
                fa_seq sq = fa_problem_seq(p, f->b);
                for (int r = 0; r < f->nh * f->ni; r++)
                    fwd_store_row(ctx, p, &sq, f->b, w.hr[r], w.ir[r], w.o + r * ldv, w.m[r],
                                  w.l[r], zero);
            } else {
                float *pt = parts + partsz * tt;
                fwd_task(ctx, p, f, split, nsplit, bq, bkv, &w, pt, pt + ldq * ldv,
                         pt + ldq * ldv + ldq);
            }
        }
        if (nsplit > 1) {
            /* merge the splits of each block in fixed order: fa_combine's math */
#pragma omp for schedule(dynamic, 1)
            for (int64_t bi = 0; bi < nb; bi++) {
                const fwd_block *f = &blocks[bi];
                fa_seq sq = fa_problem_seq(p, f->b);
                for (int r = 0; r < f->nh * f->ni; r++) {
                    float M = -INFINITY;
                    for (int s = 0; s < nsplit; s++) {
                        const float *pt = parts + partsz * (bi * nsplit + s);
                        if (pt[ldq * ldv + ldq + r] != 0.0f && pt[ldq * ldv + r] > M)
                            M = pt[ldq * ldv + r];
                    }
                    float L = 0.0f;
                    memset(w.row, 0, sizeof(float) * (size_t)p->dv);
                    for (int s = 0; s < nsplit; s++) {
                        const float *pt = parts + partsz * (bi * nsplit + s);
                        float ls = pt[ldq * ldv + ldq + r];
                        if (ls == 0.0f) continue;
                        float e = expf(pt[ldq * ldv + r] - M);
                        L += ls * e;
                        const float *orow = pt + r * ldv;
                        for (int64_t c = 0; c < p->dv; c++) w.row[c] += e * orow[c];
                    }
                    fwd_store_row(ctx, p, &sq, f->b, f->h0 + r / f->ni, f->i0 + r % f->ni,
                                  w.row, M, L, zero);
                }
            }
        }
    }
    free(blocks); free(scr); free(parts); free(zero); free(kvall); free(packed);
    return FA_OK;
}
