/* reference_backward.c - the reference backward pass: gradients by recomputation.
 *
 * Algorithm 2 of FlashAttention-2, single-threaded. The forward stored only out and lse;
 * the score matrix S is never stored: each tile of P is recomputed from Q, K and lse.
 *
 *   D_i = rowsum(dO_i * O_i)                                   (O as given; fp32)
 *   for each sequence b and KV head hk:
 *     for each block K_j, V_j of Bc keys:                      (dK_j = dV_j = 0)
 *       for each query head h of hk's group, each block Q_i of Br rows that sees K_j:
 *         P    = exp(S - lse_i)                                recomputed, [Br, Bc]
 *         dV_j += Pdrop^T dO_i
 *         dP   = dO_i V_j^T, times the dropout factor
 *         dS   = P * (dP - D_i)                                (times the softcap slope)
 *         dQ_i += scale * dS K_j
 *         dK_j += scale * dS^T Q_i
 *       store dK_j, dV_j                                       (zeros for unseen keys)
 *     store dQ of the group's query heads
 *
 * Each line below quotes, in its comment, the forward line (reference.c) it
 * differentiates. Everything accumulates in fp32 scratch and is stored once, in the
 * output's dtype. The loops are sequential, so the order of every sum is fixed and the
 * backward is bitwise reproducible whatever opt->deterministic says.
 *
 * Shapes (elements): dq like q [.., Sq, H, d_qk], dk like k [.., Sk, Hkv, d_qk],
 * dv like v [.., Sk, Hkv, d_v], dout/out [.., Sq, H, d_v], lse_in [B, H, Sq] (varlen:
 * [H, total_q]), dsinks [H]. GQA: dK and dV of a KV head sum over its query heads.
 */
#include <stdlib.h>
#include "reference.h"
#include "reference_tile.h"

/* The fp32 scratch: the tiles the paper keeps in SRAM, plus dQ of one KV head group. */
typedef struct {
    int64_t Br, Bc;
    float *dQ;          /* dQ of the G query heads of one KV head [G, Sq, d_qk]            */
    float *D;           /* D_i = rowsum(dO_i * O_i) [G, Sq]                               */
    float *K, *V;       /* K_j [Bc, d_qk], V_j [Bc, d_v]                                  */
    float *dK, *dV;     /* dK_j [Bc, d_qk], dV_j [Bc, d_v]                                */
    float *Q, *dO;      /* Q_i [Br, d_qk], dO_i [Br, d_v]                                 */
    float *P;           /* S, then P = exp(S - lse) [Br, Bc]                              */
    float *Z;           /* dropout factor: 0, or 1/(1-p) when kept (1 when off) [Br, Bc]  */
    float *T;           /* softcap slope 1 - tanh^2(s1/cap) (1 when off) [Br, Bc]         */
    float *dS;          /* dS [Br, Bc]                                                    */
    float *dsink;       /* dsinks accumulator [H]                                         */
    float *orow;        /* one row of O [d_v]                                             */
    int64_t *lo, *hi;   /* each row's visible keys within the tile [Br]                   */
} scratch;

/* Gradients of one tile: query rows [i0, i0 + nr) of head h (the g-th of its group)
   against keys [j0, j0 + nc), whose K_j, V_j are loaded in w. Adds into w->dQ, dK, dV. */
static void backward_tile(const fa_problem *p, const fa_seq *s, int64_t b, int64_t h,
                          int64_t g, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                          scratch *w)
{
    const int64_t dqk = p->dqk, dv = p->dv, Bc = w->Bc;
    const float cap = p->softcap;

    for (int64_t r = 0; r < nr; r++) {                   /* load Q_i, dO_i */
        fa_ref_load(&p->q, fa_qrow(&p->q, s, i0 + r, h), dqk, w->Q + r * dqk);
        fa_ref_load(&p->dout, fa_qrow(&p->dout, s, i0 + r, h), dv, w->dO + r * dv);
    }

    /* forward: S = Q_i K_j^T (scale, softcap, ALiBi, bias; the mask gives lo/hi) */
    fa_ref_score_tile(p, s, b, h, i0, nr, j0, nc, w->Q, w->K, w->P, Bc, w->lo, w->hi);

    for (int64_t r = 0; r < nr; r++) {
        const int64_t i = i0 + r;
        const float lse = p->lse_in[fa_lse_index(p, s, b, h, i)];
        if (lse == -INFINITY) {                          /* fully masked row: no gradient */
            w->hi[r] = w->lo[r];
            continue;
        }
        for (int64_t c = w->lo[r]; c < w->hi[r]; c++) {
            const int64_t e = r * Bc + c;
            /* forward: P = exp(S - m_new) ... O = O / l    =>  P = exp(S - lse) */
            w->P[e] = fa_ref_exp_diff(w->P[e], lse);
            /* forward: "dropout acts on the probabilities in P V only" */
            w->Z[e] = 1.0f;
            if (p->dropout_p > 0.0f)
                w->Z[e] = fa_dropout_keep(&p->drop, b, h, s->drop_i0 + i, j0 + c)
                          ? p->drop.keep_scale : 0.0f;
            /* forward: s = cap*tanh(s1/cap), s1 = scale*q.k  =>  ds/ds1 = 1 - tanh^2 */
            w->T[e] = 1.0f;
            if (cap > 0.0f) {
                float qk = 0.0f;
                for (int64_t x = 0; x < dqk; x++) qk += w->Q[r * dqk + x] * w->K[c * dqk + x];
                const float t = tanhf(p->scale * qk / cap);
                w->T[e] = 1.0f - t * t;
            }
        }
    }

    for (int64_t r = 0; r < nr; r++) {
        const float Di = w->D[g * s->sq + i0 + r];
        const float *dOr = w->dO + r * dv;
        for (int64_t c = w->lo[r]; c < w->hi[r]; c++) {
            const int64_t e = r * Bc + c;
            const float *Vc = w->V + c * dv;
            float *dVc = w->dV + c * dv;
            /* forward: O = exp(m - m_new) O + P V (P dropped)  =>  dV_j += Pdrop^T dO_i */
            const float pd = w->P[e] * w->Z[e];
            for (int64_t x = 0; x < dv; x++) dVc[x] += pd * dOr[x];
            /* forward: O = ... + P V (P dropped)  =>  dP = dO_i V_j^T, times Z */
            float dp = 0.0f;
            for (int64_t x = 0; x < dv; x++) dp += dOr[x] * Vc[x];
            dp *= w->Z[e];
            /* forward: P = exp(S - m_new), l = ... + rowsum(P), O = O / l
                 =>  dS = P * (dP - D_i)   (the softmax Jacobian; D_i from l) */
            w->dS[e] = w->P[e] * (dp - Di);
            /* forward: s = cap*tanh(s1/cap)  =>  dS1 = dS * (1 - tanh^2(s1/cap)) */
            w->dS[e] *= w->T[e];
        }
    }

    for (int64_t r = 0; r < nr; r++) {
        float *dQr = w->dQ + (g * s->sq + i0 + r) * dqk;
        const float *Qr = w->Q + r * dqk;
        for (int64_t c = w->lo[r]; c < w->hi[r]; c++) {
            /* forward: s1 = scale * q_i . k_j  (S = Q_i K_j^T) */
            const float ds = p->scale * w->dS[r * Bc + c];
            const float *Kc = w->K + c * dqk;
            float *dKc = w->dK + c * dqk;
            for (int64_t x = 0; x < dqk; x++) {
                dQr[x] += ds * Kc[x];                    /* dQ_i += scale dS K_j   */
                dKc[x] += ds * Qr[x];                    /* dK_j += scale dS^T Q_i */
            }
        }
    }
}

/* D_i = rowsum(dO_i * O_i) for the G query heads of KV head hk, and their dsinks terms.
   D_i stands for sum_j Pdrop_ij (dO_i . V_j): the part of dP that the normalization by l
   takes back. forward: "l = exp(m - m_new) l + exp(sink - m_new)" (the sink step)
   =>  dsink_h = -sum_i exp(sink_h - lse_i) * D_i. */
static void backward_rowsums(const fa_problem *p, const fa_seq *s, int64_t b, int64_t hk,
                             scratch *w)
{
    const int64_t G = p->group, dv = p->dv;
    for (int64_t g = 0; g < G; g++) {
        const int64_t h = hk * G + g;
        for (int64_t i = 0; i < s->sq; i++) {
            fa_ref_load(&p->dout, fa_qrow(&p->dout, s, i, h), dv, w->dO);
            fa_ref_load(&p->out, fa_qrow(&p->out, s, i, h), dv, w->orow);
            float d = 0.0f;
            for (int64_t x = 0; x < dv; x++) d += w->dO[x] * w->orow[x];
            w->D[g * s->sq + i] = d;
            const float lse = p->lse_in[fa_lse_index(p, s, b, h, i)];
            if (p->sinks && lse != -INFINITY)            /* masked rows: nothing */
                w->dsink[h] -= expf(p->sinks[h] - lse) * d;
        }
    }
}

fa_status fa_reference_backward_tiled(const fa_problem *p, int block_q, int block_kv)
{
    /* No row of dq, dk or dv: only dsinks (zero: no row contributes) is written, and the
       head dims (anything, when no element exists) must not size any scratch. */
    if (fa_backward_is_empty(p)) {
        if (p->dsinks)
            for (int64_t h = 0; h < p->hq; h++) p->dsinks[h] = 0.0f;
        return FA_OK;
    }
    /* Key rows but no query row (Sq = 0 or no query heads): no query reaches any key, so
       dk = dv = 0 and dsinks = 0. Sized by dk/dv, which exist: the query side (hq may be
       2^32 with Sq = 0) sizes nothing and is not walked. */
    if (p->hq == 0 || fa_problem_q_rows(p) == 0) {
        float *zero = fa_ref_alloc(p->dqk > p->dv ? p->dqk : p->dv, 1);
        if (!zero) return FA_ERR_NO_MEMORY;
        for (int64_t b = 0; b < p->batch; b++) {
            const fa_seq s = fa_problem_seq(p, b);
            for (int64_t j = 0; j < s.sk; j++)
                for (int64_t hk = 0; hk < p->hkv; hk++) {
                    fa_ref_store(&p->grad_k, fa_krow(p, &p->grad_k, &s, b, j, hk), p->dqk, zero);
                    fa_ref_store(&p->grad_v, fa_krow(p, &p->grad_v, &s, b, j, hk), p->dv, zero);
                }
        }
        if (p->dsinks)
            for (int64_t h = 0; h < p->hq; h++) p->dsinks[h] = 0.0f;
        free(zero);
        return FA_OK;
    }
    const int64_t dqk = p->dqk, dv = p->dv, G = p->group;
    int64_t sq_max, sk_max;
    fa_ref_longest(p, &sq_max, &sk_max);
    const int64_t Br = fa_ref_tile(block_q, FA_REF_BLOCK_Q, sq_max);
    const int64_t Bc = fa_ref_tile(block_kv, FA_REF_BLOCK_KV, sk_max);

    /* All scratch first: a failure has written nothing. */
    scratch w = {
        .Br = Br, .Bc = Bc,
        .dQ = fa_ref_alloc(G * sq_max, dqk), .D = fa_ref_alloc(G, sq_max),
        .K = fa_ref_alloc(Bc, dqk), .V = fa_ref_alloc(Bc, dv),
        .dK = fa_ref_alloc(Bc, dqk), .dV = fa_ref_alloc(Bc, dv),
        .Q = fa_ref_alloc(Br, dqk), .dO = fa_ref_alloc(Br, dv),
        .P = fa_ref_alloc(Br, Bc), .Z = fa_ref_alloc(Br, Bc),
        .T = fa_ref_alloc(Br, Bc), .dS = fa_ref_alloc(Br, Bc),
        .dsink = fa_ref_alloc(p->hq, 1), .orow = fa_ref_alloc(dv, 1),
        .lo = calloc((size_t)Br, sizeof(int64_t)), .hi = calloc((size_t)Br, sizeof(int64_t)),
    };
    fa_status st = FA_OK;
    if (!w.dQ || !w.D || !w.K || !w.V || !w.dK || !w.dV || !w.Q || !w.dO || !w.P || !w.Z ||
        !w.T || !w.dS || !w.dsink || !w.orow || !w.lo || !w.hi) {
        st = FA_ERR_NO_MEMORY;
        goto done;
    }

    for (int64_t b = 0; b < p->batch; b++) {
        const fa_seq s = fa_problem_seq(p, b);
        for (int64_t hk = 0; hk < p->hkv; hk++) {
            for (int64_t x = 0; x < G * s.sq * dqk; x++) w.dQ[x] = 0.0f;
            backward_rowsums(p, &s, b, hk, &w);

            for (int64_t j0 = 0; j0 < s.sk; j0 += Bc) {
                const int64_t nc = s.sk - j0 < Bc ? s.sk - j0 : Bc;
                for (int64_t c = 0; c < nc; c++) {       /* load K_j, V_j; dK_j = dV_j = 0 */
                    fa_ref_load(&p->k, fa_krow(p, &p->k, &s, b, j0 + c, hk), dqk,
                                w.K + c * dqk);
                    fa_ref_load(&p->v, fa_krow(p, &p->v, &s, b, j0 + c, hk), dv,
                                w.V + c * dv);
                    for (int64_t x = 0; x < dqk; x++) w.dK[c * dqk + x] = 0.0f;
                    for (int64_t x = 0; x < dv; x++) w.dV[c * dv + x] = 0.0f;
                }
                /* GQA: every query head of the group adds into the same dK_j, dV_j */
                for (int64_t g = 0; g < G; g++) {
                    for (int64_t i0 = 0; i0 < s.sq; i0 += Br) {
                        const int64_t nr = s.sq - i0 < Br ? s.sq - i0 : Br;
                        int64_t klo, khi;                /* skip Q_i if it cannot see K_j */
                        fa_ref_block_keys(p, &s, i0, i0 + nr, &klo, &khi);
                        if (khi <= j0 || klo >= j0 + nc) continue;
                        backward_tile(p, &s, b, hk * G + g, g, i0, nr, j0, nc, &w);
                    }
                }
                for (int64_t c = 0; c < nc; c++) {       /* store dK_j, dV_j once */
                    fa_ref_store(&p->grad_k, fa_krow(p, &p->grad_k, &s, b, j0 + c, hk), dqk,
                                 w.dK + c * dqk);
                    fa_ref_store(&p->grad_v, fa_krow(p, &p->grad_v, &s, b, j0 + c, hk), dv,
                                 w.dV + c * dv);
                }
            }

            for (int64_t g = 0; g < G; g++)              /* store dQ of the group once */
                for (int64_t i = 0; i < s.sq; i++)
                    fa_ref_store(&p->grad_q, fa_qrow(&p->grad_q, &s, i, hk * G + g), dqk,
                                 w.dQ + (g * s.sq + i) * dqk);
        }
    }
    if (p->dsinks)                                       /* overwritten, not accumulated */
        for (int64_t h = 0; h < p->hq; h++) p->dsinks[h] = w.dsink[h];

done:
    free(w.dQ); free(w.D); free(w.K); free(w.V); free(w.dK); free(w.dV); free(w.Q);
    free(w.dO); free(w.P); free(w.Z); free(w.T); free(w.dS); free(w.dsink); free(w.orow);
    free(w.lo); free(w.hi);
    return st;
}
