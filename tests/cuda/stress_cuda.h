/* stress_cuda.h - what the parts of stress_cuda share (see stress_cuda.c): the random
 * stream, the failure count, the case description and the functions of each part. */
#ifndef FA_STRESS_CUDA_H
#define FA_STRESS_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include "flashattn.h"
#include "oracle.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(2); } } while (0)
#define GUARD 256

/* stress_cuda.c: time, the random stream, failures */
double now(void);
extern uint64_t rng;
uint64_t rnext(void);
double frand(void);               /* [-1, 1) */
int irand(int n);                 /* [0, n)  */
size_t esz(fa_dtype t);
const char *dtn(fa_dtype t);
extern long fails;
void failf(const char *fmt, ...);

/* ---- cases (stress_cases.c) -------------------------------------------------------------- */
enum { K_FWD, K_BWD, K_VARLEN, K_VARLEN_BWD, K_KVCACHE, K_COMBINE, K_NKINDS };
extern const char *const kind_name[K_NKINDS];

/* How an array is checked after a run. */
enum { A_IN, A_OUT, A_LSE, A_GRAD, A_DSINKS, A_CACHE };

#define MAXA 16
typedef struct {
    const char *nm;
    int role;
    fa_dtype t;          /* element type for outputs (A_OUT/A_GRAD); inputs: any      */
    size_t n, es;        /* elements, bytes per element                                */
    void *init;          /* inputs and caches: host bytes, uploaded before each run     */
    float *oracle;       /* outputs: the reference backend's fp32 values (n); NaN where it
                            wrote nothing (live); K_COMBINE: the naive model of the rule */
    void *oracle_bytes;  /* A_CACHE: the reference's cache bytes after the append       */
    unsigned char *live; /* NULL: every element must be written; else 0 = untouched      */
} arr;

typedef struct {
    int kind, bitwise;
    char name[200];
    fa_dtype t;
    int B, Sq, Sk, H, Hkv, dqk, dv, det;
    fa_options opt;      /* pointers unset here; alibi/sinks/bias from arrays */
    int alibi, sinks, bias, out_f32;
    int nseq, maxq, maxk, TQ, TK;
    int32_t cq[20], ckk[20];
    int page, snew, maxp, npages, cap;
    int nparts;
    int na;
    arr a[MAXA];
    int ai[32];          /* index of each named array (the X_ enum below), -1 = none */
    size_t bytes;        /* sum of the arrays' device bytes, guards included              */
    unsigned char *first;/* the first run's output bytes (all arrays, guards included)    */
    long runs;
    or_oracle orc;       /* liboracle's oracle of the call (not for K_COMBINE)            */
    int has_orc;
} scase;

/* named array slots */
enum { X_Q, X_K, X_V, X_O, X_L, X_DO, X_DQ, X_DK, X_DV, X_DS, X_AL, X_SK, X_BI, X_CQ, X_CK, X_KN, X_VN, X_CS, X_BT,
       X_P0 /* combine: parts X_P0..X_P0+3, lse parts X_P0+4..X_P0+7 */ };

extern fa_context *refctx;        /* the reference backend: caches after an append, live rows */
void *hmalloc(size_t bytes);      /* pinned host memory (async copies) */
scase *new_case(int id);          /* a random case, its oracle made */
/* The call of a case, on ctx. p[i]: the pointer of array i (device, or host for the
   reference). ref = 1: outputs are fp32 (the reference's buffers). Returns the status. */
fa_status call(const scase *c, fa_context *ctx, void **p, int ref);

/* ---- checking (stress_check.c) ----------------------------------------------------------- */
void case_oracle(scase *c);       /* liboracle's oracle of c (or the exact combine) */
size_t out_bytes(const scase *c); /* what is read back: every array but the inputs */
int all_ff(const unsigned char *p, size_t n);
/* got: the arrays that are not inputs, each n*es bytes + GUARD, in order */
void check_run(scase *c, const unsigned char *got, const char *where);

/* ---- failing calls (stress_bad.c) -------------------------------------------------------- */
#define JUNK_BYTES (1 << 20)
#define NBAD 19
extern void *junk_d, *badout_d, *host_junk;   /* device inputs, device outputs (0xff), pageable host */
extern long bad_calls;
int bad_call(fa_context *ctx, int which, char *desc, size_t dlen);

/* ---- big mode (stress_big.c) ------------------------------------------------------------- */
int big(void);

#endif
