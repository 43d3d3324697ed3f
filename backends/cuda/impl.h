/* impl.h - the host side of the CUDA module, shared by its files: the context's state,
 * the library's services and what each file gives the others.
 *   module.cu        entry point (ABI check), device query, context state, workspace pool,
 *                    describe, query, the KV-cache append and fa_combine
 *   plan_forward.cu  which forward kernel serves a call, its launch parameters, the launch
 *   plan_backward.cu the same for the backward
 *   checks.cu        argument checks that are the device's own (device pointers, alignment,
 *                    FA_DEBUG=1 index-array checks)
 *   tmaps.cu         the tensor maps of the Hopper kernels (the driver's encoder)
 * Every tensor, lse and index array is device memory; work is queued on the context's
 * stream and no call synchronizes, except the FA_DEBUG=1 index-array checks.
 */
#ifndef FA_CUDA_IMPL_H
#define FA_CUDA_IMPL_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include "backend.h"
#include "kernels.h"

/* The library's services (set_error, verbose, appendf): the library's own symbols are
   hidden, so the module reaches them only through this table (module.cu). */
extern const fa_host_services *H;

typedef struct {
    int device;
    cudaStream_t stream;
    char name[256];
    int cc_major, cc_minor, sms, smem_optin, l2, debug;
    size_t mem;
    int req_bq, req_bkv;
    int use_sm90;                    /* the Hopper kernels serve the fast forward set (the
                                        warp-specialized forward, paged caches the first one)
                                        and the lean backward set */
    int dq_atomic;                   /* FA_CUDA_DQ=atomic (a test hook): the Hopper backward
                                        adds dQ with atomics, not the tensor-map reduce */
    int tmap_tried;                  /* the driver's tensor-map encoder looked up (once) */
    void *tmap_encode;               /* cuTensorMapEncodeTiled, or NULL: dQ by atomics */
    int *tickets;                    /* the warp-specialized forward's tile counter (device, 0
                                        between launches), allocated at its first launch */
    cudaEvent_t tickets_done;        /* recorded after each launch that takes tickets ... */
    cudaStream_t tickets_stream;     /* ... on this stream: a launch on another stream of the
                                        context waits for it (one counter, one launch at a time) */
    cudaMemPool_t pool;              /* the workspaces' memory pool (created at the first
                                        workspace; NULL: none yet, or creation failed) */
    int pool_failed;                 /* cudaMemPoolCreate failed: cudaMallocAsync instead */
    int dec_blocks_per_sm[2][4][3];  /* decode blocks resident per SM by [bf16][class 64, 128,
                                        256, 128 with KV-head pairs][row groups 1, 2, 4];
                                        0 = not asked yet */
    char qname[160];
} cuda_impl;

#define IMPL(ctx) ((cuda_impl *)(ctx)->impl)

fa_status cuda_err(const fa_context *ctx, cudaError_t e, const char *what);
/* A workspace of `bytes` on the context's stream, from the context's memory pool. */
cudaError_t ws_alloc(cuda_impl *im, void **ws, size_t bytes);

/* checks.cu */
fa_status check_ptr(const fa_context *ctx, const void *ptr, const char *name);
fa_status check_pointers(fa_context *ctx, const fa_problem *p);
fa_status debug_check(fa_context *ctx, const fa_problem *p);
int aligned16(const fa_tensor *t);
const char *dtname(fa_dtype t);

/* plan_forward.cu: the forward kernels fwd_plan chooses between */
enum { FWD_GENERAL, FWD_FAST, FWD_SM90, FWD_F32_SIMT, FWD_F32_TF32, FWD_SM90WS, FWD_DECODE };
fa_status fwd_plan(fa_context *ctx, const fa_problem *p, fa_cu_fwd *k, int *D, int64_t *blocks, int *fast);
fa_status cuda_forward(fa_context *ctx, const fa_problem *p);

/* plan_backward.cu: the backward kernels bwd_plan chooses between */
enum { BWD_SM80, BWD_SM90, BWD_F32, BWD_SM90WS };
fa_status bwd_plan(fa_context *ctx, const fa_problem *p, fa_cu_bwd *k, int *D, int64_t *blocks, int *path);
fa_status cuda_backward(fa_context *ctx, const fa_problem *p);

#if FA_SM90A
/* tmaps.cu: 1 when the map was encoded, 0 when the driver cannot (no encoder, or the
   shape is beyond the map's limits) */
int qkv_tensor_map(cuda_impl *im, CUtensorMap *m, const fa_tensor *t, int64_t cols, int varlen, int rows);
int dq_tensor_map(cuda_impl *im, CUtensorMap *m, float *dq_acc, int64_t rows, int dqk);
#endif

#endif /* FA_CUDA_IMPL_H */
