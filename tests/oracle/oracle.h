/* oracle.h - liboracle: the one correctness rule of flashattn. Every check of a result
 * (the Check suites, the fuzz target fuzz_diff, the CUDA test on the GPU machine and the
 * check column of flashattn-bench) computes the double-precision oracle of its problem
 * here and compares against it with the tolerance rule here.
 *
 * The rule, for each output tensor:
 *   max|ours - oracle| <= factor x max|naive - oracle| + floor
 * where "naive" is the larger-error, element by element, of the same-precision models (a
 * plain fp16/bf16/fp32 implementation and a flash-style one, whose backward takes its
 * products' operands in the storage dtype and in fp32; models.h), factor is 2 for
 * the forward and 3 for the gradients, and the floor is one rounding of the output dtype
 * at the tensor's magnitude plus the fp32 roundoff of the terms the result is made of
 * (rule.c says why each part is there). fp32 inputs also get max|ours - oracle| <= 1e-5
 * max|oracle| as the cap of the dtype part. Non-finite oracle values must be matched
 * exactly; fully masked query rows must give exactly +0 (out), -inf or the sink (lse) and
 * 0 (dq); key rows no query sees must give 0 (dk, dv).
 *
 * Use: describe the problem (or_problem, one or_seq_data per sequence, dense row-major
 * doubles), or_compute() it (forward, optionally backward), gather each output into the
 * layout below and or_check() it; or_result_str() words a failure. The problem can be a
 * sub-problem of a larger call (the bench checks a few query rows as sequences of one row).
 *
 * Layouts of the problem-wide arrays (nq query rows, nk key rows; a sequence owns rows
 * [q_row, q_row + sq) and [k_row, k_row + sk); rows no sequence owns are not compared):
 *   out [nq][hq][dv]   lse [hq][nq]   dq [nq][hq][dqk]   dk [nk][hkv][dqk]
 *   dv [nk][hkv][dv]   dsinks [hq] (summed over the sequences)
 */
#ifndef FA_ORACLE_H
#define FA_ORACLE_H

#include <stddef.h>
#include <stdint.h>
#include "flashattn.h"
#include "models.h"

/* ---- the problem ----------------------------------------------------------------------- */
typedef struct {
    const double *q, *k, *v;   /* [sq][hq][dqk], [sk][hkv][dqk], [sk][hkv][dv]           */
    const double *dout;        /* [sq][hq][dv]; needed for the backward                   */
    const double *bias;        /* [hq][sq][sk] (already broadcast) or NULL                 */
    int64_t sq, sk;
    int64_t q_row, k_row;      /* first row of the sequence in the problem-wide arrays   */
    int64_t drop_b, drop_i0;   /* dropout: Philox batch index, position of query 0        */
} or_seq_data;

typedef struct {
    int64_t nseq, nq, nk;      /* sequences; rows of the query-side, key-side arrays      */
    int64_t hq, hkv, dqk, dv;
    fa_dtype dt, odt;          /* storage of q, k, v, dout; of out, dq, dk, dv            */
    double scale;              /* resolved: never 0                                       */
    int causal, window;        /* as in fa_options                                        */
    int64_t wl, wr;
    double softcap;            /* 0 = off                                                 */
    const double *alibi;       /* [hq] or NULL                                            */
    const double *sinks;       /* [hq] or NULL                                            */
    float dropout_p;           /* 0 = off                                                 */
    uint64_t seed, offset;
    int large_logits;          /* inputs scaled to logits of ~1e4: the bound follows the
                                  logits' own rounding (or_check)                         */
    const or_seq_data *seqs;   /* [nseq]                                                  */
} or_problem;

/* ---- the oracle of a problem ------------------------------------------------------------ */
typedef struct {
    or_problem p;              /* a copy (the pointers are the caller's)                  */
    int backward;
    double *out, *n_out, *lse, *n_lse;                  /* oracle, naive                   */
    double *dq, *n_dq, *dk, *n_dk, *dv, *n_dv, *ds, *n_ds;
    double *tout, *tlse, *t_q, *t_k, *t_v;              /* term sizes (models.h)           */
    unsigned char *q_used, *k_used;                     /* rows owned by a sequence        */
    unsigned char *row_masked, *key_unseen;             /* [nq], [nk]                      */
    double *sinks;                                      /* copy of p.sinks or NULL         */
    double smax, sterm, oterm, vmax, qkmax, domax, ds_rss, ds_l1;
    int64_t skmax, sqmax;
} or_oracle;

/* Computes the oracle, the naive models and the floors' ingredients of p (the forward;
   also the backward when backward != 0, which needs every seqs[].dout). o keeps its own
   arrays: the caller's may go once it returns. Returns 0, or -1 (out of memory). */
int  or_compute(const or_problem *p, int backward, or_oracle *o);
void or_free(or_oracle *o);

/* ---- checking an output ---------------------------------------------------------------- */
typedef enum { OR_OUT, OR_LSE, OR_DQ, OR_DK, OR_DV, OR_DSINKS } or_tensor;

typedef struct {
    int pass;
    int exact;                  /* 1: failed an exact requirement (masked rows, non-finite) */
    double err, bound;          /* max|ours - oracle|, the bound                            */
    double factor, nerr, mag;   /* bound = factor x nerr (max|naive - oracle|) + floor       */
    double term_floor;          /* the terms' part of the floor                             */
    int64_t worst;              /* index of the worst element in the layout above (-1: none) */
    double ours_w, orc_w;       /* values there                                             */
} or_result;

/* Number of elements of tensor t in the layout above. */
int64_t or_count(const or_oracle *o, or_tensor t);
const char *or_tensor_name(or_tensor t);
/* Checks ours (or_count elements, the layout above) with the rule. Returns r->pass. */
int  or_check(const or_oracle *o, or_tensor t, const double *ours, or_result *r);
/* One line for a failed check: which bound, by how much, the worst element. */
void or_result_str(const or_result *r, or_tensor t, char *buf, size_t len);

/* ---- the rule itself, for a caller with its own oracle and naive arrays -------------- */
typedef struct {
    double err, nerr, mag, bound;   /* max|ours-oracle|, max|naive-oracle|, max|oracle|  */
    int64_t worst;                  /* index of the worst element (-1: none)             */
    double ours_w, orc_w;           /* values there                                      */
} or_cmp;
/* max|ours-oracle| <= factor*max|naive-oracle| + floor_ulps*max(ref_mag, max|oracle|)*
   eps(odt), capped at 1e-5*max(ref_mag, max|oracle|) when in_dt is F32, plus term_floor,
   plus the smallest subnormal of odt. Non-finite oracle values must be matched exactly
   (same infinity, NaN for NaN). Returns 1 if fine. */
int or_tol(const double *ours, const double *orc, const double *naive, int64_t n,
           fa_dtype in_dt, fa_dtype odt, double factor, double ref_mag, double floor_ulps,
           double term_floor, or_cmp *r);
/* The plain form: ref_mag 0, one ulp, no term floor. */
int or_tol_plain(const double *ours, const double *orc, const double *naive, int64_t n,
                 fa_dtype in_dt, fa_dtype odt, double factor, or_cmp *r);
/* Unit roundoff x 2 of a dtype: 2^-10 (f16), 2^-7 (bf16), 2^-23 (f32). */
double or_eps(fa_dtype t);
/* The coarser of two dtypes (larger or_eps): the precision a result passed through. */
fa_dtype or_coarser(fa_dtype a, fa_dtype b);
/* max |x[i]| over the finite elements of x (0 when there is none). */
double or_max_abs(const double *x, int64_t n);

#endif
