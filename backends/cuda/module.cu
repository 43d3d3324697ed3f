/* module.cu - the CUDA backend module: entry point (ABI check), device query, context state,
 * workspace pool, describe (impl.h lists the other files of the host side).
 *
 * Loaded with dlopen by lib/context.c. The library's own symbols are hidden, so everything
 * the module needs from it comes through fa_host_services (set_error, verbose, appendf).
 *
 * Kernels (the teaching ladder's last rungs), by folder:
 *   sm80/   FlashAttention-2 style, mma.sync m16n8k16 + ldmatrix + cp.async, head-dim classes
 *           64/128/256, on sm80..sm90: the fast forward (forward_fast.cuh: 4 warps, 2 m-tiles
 *           per warp, single-buffered K/V overlapped FA2's way) for calls without bias,
 *           ALiBi, softcap or dropout; the general forward (forward.cuh: tiles 128 x 64, 8
 *           warps) for everything else; the backward (backward.cuh: per 64 keys of a KV head,
 *           loop over the query tiles of the group; dK/dV in registers, dQ by fp32 atomics).
 *   sm90/   compute capability 9.0 (sm_90a: wgmma, TMA, mbarriers): the warp-specialized
 *           forward (forward_ws.cuh) and the first Hopper forward (forward.cuh, paged caches)
 *           for the fast set; the warp-specialized backward (backward_ws.cuh, d64/d128) and
 *           the first Hopper backward (backward.cuh, d256) for the lean set.
 *   fp32/   fp32 q/k/v: the forward of head-dim classes 64/128 on the tensor cores (tf32x3.cuh,
 *           three tf32 products per fp32 product); the rest (class 256, the backward) with
 *           fp32 FMA (simt.cuh); every feature, any head dim up to 256.
 *   device/ what they share: the instruction wrappers (ptx.cuh), the attention problem on
 *           the device (problem.cuh: sequences, masks, score pipeline, row ends, stores,
 *           block maps) and the tile copies (tiles.cuh).
 * Split-KV + combine (combine.cu) when the grid would not fill the GPU (decode); the
 * backward's pre/post kernels in backward_aux.cu. fa_query names the kernel and why.
 */
#include "impl.h"

static fa_host_services H_copy;   /* the library passes its services on its stack: copy */
const fa_host_services *H = &H_copy;

fa_status cuda_err(const fa_context *ctx, cudaError_t e, const char *what)
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
cudaError_t ws_alloc(cuda_impl *im, void **ws, size_t bytes)
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
               "4 warps x 32 query rows (d256: x 16), tiles 128 x 64 (d256: 64 x 64), Q fragments "
               "re-read by ldmatrix per KV tile, K and V single-buffered with cp.async overlapping the two products; "
               "general kernel (everything else): tiles 128 x 64, 8 warps x 16 query rows, K/V "
               "double-buffered%s\n",
               im->req_bq || im->req_bkv ? "; requested tiles ignored: the kernels are compiled for fixed tiles" : "");
    if (im->use_sm90)
        H->appendf(buf, len,
                   "forward on this chip (compute capability 9.0): cuda/sm90 wgmma kernel for the fast "
                   "kernel's feature set: 2 warpgroups x 64 query rows, tiles 128 x 128 (d256: 128 x 64), "
                   "Q, K, V in 128-byte swizzled shared memory, K/V double-buffered with cp.async, "
                   "S = Q K^T and O += P V on wgmma (P from registers); since then warp-specialized for "
                   "every layout but paged caches: a producer warp loads Q, K, V by TMA into a ring of "
                   "3/3/2 stages (d64/d128/d256; tiles 128 x 192/128/80, d64 with <= 2048 keys 128 x 128) "
                   "with mbarriers, 2 consumer warpgroups (setmaxnreg 232 registers, producer 40; d64 "
                   "without a causal mask or window from 512 queries: 3 consumer warpgroups on 192 x 128 "
                   "tiles, 160 registers, producer 32, which take turns issuing their products on work "
                   "tiles of 4096 keys or more), persistent grid of one block per SM, query tiles of a "
                   "head in descending order\n");
    if (im->use_sm90)
        H->appendf(buf, len,
                   "backward on this chip: cuda/sm90 wgmma kernel for the lean set (no softcap, ALiBi, bias "
                   "or dropout): 2 warpgroups x 64 keys (d256: both on 64 keys, dK/dV columns split), query "
                   "tiles of 64 rows, the five products on wgmma, dQ added into an fp32 workspace by the "
                   "tensor-map reduce; since then d64 and d128 warp-specialized (a producer warp loads "
                   "K, V once and Q, dO by TMA into a ring of 3/2 stages with mbarriers, 2 consumer "
                   "warpgroups with 240 registers, dS double-buffered, the two consumer warpgroups "
                   "meeting by one-way named-barrier pairs, up to a tile apart)\n");
    H->appendf(buf, len,
               "split-kv: when batch*heads*ceil(Sq/rows per tile) < %d SMs, keys are split over up to "
               "%d blocks and merged by the combine kernel; the decode kernel (at most 16 query rows per "
               "sequence) splits the keys so that its blocks fill whole waves of the SMs' resident blocks, "
               "merged by its own merge kernel\n", im->sms, FA_CU_MAX_PARTS);
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

