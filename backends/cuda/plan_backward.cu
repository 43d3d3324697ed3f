/* plan_backward.cu - the backward on the CUDA module: which kernel serves a call (bwd_plan:
 * fp32 -> simt; the lean set on compute capability 9.0 -> the warp-specialized Hopper
 * backward at d64/d128, the first Hopper backward at d256; else the sm80 kernel), the
 * fp32 workspace (D_i and dQ), the launches (one per KV tile when deterministic) and dQ's
 * conversion.
 */
#include "impl.h"

/* Can the backward kernels serve p? Fills the launch parameters (the forward's plan for
   q, k, v, out and the options, then dout, the gradients and the grid) and *path, the
   BWD_ kernel. */
fa_status bwd_plan(fa_context *ctx, const fa_problem *p, fa_cu_bwd *k, int *D, int64_t *blocks, int *path)
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


fa_status cuda_backward(fa_context *ctx, const fa_problem *p)
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

