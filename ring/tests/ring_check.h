/* ring_check.h - what test_ring needs besides MPI: a problem over the whole sequence
 * (the same random data on every rank), its double-precision oracle (tests/oracle.h) and
 * single-process fa_forward/fa_backward results, each rank's shard of it, and the
 * comparison of a rank's ring results with the rule's form:
 *
 *   max|ring - oracle| <= factor x max|single - oracle| + ulps x eps(odt) x ref_mag
 *
 * where "single" is the one-process fa_forward/fa_backward over the whole sequence on the
 * same backend (the suites check it against the oracle with the full rule), factor 2 for
 * out and lse and 3 for dq, dk, dv, dsinks, ref_mag max|oracle| of the tensor (of all
 * three gradients for dq, dk, dv) and, for fp32 inputs, also max|ring - oracle| <=
 * 1e-5 x ref_mag. dsinks, formed from the ring's own out, also gets what out's bound lets
 * it move (see rc_check_backward). Non-finite oracle values (masked rows' lse) must match
 * exactly.
 */
#ifndef FA_RING_CHECK_H
#define FA_RING_CHECK_H

#include <stdint.h>
#include "flashattn_ring.h"

typedef struct {
    const char *name;
    int64_t B, H, Hkv, dqk, dv;
    fa_dtype dt, odt;
    fa_causal causal;
    fa_ring_kind kind;
    int uneven;          /* shard lengths differ from rank to rank (1: 0-10, 2: 40-80)    */
    int empty_rank;      /* this rank (mod R, when R > 1) holds nothing; -1: none          */
    int kv_delta;        /* kv chunk length = q chunk length + kv_delta on every other
                            chunk (at least 0): Sq != Sk                                */
    int sinks;
    float softcap;
    int deterministic;   /* also: the backward twice, bitwise equal                       */
    uint64_t seed;
    int padded;          /* the shards are strided views (padded heads and rows)           */
    int window;          /* opt->window, with wl, wr (-1 unbounded) as left and right      */
    int64_t wl, wr;
    int alibi;           /* ALiBi slopes (every head its own)                              */
} rc_case;

/* The whole problem and each rank's rows of it. */
typedef struct {
    rc_case c;
    int R, rank;
    int64_t Sq, Sk;
    int64_t (*qlen)[2], (*kvlen)[2];          /* [R][2]                                   */
    int64_t *qpos, *kvpos;                    /* this rank's rows: global positions       */
    int64_t nq, nk;
    void *q, *k, *v, *dout;                   /* global, dtype dt, contiguous             */
    double *qd, *kd, *vd, *doutd;             /* the same values in double                */
    float *sinks;                             /* [H] or NULL                              */
    double *sinksd;
    float *slopes;                            /* [H] or NULL                              */
    double *slopesd;
    double *o_out, *o_lse, *o_dq, *o_dk, *o_dv, *o_ds;     /* oracle                     */
    double *s_out, *s_lse, *s_dq, *s_dk, *s_dv, *s_ds;     /* single process             */
    void *lq, *lk, *lv, *ldout;               /* this rank's shards, dtype dt             */
    fa_ring_layout layout;
    fa_options opt;
} rc_problem;

/* Builds everything on this rank (the single-process run on ctx). Returns 0, or -1 with
   a message when the single-process call fails. */
int  rc_build(rc_problem *p, const rc_case *c, int R, int rank, fa_context *ctx,
              char *msg, size_t len);
void rc_free(rc_problem *p);
/* The K/V bytes this rank's fa_ring_forward sends: a block goes on only while a rank
   ahead of it sees one of its keys (64-byte units, as the ring's messages). */
int64_t rc_expected_kv_bytes(const rc_problem *p);

/* A view of a contiguous [B, S, H, d] shard: the shard itself, or (padded) a copy with
   padding after each head, each row and each batch entry; *mem gets what to free. */
fa_tensor rc_view(const void *shard, fa_dtype dt, int64_t B, int64_t S, int64_t H, int64_t d,
                  int padded, void **mem);

/* Output buffers with guard bands and NaN poison. */
typedef struct { fa_tensor t; unsigned char *base; size_t bytes, guard; } rc_buf;
void rc_buf_new(rc_buf *b, fa_dtype dt, int64_t B, int64_t S, int64_t H, int64_t d);
void rc_buf_free(rc_buf *b);
int  rc_guard_ok(const rc_buf *b);          /* bands unchanged                          */
int  rc_all_poison(const rc_buf *b);        /* nothing written (after a failed call)     */
double rc_get(const rc_buf *b, int64_t i);  /* element i of the contiguous view         */

/* Compares this rank's rows with the oracle; prints a line per failure; returns the
   number of failures. out/lse/dq/dk/dv may be NULL (not compared). */
int rc_check_forward(const rc_problem *p, const char *tag, const rc_buf *out, const float *lse);
int rc_check_backward(const rc_problem *p, const char *tag, const rc_buf *dq, const rc_buf *dk,
                      const rc_buf *dv, const float *dsinks);

/* A CUDA context's copies (rc_device.c): the runtime (0, or -1 with why), device copies
   of host memory, of a view (its whole span, same strides), of an rc_buf (guards and
   poison included; _back copies it home and frees it) and of options' sinks and slopes
   (mem[2] to free). */
int       rc_dev_load(char *msg, size_t len);
void     *rc_dev_put(const void *host, size_t bytes);
int       rc_dev_get(void *host, const void *dev, size_t bytes);
void      rc_dev_free(void *dev);
fa_tensor rc_dev_view(const fa_tensor *t, void **dmem);
fa_tensor rc_dev_buf(const rc_buf *b, void **dmem);
int       rc_dev_buf_back(rc_buf *b, void *dmem);
fa_options rc_dev_options(const fa_options *o, int64_t H, void **mem);

#endif
