/* models.h - the oracle's models: naive attention, one sequence at a time, written from
 * the API contract alone (docs/api.md).
 *
 * Shares no code with the library except lib/philox.h (the dropout keep-mask definition,
 * which has its own known-answer test in test_oracle.c) and lib/dtype.h (storage
 * conversions). Everything works on ONE sequence at a time, on dense row-major arrays:
 *
 *   q    [sq][hq][dqk]      k  [sk][hkv][dqk]     v [sk][hkv][dv]
 *   out  [sq][hq][dv]       lse[hq][sq]           dout like out
 *   dq like q, dk like k, dv like v; dsinks[hq] is ACCUMULATED (sum over sequences).
 *   bias [hq][sq][sk] (already broadcast) or NULL.
 *
 * Two flavours:
 *   or_forward / or_backward        double precision, full score matrix, textbook softmax
 *                                   and gradients: the "oracle".
 *   or_forward_sp / or_backward_sp  "same-precision naive": what a plain fp16/bf16
 *                                   implementation computes (float accumulation, S and P
 *                                   rounded to the storage dtype, results rounded to the
 *                                   output dtype). Only used to size the tolerance.
 */
#ifndef FA_ORACLE_MODELS_H
#define FA_ORACLE_MODELS_H

#include <stdint.h>
#include "flashattn.h"

typedef struct {
    int64_t sq, sk, hq, hkv, dqk, dv;
    double scale;          /* resolved: never 0 (0 in fa_options means 1/sqrt(dqk))       */
    int causal;            /* FA_CAUSAL_NONE / _BOTTOM_RIGHT / _TOP_LEFT                  */
    int window;            /* 0/1 as in fa_options                                        */
    int64_t wl, wr;        /* window_left/right (-1 unbounded), used when window == 1     */
    double softcap;        /* 0 = off                                                     */
    const double *alibi;   /* [hq] or NULL                                                */
    const double *sinks;   /* [hq] or NULL                                                */
    const double *bias;    /* [hq][sq][sk] or NULL                                        */
    float dropout_p;       /* 0 = off (float: exactly what the caller passes)             */
    uint64_t seed, offset;
    int64_t drop_b;        /* Philox b (batch / sequence index)                           */
    int64_t drop_h0;       /* Philox h of head 0 (a slice of a call's heads)              */
    int64_t drop_i0;       /* Philox i of query 0 (kvcache: cache_seqlens[b])             */
} or_seq;

/* Is key j visible to query i? (docs/api.md, "Causal and windows") */
int or_visible(const or_seq *s, int64_t i, int64_t j);

/* Dropout multiplier of element (h, i, j): 0 or 1/(1-p) (1 when dropout is off). */
double or_dropout_mult(const or_seq *s, int64_t h, int64_t i, int64_t j);

void or_forward(const or_seq *s, const double *q, const double *k, const double *v,
                double *out, double *lse);
void or_backward(const or_seq *s, const double *q, const double *k, const double *v,
                 const double *dout, double *dq, double *dk, double *dv, double *dsinks);

/* Magnitude of the terms that cancel in dq and dk, and the squares of P's own roundoff
   in dv, dq and dk (see models.c): tq and tq2 like dq, tk and tk2 like dk, tv like dv,
   ACCUMULATED (the caller zeroes them; none may be NULL). out: the oracle's
   [sq][hq][dv]; tlse: lse's terms [hq][sq] as or_forward_terms filled them; d_weight
   scales the terms of D (1: out stored in fp32). */
void or_backward_terms(const or_seq *s, const double *q, const double *k, const double *v,
                       const double *out, const double *dout, const double *tlse,
                       double d_weight, double *tq, double *tk, double *tv, double *tq2,
                       double *tk2);

/* Magnitude of out's sensitivity to the fp32 roundoff of its scores (see models.c): tout
   like out, ACCUMULATED (the caller zeroes it). out: the oracle's [sq][hq][dv]. tlse
   (NULL or [hq][sq], accumulated): the same for lse. */
void or_forward_terms(const or_seq *s, const double *q, const double *k, const double *v,
                      const double *out, double *tout, double *tlse);

/* Same-precision naive. dt: storage dtype of q/k/v; odt: dtype of out (and dq, dk, dv).
   Inputs are the stored values (already representable in dt). */
void or_forward_sp(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                   const double *k, const double *v, double *out, double *lse);
/* The same, as a flash-style implementation forms it: scores in fp32, exp(s - m) rounded
   to dt unnormalized for the P V product, dropout as a 0/1 mask, and keep_scale / l
   applied to the fp32 sum. Its roundings of P fall elsewhere than the normalized ones;
   or_compute takes, element by element, the larger of the two models' errors (a row with
   few keys has few roundings of P, and one model alone can be exact by chance). lse may
   be NULL. */
void or_forward_sp_flash(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                         const double *k, const double *v, double *out, double *lse);
/* The backward receives `out` as the forward stored it (API: out and lse as fa_forward
   returned them), so a plain implementation of this API forms D_i = rowsum(dout_i * out_i)
   from that rounded out, the way flash-attention's backward does. out: [sq][hq][dv], the
   same-precision forward's output. */
void or_backward_sp(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                    const double *k, const double *v, const double *out, const double *dout,
                    double *dq, double *dk, double *dv, double *dsinks);

/* The backward as a flash-style implementation forms it: scores, P and dP in fp32 (P
   recomputed from the scores), P and dS rounded to dt only as operands of the products,
   or kept in fp32 there too when fp32_operands is set (products run in fp32, as the CPU
   backend's AVX-512 and AVX2 kernels run them); out: the flash-style forward's. dq, dk,
   dv are written whole; dsinks may be NULL. */
void or_backward_sp_flash(const or_seq *s, fa_dtype dt, fa_dtype odt, const double *q,
                          const double *k, const double *v, const double *out,
                          const double *dout, double *dq, double *dk, double *dv,
                          double *dsinks, int fp32_operands);

/* Combine: out[r][c] = sum_i exp(lse_i[r] - lse[r]) out_i[r][c], lse = logsumexp lse_i.
   parts[i] is [rows][d]; lse_parts[i] is [rows]. A row with all lse_i = -inf: 0, -inf. */
void or_combine(int n, int64_t rows, int64_t d, const double *const *parts,
                const double *const *lse_parts, double *out, double *lse);

#endif
