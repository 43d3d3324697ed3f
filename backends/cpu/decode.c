/* decode.c - the CPU decode path: fa_forward_kvcache (or fa_forward, whose fa_query then
 * names it) with at most 16 new tokens per sequence against a long cache. The work is
 * reading K and V once; this path keeps the cores busy on that and reads each K/V row once
 * per pass, in memory order:
 *
 *   task = (sequence b, key split s)                 [OpenMP, dynamic]
 *     rows = per KV head, its group's query heads x the new tokens (H/Hkv * Sq <= 128),
 *            packed into one block of Q rows, so each K/V row serves every query head of its
 *            group
 *     for each block of bk keys of the split some row sees, with the row kernels
 *     (run_rows: AVX-512, d_qk and d_v multiples of 32):
 *       the block's and the next block's row addresses (page by page); the kernels
 *       prefetch the next block's rows (into L2) beside the rows they read
 *       per KV head: S^T straight from the K rows (decode_avx512.c; packed, ld = rows, for
 *            up to 16 rows), score pipeline and mask, online softmax
 *       per KV head: O = alpha O + P V straight from the V rows
 *     or else:
 *       K rows of every KV head -> fp32 [hkv][bk][ldk]   key by key: the heads of a key
 *            are adjacent in [.., S, Hkv, d], so the block is one stream (page by page
 *            through the block table); rows DEC_PF keys ahead prefetched
 *       per KV head: S = Q K^T (gemm_rowA on K^T), S^T, score pipeline and mask (scores.h:
 *            softcap, ALiBi; causal, windows), online softmax (softmax_fwd)
 *       V rows likewise, then per KV head O = alpha O + P V (gemm_colA_scaled)
 *     partial (O, m, l) per KV head and split; merged in split order (fa_combine's math)
 *
 * One KV head at a time would read rows Hkv * d elements apart, each on its own 4 KiB
 * page for fp32 d = 128, Hkv = 8: there the hardware prefetchers stop and every row is a
 * TLB miss. The block (bk keys, every KV head) stays in L2. The splits depend on the
 * shapes only (batch, the longest cache) and a split's keys on its sequence's length
 * only, so the result is bitwise the same for any thread count.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "decode.h"
#include "decode_kernels.h"
#include "scores.h"
#include "scratch.h"
#include "state.h"
#include "threads.h"
#include "vecops.h"

#define DEC_MAX_SQ 16      /* new tokens per sequence served */
#define DEC_MAX_ROWS 128   /* query rows per KV head (group x new tokens) */
#define DEC_BK 64          /* keys per block */
#define DEC_PF 16          /* rows prefetched ahead */
#define DEC_TASKS 64       /* tasks aimed for: batch x splits */
#define DEC_MIN_KEYS 512   /* keys per split at least */
#define DEC_MAX_SPLITS 64

int fa_cpu_decode_why(const fa_problem *p)
{
    if (p->layout == FA_LAYOUT_VARLEN || p->q.shape[1] > DEC_MAX_SQ) return FA_CPU_DECODE_SHAPE;
    if (p->has_bias) return FA_CPU_DECODE_BIAS;
    if (p->dropout_p > 0.0f) return FA_CPU_DECODE_DROPOUT;
    if (p->group * p->q.shape[1] > DEC_MAX_ROWS) return FA_CPU_DECODE_ROWS;
    return FA_CPU_DECODE_OK;
}

const char *fa_cpu_decode_reason(int why)
{
    switch (why) {
    case FA_CPU_DECODE_BIAS: return "a bias";
    case FA_CPU_DECODE_DROPOUT: return "dropout";
    case FA_CPU_DECODE_ROWS: return "more than 128 query rows per KV head";
    default: return "";
    }
}

int fa_cpu_decode_splits(const fa_problem *p)
{
    int64_t units = p->batch;
    if (units <= 0 || units >= DEC_TASKS) return 1;
    int64_t s = (DEC_TASKS + units - 1) / units;
    int64_t maxs = p->max_sk / DEC_MIN_KEYS;
    if (s > maxs) s = maxs;
    if (s > DEC_MAX_SPLITS) s = DEC_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* The call's constants (ldb: rows of K^T and S, bk keys). */
typedef struct {
    const fa_problem *p;
    const fa_cpu_kernels *K;
    int64_t sq, nr, ldq, ldk, ldv, ldb, dqk, dv, hkv;
    int nsplit, slow, bk;
    int kt16;         /* bf16/fp16 K straight into K^T (decode_avx512.c) */
    int rowk;         /* scores and P V straight from the cache rows (decode_avx512.c) */
    int kdt, vdt;     /* their element types (FA_CPU_DEC_*) */
    float sc;
    int64_t partsz;   /* floats of one partial: O [nr][ldv], m [ldq], l [ldq] */
} dec_geom;

/* One thread's scratch; the per-KV-head parts are [hkv] slices. */
typedef struct {
    float *qr, *kt, *sr, *s, *kc, *vc, *alpha, *row;
    int64_t *hr, *ir, *lo, *hi;
    const char **rk, **rv;   /* the block's K and V rows of KV head 0 (rowk) */
    const char **nrk, **nrv; /* the next block's (prefetched while the block is read) */
} dec_scratch;

/* Keys per block: the block's K and V rows of every KV head (fp32) within ~512 KiB, so
   they stay in L2 between the load and the products; 16 to 64 keys, a multiple of 16
   (whole register transposes of K). */
static int block_keys(const fa_problem *p, int64_t ldk, int64_t ldv)
{
    int64_t per = p->hkv * (ldk + ldv) * (int64_t)sizeof(float);
    int64_t bk = per > 0 ? ((int64_t)512 << 10) / per / 16 * 16 : 64;
    if (bk > 64) bk = 64;
    if (bk < 16) bk = 16;
    return (int)bk;
}

static int dec_type(fa_dtype t)
{
    return t == FA_BF16 ? FA_CPU_DEC_BF16 : t == FA_F16 ? FA_CPU_DEC_F16 : FA_CPU_DEC_F32;
}

static int64_t scratch_floats(const dec_geom *g)
{
    return g->hkv * (g->ldq * g->ldk + g->bk * (g->ldq + g->ldk + g->ldv) + g->ldq + 2 * g->ldq) +
           (g->dqk + g->ldq) * g->ldb + fa_cpu_pad(g->dv) + 3 * 2 * g->ldq + 4 * 2 * g->bk;
}

static dec_scratch scratch_at(const dec_geom *g, float *base)
{
    dec_scratch w;
    const int64_t n = g->hkv;
    memset(base, 0, sizeof(float) * (size_t)scratch_floats(g));
    w.qr = base; base += n * g->ldq * g->ldk;
    w.s = base; base += n * g->bk * g->ldq;
    w.kc = base; base += n * g->bk * g->ldk;
    w.vc = base; base += n * g->bk * g->ldv;
    w.alpha = base; base += n * g->ldq;
    w.kt = base; base += g->dqk * g->ldb;
    w.sr = base; base += g->ldq * g->ldb;
    w.row = base; base += fa_cpu_pad(g->dv);
    int64_t *ib = (int64_t *)base;
    w.hr = ib; ib += n * g->ldq;
    w.ir = ib; w.lo = ib + g->ldq; w.hi = ib + 2 * g->ldq;
    ib += 3 * g->ldq;
    w.rk = (const char **)ib; w.rv = w.rk + g->bk;
    w.nrk = w.rv + g->bk; w.nrv = w.nrk + g->bk;
    return w;
}

/* Rows of every KV head: query, visible keys (the same for each head), head; Q rows
   fp32 [nr][ldk] per head, ldq rows apart (with rowk: paired order against a bf16 cache,
   bf16 rows for BF16DOT); m, l, O start (the sink enters with split 0). [*j0, *j1):
   the split's keys some row sees. part(hk) is the partial of head hk. */
static int task_rows(const dec_geom *g, const fa_seq *sq, float *parts, int split,
                     dec_scratch *w, int64_t *j0, int64_t *j1)
{
    const fa_problem *p = g->p;
    int nr = (int)g->nr;
    int64_t blo = INT64_MAX, bhi = INT64_MIN;
    for (int r = 0; r < nr; r++) {
        w->ir[r] = r % g->sq;
        fa_visible_range(p, sq, w->ir[r], &w->lo[r], &w->hi[r]);
        if (w->lo[r] < w->hi[r]) {
            if (w->lo[r] < blo) blo = w->lo[r];
            if (w->hi[r] > bhi) bhi = w->hi[r];
        }
    }
    for (int64_t hk = 0; hk < g->hkv; hk++) {
        float *o = parts + g->partsz * g->nsplit * hk, *m = o + g->nr * g->ldv, *l = m + g->ldq;
        int64_t *hr = w->hr + hk * g->ldq;
        for (int r = 0; r < nr; r++) hr[r] = hk * p->group + r / g->sq;
        for (int r = 0; r < g->ldq; r++) {
            int first = split == 0 && p->sinks && r < nr;
            m[r] = first ? p->sinks[hr[r]] : -INFINITY;
            l[r] = first ? 1.0f : 0.0f;
        }
        memset(o, 0, sizeof(float) * (size_t)(g->nr * g->ldv));
    }
    int64_t nkb = fa_sz_ceil_div(sq->sk, g->bk);
    *j0 = nkb * split / g->nsplit * g->bk;
    *j1 = nkb * (split + 1) / g->nsplit * g->bk;
    if (*j1 > sq->sk) *j1 = sq->sk;
    if (blo >= bhi) return 0;
    if (*j0 < blo) *j0 = blo;
    if (*j1 > bhi) *j1 = bhi;
    if (*j0 >= *j1) return 0;
    size_t qsz = fa_dtype_size(p->q.dtype);
    for (int64_t hk = 0; hk < g->hkv; hk++) {
        const int64_t *hr = w->hr + hk * g->ldq;
        float *q = w->qr + hk * g->ldq * g->ldk;
        for (int r = 0; r < nr; r++) {
            const char *src = (const char *)p->q.data +
                              fa_qrow(&p->q, sq, w->ir[r], hr[r]) * (int64_t)qsz;
            if (g->rowk && g->kdt == FA_CPU_DEC_BF16DOT)
                memcpy(q + r * g->ldk, src, (size_t)g->dqk * qsz);
            else g->K->cvt_in(q + r * g->ldk, src, g->dqk, p->q.dtype);
        }
#ifdef FA_HAVE_AVX512
        if (g->rowk && g->kdt == FA_CPU_DEC_BF16) fa_cpu_decode_pair_avx512(q, g->ldk, nr, g->dqk);
#endif
    }
    return 1;
}

/* First byte of key j's row of KV head hk in t (page by page through the block table). */
static const char *kv_row(const fa_problem *p, const fa_tensor *t, const fa_seq *sq,
                          int64_t b, int64_t j, int64_t hk, size_t sz)
{
    return (const char *)t->data + fa_krow(p, t, sq, b, j, hk) * (int64_t)sz;
}

/* Rows j0 .. j0+nk-1 of every KV head of t -> dst [hk][bk][ld] fp32, key by key (the
   heads of a key are adjacent in the usual [.., S, Hkv, d] layout: one stream); rows
   DEC_PF keys ahead (below jend) are prefetched. dst NULL: the rows are read in place
   (direct_rows), and the next block's rows are prefetched instead. Returns 1 when a row
   holds Inf/NaN and check is set. */
static int load_rows(const dec_geom *g, const fa_tensor *t, int64_t d, int64_t ld,
                     const fa_seq *sq, int64_t b, int64_t j0, int nk, int64_t jend,
                     float *dst, int check)
{
    const int pf = dst ? DEC_PF : g->bk;
    const fa_problem *p = g->p;
    size_t sz = fa_dtype_size(t->dtype);
    int64_t bytes = d * (int64_t)sz;
    int bad = 0;
    for (int j = 0; j < nk; j++) {
        for (int64_t hk = 0; hk < g->hkv; hk++) {
            if (j0 + j + pf < jend) fa_cpu_prefetch_span(kv_row(p, t, sq, b, j0 + j + pf, hk, sz), bytes, 0, 0);
            if (!dst) continue;
            float *row = dst + (hk * g->bk + j) * ld;
            g->K->cvt_in(row, kv_row(p, t, sq, b, j0 + j, hk, sz), d, t->dtype);
            if (check && fa_cpu_nonfinite(row, 1, d, ld)) bad = 1;
        }
    }
    return bad;
}

/* Are the block's rows one row stride (stride[1]) apart: a contiguous cache, or a block
   within one page? Shapes and the block table decide, never threads. */
static int one_stride(const fa_problem *p, int64_t j0, int nk)
{
    return !p->block_table || j0 / p->page_size == (j0 + nk - 1) / p->page_size;
}

/* Can the block's rows of t be read in place (fp32, one_stride)? */
static int direct_rows(const fa_problem *p, const fa_tensor *t, int64_t j0, int nk)
{
    return t->dtype == FA_F32 && one_stride(p, j0, nk);
}

/* Key j0's row of KV head hk in an fp32 t. */
static const float *row_f32(const fa_problem *p, const fa_tensor *t, const fa_seq *sq,
                            int64_t b, int64_t j0, int64_t hk)
{
    return (const float *)t->data + fa_krow(p, t, sq, b, j0, hk);
}

/* O = alpha O + P V for one KV head (s, vc [nk][ldvc], alpha its slices). With Inf/NaN in V and a
   partly masked block each row sums only its keys (0 * Inf would reach rows that do not
   see the key). */
static void pv(const dec_geom *g, const dec_scratch *w, const float *s, const float *vc,
               int64_t ldvc, const float *alpha, int64_t j0, int nk, int full, int vbad, float *o)
{
    const fa_cpu_kernels *K = g->K;
    const int64_t ldq = g->ldq, ldv = g->ldv, dv = g->dv;
    int nr = (int)g->nr;
    if ((full || !vbad) && K->gemm_colA_scaled) {
        K->gemm_colA_scaled(nr, (int)dv, nk, s, ldq, vc, ldvc, o, ldv, alpha);
        return;
    }
    for (int r = 0; r < nr; r++)
        if (alpha[r] != 1.0f)
            for (int64_t c = 0; c < dv; c++) o[r * ldv + c] *= alpha[r];
    if (full || !vbad) {
        K->gemm_colA(nr, (int)dv, nk, s, ldq, vc, ldvc, o, ldv, 1);
        return;
    }
    for (int r = 0; r < nr; r++) {
        int64_t a = w->lo[r] > j0 ? w->lo[r] - j0 : 0;
        int64_t e = w->hi[r] < j0 + nk ? w->hi[r] - j0 : nk;
        for (int64_t j = a; j < e; j++) {
            float pj = s[j * ldq + r];
            for (int64_t c = 0; c < dv; c++) o[r * ldv + c] += pj * vc[j * ldvc + c];
        }
    }
}

/* S^T [nk][ldq] of KV head hk's rows against the block's keys, as S = Q K^T on K^T:
   the product's columns are then the keys (whole vectors) rather than the few rows of a
   decode call (S^T = K Q^T with 4 rows fills a quarter of an AVX-512 vector); the two
   transposes are passes over L1/L2 data. k: the block's K rows of head hk, ld apart
   (fp32; 16-bit rows straight from the cache with kt16). */
static void scores(const dec_geom *g, dec_scratch *w, int64_t hk, const void *k, int64_t ld,
                   int kt16, int nk, float *s)
{
#ifdef FA_HAVE_AVX512
    if (kt16)
        fa_cpu_decode_kt16_avx512(w->kt, g->ldb, (const uint16_t *)k, ld, nk, g->dqk,
                                  g->p->k.dtype == FA_F16);
    else
#endif
        fa_cpu_transpose_f32(g->K, w->kt, g->ldb, (const float *)k, ld, nk, g->dqk);
    (void)kt16;
    g->K->gemm_rowA((int)g->nr, nk, (int)g->dqk, w->qr + hk * g->ldq * g->ldk, g->ldk, w->kt,
                    g->ldb, w->sr, g->ldb, 0);
    fa_cpu_transpose_f32(g->K, s, g->ldq, w->sr, g->ldb, (int)g->nr, nk);
}

#ifdef FA_HAVE_AVX512
/* The online softmax of R <= 16 rows (R a power of two) whose S^T is packed, ld = R:
   nkp keys (nkp * R a multiple of 16), seen by softmax_fwd as nkp * R / 16 keys of 16
   columns (column c: row c % R). Every column of a row starts from the row's new max, so
   their exps share one reference; their sums add up to the row's, and alpha = exp(m -
   new max) once per row. */
static void softmax_packed(const dec_geom *g, float *s, int nkp, int R, float *m, float *l,
                           float *alpha)
{
    float bm[16], mt[16], lt[16], at[16];
    const int nv = nkp * R / 16;
    fa_cpu_decode_colmax_avx512(s, nv, g->sc, bm);
    for (int c = 0; c < 16; c++) {
        mt[c] = m[c % R];
        for (int x = c % R; x < 16; x += R) mt[c] = bm[x] > mt[c] ? bm[x] : mt[c];
        lt[c] = 0.0f;
    }
    g->K->softmax_fwd(s, nv, 16, 16, g->sc, mt, lt, at);
    for (int r = 0; r < R; r++) {
        float mu = mt[r] == -INFINITY ? 0.0f : mt[r], sum = 0.0f;
        for (int x = r; x < 16; x += R) sum += lt[x];
        alpha[r] = expf(m[r] - mu);
        l[r] = l[r] * alpha[r] + sum;
        m[r] = mt[r];
    }
}

/* Scores of KV head hk's rows against the block's nk keys (rows w->rk), their pipeline,
   mask and online softmax: P in s, S^T ld = R (packed, nr <= 16: R = nr rounded up to a
   power of two, keys to nkp) or ldq. Returns the ld. */
static int64_t head_scores(const dec_geom *g, const fa_seq *sq, int64_t b, int64_t hk,
                           int64_t jb, int nk, int npf, int full, dec_scratch *w, float *s,
                           float *m)
{
    const fa_problem *p = g->p;
    const int nr = (int)g->nr;
    int R = 1;
    while (R < nr) R *= 2;
    const int packed = nr <= 16;
    const int64_t ld = packed ? R : g->ldq;
    fa_cpu_decode_qk_avx512(s, ld, w->qr + hk * g->ldq * g->ldk, g->ldk, nr, w->rk, w->nrk,
                            npf, hk * p->k.stride[2] * (int64_t)fa_dtype_size(p->k.dtype), nk,
                            g->dqk, g->kdt);
    if (g->slow) fa_cpu_score_pass(p, sq, b, s, nk, nr, ld, jb, w->hr + hk * g->ldq, w->ir, NULL);
    if (!full) fa_cpu_mask_pass(s, nk, nr, ld, jb, w->lo, w->hi);
    float *l = m + g->ldq, *alpha = w->alpha + hk * g->ldq;
    if (!packed) {
        g->K->softmax_fwd(s, nk, nr, ld, g->sc, m, l, alpha);
        return ld;
    }
    int nkp = (nk * R + 15) / 16 * 16 / R;
    for (int64_t x = (int64_t)nk * R; x < (int64_t)nkp * R; x++) s[x] = -INFINITY;
    softmax_packed(g, s, nkp, R, m, l, alpha);
    return ld;
}

/* The K and V row addresses of KV head 0 for keys jb .. jb+nk-1 (page by page). */
static void block_rows(const fa_problem *p, const fa_seq *sq, int64_t b, int64_t jb, int nk,
                       const char **rk, const char **rv)
{
    for (int j = 0; j < nk; j++) {
        rk[j] = kv_row(p, &p->k, sq, b, jb + j, 0, fa_dtype_size(p->k.dtype));
        rv[j] = kv_row(p, &p->v, sq, b, jb + j, 0, fa_dtype_size(p->v.dtype));
    }
}

static void swap_rows(const char ***a, const char ***b)
{
    const char **t = *a;
    *a = *b;
    *b = t;
}

/* The keys [j0, j1) of sequence b with the row kernels (rowk): per block the row
   addresses of KV head 0 and of the next block (page by page), then per KV head the
   scores, their pipeline and softmax, and P V; the kernels prefetch the next block's row
   of the same head beside each row they read. On a partly masked block each row's P V
   runs over its own keys only (0 * Inf would reach rows that do not see a key). */
static void run_rows(const dec_geom *g, const fa_seq *sq, int64_t b, int64_t j0, int64_t j1,
                     dec_scratch *w, float *mine)
{
    const fa_problem *p = g->p;
    const int nr = (int)g->nr;
    const int64_t ldq = g->ldq, step = g->partsz * g->nsplit;
    const int64_t voff = p->v.stride[2] * (int64_t)fa_dtype_size(p->v.dtype);
    int64_t lds = ldq;
    if (j0 < j1) block_rows(p, sq, b, j0, (int)(j1 - j0 < g->bk ? j1 - j0 : g->bk), w->rk, w->rv);
    for (int64_t jb = j0; jb < j1; jb += g->bk) {
        int nk = (int)(j1 - jb < g->bk ? j1 - jb : g->bk);
        int64_t jn = jb + nk;
        int nn = jn >= j1 ? 0 : (int)(j1 - jn < g->bk ? j1 - jn : g->bk);
        block_rows(p, sq, b, jn, nn, w->nrk, w->nrv);
        int full = 1;
        for (int r = 0; r < nr && full; r++)
            if (w->lo[r] > jb || w->hi[r] < jb + nk) full = 0;
        for (int64_t hk = 0; hk < g->hkv; hk++)
            lds = head_scores(g, sq, b, hk, jb, nk, nn, full, w, w->s + hk * g->bk * ldq,
                              mine + step * hk + g->nr * g->ldv);
        for (int64_t hk = 0; hk < g->hkv; hk++) {
            const float *s = w->s + hk * g->bk * ldq, *al = w->alpha + hk * ldq;
            float *o = mine + step * hk;
            if (full) {
                fa_cpu_decode_pv_avx512(o, g->ldv, al, s, lds, 0, nr, w->rv, w->nrv, nn,
                                        hk * voff, 0, nk, g->dv, g->vdt);
                continue;
            }
            for (int r = 0; r < nr; r++) {
                int64_t a = w->lo[r] > jb ? w->lo[r] - jb : 0;
                int64_t e = w->hi[r] < jb + nk ? w->hi[r] - jb : nk;
                fa_cpu_decode_pv_avx512(o, g->ldv, al, s, lds, r, 1, w->rv, w->nrv, nn,
                                        hk * voff, (int)a, (int)(e > a ? e : a), g->dv,
                                        g->vdt);
            }
        }
        swap_rows(&w->rk, &w->nrk);
        swap_rows(&w->rv, &w->nrv);
    }
    if (g->vdt == FA_CPU_DEC_BF16)
        for (int64_t hk = 0; hk < g->hkv; hk++)
            fa_cpu_decode_unpair_avx512(mine + step * hk, g->ldv, nr, g->dv);
}
#endif

/* Split `split` of sequence b, every KV head: the unnormalised O, m and l of its rows
   into the heads' partials (parts: head 0's, split 0; heads nsplit partials apart). */
static void run_task(const dec_geom *g, int64_t b, int split, dec_scratch *w, float *parts)
{
    const fa_problem *p = g->p;
    fa_seq sq = fa_problem_seq(p, b);
    int64_t j0, j1;
    float *mine = parts + g->partsz * split;
    if (!task_rows(g, &sq, mine, split, w, &j0, &j1)) return;
#ifdef FA_HAVE_AVX512
    if (g->rowk) {
        run_rows(g, &sq, b, j0, j1, w, mine);
        return;
    }
#endif
    const int nr = (int)g->nr;
    const int64_t ldq = g->ldq, step = g->partsz * g->nsplit;
    for (int64_t jb = j0; jb < j1; jb += g->bk) {
        int nk = (int)(j1 - jb < g->bk ? j1 - jb : g->bk);
        int full = 1;
        for (int r = 0; r < nr && full; r++)
            if (w->lo[r] > jb || w->hi[r] < jb + nk) full = 0;
        int kdir = direct_rows(p, &p->k, jb, nk), vdir = full && direct_rows(p, &p->v, jb, nk);
        int k16 = g->kt16 && one_stride(p, jb, nk);
        load_rows(g, &p->k, g->dqk, g->ldk, &sq, b, jb, nk, j1, kdir || k16 ? NULL : w->kc, 0);
        for (int64_t hk = 0; hk < g->hkv; hk++) {
            float *s = w->s + hk * g->bk * ldq, *m = mine + step * hk + g->nr * g->ldv;
            if (kdir || k16)
                scores(g, w, hk, kv_row(p, &p->k, &sq, b, jb, hk, fa_dtype_size(p->k.dtype)),
                       p->k.stride[1], k16, nk, s);
            else
                scores(g, w, hk, w->kc + hk * g->bk * g->ldk, g->ldk, 0, nk, s);
            if (g->slow)
                fa_cpu_score_pass(p, &sq, b, s, nk, nr, ldq, jb, w->hr + hk * ldq, w->ir, NULL);
            if (!full) fa_cpu_mask_pass(s, nk, nr, ldq, jb, w->lo, w->hi);
            g->K->softmax_fwd(s, nk, nr, ldq, g->sc, m, m + ldq, w->alpha + hk * ldq);
        }
        int vbad = load_rows(g, &p->v, g->dv, g->ldv, &sq, b, jb, nk, j1, vdir ? NULL : w->vc,
                             !full);
        for (int64_t hk = 0; hk < g->hkv; hk++) {
            const float *vc = vdir ? row_f32(p, &p->v, &sq, b, jb, hk) : w->vc + hk * g->bk * g->ldv;
            pv(g, w, w->s + hk * g->bk * ldq, vc, vdir ? p->v.stride[1] : g->ldv,
               w->alpha + hk * ldq, jb, nk, full, vbad, mine + step * hk);
        }
    }
}

/* Row r of KV head hk's rows: out = o / l, lse = m + log l (zeros, -inf for no key). */
static void store_row(const dec_geom *g, const fa_seq *sq, int64_t b, int64_t hk, int r,
                      const float *orow, float m, float l, const float *zero)
{
    const fa_problem *p = g->p;
    int64_t h = hk * p->group + r / g->sq, i = r % g->sq;
    void *dst = (char *)p->out.data + fa_qrow(&p->out, sq, i, h) * (int64_t)fa_dtype_size(p->out.dtype);
    if (l == 0.0f) g->K->cvt_out(dst, p->out.dtype, zero, p->dv, 1.0f);
    else g->K->cvt_out(dst, p->out.dtype, orow, p->dv, 1.0f / l);
    if (p->lse) p->lse[fa_lse_index(p, sq, b, h, i)] = l == 0.0f ? -INFINITY : m + logf(l);
}

/* The nsplit partials of (b, hk) merged in split order, then written. */
static void merge(const dec_geom *g, const float *parts, int64_t b, int64_t hk, float *row,
                  const float *zero)
{
    const fa_problem *p = g->p;
    fa_seq sq = fa_problem_seq(p, b);
    const float *base = parts + g->partsz * g->nsplit * (b * p->hkv + hk);
    const int64_t om = g->nr * g->ldv, ol = om + g->ldq;
    for (int r = 0; r < g->nr; r++) {
        float M = -INFINITY, L = 0.0f;
        for (int s = 0; s < g->nsplit; s++) {
            const float *pt = base + g->partsz * s;
            if (pt[ol + r] != 0.0f && pt[om + r] > M) M = pt[om + r];
        }
        memset(row, 0, sizeof(float) * (size_t)p->dv);
        for (int s = 0; s < g->nsplit; s++) {
            const float *pt = base + g->partsz * s;
            if (pt[ol + r] == 0.0f) continue;
            float e = expf(pt[om + r] - M);
            L += pt[ol + r] * e;
            for (int64_t c = 0; c < p->dv; c++) row[c] += e * pt[r * g->ldv + c];
        }
        store_row(g, &sq, b, hk, r, row, M, L, zero);
    }
}

fa_status fa_cpu_decode(fa_context *ctx, const fa_problem *p)
{
    if (fa_forward_is_empty(p)) return FA_OK;
    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    dec_geom g;
    int ovf = 0;
    g.p = p;
    g.K = st->k;
    g.sq = p->q.shape[1];
    g.nr = p->group * g.sq;
    g.ldq = fa_cpu_ld(g.nr);
    g.ldk = fa_sz_ld(p->dqk, &ovf);
    g.ldv = fa_sz_ld(p->dv, &ovf);
    g.dqk = p->dqk;
    g.dv = p->dv;
    g.hkv = p->hkv;
    g.bk = block_keys(p, g.ldk, g.ldv);
    g.ldb = fa_cpu_ld(g.bk);
    g.nsplit = fa_cpu_decode_splits(p);
    g.kt16 = st->isa >= FA_CPU_AVX512 && (p->k.dtype == FA_BF16 || p->k.dtype == FA_F16);
    g.kdt = p->k.dtype == FA_BF16 && st->bf16dot ? FA_CPU_DEC_BF16DOT : dec_type(p->k.dtype);
    g.vdt = dec_type(p->v.dtype);
    g.rowk = st->isa >= FA_CPU_AVX512 && p->dqk % 32 == 0 && p->dv % 32 == 0;
    g.slow = fa_cpu_slow_scores(p);
    g.sc = g.slow ? 1.0f : p->scale;
    g.partsz = fa_sz_pad(fa_sz_add(fa_sz_mul(g.nr, g.ldv, &ovf), 2 * g.ldq, &ovf), &ovf);
    int64_t units = p->batch * p->hkv, ntask = p->batch * g.nsplit;
    int nt = fa_cpu_threads(ctx);
    if (ntask < nt) nt = (int)ntask;
    int64_t per = ovf ? 0 : fa_sz_pad(scratch_floats(&g), &ovf);
    int64_t scrsz = fa_sz_mul(per, nt, &ovf);
    int64_t partall = fa_sz_mul(g.partsz, fa_sz_mul(units, g.nsplit, &ovf), &ovf);
    if (ovf)
        return fa_set_error(ctx, FA_ERR_NO_MEMORY, "cpu backend: the decode scratch for head "
                            "dims %lld/%lld does not fit in 64 bits", (long long)p->dqk,
                            (long long)p->dv);
    float *scr = fa_cpu_alloc_raw(scrsz), *parts = fa_cpu_alloc_raw(partall);
    float *zero = fa_cpu_alloc(g.ldv);
    if (!scr || !parts || !zero) {
        free(scr); free(parts); free(zero);
        return fa_set_error(ctx, FA_ERR_NO_MEMORY, "cpu backend: cannot allocate the decode "
                            "scratch (%lld + %lld floats)", (long long)scrsz, (long long)partall);
    }
#pragma omp parallel num_threads(nt)
    {
        dec_scratch w = scratch_at(&g, scr + per * fa_cpu_tid());
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++)
            run_task(&g, t / g.nsplit, (int)(t % g.nsplit), &w,
                     parts + g.partsz * g.nsplit * p->hkv * (t / g.nsplit));
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) merge(&g, parts, u / p->hkv, u % p->hkv, w.row, zero);
    }
    free(scr); free(parts); free(zero);
    return FA_OK;
}
