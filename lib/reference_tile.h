/* reference_tile.h - the tile helpers of the reference backend (reference_tile.c), shared
 * by its forward (reference.c) and backward (reference_backward.c). */
#ifndef FA_REFERENCE_TILE_H
#define FA_REFERENCE_TILE_H

#include <math.h>
#include "backend.h"
#include "dtype.h"

/* The score of query i against key j of sequence b, head h, before the mask, from the raw
   dot product qk = q_i . k_j:   s = scale*qk ; softcap ; + ALiBi ; + bias. */
float fa_problem_score(const fa_problem *p, const fa_seq *s, int64_t b, int64_t h,
                       int64_t i, int64_t j, float qk);

/* Keys [*lo, *hi) that some query row in [i0, i1) of sequence s can see (the union of
   the rows' visible ranges). Empty (*lo == *hi == 0) when no row sees any key. */
void fa_ref_block_keys(const fa_problem *p, const fa_seq *s, int64_t i0, int64_t i1,
                       int64_t *lo, int64_t *hi);

/* S_ij for the rows [i0, i0 + nr) and keys [j0, j0 + nc) of one tile, from fp32 tiles
   Q [nr, d_qk] and K [nc, d_qk] (row-major): S[r * ldS + c] = score of (i0 + r, j0 + c).
   Row r's visible keys in the tile are c in [lo[r], hi[r]); only those entries are
   written (the mask is "not computed", so a NaN in a masked key never reaches the row). */
void fa_ref_score_tile(const fa_problem *p, const fa_seq *s, int64_t b, int64_t h,
                       int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                       const float *Q, const float *K, float *S, int64_t ldS,
                       int64_t *lo, int64_t *hi);

/* exp(a - b) for b >= a, with a masked (-inf) a giving exactly 0. This is the guard that
   keeps exp(-inf - -inf) = exp(NaN) out of fully masked rows. A NaN a stays NaN. */
static inline float fa_ref_exp_diff(float a, float b)
{
    return a == -INFINITY ? 0.0f : expf(a - b);
}

/* max(a, b) that propagates NaN (fmaxf would drop it and hide a NaN input). */
static inline float fa_ref_max(float a, float b)
{
    return (a > b || a != a) ? a : b;
}

/* The longest query and key sequence of the batch. Scratch is sized from these, not from
   p->max_sq / p->max_sk, which for varlen are only caller-given upper bounds. */
void fa_ref_longest(const fa_problem *p, int64_t *sq, int64_t *sk);

/* Scratch tile sizes actually used for a problem: the request, or the default, clamped
   to the longest sequence (so a huge request on a short problem allocates little). */
static inline int64_t fa_ref_tile(int requested, int def, int64_t longest)
{
    int64_t t = requested > 0 ? requested : def;
    if (longest < 1) longest = 1;
    return t < longest ? t : longest;
}

/* n elements starting at element off of a tensor, converted to / from fp32. */
static inline void fa_ref_load(const fa_tensor *t, int64_t off, int64_t n, float *dst)
{
    for (int64_t c = 0; c < n; c++) dst[c] = fa_load(t->data, t->dtype, off + c);
}
static inline void fa_ref_store(const fa_tensor *t, int64_t off, int64_t n, const float *src)
{
    for (int64_t c = 0; c < n; c++) fa_store(t->data, t->dtype, off + c, src[c]);
}

/* Zeroed fp32 scratch of rows x cols elements (never a NULL "success" for 0); NULL when
   the product does not fit int64 or memory is short. */
float *fa_ref_alloc(int64_t rows, int64_t cols);

#endif /* FA_REFERENCE_TILE_H */
