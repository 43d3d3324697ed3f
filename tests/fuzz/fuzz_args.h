/* fuzz_args.h - the pieces of the fuzz_args target (fuzz_args.c) apart from the target
 * itself: decoding the input bytes into arguments and the exactly sized memory behind
 * them, with snapshots to see what a call wrote (fuzz_args_input.c); the spec predicate,
 * sufficient conditions for FA_ERR_INVALID_ARG written from docs/api.md, and the checks
 * made after each call (fuzz_args_spec.c).
 */
#ifndef FA_FUZZ_ARGS_H
#define FA_FUZZ_ARGS_H

#include <flashattn.h>
#include <stddef.h>
#include <stdint.h>

typedef struct { const uint8_t *p; size_t n; } reader;

#define BUDGET_BYTES (256 * 1024)
#define FAR_AWAY ((void *)(uintptr_t)4096)

typedef struct {
    fa_tensor t;
    void *buf;       /* owned allocation (may differ from t.data when aliased)    */
    size_t bytes;    /* extent in bytes when it fits                             */
    void *copy;      /* snapshot of buf                                          */
    int fits;        /* 1: t.data points at a buffer covering the whole view     */
} ftensor;

/* A plain float array of exactly n elements with its snapshot. */
typedef struct { float *p; float *copy; int64_t n; } farr;

/* ---- fuzz_args_input.c: the input and the memory ------------------------------------- */
uint64_t rd(reader *r, int bytes);                /* the next bytes, big-endian; 0 past the end */
int64_t rd_size(reader *r, int64_t small);        /* usually <= small, sometimes 0, < 0 or huge */
void make_tensor(reader *r, ftensor *f, int64_t b, int64_t s, int64_t h, int64_t d,
                 fa_dtype dt);
void snapshot(ftensor *f);
int changed(const ftensor *f);                    /* buf differs from its snapshot */
void free_tensor(ftensor *f);
void farr_make(farr *a, int64_t n, float base);
int farr_changed(const farr *a);
void farr_free(farr *a);
int32_t *make_index(reader *r, int64_t n, int64_t hi, int monotone);

/* ---- fuzz_args_spec.c: the spec predicate and the checks ------------------------------ */
int dtype_ok(fa_dtype t);
int tensor_bad(const fa_tensor *t, int output, int query);
int opts_bad(const fa_options *o, int bias_ok, int query);
int qkv_bad(const fa_tensor *q, const fa_tensor *k, const fa_tensor *v, const fa_tensor *o,
            int dense);
void fail(const char *fn, const char *what, fa_context *ctx);   /* report and abort */
void valid_call_still_works(fa_context *ctx);
void check_status(fa_context *ctx, fa_status st, const char *fn, int must_fail, int op_call);

#endif
