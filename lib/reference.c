/* reference.c - the reference backend: the forward pass, and the backend vtable (the
 * backward is reference_backward.c, the tile helpers both share reference_tile.c).
 *
 * This file is the specification of flashattn and the first rung of the teaching ladder:
 * plain C, one thread, no SIMD, fp32 arithmetic for every storage dtype. It follows
 * Algorithm 1 of FlashAttention-2 (Dao, 2023) literally, with the paper's names:
 *
 *   for each sequence b and query head h:                     (KV head hk = h / group)
 *     for each block Q_i of Br query rows:                    ("load Q_i into SRAM")
 *       m = -inf, l = 0, O = 0                                 per row
 *       for each block K_j, V_j of Bc keys that the block can see:
 *         S     = Q_i K_j^T                                    [Br, Bc] (score order below)
 *         m_new = max(m, rowmax(S))
 *         P     = exp(S - m_new)
 *         l     = exp(m - m_new) * l + rowsum(P)               } the three update lines
 *         O     = exp(m - m_new) * O + P V                     } of the paper
 *         m     = m_new                                        }
 *       O = O / l ;  lse = m + log(l)
 *
 * The score order (docs/api.md; fa_options in flashattn.h): s = scale*q.k ; softcap ;
 * + ALiBi + bias ; mask ; softmax with the sink in the denominator ; dropout on the
 * probabilities. Dropout changes only the P V product: l (and so lse) uses the undropped
 * probabilities.
 *
 * Beyond the paper: only each row's visible keys are computed (a masked key never reaches
 * the row, even when it holds a NaN); a row that sees no key gets out = 0 and lse = -inf
 * (fa_ref_exp_diff keeps exp(-inf - -inf) = NaN out); the sink logit is folded in after
 * the last block as one more online step with no value row; the running max propagates
 * NaN, so a NaN input reaches exactly the rows that read it. One thread and fixed loop
 * order: the forward is bitwise reproducible.
 *
 * Shapes (elements): q [.., Sq, H, d_qk], k [.., Sk, Hkv, d_qk], v [.., Sk, Hkv, d_v],
 * out [.., Sq, H, d_v], lse [B, H, Sq] (varlen: [H, total_q]). problem.h resolves
 * sequences, rows, keys, the paged cache and the mask; this file only computes.
 */
#include <stdlib.h>
#include "reference.h"
#include "reference_tile.h"

/* The dropout factor of probability (b, h, i, j): 0 if dropped, 1/(1-p) if kept, 1 when
   dropout is off. Row i is the query's position in its sequence (its cache position for
   the KV cache: drop_i0 + i), j the key's. */
static float dropout_factor(const fa_problem *p, const fa_seq *s, int64_t b, int64_t h,
                            int64_t i, int64_t j)
{
    if (p->dropout_p <= 0.0f) return 1.0f;
    return fa_dropout_keep(&p->drop, b, h, s->drop_i0 + i, j) ? p->drop.keep_scale : 0.0f;
}

/* One step of the online softmax for one query row i: fold the scores S[lo, hi) of the
   key block starting at j0 (the row's visible keys; P overwrites S) into the row's running
   max m, sum l and unnormalized output O [d_v]. V is the block's V_j [Bc, d_v]. */
static void online_softmax_step(const fa_problem *p, const fa_seq *s, int64_t b, int64_t h,
                                int64_t i, int64_t j0, float *S, int64_t lo, int64_t hi,
                                const float *V, float *m, float *l, float *O)
{
    const int64_t dv = p->dv;

    /* m_new = max(m, rowmax(S)) */
    float m_new = *m;
    for (int64_t c = lo; c < hi; c++) m_new = fa_ref_max(m_new, S[c]);

    /* P = exp(S - m_new). While the row has seen no finite score, m_new = -inf and the
       guard in fa_ref_exp_diff makes P = 0 instead of exp(-inf - -inf) = NaN. */
    float rowsum = 0.0f;
    for (int64_t c = lo; c < hi; c++) {
        S[c] = fa_ref_exp_diff(S[c], m_new);
        rowsum += S[c];
    }
    const float alpha = fa_ref_exp_diff(*m, m_new);      /* exp(m - m_new) */

    /* The three update lines of the paper: */
    *l = alpha * *l + rowsum;                            /* l = exp(m - m_new) l + rowsum(P) */
    for (int64_t x = 0; x < dv; x++) O[x] *= alpha;      /* O = exp(m - m_new) O + P V       */
    for (int64_t c = lo; c < hi; c++) {
        /* dropout acts on the probabilities in P V only; l keeps the undropped ones */
        const float pd = S[c] * dropout_factor(p, s, b, h, i, j0 + c);
        for (int64_t x = 0; x < dv; x++) O[x] += pd * V[c * dv + x];
    }
    *m = m_new;                                          /* m = m_new                        */
}

fa_status fa_reference_forward_tiled(const fa_problem *p, int block_q, int block_kv)
{
    /* No row of out or lse: nothing to write, and the head dims (which may be anything
       when no element exists) must not size any scratch. */
    if (fa_forward_is_empty(p)) return FA_OK;
    const int64_t dqk = p->dqk, dv = p->dv;
    int64_t sq_max, sk_max;
    fa_ref_longest(p, &sq_max, &sk_max);
    const int64_t Br = fa_ref_tile(block_q, FA_REF_BLOCK_Q, sq_max);
    const int64_t Bc = fa_ref_tile(block_kv, FA_REF_BLOCK_KV, sk_max);

    /* All scratch first, so that a failure has written nothing. These are the tiles the
       paper keeps in on-chip SRAM. */
    float *Q = fa_ref_alloc(Br, dqk);    /* Q_i [Br, d_qk]                              */
    float *K = fa_ref_alloc(Bc, dqk);    /* K_j [Bc, d_qk]                              */
    float *V = fa_ref_alloc(Bc, dv);     /* V_j [Bc, d_v]                               */
    float *S = fa_ref_alloc(Br, Bc);     /* S = Q_i K_j^T, overwritten by P [Br, Bc]    */
    float *O = fa_ref_alloc(Br, dv);     /* O_i, unnormalized [Br, d_v]                  */
    float *m = fa_ref_alloc(Br, 1);      /* running row max                             */
    float *l = fa_ref_alloc(Br, 1);      /* running row sum of exp(S - m)               */
    int64_t *lo = calloc((size_t)Br, sizeof *lo), *hi = calloc((size_t)Br, sizeof *hi);
    fa_status st = FA_OK;
    if (!Q || !K || !V || !S || !O || !m || !l || !lo || !hi) {
        st = FA_ERR_NO_MEMORY;
        goto done;
    }

    for (int64_t b = 0; b < p->batch; b++) {
        const fa_seq s = fa_problem_seq(p, b);
        for (int64_t h = 0; h < p->hq; h++) {
            const int64_t hk = h / p->group;             /* GQA/MQA: the KV head of h */
            for (int64_t i0 = 0; i0 < s.sq; i0 += Br) {
                const int64_t nr = s.sq - i0 < Br ? s.sq - i0 : Br;
                for (int64_t r = 0; r < nr; r++) {       /* load Q_i; m = -inf, l = 0, O = 0 */
                    fa_ref_load(&p->q, fa_qrow(&p->q, &s, i0 + r, h), dqk, Q + r * dqk);
                    m[r] = -INFINITY;
                    l[r] = 0.0f;
                    for (int64_t x = 0; x < dv; x++) O[r * dv + x] = 0.0f;
                }

                /* Key blocks wholly outside [klo, khi) are masked for every row of Q_i:
                   skip them (causal skips the upper triangle, a window both sides). */
                int64_t klo, khi;
                fa_ref_block_keys(p, &s, i0, i0 + nr, &klo, &khi);
                for (int64_t j0 = klo - klo % Bc; j0 < khi; j0 += Bc) {
                    const int64_t nc = s.sk - j0 < Bc ? s.sk - j0 : Bc;
                    for (int64_t c = 0; c < nc; c++) {   /* load K_j, V_j (paged or not) */
                        fa_ref_load(&p->k, fa_krow(p, &p->k, &s, b, j0 + c, hk), dqk,
                                    K + c * dqk);
                        fa_ref_load(&p->v, fa_krow(p, &p->v, &s, b, j0 + c, hk), dv,
                                    V + c * dv);
                    }

                    /* S = Q_i K_j^T (scaled, softcapped, + ALiBi + bias; masked entries
                       are outside [lo[r], hi[r]) and never computed) */
                    fa_ref_score_tile(p, &s, b, h, i0, nr, j0, nc, Q, K, S, Bc, lo, hi);

                    for (int64_t r = 0; r < nr; r++)
                        online_softmax_step(p, &s, b, h, i0 + r, j0, S + r * Bc, lo[r], hi[r],
                                            V, &m[r], &l[r], O + r * dv);
                }

                for (int64_t r = 0; r < nr; r++) {
                    float *Or = O + r * dv;
                    /* The sink: one more logit in the denominator with no value row, i.e.
                       one more online step whose P V is 0. A row that saw no key gets
                       m = sink, l = 1, O = 0: out = 0 and lse = sink, as specified. */
                    if (p->sinks) {
                        const float sink = p->sinks[h];
                        const float m_new = fa_ref_max(m[r], sink);
                        const float alpha = fa_ref_exp_diff(m[r], m_new);
                        l[r] = alpha * l[r] + fa_ref_exp_diff(sink, m_new);
                        for (int64_t x = 0; x < dv; x++) Or[x] *= alpha;
                        m[r] = m_new;
                    }
                    float lse;
                    if (l[r] == 0.0f) {                  /* fully masked: out = 0, lse = -inf */
                        for (int64_t x = 0; x < dv; x++) Or[x] = 0.0f;
                        lse = -INFINITY;
                    } else {                             /* O = O / l ; lse = m + log(l) */
                        for (int64_t x = 0; x < dv; x++) Or[x] /= l[r];
                        lse = m[r] + logf(l[r]);
                    }
                    fa_ref_store(&p->out, fa_qrow(&p->out, &s, i0 + r, h), dv, Or);
                    if (p->lse) p->lse[fa_lse_index(p, &s, b, h, i0 + r)] = lse;
                }
            }
        }
    }

done:
    free(Q); free(K); free(V); free(S); free(O); free(m); free(l); free(lo); free(hi);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* The backend vtable                                                                 */
/* ---------------------------------------------------------------------------------- */

static void ref_describe(const fa_context *ctx, char *buf, size_t len)
{
    fa_appendf(buf, len,
               "kernel: reference, plain C (the specification; slow by design)\n"
               "tiles: block_q=%d (%s), block_kv=%d (%s); each clamped to the longest "
               "sequence of a call\n"
               "threads: 1 (single-threaded: forward and backward are bitwise reproducible)\n",
               ctx->block_q > 0 ? ctx->block_q : FA_REF_BLOCK_Q,
               ctx->block_q > 0 ? "set by fa_context_set_tiles" : "default",
               ctx->block_kv > 0 ? ctx->block_kv : FA_REF_BLOCK_KV,
               ctx->block_kv > 0 ? "set by fa_context_set_tiles" : "default");
}

static fa_status ref_forward(fa_context *ctx, const fa_problem *p)
{
    fa_status st = fa_reference_forward_tiled(p, ctx->block_q, ctx->block_kv);
    if (st != FA_OK)
        return fa_set_error(ctx, st, "reference backend: cannot allocate the forward's scratch "
                            "tiles (%lld x %lld head dims)", (long long)p->dqk, (long long)p->dv);
    return FA_OK;
}

static fa_status ref_backward(fa_context *ctx, const fa_problem *p)
{
    fa_status st = fa_reference_backward_tiled(p, ctx->block_q, ctx->block_kv);
    if (st != FA_OK)
        return fa_set_error(ctx, st,
                            "reference backward: cannot allocate the fp32 scratch "
                            "(dQ of one KV head group and the tiles)");
    return FA_OK;
}

/* The reference serves every valid call. */
static fa_status ref_query(fa_context *ctx, const fa_problem *p, int backward,
                           const char **name)
{
    (void)ctx; (void)p;
    *name = backward ? "reference backward (recompute, fp32 scratch, 1 thread)"
                     : "reference forward (blocked online softmax, 1 thread)";
    return FA_OK;
}

const fa_backend_ops fa_reference_ops = {
    .name = "reference",
    .describe = ref_describe,
    .forward = ref_forward,
    .backward = ref_backward,
    .query = ref_query,
};
