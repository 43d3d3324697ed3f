/* problem.h - one validated, normalized description of an attention call.
 *
 * The API layer (api.c) validates the arguments of fa_forward, fa_backward, the varlen and
 * KV-cache variants once, and turns them into an fa_problem. Backends implement just two
 * operations on it, forward and backward, and never look at the public argument lists.
 * The accessors below give every backend the same meaning of "sequence b", "row i",
 * "key j", "visible", "bias", "dropout".
 *
 * Shapes (elements): q [.., Sq, H, d_qk], k [.., Sk, Hkv, d_qk], v [.., Sk, Hkv, d_v],
 * out/dout [.., Sq, H, d_v]; grad_q/grad_k/grad_v (public dq/dk/dv) like q/k/v. All stride[3] == 1.
 */
#ifndef FA_PROBLEM_H
#define FA_PROBLEM_H

#include <math.h>
#include <stdint.h>
#include "flashattn.h"
#include "philox.h"

typedef enum {
    FA_LAYOUT_DENSE = 0,   /* [B, S, H, d] tensors, every sequence the same length   */
    FA_LAYOUT_VARLEN,      /* [1, total, H, d] packed with cu_seqlens prefix sums     */
    FA_LAYOUT_KVCACHE      /* q dense; k/v a contiguous or paged cache                */
} fa_layout;

typedef struct fa_problem {
    fa_layout layout;
    int64_t batch;         /* number of sequences                                   */
    int64_t hq, hkv;       /* query heads, KV heads; hq % hkv == 0                   */
    int64_t group;         /* hq / hkv: query head h reads KV head h / group        */
    int64_t dqk, dv;       /* head dims                                             */
    int64_t max_sq, max_sk;/* upper bounds of the per-sequence lengths              */

    /* Forward: inputs q, k, v; outputs out, lse (lse may be NULL).
       Backward: inputs q, k, v, out, dout, lse_in; outputs grad_q, grad_k, grad_v (the
       public dq, dk, dv: renamed here because dv is the head dim), dsinks. */
    fa_tensor q, k, v, out, dout, grad_q, grad_k, grad_v;
    float       *lse;      /* forward output, or NULL                               */
    const float *lse_in;   /* backward input                                        */
    float       *dsinks;   /* backward output [hq] or NULL                          */

    /* varlen */
    const int32_t *cu_q, *cu_k;   /* [batch + 1] */
    /* kvcache: k/v are the cache. Keys of sequence b: cache_seqlens[b] + s_new. */
    const int32_t *cache_seqlens; /* [batch], the lengths before the append         */
    int64_t        s_new;         /* rows appended per sequence (0 without k_new)   */
    const int32_t *block_table;   /* [batch, max_pages] or NULL (contiguous cache)  */
    int64_t        max_pages, page_size;

    /* Options, resolved. */
    float   scale;          /* never 0: the default 1/sqrt(d_qk) is filled in       */
    fa_causal causal;
    int64_t window_left;    /* -1 = unbounded                                       */
    int64_t window_right;   /* -1 = unbounded; 0 when causal                        */
    float   softcap;        /* 0 = off                                              */
    const float *alibi;     /* [hq] or NULL                                         */
    const float *sinks;     /* [hq] or NULL                                         */
    int     has_bias;
    fa_tensor bias;         /* [B, Sq, H, Sk] with broadcast dims given stride 0    */
    float   dropout_p;      /* 0 = off                                              */
    fa_dropout_key drop;    /* valid when dropout_p > 0                             */
    int     deterministic;
} fa_problem;

/* One sequence of the batch, resolved. */
typedef struct {
    int64_t tb;     /* index into the tensors' batch dimension (0 for varlen)          */
    int64_t q0, k0; /* first row of this sequence in q/out and in k/v (varlen), else 0 */
    int64_t sq, sk; /* query and key lengths                                           */
    int64_t off;    /* alignment: query i sits at key position i + off                 */
    int64_t drop_i0;/* dropout row index of query 0 (cache_seqlens[b] for kvcache)     */
} fa_seq;

static inline fa_seq fa_problem_seq(const fa_problem *p, int64_t b)
{
    fa_seq s;
    s.tb = b; s.q0 = 0; s.k0 = 0; s.drop_i0 = 0;
    switch (p->layout) {
    case FA_LAYOUT_VARLEN:
        s.tb = 0;
        s.q0 = p->cu_q[b]; s.sq = p->cu_q[b + 1] - p->cu_q[b];
        s.k0 = p->cu_k[b]; s.sk = p->cu_k[b + 1] - p->cu_k[b];
        break;
    case FA_LAYOUT_KVCACHE:
        s.sq = p->q.shape[1];
        s.sk = (int64_t)p->cache_seqlens[b] + p->s_new;
        s.drop_i0 = p->cache_seqlens[b];
        break;
    default:
        s.sq = p->q.shape[1];
        s.sk = p->k.shape[1];
        break;
    }
    s.off = p->causal == FA_CAUSAL_TOP_LEFT ? 0 : s.sk - s.sq;
    return s;
}

/* Element offset of (row i, head h, column 0) of a query-side tensor (q, out, dq, dout). */
static inline int64_t fa_qrow(const fa_tensor *t, const fa_seq *s, int64_t i, int64_t h)
{
    return s->tb * t->stride[0] + (s->q0 + i) * t->stride[1] + h * t->stride[2];
}

/* Element offset of (key j, KV head hk, column 0) of a key-side tensor (k, v, dk, dv).
   Handles the paged cache: page = block_table[b][j / page_size]. */
static inline int64_t fa_krow(const fa_problem *p, const fa_tensor *t, const fa_seq *s,
                              int64_t b, int64_t j, int64_t hk)
{
    if (p->block_table) {
        int64_t page = p->block_table[b * p->max_pages + j / p->page_size];
        return page * t->stride[0] + (j % p->page_size) * t->stride[1] + hk * t->stride[2];
    }
    return s->tb * t->stride[0] + (s->k0 + j) * t->stride[1] + hk * t->stride[2];
}

/* Index of lse(b, h, i): [B, H, Sq] dense/kvcache, [H, total_q] varlen. */
static inline int64_t fa_lse_index(const fa_problem *p, const fa_seq *s, int64_t b,
                                   int64_t h, int64_t i)
{
    if (p->layout == FA_LAYOUT_VARLEN)
        return h * p->q.shape[1] + s->q0 + i;
    return (b * p->hq + h) * p->q.shape[1] + i;
}

/* Is key j visible to query i? (causal and window; positions within the sequence) */
static inline int fa_visible(const fa_problem *p, const fa_seq *s, int64_t i, int64_t j)
{
    int64_t pos = i + s->off;
    if (p->window_left >= 0 && j < pos - p->window_left) return 0;
    if (p->window_right >= 0 && j > pos + p->window_right) return 0;
    return 1;
}

/* Visible key range [*lo, *hi) of query i, clamped to [0, sk). Empty when lo >= hi. */
static inline void fa_visible_range(const fa_problem *p, const fa_seq *s, int64_t i,
                                    int64_t *lo, int64_t *hi)
{
    int64_t pos = i + s->off, a = 0, e = s->sk;
    if (p->window_left >= 0 && pos - p->window_left > a) a = pos - p->window_left;
    if (p->window_right >= 0 && pos + p->window_right + 1 < e) e = pos + p->window_right + 1;
    *lo = a; *hi = e;
}

/* Query rows of the whole call over all heads' sequences, per head: B * Sq (dense, KV
   cache) or cu_seqlens_q[batch] (varlen; host memory). O(1): never a walk over the batch.
   Fits int64: q holds B * Sq * H * d_qk elements with d_qk >= 1 (validation). */
static inline int64_t fa_problem_q_rows(const fa_problem *p)
{
    if (p->batch <= 0) return 0;
    if (p->layout == FA_LAYOUT_VARLEN) return p->cu_q[p->batch];
    return p->batch * p->q.shape[1];
}

/* Key rows of a dense or varlen call (the rows of dk/dv the backward writes). */
static inline int64_t fa_problem_k_rows(const fa_problem *p)
{
    if (p->batch <= 0) return 0;
    if (p->layout == FA_LAYOUT_VARLEN) return p->cu_k[p->batch];
    return p->batch * p->k.shape[1];
}

/* Does the forward have anything to write? Rows of out and lse exist only when some
   sequence has a query row and there are query heads (docs/api.md, empty calls: empty problems
   write what they must, which is then nothing). */
static inline int fa_forward_is_empty(const fa_problem *p)
{
    return p->hq == 0 || fa_problem_q_rows(p) == 0;
}

/* Does the backward have anything to write besides dsinks (zeros when no row exists)?
   dq rows need query rows, dk/dv rows need key rows and KV heads. */
static inline int fa_backward_is_empty(const fa_problem *p)
{
    return (p->hq == 0 || fa_problem_q_rows(p) == 0) &&
           (p->hkv == 0 || fa_problem_k_rows(p) == 0);
}

/* Element offset of bias(b, i, h, j) (broadcast dims have stride 0). */
static inline int64_t fa_bias_index(const fa_problem *p, int64_t b, int64_t i, int64_t h,
                                    int64_t j)
{
    return b * p->bias.stride[0] + i * p->bias.stride[1] + h * p->bias.stride[2] + j;
}

/* The score pipeline before masking, on one raw dot product qk = q_i . k_j:
   s = scale * qk ; softcap ; - slope*|i+off-j| ; + bias. (Bias added by the caller, which
   knows its dtype; see fa_problem_score in reference.c.) */
static inline float fa_softcap(float s, float cap)
{
    return cap > 0.0f ? cap * tanhf(s / cap) : s;
}

/* ALiBi term for query i (within the sequence) and key j. */
static inline float fa_alibi(const fa_problem *p, const fa_seq *s, int64_t h, int64_t i,
                             int64_t j)
{
    if (!p->alibi) return 0.0f;
    int64_t dist = i + s->off - j;
    if (dist < 0) dist = -dist;
    return -p->alibi[h] * (float)dist;
}

#endif /* FA_PROBLEM_H */
