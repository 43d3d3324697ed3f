/* cuda.cu - the CUDA backend module: entry point (ABI check), device query, dispatch.
 *
 * Loaded with dlopen by lib/context.c. The library's own symbols are hidden, so everything
 * the module needs from it comes through fa_host_services (set_error, verbose, appendf).
 * Every tensor, lse and index array is device memory; work is queued on the context's
 * stream and no call synchronizes, except the FA_DEBUG=1 index-array checks.
 *
 * Paths (the teaching ladder's last rungs):
 *   forward  cuda/sm80: FlashAttention-2 style, mma.sync m16n8k16 + ldmatrix + cp.async,
 *            head-dim classes 64/128/256. The fast kernel (forward_fast.cuh: 4 warps, 2 m-tiles
 *            per warp, single-buffered K/V overlapped FA2's way) serves calls without bias,
 *            ALiBi, softcap or dropout; the general kernel (forward_sm80.cuh: tiles 128 x 64,
 *            8 warps) everything else; fa_query names which one and why;
 *            split-KV + combine when the grid would not fill the GPU (decode).
 *   backward cuda/sm80: FlashAttention-2 style (backward_sm80.cuh): per 64 keys of a KV head,
 *            loop over the query tiles of the group; dK/dV in registers, dQ by fp32 atomics
 *            (deterministic=1: one launch per KV tile), pre/post kernels in backward_aux.cu.
 *   fp32     cuda/tf32x3 (tf32x3_fwd.cuh): the forward of head-dim classes 64/128 on the tensor
 *            cores, three tf32 products per fp32 product; cuda/simt (simt_f32.cuh): the rest
 *            (class 256, the backward) with fp32 FMA; every feature, any head dim up to 256.
 */
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

static fa_host_services H_copy;   /* the library passes its services on its stack: copy */
static const fa_host_services *H = &H_copy;

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
    char qname[160];
} cuda_impl;

#define IMPL(ctx) ((cuda_impl *)(ctx)->impl)

static fa_status cuda_err(const fa_context *ctx, cudaError_t e, const char *what)
{
    return H->set_error(ctx, FA_ERR_DEVICE, "cuda: %s: %s (%s)", what, cudaGetErrorName(e),
                        cudaGetErrorString(e));
}

/* The kernel families this device runs, from its compute capability (at context creation
   and at every fa_context_set_device). The wgmma kernels exist only in builds that compiled
   sm_90a code (FA_SM90A) and run only on compute capability 9.0 exactly (sm_90a code does
   not run on later chips). */
static void dispatch_flags(cuda_impl *im)
{
    im->use_sm90 = FA_SM90A && im->cc_major == 9 && im->cc_minor == 0;
}

/* The warp-specialized forward's tile for problem p at head-dim class D: *bm query rows x
   *bn keys, one of the tiles compiled (kernels.h: fa_fwd_ws_has) */
static void fwd_ws_tile(int D, const fa_problem *p, int *bm, int *bn)
{
    /* d64: 128-key tiles up to 2048 keys (1.04-1.15x the 192-key ones at 512-1024 keys, even
       at 2048; 0.95-0.98x from 4096 on, on the H200) */
    *bn = D == 64 && p->max_sk <= 2048 ? fa_fwd_ws_bn_alt(D) : fa_fwd_ws_bn(D);
    *bm = 128;
    /* d64 without causal mask or window, from 512 queries: 192 query rows (3 consumer
       warpgroups) x 128 keys, 1.08-1.15x the two-warpgroup tiles at 512-16k keys; under a
       causal mask 0.96-1.04x (more of each diagonal tile is masked), so not there */
    const int masked = p->window_left >= 0 || p->window_right >= 0;   /* causal is a window */
    if (fa_fwd_ws_bm_alt(D) > 0 && !masked && p->max_sq >= 512) {
        *bm = fa_fwd_ws_bm_alt(D);
        *bn = fa_fwd_ws_bn_alt(D);
    }
    if (!fa_fwd_ws_has(D, *bm, *bn)) *bm = 128;
}

static fa_status load_device(fa_context *ctx, cuda_impl *im, int dev)
{
    cudaDeviceProp pr;
    cudaError_t e = cudaGetDeviceProperties(&pr, dev);
    if (e != cudaSuccess) return H->set_error(ctx, FA_ERR_UNSUPPORTED, "cuda: device %d: %s", dev, cudaGetErrorString(e));
    if (pr.major < 8)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            "cuda: device %d (%s) is sm%d%d; the kernels need sm80 or newer", dev, pr.name,
                            pr.major, pr.minor);
    e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = fa_probe();
    if (e != cudaSuccess) {
        cudaGetLastError();
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            "cuda: device %d (%s, sm%d%d): %s (rebuild with --with-cuda-arch=...%d%d)", dev,
                            pr.name, pr.major, pr.minor, cudaGetErrorString(e), pr.major, pr.minor);
    }
    im->device = dev;
    snprintf(im->name, sizeof im->name, "%s", pr.name);
    im->cc_major = pr.major; im->cc_minor = pr.minor;
    im->sms = pr.multiProcessorCount;
    im->smem_optin = (int)pr.sharedMemPerBlockOptin;
    im->l2 = pr.l2CacheSize;
    im->mem = pr.totalGlobalMem;
    dispatch_flags(im);
    return FA_OK;
}

static fa_status cuda_init(fa_context *ctx)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return H->set_error(ctx, FA_ERR_UNSUPPORTED, "cuda: no usable CUDA device (%s)",
                            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    cuda_impl *im = (cuda_impl *)calloc(1, sizeof *im);
    if (!im) return H->set_error(ctx, FA_ERR_NO_MEMORY, "cuda: out of host memory");
    fa_status st = load_device(ctx, im, 0);
    if (st != FA_OK) { free(im); return st; }
    const char *dbg = getenv("FA_DEBUG");
    im->debug = dbg && !strcmp(dbg, "1");
    const char *dq = getenv("FA_CUDA_DQ");   /* FA_CUDA_DQ=atomic: the Hopper backward's dQ by atomics */
    im->dq_atomic = dq && !strcmp(dq, "atomic");
    ctx->impl = im;
    H->verbose(ctx, "cuda: device 0 %s sm%d%d, %d SMs, %d KiB smem/block, %d MiB L2", im->name,
               im->cc_major, im->cc_minor, im->sms, im->smem_optin / 1024, im->l2 >> 20);
    return FA_OK;
}

/* The device resources a context holds: the forward's ticket counter and the workspace
   pool. A pool with allocations still pending frees itself once they complete. */
static void release_device(cuda_impl *im)
{
    if (!im->tickets && !im->pool) return;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
    cudaSetDevice(im->device);
    if (im->tickets) {
        cudaFree(im->tickets);
        cudaEventDestroy(im->tickets_done);
        im->tickets = NULL;
    }
    if (im->pool) cudaMemPoolDestroy(im->pool);
    im->pool = NULL;
    im->pool_failed = 0;
    if (cur >= 0) cudaSetDevice(cur);
    cudaGetLastError();   /* nothing left for the caller's next error check */
}

static void cuda_fini(fa_context *ctx)
{
    cuda_impl *im = IMPL(ctx);
    if (im) release_device(im);
    free(ctx->impl);
    ctx->impl = NULL;
}

/* A workspace of `bytes` on the context's stream, from the context's own memory pool: the
   pool keeps what it held between calls (release threshold: unlimited), so a call does not
   map fresh memory. From the device's default pool, whose threshold is 0, every call after a
   synchronization mapped its workspace again: 0.17-0.27 ms per backward at 16k tokens x
   2048 on an H200 (S512: 0.76-1.07 ms before, 0.59-0.86 after). The pool is the context's,
   so the setting does not reach other code in the process; fa_context_destroy frees it, and
   a failed allocation trims it and tries once more. */
static cudaError_t ws_alloc(cuda_impl *im, void **ws, size_t bytes)
{
    if (!im->pool && !im->pool_failed) {
        cudaMemPoolProps pp;
        memset(&pp, 0, sizeof pp);
        pp.allocType = cudaMemAllocationTypePinned;
        pp.location.type = cudaMemLocationTypeDevice;
        pp.location.id = im->device;
        uint64_t keep = UINT64_MAX;
        if (cudaMemPoolCreate(&im->pool, &pp) != cudaSuccess ||
            cudaMemPoolSetAttribute(im->pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
            cudaGetLastError();
            if (im->pool) cudaMemPoolDestroy(im->pool);
            im->pool = NULL;
            im->pool_failed = 1;
        }
    }
    if (!im->pool) return cudaMallocAsync(ws, bytes, im->stream);
    cudaError_t e = cudaMallocFromPoolAsync(ws, bytes, im->pool, im->stream);
    if (e == cudaErrorMemoryAllocation) {
        /* what the pool keeps and no call uses goes back to the device, then one retry */
        cudaGetLastError();
        cudaStreamSynchronize(im->stream);
        cudaMemPoolTrimTo(im->pool, 0);
        e = cudaMallocFromPoolAsync(ws, bytes, im->pool, im->stream);
    }
    return e;
}

static void cuda_describe(const fa_context *ctx, char *buf, size_t len)
{
    const cuda_impl *im = IMPL(ctx);
    H->appendf(buf, len,
               "gpu: %s (device %d), compute capability %d.%d, %d SMs, %d KiB shared memory per "
               "block (opt-in), %d MiB L2, %zu MiB memory\n",
               im->name, im->device, im->cc_major, im->cc_minor, im->sms, im->smem_optin / 1024,
               im->l2 >> 20, im->mem >> 20);
    H->appendf(buf, len,
               "forward: cuda/sm80 kernels (mma.sync m16n8k16 + ldmatrix, fp32 accumulation, online "
               "softmax in registers), head-dim classes 64/128/256 (d_qk, d_v multiples of 8 up to 256), "
               "fp16/bf16; fast kernel (no bias, ALiBi, softcap or dropout): FlashAttention-2 layout, "
               "4 warps x 32 query rows (d256: x 16), tiles 128 x 64 (d256: 64 x 64), Q fragments in "
               "registers for d64, K and V single-buffered with cp.async overlapping the two products; "
               "general kernel (everything else%s): tiles 128 x 64, 8 warps x 16 query rows, K/V "
               "double-buffered%s\n",
               im->req_bq || im->req_bkv ? "; requested tiles ignored: the kernels are compiled for fixed tiles" : "");
    if (im->use_sm90)
        H->appendf(buf, len,
                   "forward on this chip (compute capability 9.0): cuda/sm90 wgmma kernel for the fast "
                   "kernel's feature set: 2 warpgroups x 64 query rows, tiles 128 x 128 (d256: 128 x 64), "
                   "Q, K, V in 128-byte swizzled shared memory, K/V double-buffered with cp.async, "
                   "S = Q K^T and O += P V on wgmma (P from registers)%s\n",
                   "; since then warp-specialized for every layout but paged caches: a "
                                "producer warp loads Q, K, V by TMA into a ring of 3/3/2 stages (d64/d128/d256; "
                                "tiles 128 x 192/128/80, d64 with <= 2048 keys 128 x 128) with mbarriers, 2 "
                                "consumer warpgroups (setmaxnreg 232 registers, producer 40; d64 without a causal "
                                "mask or window from 512 queries: 3 consumer warpgroups on 192 x 128 tiles, 160 "
                                "registers, producer 32, which take turns issuing their products on work tiles "
                                "of 4096 keys or more), persistent grid of one block per SM, query tiles of a "
                                "head in descending order");
    if (im->use_sm90)
        H->appendf(buf, len,
                   "backward on this chip: cuda/sm90 wgmma kernel for the lean set (no softcap, ALiBi, bias "
                   "or dropout): 2 warpgroups x 64 keys (d256: both on 64 keys, dK/dV columns split), query "
                   "tiles of 64 rows, the five products on wgmma, dQ added into an fp32 workspace by the "
                   "tensor-map reduce%s\n",
                   "; since then d64 and d128 warp-specialized (a producer warp loads "
                                 "K, V once and Q, dO by TMA into a ring of 3/2 stages with mbarriers, 2 consumer "
                                 "warpgroups with 240 registers, dS double-buffered, one named barrier per query "
                                 "tile), the consumer warpgroups meeting by one-way barrier pairs, up to a tile apart)");
    H->appendf(buf, len,
               "split-kv: when batch*heads*ceil(Sq/rows per tile) < %d SMs (decode), keys are split over up to "
               "%d blocks and merged by the combine kernel\n", im->sms, FA_CU_MAX_PARTS);
    H->appendf(buf, len,
               "backward: cuda/sm80 kernel (FlashAttention-2 style: one block per 64 keys of a KV head "
               "looping over the 64-row query tiles of its query heads; dK, dV in registers, dQ added "
               "atomically into an fp32 workspace; deterministic=1: one launch per KV tile; a lean "
               "instantiation without the softcap, ALiBi, bias and dropout stages serves calls that use none), "
               "D = rowsum(dO*O) and dQ conversion kernels, fp16/bf16, head-dim classes 64/128/256\n");
    H->appendf(buf, len,
               "fp32 q/k/v: every feature, any head dim up to 256; forward of head-dim classes 64/128: "
               "cuda/tf32x3 (tensor cores, each fp32 product as three tf32 products: big*big + big*small + "
               "small*big, fp32 accumulation; 8 warps x 16 query rows, 32 keys per tile); class 256 and the "
               "backward: cuda/simt kernels (fp32 FMA on the CUDA cores; forward 64 query rows x 32 keys, "
               "backward 32 keys x %d/%d query rows (d <= 64 / larger), 256 threads)\n",
               fa_f32_bwd_bq(64), fa_f32_bwd_bq(128));
    if (im->use_sm90 && im->dq_atomic)
        H->appendf(buf, len, "FA_CUDA_DQ=atomic: the Hopper backward adds dQ by atomics, not the tensor-map reduce\n");
    H->appendf(buf, len, "stream: %p%s\n", (void *)im->stream, im->stream ? "" : " (default)");
}

static fa_status cuda_set_threads(fa_context *ctx, int n)
{
    (void)n;
    return H->set_error(ctx, FA_ERR_UNSUPPORTED, "fa_context_set_threads: the cuda backend has no thread count");
}

static fa_status cuda_set_tiles(fa_context *ctx, int bq, int bkv)
{
    IMPL(ctx)->req_bq = bq; IMPL(ctx)->req_bkv = bkv;
    return FA_OK;
}

static fa_status cuda_set_device(fa_context *ctx, int dev)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || dev >= n) {
        cudaGetLastError();
        return H->set_error(ctx, FA_ERR_INVALID_ARG, "fa_context_set_device: device=%d but %d CUDA devices", dev, n);
    }
    /* the ticket counter and the pool belong to the old device; the next call that needs
       them creates them on the device in use */
    release_device(IMPL(ctx));
    cuda_impl tmp = *IMPL(ctx);
    fa_status st = load_device(ctx, &tmp, dev);
    if (st != FA_OK) return st;
    tmp.stream = 0;   /* a stream belongs to its device */
    *IMPL(ctx) = tmp;
    return FA_OK;
}

static fa_status cuda_set_stream(fa_context *ctx, void *stream)
{
    IMPL(ctx)->stream = (cudaStream_t)stream;
    return FA_OK;
}

/* ---- argument checks that are the device's own -------------------------------------- */

/* A host pointer is INVALID_ARG (an argument error, never a crash). NULL passes (optional). */
static fa_status check_ptr(const fa_context *ctx, const void *ptr, const char *name)
{
    if (!ptr) return FA_OK;
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e != cudaSuccess) { cudaGetLastError(); a.type = cudaMemoryTypeUnregistered; }
    if (a.type == cudaMemoryTypeUnregistered)
        return H->set_error(ctx, FA_ERR_INVALID_ARG,
                            "cuda: %s=%p is host memory; the cuda backend needs device pointers", name, ptr);
    return FA_OK;
}

static int aligned16(const fa_tensor *t)
{
    return ((uintptr_t)t->data % 16) == 0 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 &&
           t->stride[2] % 8 == 0;
}

static const char *dtname(fa_dtype t) { return t == FA_F16 ? "fp16" : t == FA_BF16 ? "bf16" : "fp32"; }

/* The forward kernels fwd_plan chooses between. */
enum { FWD_GENERAL, FWD_FAST, FWD_SM90, FWD_F32_SIMT, FWD_F32_TF32, FWD_SM90WS };

/* Can the forward kernels serve p? Fills the launch parameters; *fast = the FWD_ kernel. */
static fa_status fwd_plan(fa_context *ctx, const fa_problem *p, fa_cu_fwd *k, int *D, int64_t *blocks,
                          int *fast)
{
    cuda_impl *im = IMPL(ctx);
    memset(k, 0, sizeof *k);
    const int f32 = p->q.dtype == FA_F32;
    if (f32 ? p->dqk > 256 || p->dv > 256 : p->dqk % 8 || p->dv % 8 || p->dqk > 256 || p->dv > 256)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            f32 ? "cuda: head dims d_qk=%lld, d_v=%lld: the fp32 kernels take head dims up to 256"
                                : "cuda: head dims d_qk=%lld, d_v=%lld: the fp16/bf16 kernels need multiples of 8 up to 256",
                            (long long)p->dqk, (long long)p->dv);
    int64_t dm = p->dqk > p->dv ? p->dqk : p->dv;
    *D = dm <= 64 ? 64 : dm <= 128 ? 128 : 256;
    if (f32) {
        /* fp32 q/k/v: the fp32-FMA kernels (simt_f32.cuh), every feature, scalar loads
           (4-byte alignment, any strides) */
        *fast = FWD_F32_SIMT;
        /* head-dim classes 64 and 128 take the 3xTF32 tensor-core forward (tf32x3_fwd.cuh)
           where its shared memory fits */
        if (*D <= 128 && fa_tf32_fwd_smem(*D) <= im->smem_optin) *fast = FWD_F32_TF32;
        int vec = p->dqk % 4 == 0 && p->dv % 4 == 0;
        const fa_tensor *vt[3] = { &p->q, &p->k, &p->v };
        for (int i = 0; i < 3; i++)
            vec = vec && (uintptr_t)vt[i]->data % 16 == 0 && vt[i]->stride[0] % 4 == 0 && vt[i]->stride[1] % 4 == 0 &&
                  vt[i]->stride[2] % 4 == 0;
        k->f32_vec = vec;
        if (*fast == FWD_F32_SIMT && fa_f32_fwd_smem(*D) > im->smem_optin)
            return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                                "cuda: the fp32 forward of head-dim class %d needs %d KiB shared memory per block; %s allows %d KiB",
                                *D, fa_f32_fwd_smem(*D) / 1024, im->name, im->smem_optin / 1024);
    }
    /* The fast kernel serves the common feature set; why not, when it does not. */
    const char *general_why = f32 ? "fp32" : p->has_bias ? "bias" : p->alibi ? "alibi" : p->softcap > 0.f ? "softcap"
                              : p->dropout_p > 0.f ? "dropout" : !(p->scale > 0.f) ? "scale <= 0"
                              : fa_fwd_fast_smem(*D) > im->smem_optin ? "shared memory" : NULL;
    if (!f32) *fast = general_why == NULL ? FWD_FAST : FWD_GENERAL;
    if (*fast == FWD_FAST && im->use_sm90 && fa_fwd_sm90_smem(*D) <= im->smem_optin) *fast = FWD_SM90;
    /* The warp-specialized forward, except for paged caches (at d64 and <= 2048 keys with
 128-key tiles: 1.04-1.15x the first Hopper forward at 512-1024 keys, on the H200) */
    int wsbm, wsbn;
    fwd_ws_tile(*D, p, &wsbm, &wsbn);
    if (*fast == FWD_SM90 && !p->block_table && fa_fwd_ws_smem(*D, wsbm, wsbn) <= im->smem_optin)
        *fast = FWD_SM90WS;
    if (*fast == FWD_GENERAL && fa_fwd_smem(*D) > im->smem_optin)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            "cuda: head-dim class %d needs %d KiB shared memory per block; %s allows %d KiB",
                            *D, fa_fwd_smem(*D) / 1024, im->name, im->smem_optin / 1024);
    const fa_tensor *ts[3] = { &p->q, &p->k, &p->v };
    const char *tn[3] = { "q", "k", "v" };
    for (int i = 0; i < 3 && !f32; i++)
        if (!aligned16(ts[i]))
            return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                                "cuda: %s must be 16-byte aligned with strides multiples of 8 elements "
                                "(got data %p, strides %lld, %lld, %lld)", tn[i], ts[i]->data,
                                (long long)ts[i]->stride[0], (long long)ts[i]->stride[1], (long long)ts[i]->stride[2]);
    const fa_tensor *o = &p->out;
    if (!f32 && ((uintptr_t)o->data % (o->dtype == FA_F32 ? 8 : 4) || o->stride[0] % 2 || o->stride[1] % 2 || o->stride[2] % 2))
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            "cuda: out must be aligned to 2 elements with even strides");
    const int64_t big = (int64_t)1 << 30;
    if (p->max_sq >= big || p->max_sk >= big || p->q.shape[1] >= big || p->k.shape[1] >= big ||
        p->batch >= big || p->hq >= 65536)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED, "cuda: sequence lengths, batch or heads too large for 32-bit indices");

    k->q = p->q.data; k->k = p->k.data; k->v = p->v.data; k->out = p->out.data; k->lse = p->lse;
    k->q_sb = p->q.stride[0]; k->q_ss = p->q.stride[1]; k->q_sh = p->q.stride[2];
    k->k_sb = p->k.stride[0]; k->k_ss = p->k.stride[1]; k->k_sh = p->k.stride[2];
    k->v_sb = p->v.stride[0]; k->v_ss = p->v.stride[1]; k->v_sh = p->v.stride[2];
    k->o_sb = o->stride[0]; k->o_ss = o->stride[1]; k->o_sh = o->stride[2];
    k->out_dtype = (int)o->dtype;
    k->layout = (int)p->layout; k->batch = (int)p->batch; k->hq = (int)p->hq; k->hkv = (int)p->hkv;
    k->group = (int)p->group; k->dqk = (int)p->dqk; k->dv = (int)p->dv;
    k->sq = (int)p->q.shape[1]; k->sk = (int)p->k.shape[1];
    k->total_q = (int)p->q.shape[1]; k->total_k = (int)p->k.shape[1];
    k->cu_q = p->cu_q; k->cu_k = p->cu_k; k->cache_seqlens = p->cache_seqlens; k->block_table = p->block_table;
    k->s_new = (int)p->s_new;
    if (p->layout == FA_LAYOUT_KVCACHE) {
        k->max_pages = (int)p->max_pages; k->page_size = (int)p->page_size;
        k->num_pages = (int)p->k.shape[0];
        k->cache_cap = p->block_table ? (int)(p->max_pages * p->page_size) : (int)p->k.shape[1];
    }
    k->top_left = p->causal == FA_CAUSAL_TOP_LEFT;
    k->window_left = p->window_left < 0 || p->window_left >= big ? -1 : (int)p->window_left;
    k->window_right = p->window_right < 0 || p->window_right >= big ? -1 : (int)p->window_right;
    k->scale = p->scale; k->softcap = p->softcap; k->alibi = p->alibi; k->sinks = p->sinks;
    if (p->has_bias) {
        k->bias = p->bias.data; k->bias_dtype = (int)p->bias.dtype;
        k->bias_sb = p->bias.stride[0]; k->bias_ss = p->bias.stride[1]; k->bias_sh = p->bias.stride[2];
    }
    k->keep_scale = 1.f;
    if (p->dropout_p > 0.f) {
        k->dropout_p = p->dropout_p; k->drop_k0 = p->drop.k0; k->drop_k1 = p->drop.k1;
        k->drop_threshold = p->drop.threshold; k->keep_scale = p->drop.keep_scale;
    }
    int bm = *fast == FWD_F32_TF32 ? FA_TF32_FWD_BM : *fast == FWD_F32_SIMT ? FA_F32_FWD_BM
             : *fast == FWD_SM90WS ? wsbm : *fast == FWD_SM90 ? FA_FWD_SM90_BM : *fast == FWD_FAST ? fa_fwd_fast_bm(*D) : 128;
    int splits;
    for (;;) {
        k->m_blocks = (int)((p->max_sq + bm - 1) / bm);
        if (k->m_blocks == 0) k->m_blocks = 1;
        /* Split-KV when the grid would leave SMs idle; depends on shapes and the SM count only. */
        const int64_t base = p->batch * p->hq * k->m_blocks, kblocks = (p->max_sk + 63) / 64;
        splits = 1;
        if (p->layout != FA_LAYOUT_VARLEN && base > 0 && base < im->sms && kblocks >= 4) {
            int64_t want = (im->sms + base - 1) / base;
            if (want > kblocks / 2) want = kblocks / 2;
            if (want > FA_CU_MAX_PARTS) want = FA_CU_MAX_PARTS;
            if (want > 1) splits = (int)want;
        }
        k->n_splits = splits;
        *blocks = base * splits;
        if (*fast != FWD_SM90WS || *blocks <= INT32_MAX) break;
        /* the work-tile indices of the warp-specialized kernel are 32-bit: the first Hopper
           forward, counted again for its 128-row tiles */
        *fast = FWD_SM90;
        bm = FA_FWD_SM90_BM;
    }
    if (*fast == FWD_F32_TF32)
        snprintf(im->qname, sizeof im->qname, "cuda/tf32x3 fwd fp32 d%d 3 tf32 mma.sync per product %dx%d 8 warps%s", *D,
                 bm, FA_TF32_FWD_BN, splits > 1 ? " split-kv" : "");
    else if (*fast == FWD_F32_SIMT)
        snprintf(im->qname, sizeof im->qname, "cuda/simt fwd fp32 d%d fp32 FMA %dx%d 256 threads%s", *D, bm,
                 FA_F32_FWD_BN, splits > 1 ? " split-kv" : "");
    else if (*fast == FWD_SM90WS)
        snprintf(im->qname, sizeof im->qname,
                 "cuda/sm90 fwd %s d%d wgmma %dx%d tma warp-specialized 1 producer + %d consumer warpgroups persistent%s",
                 dtname(p->q.dtype), *D, bm, wsbn, bm / 64, splits > 1 ? " split-kv" : "");
    else if (*fast == FWD_SM90)
        snprintf(im->qname, sizeof im->qname, "cuda/sm90 fwd %s d%d wgmma %dx%d 2 warpgroups%s%s", dtname(p->q.dtype), *D,
                 bm, fa_fwd_sm90_bn(*D), p->block_table ? " (paged cache)" : "",
                 splits > 1 ? " split-kv" : "");
    else if (*fast == FWD_FAST)
        snprintf(im->qname, sizeof im->qname, "cuda/sm80 fwd %s d%d fast %dx64 4 warps%s", dtname(p->q.dtype), *D,
                 bm, splits > 1 ? " split-kv" : "");
    else
        snprintf(im->qname, sizeof im->qname, "cuda/sm80 fwd %s d%d general 128x64 8 warps (%s)%s",
                 dtname(p->q.dtype), *D, general_why, splits > 1 ? " split-kv" : "");
    if (splits > 1)
        snprintf(im->qname + strlen(im->qname), sizeof im->qname - strlen(im->qname), " %d", splits);
    return FA_OK;
}

/* FA_DEBUG=1: read the index arrays back (synchronizes) and check them as validate.c does. */
static fa_status debug_check(fa_context *ctx, const fa_problem *p)
{
    if (p->layout == FA_LAYOUT_VARLEN) {
        int64_t n = p->batch + 1;
        int32_t *cq = (int32_t *)malloc(n * 4), *ck = (int32_t *)malloc(n * 4);
        fa_status st = FA_OK;
        if (!cq || !ck) st = H->set_error(ctx, FA_ERR_NO_MEMORY, "cuda: FA_DEBUG: out of host memory");
        else if (cudaMemcpy(cq, p->cu_q, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
                 cudaMemcpy(ck, p->cu_k, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
            st = cuda_err(ctx, cudaGetLastError(), "FA_DEBUG: reading cu_seqlens");
        for (int w = 0; w < 2 && st == FA_OK; w++) {
            const int32_t *c = w ? ck : cq;
            const char *nm = w ? "cu_seqlens_k" : "cu_seqlens_q";
            int64_t tot = w ? p->k.shape[1] : p->q.shape[1], mx = w ? p->max_sk : p->max_sq;
            if (c[0] != 0) st = H->set_error(ctx, FA_ERR_INVALID_ARG, "%s[0]=%d must be 0", nm, c[0]);
            for (int64_t b = 0; b < p->batch && st == FA_OK; b++)
                if (c[b + 1] < c[b] || c[b + 1] - c[b] > mx || c[b + 1] > tot)
                    st = H->set_error(ctx, FA_ERR_INVALID_ARG, "%s[%lld]=%d is not monotonic, over max_seqlen or past the tensor",
                                      nm, (long long)b + 1, c[b + 1]);
        }
        free(cq); free(ck);
        return st;
    }
    if (p->layout == FA_LAYOUT_KVCACHE) {
        int32_t *cs = (int32_t *)malloc(p->batch * 4 + 4);
        int32_t *bt = p->block_table ? (int32_t *)malloc(p->batch * p->max_pages * 4 + 4) : NULL;
        fa_status st = FA_OK;
        if (!cs || (p->block_table && !bt)) st = H->set_error(ctx, FA_ERR_NO_MEMORY, "cuda: FA_DEBUG: out of host memory");
        else if (cudaMemcpy(cs, p->cache_seqlens, p->batch * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
                 (bt && cudaMemcpy(bt, p->block_table, p->batch * p->max_pages * 4, cudaMemcpyDeviceToHost) != cudaSuccess))
            st = cuda_err(ctx, cudaGetLastError(), "FA_DEBUG: reading cache_seqlens/block_table");
        int64_t cap = p->block_table ? p->max_pages * p->page_size : p->k.shape[1];
        for (int64_t b = 0; b < p->batch && st == FA_OK; b++) {
            if (cs[b] < 0 || cs[b] + p->s_new > cap)
                st = H->set_error(ctx, FA_ERR_INVALID_ARG, "cache_seqlens[%lld]=%d: with %lld new rows over the capacity %lld",
                                  (long long)b, cs[b], (long long)p->s_new, (long long)cap);
            if (bt)
                for (int64_t pg = 0; pg * p->page_size < cs[b] + p->s_new && st == FA_OK; pg++) {
                    int32_t e = bt[b * p->max_pages + pg];
                    if (e < 0 || e >= p->k.shape[0])
                        st = H->set_error(ctx, FA_ERR_INVALID_ARG, "block_table[%lld][%lld]=%d out of range [0, %lld)",
                                          (long long)b, (long long)pg, e, (long long)p->k.shape[0]);
                }
        }
        free(cs); free(bt);
        return st;
    }
    return FA_OK;
}

static fa_status check_pointers(fa_context *ctx, const fa_problem *p)
{
    fa_status st;
#define CK(ptr, nm) if ((st = check_ptr(ctx, ptr, nm)) != FA_OK) return st
    CK(p->q.data, "q.data"); CK(p->k.data, "k.data"); CK(p->v.data, "v.data");
    CK(p->out.data, "out.data"); CK(p->lse, "lse"); CK(p->alibi, "alibi_slopes"); CK(p->sinks, "sinks");
    if (p->has_bias) CK(p->bias.data, "bias.data");
    CK(p->cu_q, "cu_seqlens_q"); CK(p->cu_k, "cu_seqlens_k");
    CK(p->cache_seqlens, "cache_seqlens"); CK(p->block_table, "block_table");
#undef CK
    return FA_OK;
}

#if FA_SM90A
typedef CUresult (*tmap_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
/* The driver's cuTensorMapEncodeTiled (looked up once), or NULL. */
static void *tmap_encoder(cuda_impl *im)
{
    if (!im->tmap_tried) {
        im->tmap_tried = 1;
        cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            im->tmap_encode = fn;
        else
            cudaGetLastError();
    }
    return im->tmap_encode;
}

/* The tensor map of one 16-bit [batch, seq, heads, cols] tensor for the warp-specialized
   forward: boxes of 64 columns x `rows` rows of one head, 128-byte swizzle, zeros outside.
   Varlen tensors are one sequence of all tokens (batch 1). 0 when the driver cannot encode
   it. */
static int qkv_tensor_map(cuda_impl *im, CUtensorMap *m, const fa_tensor *t, int64_t cols, int varlen, int rows)
{
    if (!tmap_encoder(im)) return 0;
    const cuuint64_t dim[4] = { (cuuint64_t)cols, (cuuint64_t)t->shape[1], (cuuint64_t)t->shape[2],
                                varlen ? 1 : (cuuint64_t)t->shape[0] };
    const cuuint64_t stride[3] = { (cuuint64_t)t->stride[1] * 2, (cuuint64_t)t->stride[2] * 2,
                                   (cuuint64_t)(varlen ? t->stride[2] : t->stride[0]) * 2 };
    const cuuint32_t box[4] = { 64, (cuuint32_t)rows, 1, 1 }, es[4] = { 1, 1, 1, 1 };
    memset(m, 0, sizeof *m);
    return ((tmap_encode_fn)im->tmap_encode)(m, t->dtype == FA_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                             4, t->data, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
#endif

static fa_status cuda_forward(fa_context *ctx, const fa_problem *p)
{
    cuda_impl *im = IMPL(ctx);
    fa_cu_fwd k;
    int D, fast;
    int64_t blocks;
    fa_status st = fwd_plan(ctx, p, &k, &D, &blocks, &fast);
    if (st != FA_OK) return st;
    if ((st = check_pointers(ctx, p)) != FA_OK) return st;
    cudaSetDevice(im->device);
    if (im->debug && (st = debug_check(ctx, p)) != FA_OK) return st;
    int bm, bn;   /* the warp-specialized forward's tile */
    fwd_ws_tile(D, p, &bm, &bn);
#if FA_SM90A
    CUtensorMap maps[3];
    if (fast == FWD_SM90WS) {
        const int vl = p->layout == FA_LAYOUT_VARLEN;
        if (!qkv_tensor_map(im, &maps[0], &p->q, p->dqk, vl, bm) ||
            !qkv_tensor_map(im, &maps[1], &p->k, p->dqk, vl, bn) || !qkv_tensor_map(im, &maps[2], &p->v, p->dv, vl, bn)) {
            H->verbose(ctx, "cuda: the driver could not encode the tensor maps of q/k/v: the first sm90 forward instead");
            fast = FWD_SM90;
            if (bm != FA_FWD_SM90_BM) {   /* the work tiles were counted for the ws kernel's rows */
                k.m_blocks = (int)((p->max_sq + FA_FWD_SM90_BM - 1) / FA_FWD_SM90_BM);
                if (k.m_blocks == 0) k.m_blocks = 1;
                blocks = p->batch * p->hq * k.m_blocks * k.n_splits;
            }
            snprintf(im->qname, sizeof im->qname, "cuda/sm90 fwd %s d%d wgmma 128x%d 2 warpgroups (no tensor maps)%s",
                     dtname(p->q.dtype), D, fa_fwd_sm90_bn(D), k.n_splits > 1 ? " split-kv" : "");
        }
    }
    const int tickets = fast == FWD_SM90WS && blocks > im->sms;   /* more tiles than blocks */
    if (tickets && !im->tickets) {
        cudaError_t ae = cudaMalloc((void **)&im->tickets, sizeof(int));
        if (ae == cudaSuccess) ae = cudaMemset(im->tickets, 0, sizeof(int));
        if (ae == cudaSuccess) ae = cudaEventCreateWithFlags(&im->tickets_done, cudaEventDisableTiming);
        if (ae != cudaSuccess) {
            cudaGetLastError();
            if (im->tickets) cudaFree(im->tickets);
            im->tickets = NULL;
            return cuda_err(ctx, ae, "the forward's tile counter");
        }
        im->tickets_stream = im->stream;
    }
    /* the previous launch that took tickets ran on another stream: this one starts after it */
    if (tickets && im->tickets_stream != im->stream) cudaStreamWaitEvent(im->stream, im->tickets_done, 0);
#endif
    const int64_t grid = fast == FWD_SM90WS && blocks > im->sms ? im->sms : blocks;
    H->verbose(ctx, "cuda: forward %s (%lld blocks of %d threads, %d B shared memory%s)", im->qname,
               (long long)grid,
               fast == FWD_F32_TF32 ? FA_TF32_NT : fast == FWD_F32_SIMT ? FA_F32_NT : fast == FWD_SM90 ? FA_FWD_SM90_NT
               : fast == FWD_SM90WS ? fa_fwd_ws_nt(bm) : fast == FWD_FAST ? FA_FWD_FAST_NT : 256,
               fast == FWD_F32_TF32 ? fa_tf32_fwd_smem(D) : fast == FWD_F32_SIMT ? fa_f32_fwd_smem(D)
               : fast == FWD_SM90 ? fa_fwd_sm90_smem(D) : fast == FWD_SM90WS ? fa_fwd_ws_smem(D, bm, bn)
               : fast == FWD_FAST ? fa_fwd_fast_smem(D) : fa_fwd_smem(D),
               fast == FWD_SM90WS ? ", persistent over the work tiles" : "");
    if (blocks == 0 || p->hq == 0 || p->batch == 0) return FA_OK;
    void *ws = NULL;
    cudaError_t e = cudaSuccess;
    const int64_t rows = p->batch * p->hq * p->q.shape[1];
    if (k.n_splits > 1) {
        size_t bytes = (size_t)k.n_splits * rows * (p->dv + 1) * sizeof(float);
        e = ws_alloc(im, &ws, bytes);
        if (e != cudaSuccess) { cudaGetLastError(); return H->set_error(ctx, FA_ERR_NO_MEMORY, "cuda: split-kv workspace of %zu bytes: %s", bytes, cudaGetErrorString(e)); }
        k.o_part = (float *)ws;
        k.lse_part = k.o_part + (size_t)k.n_splits * rows * p->dv;
    }
    const bool bf = p->q.dtype == FA_BF16;
    if (fast == FWD_F32_TF32) e = D == 64 ? fa_tf32_fwd_launch<64>(k, blocks, im->stream) : fa_tf32_fwd_launch<128>(k, blocks, im->stream);
    else if (fast == FWD_F32_SIMT) switch (D) {
    case 64: e = fa_f32_fwd_launch<64>(k, blocks, im->stream); break;
    case 128: e = fa_f32_fwd_launch<128>(k, blocks, im->stream); break;
    default: e = fa_f32_fwd_launch<256>(k, blocks, im->stream); break;
    }
    else if (fast == FWD_SM90WS) {
#if FA_SM90A
        const int g = (int)grid;
        int *const tk = tickets ? im->tickets : NULL;
        switch (D) {
        case 64: e = bf ? fa_fwd_ws_launch<__nv_bfloat16, 64>(k, blocks, g, maps, tk, bm, bn, im->stream) : fa_fwd_ws_launch<__half, 64>(k, blocks, g, maps, tk, bm, bn, im->stream); break;
        case 128: e = bf ? fa_fwd_ws_launch<__nv_bfloat16, 128>(k, blocks, g, maps, tk, bm, bn, im->stream) : fa_fwd_ws_launch<__half, 128>(k, blocks, g, maps, tk, bm, bn, im->stream); break;
        default: e = bf ? fa_fwd_ws_launch<__nv_bfloat16, 256>(k, blocks, g, maps, tk, bm, bn, im->stream) : fa_fwd_ws_launch<__half, 256>(k, blocks, g, maps, tk, bm, bn, im->stream); break;
        }
        if (tickets && e == cudaSuccess) {
            cudaEventRecord(im->tickets_done, im->stream);
            im->tickets_stream = im->stream;
        }
#endif
    }
    else if (fast == FWD_SM90) {
#if FA_SM90A
        switch (D) {
        case 64: e = bf ? fa_fwd_sm90_launch<__nv_bfloat16, 64>(k, blocks, im->stream) : fa_fwd_sm90_launch<__half, 64>(k, blocks, im->stream); break;
        case 128: e = bf ? fa_fwd_sm90_launch<__nv_bfloat16, 128>(k, blocks, im->stream) : fa_fwd_sm90_launch<__half, 128>(k, blocks, im->stream); break;
        default: e = bf ? fa_fwd_sm90_launch<__nv_bfloat16, 256>(k, blocks, im->stream) : fa_fwd_sm90_launch<__half, 256>(k, blocks, im->stream); break;
        }
#endif
    }
    else if (fast == FWD_FAST) switch (D) {
    case 64: e = bf ? fa_fwd_fast_launch<__nv_bfloat16, 64>(k, blocks, im->stream) : fa_fwd_fast_launch<__half, 64>(k, blocks, im->stream); break;
    case 128: e = bf ? fa_fwd_fast_launch<__nv_bfloat16, 128>(k, blocks, im->stream) : fa_fwd_fast_launch<__half, 128>(k, blocks, im->stream); break;
    default: e = bf ? fa_fwd_fast_launch<__nv_bfloat16, 256>(k, blocks, im->stream) : fa_fwd_fast_launch<__half, 256>(k, blocks, im->stream); break;
    }
    else switch (D) {
    case 64: e = bf ? fa_fwd_launch<__nv_bfloat16, 64>(k, blocks, im->stream) : fa_fwd_launch<__half, 64>(k, blocks, im->stream); break;
    case 128: e = bf ? fa_fwd_launch<__nv_bfloat16, 128>(k, blocks, im->stream) : fa_fwd_launch<__half, 128>(k, blocks, im->stream); break;
    default: e = bf ? fa_fwd_launch<__nv_bfloat16, 256>(k, blocks, im->stream) : fa_fwd_launch<__half, 256>(k, blocks, im->stream); break;
    }
    if (e == cudaSuccess && k.n_splits > 1) {
        fa_cu_combine c;
        memset(&c, 0, sizeof c);
        c.n = k.n_splits;
        c.o_base = k.o_part; c.lse_base = k.lse_part;
        c.o_pstride = rows * p->dv; c.lse_pstride = rows;
        c.p_sb = p->hq * p->q.shape[1] * p->dv; c.p_ss = p->dv; c.p_sh = p->q.shape[1] * p->dv;
        c.out = p->out.data; c.out_dtype = (int)p->out.dtype;
        c.o_sb = p->out.stride[0]; c.o_ss = p->out.stride[1]; c.o_sh = p->out.stride[2];
        c.lse_out = p->lse; c.sinks = p->sinks;
        c.B = (int)p->batch; c.S = (int)p->q.shape[1]; c.H = (int)p->hq; c.D = (int)p->dv;
        e = fa_combine_launch(c, im->sms, im->stream);
    }
    if (ws) cudaFreeAsync(ws, im->stream);
    if (e != cudaSuccess) { cudaGetLastError(); return cuda_err(ctx, e, "forward launch"); }
    return FA_OK;
}

/* Can the backward kernels serve p? Fills the launch parameters (the forward's plan for
   q, k, v, out and the options, then dout, the gradients and the grid) and *path, the
   BWD_ kernel. */
enum { BWD_SM80, BWD_SM90, BWD_F32, BWD_SM90WS };
static fa_status bwd_plan(fa_context *ctx, const fa_problem *p, fa_cu_bwd *k, int *D, int64_t *blocks, int *path)
{
    cuda_impl *im = IMPL(ctx);
    int64_t fb;
    int ffast;
    memset(k, 0, sizeof *k);
    if (p->layout == FA_LAYOUT_KVCACHE)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED, "cuda: no backward for the KV-cache layout");
    fa_status st = fwd_plan(ctx, p, &k->f, D, &fb, &ffast);
    if (st != FA_OK) return st;
    const int f32 = ffast == FWD_F32_SIMT || ffast == FWD_F32_TF32;
    if (f32 && fa_f32_bwd_smem(*D) > im->smem_optin)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            "cuda: the fp32 backward of head-dim class %d needs %d KiB shared memory per block; %s allows %d KiB",
                            *D, fa_f32_bwd_smem(*D) / 1024, im->name, im->smem_optin / 1024);
    if (!f32 && fa_bwd_smem(*D) > im->smem_optin)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            "cuda: the backward of head-dim class %d needs %d KiB shared memory per block "
                            "(K, V, double-buffered Q, dO: 64 x %d each); %s allows %d KiB",
                            *D, fa_bwd_smem(*D) / 1024, *D, im->name, im->smem_optin / 1024);
    if (!f32 && !aligned16(&p->dout))
        return H->set_error(ctx, FA_ERR_UNSUPPORTED,
                            "cuda: dout must be 16-byte aligned with strides multiples of 8 elements");
    const fa_tensor *gs[2] = { &p->grad_k, &p->grad_v };
    for (int i = 0; i < 2 && !f32; i++) {
        const fa_tensor *g = gs[i];
        if ((uintptr_t)g->data % (g->dtype == FA_F32 ? 8 : 4) || g->stride[0] % 2 || g->stride[1] % 2 || g->stride[2] % 2)
            return H->set_error(ctx, FA_ERR_UNSUPPORTED, "cuda: %s must be aligned to 2 elements with even strides",
                                i ? "dv" : "dk");
    }
    fa_cu_fwd *f = &k->f;
    f->lse = (float *)p->lse_in;
    f->n_splits = 1;
    k->dout = p->dout.data; k->do_sb = p->dout.stride[0]; k->do_ss = p->dout.stride[1]; k->do_sh = p->dout.stride[2];
    k->dtype = (int)p->q.dtype;
    k->dq = p->grad_q.data; k->dq_dtype = (int)p->grad_q.dtype;
    k->dq_sb = p->grad_q.stride[0]; k->dq_ss = p->grad_q.stride[1]; k->dq_sh = p->grad_q.stride[2];
    k->dk = p->grad_k.data; k->dk_dtype = (int)p->grad_k.dtype;
    k->dk_sb = p->grad_k.stride[0]; k->dk_ss = p->grad_k.stride[1]; k->dk_sh = p->grad_k.stride[2];
    k->dv = p->grad_v.data; k->dv_dtype = (int)p->grad_v.dtype;
    k->dv_sb = p->grad_v.stride[0]; k->dv_ss = p->grad_v.stride[1]; k->dv_sh = p->grad_v.stride[2];
    k->dsinks = p->dsinks;
    k->max_sq = (int)p->max_sq;
    *path = f32 ? BWD_F32 : im->use_sm90 && fa_bwd_lean(*k) && fa_bwd_sm90_smem(*D) <= im->smem_optin ? BWD_SM90 : BWD_SM80;
    /* the warp-specialized Hopper backward where it is compiled (d64, d128) */
    if (*path == BWD_SM90 && *D <= 128 && fa_bwd_ws_smem(*D) <= im->smem_optin) *path = BWD_SM90WS;
    const int bn = *path == BWD_F32 ? FA_F32_BWD_BN : *path == BWD_SM90WS ? FA_BWD_WS_BN
                   : *path == BWD_SM90 ? fa_bwd_sm90_bn(*D) : 64;
    k->n_blocks = (int)((p->max_sk + bn - 1) / bn);
    k->kv_tile = -1;
    *blocks = p->batch * p->hkv * k->n_blocks;
    if (f32)
        snprintf(im->qname, sizeof im->qname, "cuda/simt bwd fp32 d%d fp32 FMA %dx%d 256 threads%s", *D, FA_F32_BWD_BN,
                 fa_f32_bwd_bq(*D), p->deterministic ? " deterministic" : "");
    else if (*path == BWD_SM90WS)
        snprintf(im->qname, sizeof im->qname,
                 "cuda/sm90 bwd %s d%d wgmma %dx%d tma warp-specialized 1 producer + 2 consumer warpgroups%s",
                 dtname(p->q.dtype), *D, FA_BWD_WS_BN, FA_BWD_SM90_BQ,
                 p->deterministic ? " deterministic" : "");
    else if (*path == BWD_SM90)
        snprintf(im->qname, sizeof im->qname, "cuda/sm90 bwd %s d%d wgmma %dx%d 2 warpgroups%s%s", dtname(p->q.dtype), *D,
                 fa_bwd_sm90_bn(*D), FA_BWD_SM90_BQ, *D > 128 ? " dK/dV columns split" : "",
                 p->deterministic ? " deterministic" : "");
    else
        snprintf(im->qname, sizeof im->qname, "cuda/sm80 bwd %s d%d 64x64 %s%s", dtname(p->q.dtype), *D,
                 fa_bwd_lean(*k) ? "lean" : "general", p->deterministic ? " deterministic" : "");
    return FA_OK;
}

#if FA_SM90A
/* The tensor map of the Hopper backward's fp32 dQ workspace (rows x dqk, boxes of
   FA_BWD_SM90_DQ_BOX_ROWS x FA_BWD_SM90_DQ_BOX_COLS with the 128-byte swizzle), encoded by
   the driver's cuTensorMapEncodeTiled. 0 when the driver has no encoder or the shape does
   not fit the map's limits (row coordinates are 32-bit): the kernel then adds dQ with
   atomics. FA_CUDA_DQ=atomic forces that path (tests/cuda runs the backward under it). */
static int dq_tensor_map(cuda_impl *im, CUtensorMap *m, float *dq_acc, int64_t rows, int dqk)
{
    if (im->dq_atomic || !tmap_encoder(im) || rows > INT32_MAX || rows < 1) return 0;
    const cuuint64_t dim[2] = { (cuuint64_t)dqk, (cuuint64_t)rows }, stride[1] = { (cuuint64_t)dqk * sizeof(float) };
    const cuuint32_t box[2] = { FA_BWD_SM90_DQ_BOX_COLS, FA_BWD_SM90_DQ_BOX_ROWS }, es[2] = { 1, 1 };
    memset(m, 0, sizeof *m);
    return ((tmap_encode_fn)im->tmap_encode)(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, dq_acc, dim, stride, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
#endif

static fa_status cuda_backward(fa_context *ctx, const fa_problem *p)
{
    cuda_impl *im = IMPL(ctx);
    fa_cu_bwd k;
    int D, path;
    int64_t blocks;
    fa_status st = bwd_plan(ctx, p, &k, &D, &blocks, &path);
    if (st != FA_OK) return st;
    if ((st = check_pointers(ctx, p)) != FA_OK) return st;
#define CKP(ptr, nm) if ((st = check_ptr(ctx, ptr, nm)) != FA_OK) return st
    CKP(p->dout.data, "dout.data"); CKP(p->grad_q.data, "dq.data"); CKP(p->grad_k.data, "dk.data");
    CKP(p->grad_v.data, "dv.data"); CKP(p->lse_in, "lse"); CKP(p->dsinks, "dsinks");
#undef CKP
    cudaSetDevice(im->device);
    if (im->debug && (st = debug_check(ctx, p)) != FA_OK) return st;
#if FA_SM90A
    CUtensorMap maps[4];
    if (path == BWD_SM90WS) {
        const int vl = p->layout == FA_LAYOUT_VARLEN;
        if (!qkv_tensor_map(im, &maps[0], &p->q, p->dqk, vl, FA_BWD_SM90_BQ) ||
            !qkv_tensor_map(im, &maps[1], &p->k, p->dqk, vl, FA_BWD_WS_BN) ||
            !qkv_tensor_map(im, &maps[2], &p->v, p->dv, vl, FA_BWD_WS_BN) ||
            !qkv_tensor_map(im, &maps[3], &p->dout, p->dv, vl, FA_BWD_SM90_BQ)) {
            H->verbose(ctx, "cuda: the driver could not encode the tensor maps of q/k/v/dout: the first sm90 backward instead");
            path = BWD_SM90;
            snprintf(im->qname, sizeof im->qname, "cuda/sm90 bwd %s d%d wgmma %dx%d 2 warpgroups (no tensor maps)%s",
                     dtname(p->q.dtype), D, fa_bwd_sm90_bn(D), FA_BWD_SM90_BQ, p->deterministic ? " deterministic" : "");
        }
    }
#endif
    H->verbose(ctx, "cuda: backward %s (%lld blocks of %d threads, %d B shared memory)", im->qname,
               (long long)blocks,
               path == BWD_F32 ? FA_F32_NT : path == BWD_SM90WS ? FA_BWD_WS_NT : path == BWD_SM90 || D > 64 ? 256 : 128,
               path == BWD_F32 ? fa_f32_bwd_smem(D) : path == BWD_SM90WS ? fa_bwd_ws_smem(D)
               : path == BWD_SM90 ? fa_bwd_sm90_smem(D) : fa_bwd_smem(D));
    if (p->batch == 0 || p->hq == 0) return FA_OK;
    /* fp32 workspace: D_i and dQ, rows in the lse layout */
    const int64_t rows = p->layout == FA_LAYOUT_VARLEN ? p->hq * p->q.shape[1] : p->batch * p->hq * p->q.shape[1];
    void *ws = NULL;
    cudaError_t e = cudaSuccess;
    size_t bytes = (size_t)rows * (p->dqk + 1) * sizeof(float) + 16;
    e = ws_alloc(im, &ws, bytes);
    if (e != cudaSuccess) { cudaGetLastError(); return H->set_error(ctx, FA_ERR_NO_MEMORY, "cuda: backward workspace of %zu bytes: %s", bytes, cudaGetErrorString(e)); }
    k.dq_acc = (float *)ws;
    k.dsum = k.dq_acc + (size_t)rows * p->dqk;
    e = cudaMemsetAsync(k.dq_acc, 0, (size_t)rows * p->dqk * sizeof(float), im->stream);   /* dQ adds into it */
    if (e == cudaSuccess) e = fa_bwd_pre_launch(k, im->stream);
    const bool bf = p->q.dtype == FA_BF16;
    /* deterministic: one launch per KV tile, so that every dQ element gets at most one
       atomic add per launch and the adds come in launch order */
    const int nl = p->deterministic ? k.n_blocks : 1;
    const int64_t lb = p->deterministic ? p->batch * p->hkv : blocks;
#if FA_SM90A
    CUtensorMap dqm;
    const int sm90 = path == BWD_SM90 || path == BWD_SM90WS;
    const void *dq_map = sm90 && dq_tensor_map(im, &dqm, k.dq_acc, rows, p->dqk) ? &dqm : NULL;
    if (sm90) H->verbose(ctx, "cuda: dQ added by %s", dq_map ? "the tensor-map reduce" : "atomics (no tensor map)");
#endif
    for (int t = 0; t < nl && e == cudaSuccess && lb > 0; t++) {
        k.kv_tile = p->deterministic ? t : -1;
        if (path == BWD_F32) {
            e = D == 64 ? fa_f32_bwd_launch<64>(k, lb, im->stream)
                : D == 128 ? fa_f32_bwd_launch<128>(k, lb, im->stream) : fa_f32_bwd_launch<256>(k, lb, im->stream);
            continue;
        }
#if FA_SM90A
        if (path == BWD_SM90WS) {
            if (D == 64)
                e = bf ? fa_bwd_ws_launch<__nv_bfloat16, 64>(k, lb, im->stream, maps, dq_map) : fa_bwd_ws_launch<__half, 64>(k, lb, im->stream, maps, dq_map);
            else
                e = bf ? fa_bwd_ws_launch<__nv_bfloat16, 128>(k, lb, im->stream, maps, dq_map) : fa_bwd_ws_launch<__half, 128>(k, lb, im->stream, maps, dq_map);
            continue;
        }
        if (path == BWD_SM90) {
            if (D == 64)
                e = bf ? fa_bwd_sm90_launch<__nv_bfloat16, 64>(k, lb, im->stream, dq_map) : fa_bwd_sm90_launch<__half, 64>(k, lb, im->stream, dq_map);
            else if (D == 128)
                e = bf ? fa_bwd_sm90_launch<__nv_bfloat16, 128>(k, lb, im->stream, dq_map) : fa_bwd_sm90_launch<__half, 128>(k, lb, im->stream, dq_map);
            else
                e = bf ? fa_bwd_sm90_launch<__nv_bfloat16, 256>(k, lb, im->stream, dq_map) : fa_bwd_sm90_launch<__half, 256>(k, lb, im->stream, dq_map);
            continue;
        }
#endif
        switch (D) {
        case 64: e = bf ? fa_bwd_launch<__nv_bfloat16, 64>(k, lb, im->stream) : fa_bwd_launch<__half, 64>(k, lb, im->stream); break;
        case 128: e = bf ? fa_bwd_launch<__nv_bfloat16, 128>(k, lb, im->stream) : fa_bwd_launch<__half, 128>(k, lb, im->stream); break;
        default: e = bf ? fa_bwd_launch<__nv_bfloat16, 256>(k, lb, im->stream) : fa_bwd_launch<__half, 256>(k, lb, im->stream); break;
        }
    }
    if (e == cudaSuccess) e = fa_bwd_post_launch(k, im->stream);
    cudaFreeAsync(ws, im->stream);
    if (e != cudaSuccess) { cudaGetLastError(); return cuda_err(ctx, e, "backward launch"); }
    return FA_OK;
}

static fa_status cuda_query(fa_context *ctx, const fa_problem *p, int backward, const char **name)
{
    if (backward) {
        fa_cu_bwd kb;
        int Db, path;
        int64_t bb;
        fa_status sb = bwd_plan(ctx, p, &kb, &Db, &bb, &path);
        if (sb != FA_OK) return sb;
        *name = IMPL(ctx)->qname;
        return FA_OK;
    }
    fa_cu_fwd k;
    int D, fast;
    int64_t blocks;
    fa_status st = fwd_plan(ctx, p, &k, &D, &blocks, &fast);
    if (st != FA_OK) return st;
    *name = IMPL(ctx)->qname;
    return FA_OK;
}

static fa_status cuda_kv_append(fa_context *ctx, const fa_problem *p, const fa_tensor *kn, const fa_tensor *vn)
{
    cuda_impl *im = IMPL(ctx);
    fa_cu_fwd k;
    int D, fast;
    int64_t blocks;
    fa_status st;
    /* the forward's plan: a call the forward cannot serve is refused before the append */
    if ((st = fwd_plan(ctx, p, &k, &D, &blocks, &fast)) != FA_OK) return st;
    if ((st = check_ptr(ctx, kn->data, "k_new.data")) != FA_OK || (st = check_ptr(ctx, vn->data, "v_new.data")) != FA_OK ||
        (st = check_pointers(ctx, p)) != FA_OK)
        return st;
    cudaSetDevice(im->device);
    if (im->debug && (st = debug_check(ctx, p)) != FA_OK) return st;
    fa_cu_append a;
    a.k_new = kn->data; a.v_new = vn->data;
    a.k_sb = kn->stride[0]; a.k_ss = kn->stride[1]; a.k_sh = kn->stride[2];
    a.v_sb = vn->stride[0]; a.v_ss = vn->stride[1]; a.v_sh = vn->stride[2];
    cudaError_t e = fa_kv_append_launch(k, a, p->k.dtype == FA_F32 ? 4 : 2, im->sms, im->stream);
    if (e != cudaSuccess) { cudaGetLastError(); return cuda_err(ctx, e, "kv_append launch"); }
    return FA_OK;
}

static fa_status cuda_combine(fa_context *ctx, fa_tensor *out, float *lse, const fa_tensor *parts,
                              const float *const *lse_parts, int n)
{
    cuda_impl *im = IMPL(ctx);
    if (n > FA_CU_MAX_PARTS)
        return H->set_error(ctx, FA_ERR_UNSUPPORTED, "cuda: fa_combine of %d parts; the kernel takes up to %d", n, FA_CU_MAX_PARTS);
    fa_status st;
    if ((st = check_ptr(ctx, out->data, "out.data")) != FA_OK || (st = check_ptr(ctx, lse, "lse")) != FA_OK) return st;
    fa_cu_combine c;
    memset(&c, 0, sizeof c);
    c.n = n;
    for (int i = 0; i < n; i++) {
        if ((st = check_ptr(ctx, parts[i].data, "out_parts[i].data")) != FA_OK ||
            (st = check_ptr(ctx, lse_parts[i], "lse_parts[i]")) != FA_OK)
            return st;
        c.data[i] = parts[i].data; c.lse[i] = lse_parts[i]; c.dtype[i] = (int)parts[i].dtype;
        c.sb[i] = parts[i].stride[0]; c.ss[i] = parts[i].stride[1]; c.sh[i] = parts[i].stride[2];
    }
    c.out = out->data; c.out_dtype = (int)out->dtype;
    c.o_sb = out->stride[0]; c.o_ss = out->stride[1]; c.o_sh = out->stride[2];
    c.lse_out = lse;
    c.B = (int)out->shape[0]; c.S = (int)out->shape[1]; c.H = (int)out->shape[2]; c.D = (int)out->shape[3];
    cudaSetDevice(im->device);
    cudaError_t e = fa_combine_launch(c, im->sms, im->stream);
    if (e != cudaSuccess) { cudaGetLastError(); return cuda_err(ctx, e, "combine launch"); }
    return FA_OK;
}

static const fa_backend_ops cuda_ops = {
    /* name */ "cuda",
    /* init */ cuda_init,
    /* fini */ cuda_fini,
    /* describe */ cuda_describe,
    /* forward */ cuda_forward,
    /* backward */ cuda_backward,
    /* query */ cuda_query,
    /* set_threads */ cuda_set_threads,
    /* set_tiles */ cuda_set_tiles,
    /* device_memory */ 1,
    /* kv_append */ cuda_kv_append,
    /* combine */ cuda_combine,
    /* set_device */ cuda_set_device,
    /* set_stream */ cuda_set_stream,
};

extern "C" __attribute__((visibility("default"))) const fa_backend_ops *
fa_module_entry(const fa_host_services *host, char *why, size_t why_len)
{
    if (!host || host->abi != FA_MODULE_ABI || host->sizeof_context != sizeof(fa_context) ||
        host->sizeof_problem != sizeof(fa_problem) || host->sizeof_ops != sizeof(fa_backend_ops)) {
        if (why)
            snprintf(why, why_len, "module built for ABI %d (context %zu, problem %zu, ops %zu bytes); library has ABI %d (%zu, %zu, %zu)",
                     FA_MODULE_ABI, sizeof(fa_context), sizeof(fa_problem), sizeof(fa_backend_ops),
                     host ? host->abi : -1, host ? host->sizeof_context : 0, host ? host->sizeof_problem : 0,
                     host ? host->sizeof_ops : 0);
        return NULL;
    }
    H_copy = *host;
    return &cuda_ops;
}
