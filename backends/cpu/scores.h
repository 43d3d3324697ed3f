/* scores.h - the per-score passes over an S^T tile (key-major, kernels.h): the feature
 * pipeline (scale, softcap, ALiBi, bias), the mask and the dropout keep factors. */
#ifndef FA_CPU_SCORES_H
#define FA_CPU_SCORES_H

#include <math.h>
#include <stdint.h>
#include "problem.h"
#include "dtype.h"

/* Does the call need the per-element score pipeline (the "slow" pre-pass)? */
static inline int fa_cpu_slow_scores(const fa_problem *p)
{
    return p->softcap > 0.0f || p->alibi || p->has_bias || !(p->scale > 0.0f);
}

/* Apply s = scale*qk ; softcap ; + alibi ; + bias to an S^T tile in place, key j0 + j,
   query row r at (b, h[r], i[r]). t (optional) receives tanh(scale*qk / softcap). */
static inline void fa_cpu_score_pass(const fa_problem *p, const fa_seq *sq, int64_t b,
                                     float *s, int nk, int nq, int64_t ld, int64_t j0,
                                     const int64_t *hr, const int64_t *ir, float *t)
{
    float scale = p->scale, cap = p->softcap;
    for (int r = 0; r < nq; r++) {
        int64_t h = hr[r], i = ir[r];
        float slope = p->alibi ? p->alibi[h] : 0.0f;
        int64_t pos = i + sq->off;
        int64_t bidx = p->has_bias ? fa_bias_index(p, sq->tb, i, h, 0) : 0;
        for (int j = 0; j < nk; j++) {
            float x = s[j * ld + r] * scale;
            if (cap > 0.0f) {
                float th = tanhf(x / cap);
                if (t) t[j * ld + r] = th;
                x = cap * th;
            }
            if (p->alibi) {
                int64_t dist = pos - (j0 + j);
                if (dist < 0) dist = -dist;
                x += -slope * (float)dist;
            }
            if (p->has_bias) x += fa_load(p->bias.data, p->bias.dtype, bidx + j0 + j);
            s[j * ld + r] = x;
        }
    }
}

/* -inf outside each row's visible key range [lo[r], hi[r]). When lo and hi are
   non-decreasing in r (one head's consecutive queries: causal, windows), the masked
   queries of key j are a prefix (hi <= j) and a suffix (lo > j) of the row: filled as two
   contiguous runs per key instead of a compare per score. */
static inline void fa_cpu_mask_pass(float *s, int nk, int nq, int64_t ld, int64_t j0,
                                    const int64_t *lo, const int64_t *hi)
{
    int mono = 1;
    for (int r = 1; r < nq && mono; r++)
        if (lo[r] < lo[r - 1] || hi[r] < hi[r - 1]) mono = 0;
    if (mono) {
        int r1 = 0, r2 = 0;
        for (int j = 0; j < nk; j++) {
            int64_t jj = j0 + j;
            float *row = s + j * ld;
            while (r1 < nq && hi[r1] <= jj) r1++;
            while (r2 < nq && lo[r2] <= jj) r2++;
#pragma omp simd
            for (int r = 0; r < r1; r++) row[r] = -INFINITY;
#pragma omp simd
            for (int r = r2 > r1 ? r2 : r1; r < nq; r++) row[r] = -INFINITY;
        }
        return;
    }
    for (int r = 0; r < nq; r++) {
        for (int j = 0; j < nk; j++) {
            int64_t jj = j0 + j;
            if (jj < lo[r] || jj >= hi[r]) s[j * ld + r] = -INFINITY;
        }
    }
}

/* Dropout keep factors of an S^T tile: f[j][r] = keep ? kept : 0 multiplied into d0 and
   (when not NULL) d1, same layout. The backward passes kept = keep_scale; the forward
   passes 1 (a mask) and applies keep_scale with 1/l to the finished row (forward.c). */
static inline void fa_cpu_dropout_pass(const fa_problem *p, int64_t b, int nk, int nq,
                                       int64_t ld, int64_t j0, const int64_t *hr,
                                       const int64_t *ir_drop, float kept, float *d0,
                                       float *d1)
{
    const fa_dropout_key *key = &p->drop;
    float ks = kept;
    for (int r = 0; r < nq; r++) {
        int64_t jj = j0 & ~(int64_t)3;
        uint32_t w[4];
        for (; jj < j0 + nk; jj += 4) {
            fa_dropout_words(key, b, hr[r], ir_drop[r], jj, w);
            for (int e = 0; e < 4; e++) {
                int64_t j = jj + e - j0;
                if (j < 0 || j >= nk) continue;
                float f = w[e] >= key->threshold ? ks : 0.0f;
                d0[j * ld + r] *= f;
                if (d1) d1[j * ld + r] *= f;
            }
        }
    }
}

#endif
