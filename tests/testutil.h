/* testutil.h - shared test machinery: backends under test (testutil.c), buffers with
 * guard bands and NaN poison (buffers.c), and a case runner (runner.c) that checks one
 * fa_forward[_varlen] (+ fa_backward[_varlen]) call on every backend against the oracle
 * with the tolerance rule, both from liboracle (tests/oracle/oracle.h).
 *
 * Environment:
 *   FA_TEST_BACKENDS=reference,cpu   backends every case runs on (default: both)
 *   FA_TEST_SLOW=1                   run the full cross-product sweeps (tests marked slow)
 *   FA_TEST_BIG=1                    run the > 2^31-element test
 * Contexts are only ever created inside a test (Check forks each test; an OpenMP runtime
 * started in the parent can hang the child in libgomp).
 */
#ifndef FA_TESTUTIL_H
#define FA_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include "flashattn.h"
#include "oracle.h"

/* ---- environment ------------------------------------------------------------------- */
int  tu_env_flag(const char *name);              /* getenv(name) is "1" (or non-0)      */
int  tu_backends(fa_backend out[8]);             /* from FA_TEST_BACKENDS               */
const char *tu_backend_name(fa_backend b);
fa_context *tu_ctx(fa_backend b);                /* create or fail the test             */
/* Print a visible note (stderr and stdout) that a heavy test was skipped. */
void tu_note(const char *fmt, ...);

/* ---- random numbers (splitmix64) ----------------------------------------------------- */
typedef struct { uint64_t s; } tu_rng;
uint64_t tu_next(tu_rng *r);
double   tu_unif(tu_rng *r);                     /* uniform in [-1, 1)                 */

/* ---- buffers --------------------------------------------------------------------------- */
typedef enum { TL_CONTIG = 0, TL_TRANSPOSED, TL_PADDED } tu_layout;

#define TU_GUARD 67   /* guard elements before and after every view */

typedef struct {
    fa_tensor t;
    unsigned char *base;   /* allocation: guard, view span, guard                       */
    size_t nel, esz;       /* allocation size in elements, element size                 */
    int64_t off;           /* element offset of t.data in base                          */
    unsigned char *snap;   /* copy of base at tu_snapshot                               */
    unsigned char *must;   /* per element: 1 = the call must write it                  */
} tu_buf;

tu_buf *tu_buf_strided(fa_dtype dt, const int64_t shape[4], const int64_t stride[4]);
tu_buf *tu_buf_new(fa_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, tu_layout L);
tu_buf *tu_buf_flat(fa_dtype dt, int64_t n);      /* [1, 1, 1, n] contiguous            */
void    tu_buf_free(tu_buf *b);
int64_t tu_idx(const tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3);
double  tu_get(const tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3);
void    tu_set(tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x);
/* Input: every view element uniform*amp (rounded to the dtype); everything else NaN. */
void    tu_fill(tu_buf *b, tu_rng *r, double amp);
/* Output: whole allocation set to the NaN poison pattern; must = the whole view. */
void    tu_poison(tu_buf *b);
/* must = rows [s0, s1) of dimension 1 only (varlen totals); call after tu_poison. */
void    tu_must_rows(tu_buf *b, int64_t s0, int64_t s1);
void    tu_snapshot(tu_buf *b);
/* After a successful call: every must element written (not poison), every other byte of
   the allocation unchanged. Returns 1 if fine, else 0 with a message. */
int     tu_check_written(const tu_buf *b, const char *name, char *msg, size_t len);
/* After any call: the whole allocation equals the snapshot. */
int     tu_check_unchanged(const tu_buf *b, const char *name, char *msg, size_t len);
/* Copy rows [s0, s0+n) of batch entry tb into a dense double array [n][shape2][shape3]. */
double *tu_gather(const tu_buf *b, int64_t tb, int64_t s0, int64_t n);
int     tu_is_poison(const tu_buf *b, int64_t elem);
const char *tu_dtype_name(fa_dtype t);

/* ---- the case runner ------------------------------------------------------------------ */
enum { TB_NONE = 0, TB_FULL, TB_B_STRIDE0, TB_H_SHAPE1, TB_BH_SHAPE1_PADDED, TB_Q_STRIDE0 };
enum { TN_NONE = 0, TN_Q_ROW, TN_K_ROW, TN_V_ELEM };

typedef struct {
    const char *tag;
    int varlen;                    /* 0: fa_forward; 1: fa_forward_varlen                */
    int64_t B, H, Hkv, Sq, Sk, dqk, dv;
    const int64_t *lq, *lk;        /* varlen: B lengths each (Sq/Sk unused)             */
    int64_t extra_rows;            /* varlen: tensor rows past the totals (untouched)   */
    int64_t max_slack;             /* varlen: max_seqlen = true max + slack             */
    fa_dtype dt, odt;              /* q/k/v dtype; out, dout, dq, dk, dv dtype          */
    tu_layout layout;
    fa_causal causal;
    int window; int64_t wl, wr;
    float scale, softcap, dropout_p;
    uint64_t dseed, doffset;       /* dropout seed/offset                               */
    int alibi, sinks;
    int bias; fa_dtype bias_dt;    /* TB_* ; bias dtype                                 */
    int no_lse;                    /* forward with lse = NULL                           */
    int backward;
    int deterministic;
    double amp;                    /* q/k amplitude (0 -> 1)                             */
    double sink_amp;               /* sink logits amplitude (0 -> 2)                    */
    int nan_mode;                  /* TN_*                                               */
    uint64_t seed;                 /* data seed                                          */
    int tile_q, tile_kv;           /* fa_context_set_tiles on every context (0: default) */
    int threads;                   /* fa_context_set_threads where supported (0: default) */
} tu_case;

void tu_case_str(const tu_case *c, char *buf, size_t len);
/* Run the case on every backend under test; fails the current test on any mismatch. */
void tu_run(const tu_case *c);

/* ---- suite helpers ----------------------------------------------------------------- */
/* Add a test to a new tcase named like the test with the given timeout (seconds). */
#define TU_ADD(suite, fn, timeout) do { TCase *tc_ = tcase_create(#fn); \
        tcase_set_timeout(tc_, (double)(timeout)); tcase_add_test(tc_, fn); \
        suite_add_tcase(suite, tc_); } while (0)
#include "tu_main.h"   /* int tu_main(Suite *s) */

#endif
