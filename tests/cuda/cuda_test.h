/* cuda_test.h - what the parts of test_cuda share (see test_cuda.c): the random stream,
 * host/device buffer pairs, the PASS/FAIL line, the dense case description, and the
 * bridge to liboracle (tests/oracle/oracle.h), which every numeric check goes through. */
#ifndef FA_CUDA_TEST_H
#define FA_CUDA_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include "flashattn.h"
#include "oracle.h"

extern int fails, passes, quick;
extern fa_context *cu, *ref;      /* the CUDA backend under test; the reference backend */
extern uint64_t rng;               /* the one random stream (its seed is printed)        */
double frand(void);                /* uniform in [-1, 1)                                 */

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(2); } } while (0)

size_t esz(fa_dtype t);
const char *dtname(fa_dtype t);

/* A buffer on both sides: host bytes h, device bytes d, n elements of dtype t. */
typedef struct { void *h, *d; size_t n; fa_dtype t; } buf;
buf mk(size_t n, fa_dtype t, double amp);   /* random (amp * frand()), both sides       */
buf mk_poison(size_t n, fa_dtype t);        /* device poisoned (0xff: NaN), host zero   */
buf mk_zero(size_t n, fa_dtype t);          /* zero on both sides; draws no random number */
void fr(buf *b);
void pull(buf *b);                          /* device -> host, guard band included      */
fa_tensor view(void *data, fa_dtype t, int64_t B, int64_t S, int64_t H, int64_t D, int transposed);
int guard_ok(const buf *b);                 /* the 256 bytes past n still 0xff          */
double absmax(const float *x, size_t n);
/* A PASS/FAIL line (FAIL lines only under quick), counted in passes / fails. */
void result(const char *name, int ok, const char *fmt, ...);

typedef struct {
    const char *name; fa_dtype t; int B, Sq, Sk, H, Hkv, dqk, dv;
    fa_causal causal; int window; int64_t wl, wr; float softcap, dropout;
    int alibi, sinks, bias, transposed, out_f32;
} dcase;

/* ---- liboracle --------------------------------------------------------------------- */
/* Rows [s0, s0 + n) of batch entry b of a [B, S, H, D] tensor at host bytes h, stored
   [B][S][H][D] (or [B][H][S][D] when transposed), as [n][H][D] doubles (malloc'd). */
double *host_rows(const void *h, fa_dtype t, int64_t S, int64_t H, int64_t D, int transposed,
                  int64_t b, int64_t s0, int64_t n);
/* The first n elements of a buffer's host side, as doubles (malloc'd). */
double *host_all(const buf *b, size_t n);
/* lse [B][H][S] (float) in the oracle's layout [H][B * S] (malloc'd). */
double *lse_bhs(const float *l, int64_t B, int64_t H, int64_t S);
/* ours against the oracle with the rule; prints why on a failure. *ratio: err / bound. */
int oracle_ok(const or_oracle *o, or_tensor t, const double *ours, double *ratio);

/* ---- the cases -------------------------------------------------------------------- */
void run_dense(const dcase *c);                  /* cuda_dense.c */
void run_backward(const dcase *c, int det);
void features_fwd(fa_dtype t, int d);
void features_bwd(fa_dtype t, int d);
void run_varlen(fa_dtype t, int nseq, int d, fa_causal causal);                 /* cuda_varlen.c */
void run_varlen_bwd(fa_dtype t, int nseq, int d, fa_causal causal, int det);
void run_kvcache(fa_dtype t, int B, int Sq, int snew, int page, int d, fa_causal causal, int H, int Hkv);
void run_decode_suite(void);                     /* cuda_decode.c */
void run_decode_san(void);

#endif
