/* reference_tile.c - the reference backend's tile helpers, shared by the forward
 * (reference.c) and the backward (reference_backward.c): scratch, the score of one pair,
 * and the scores of one tile with its rows' visible keys. */
#include <stdlib.h>
#include "reference_tile.h"

float *fa_ref_alloc(int64_t rows, int64_t cols)
{
    int64_t n;
    if (rows < 0 || cols < 0 || __builtin_mul_overflow(rows, cols, &n)) return NULL;
    return calloc(n > 0 ? (size_t)n : 1, sizeof(float));
}

void fa_ref_longest(const fa_problem *p, int64_t *sq, int64_t *sk)
{
    *sq = *sk = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        const fa_seq s = fa_problem_seq(p, b);
        if (s.sq > *sq) *sq = s.sq;
        if (s.sk > *sk) *sk = s.sk;
    }
}

/* s = scale*qk ; softcap ; + ALiBi ; + bias. The mask is applied by the caller. */
float fa_problem_score(const fa_problem *p, const fa_seq *s, int64_t b, int64_t h,
                       int64_t i, int64_t j, float qk)
{
    float x = p->scale * qk;                           /* s = scale * q.k       */
    x = fa_softcap(x, p->softcap);                     /* s = cap*tanh(s/cap)   */
    x += fa_alibi(p, s, h, i, j);                      /* s -= slope*|i+off-j|  */
    if (p->has_bias)                                   /* s += bias[b, i, h, j] */
        x += fa_load(p->bias.data, p->bias.dtype, fa_bias_index(p, b, i, h, j));
    return x;
}

void fa_ref_block_keys(const fa_problem *p, const fa_seq *s, int64_t i0, int64_t i1,
                       int64_t *lo, int64_t *hi)
{
    int any = 0;
    *lo = *hi = 0;
    for (int64_t i = i0; i < i1; i++) {
        int64_t a, e;
        fa_visible_range(p, s, i, &a, &e);
        if (a >= e) continue;                          /* this row sees no key */
        if (!any || a < *lo) *lo = a;
        if (!any || e > *hi) *hi = e;
        any = 1;
    }
}

void fa_ref_score_tile(const fa_problem *p, const fa_seq *s, int64_t b, int64_t h,
                       int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                       const float *Q, const float *K, float *S, int64_t ldS,
                       int64_t *lo, int64_t *hi)
{
    const int64_t d = p->dqk;
    for (int64_t r = 0; r < nr; r++) {
        int64_t a, e;
        fa_visible_range(p, s, i0 + r, &a, &e);        /* the mask: causal and window */
        a = (a > j0 ? a : j0) - j0;
        e = (e < j0 + nc ? e : j0 + nc) - j0;
        if (e < a) e = a;
        lo[r] = a;
        hi[r] = e;
        for (int64_t c = a; c < e; c++) {
            const float *q = Q + r * d, *k = K + c * d;
            float qk = 0.0f;
            for (int64_t x = 0; x < d; x++) qk += q[x] * k[x];
            S[r * ldS + c] = fa_problem_score(p, s, b, h, i0 + r, j0 + c, qk);
        }
    }
}
