/* plan_forward.cu - the forward on the CUDA module: which kernel serves a call (fwd_plan:
 * fp16/bf16 with at most 16 query rows per sequence and at most 64 per KV group, dense or
 * KV cache, no bias or dropout -> the decode kernel; fp32 -> tf32x3 or simt; fp16/bf16
 * with bias, ALiBi, softcap or dropout -> the general sm80 kernel; else the fast sm80
 * kernel, on compute capability 9.0 the warp-specialized Hopper forward, paged caches the
 * first Hopper forward), the split-KV decision, the launch and the merge of the splits.
 */
#include "impl.h"
#include "decode/decode.h"

/* Why the decode kernel (decode/decode.h) does not serve p, or NULL when it does. */
static const char *decode_why(const cuda_impl *im, const fa_problem *p, int D)
{
    const int64_t sq = p->q.shape[1];
    return p->q.dtype == FA_F32 ? "fp32" : p->layout == FA_LAYOUT_VARLEN ? "varlen" : p->has_bias ? "bias"
           : p->dropout_p > 0.f ? "dropout" : sq < 1 ? "Sq = 0" : sq > FA_DEC_MAX_SQ ? "Sq > 16"
           : p->group * sq > FA_DEC_MAX_ROWS ? "group x Sq > 64"
           : fa_dec_smem(D, fa_dec_wm((int)(p->group * sq))) > im->smem_optin ? "shared memory" : NULL;
}

/* Decode blocks resident per SM for the call's dtype, kernel class D with hp KV heads per
   block and wm row groups, asked of the runtime once per context (registers and shared
   memory as compiled); at least 1. */
static int decode_blocks_per_sm(cuda_impl *im, const fa_problem *p, int D, int hp, int wm)
{
    const int bf = p->q.dtype == FA_BF16, di = hp == 2 ? 3 : D == 64 ? 0 : D == 128 ? 1 : 2;
    const int wi = wm == 1 ? 0 : wm == 2 ? 1 : 2;
    int *n = &im->dec_blocks_per_sm[bf][di][wi];
    if (*n == 0) {
        cudaSetDevice(im->device);
        switch (D) {
        case 64: *n = bf ? fa_decode_blocks_per_sm<__nv_bfloat16, 64>(wm, 1) : fa_decode_blocks_per_sm<__half, 64>(wm, 1); break;
        case 128: *n = bf ? fa_decode_blocks_per_sm<__nv_bfloat16, 128>(wm, hp) : fa_decode_blocks_per_sm<__half, 128>(wm, hp); break;
        default: *n = bf ? fa_decode_blocks_per_sm<__nv_bfloat16, 256>(wm, 1) : fa_decode_blocks_per_sm<__half, 256>(wm, 1); break;
        }
        if (*n < 1) *n = 1;
    }
    return *n;
}

/* The decode wave: SMs x resident blocks of the kernel of class hp x D for the call. */
static int64_t decode_wave(cuda_impl *im, const fa_problem *p, int D, int hp)
{
    return (int64_t)im->sms * decode_blocks_per_sm(im, p, hp * D, hp, fa_dec_wm((int)(hp * p->group * p->q.shape[1])));
}

/* Splits the decode may take at most: FA_CU_MAX_PARTS, each of at least two 64-key chunks. */
static int64_t decode_max_splits(const fa_problem *p)
{
    const int64_t chunks = (p->max_sk + FA_DEC_BN - 1) / FA_DEC_BN;
    return chunks / 2 < FA_CU_MAX_PARTS ? chunks / 2 : FA_CU_MAX_PARTS;
}

/* KV heads per decode block: 2 when the heads are of class 64 and can be paired side by
   side in the class-128 kernel (an even number of KV heads, both heads' packed rows in its
   64) and the pairs, split at most decode_max_splits ways, still fill a wave; else 1. A
   pair's block reads rows of 2 x 64 elements, as at class 128, from half as many blocks:
   1.06-1.15x the unpaired kernel from 64 x 8k tokens, 1.46x at 64 x 2k, 1.03-1.07x at
   B = 8-32 (H200, GQA 32:8); B = 1 (four pairs) would leave most of the wave idle. */
static int decode_heads_per_block(cuda_impl *im, const fa_problem *p, int D)
{
    const int64_t rows = 2 * p->group * p->q.shape[1];
    if (D != 64 || p->hkv % 2 || rows > FA_DEC_MAX_ROWS || fa_dec_smem(128, fa_dec_wm((int)rows)) > im->smem_optin)
        return 1;
    return p->batch * p->hkv / 2 * decode_max_splits(p) >= decode_wave(im, p, D, 2) ? 2 : 1;
}

/* KV splits of the decode kernel over base = batch x KV heads / hp blocks, W = SMs x resident
   blocks per SM: W / base splits when base < W / 2 (every resident slot busy); and when one
   split leaves the last wave under 80% full, the fewest splits that fill it to 90% (a
   partial wave costs a whole one), each of at least 16 chunks (shorter splits cost their
   start more than the tail). At most FA_CU_MAX_PARTS splits of at least two 64-key chunks.
   FA_CUDA_DECODE_SPLITS=n (a test hook, docs/testing.md) forces n (1..FA_CU_MAX_PARTS). */
static int decode_splits(cuda_impl *im, const fa_problem *p, int D, int hp)
{
    const char *force = getenv("FA_CUDA_DECODE_SPLITS");
    if (force && *force) {
        const int n = atoi(force);
        return n < 1 ? 1 : n > FA_CU_MAX_PARTS ? FA_CU_MAX_PARTS : n;
    }
    const int64_t base = p->batch * p->hkv / hp, chunks = (p->max_sk + FA_DEC_BN - 1) / FA_DEC_BN;
    const int64_t smax = decode_max_splits(p);
    if (base == 0 || smax < 2) return 1;
    const int64_t W = decode_wave(im, p, D, hp);
    if (base < W / 2) return (int)(W / base < smax ? W / base : smax);
    const double w = (double)base / (double)W;
    if (ceil(w) < 1.25 * w) return 1;
    for (int64_t s = 2; s <= smax && chunks / s >= 16; s++)
        if (ceil(w * (double)s) <= 1.1 * w * (double)s) return (int)s;
    return 1;
}

/* The warp-specialized forward's tile for problem p at head-dim class D (sm90/tiles.h). */
static void fwd_ws_tile(int D, const fa_problem *p, int *bm, int *bn)
{
    const int masked = p->window_left >= 0 || p->window_right >= 0;   /* causal is a window */
    fa_fwd_ws_pick(D, p->max_sq, p->max_sk, masked, bm, bn);
}

/* Rows of one TMA box of the warp-specialized forward's K/V tiles of `bn` keys: bn, or
   for a paged cache the page size when it is a multiple of 8 that divides bn or is a
   multiple of it (a box then starts on the 128-byte swizzle's 8-row period and stays in
   its page); 0 when the pages cannot be followed by boxes. */
static int ws_box_rows(const fa_problem *p, int bn)
{
    if (!p->block_table) return bn;
    const int64_t ps = p->page_size;
    if (ps % 8 || (bn % ps && ps % bn)) return 0;
    return ps < bn ? (int)ps : bn;
}

/* Can the forward kernels serve p? Fills the launch parameters; *fast = the FWD_ kernel. */
fa_status fwd_plan(fa_context *ctx, const fa_problem *p, fa_cu_fwd *k, int *D, int64_t *blocks,
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
        /* fp32 q/k/v: the fp32-FMA kernels (fp32/simt.cuh), every feature, scalar loads
           (4-byte alignment, any strides) */
        *fast = FWD_F32_SIMT;
        /* head-dim classes 64 and 128 take the 3xTF32 tensor-core forward (fp32/tf32x3.cuh)
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
    /* The warp-specialized forward, for paged caches too when their pages can be loaded
       as TMA boxes (at d64 and <= 2048 keys with 128-key tiles: 1.04-1.15x the first
       Hopper forward at 512-1024 keys, on the H200) */
    int wsbm, wsbn;
    fwd_ws_tile(*D, p, &wsbm, &wsbn);
    if (*fast == FWD_SM90 && ws_box_rows(p, wsbn) && fa_fwd_ws_smem(*D, wsbm, wsbn) <= im->smem_optin)
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
    const char *dec_why = decode_why(im, p, *D);
    if (!dec_why) {
        *fast = FWD_DECODE;
        const int hp = decode_heads_per_block(im, p, *D);
        k->dec_hp = hp;   /* the kernel of class hp x D */
        k->n_splits = decode_splits(im, p, *D, hp);
        k->m_blocks = 1;
        *blocks = p->batch * p->hkv / hp * k->n_splits;
        snprintf(im->qname, sizeof im->qname, "cuda/decode fwd %s d%d%s mma.sync %d rows x %d keys 4 warps, %d-stage cp.async%s",
                 dtname(p->q.dtype), hp * *D, hp == 2 ? " (2 KV heads of d <= 64 per block)" : "",
                 16 * fa_dec_wm((int)(hp * p->group * p->q.shape[1])), FA_DEC_BN, FA_DEC_STAGES,
                 p->block_table ? " (paged cache)" : "");
        if (k->n_splits > 1)
            snprintf(im->qname + strlen(im->qname), sizeof im->qname - strlen(im->qname), " split-kv %d", k->n_splits);
        return FA_OK;
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
                 "cuda/sm90 fwd %s d%d wgmma %dx%d tma warp-specialized 1 producer + %d consumer warpgroups persistent%s%s",
                 dtname(p->q.dtype), *D, bm, wsbn, bm / 64, p->block_table ? " (paged cache)" : "",
                 splits > 1 ? " split-kv" : "");
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
    if (p->q.shape[1] <= FA_DEC_MAX_ROWS)   /* a decode-like shape the decode kernel leaves here */
        snprintf(im->qname + strlen(im->qname), sizeof im->qname - strlen(im->qname), " (not decode: %s)", dec_why);
    return FA_OK;
}


fa_status cuda_forward(fa_context *ctx, const fa_problem *p)
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
        const int box = ws_box_rows(p, bn);   /* a paged cache's maps span its pages */
        if (!qkv_tensor_map(im, &maps[0], &p->q, p->dqk, vl, bm) ||
            !qkv_tensor_map(im, &maps[1], &p->k, p->dqk, vl, box) || !qkv_tensor_map(im, &maps[2], &p->v, p->dv, vl, box)) {
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
               : fast == FWD_SM90WS ? fa_fwd_ws_nt(bm) : fast == FWD_FAST ? FA_FWD_FAST_NT : fast == FWD_DECODE ? FA_DEC_NT : 256,
               fast == FWD_DECODE ? fa_dec_smem(k.dec_hp * D, fa_dec_wm((int)(k.dec_hp * p->group * p->q.shape[1])))
               : fast == FWD_F32_TF32 ? fa_tf32_fwd_smem(D) : fast == FWD_F32_SIMT ? fa_f32_fwd_smem(D)
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
    if (fast == FWD_DECODE) {
        const int wm = fa_dec_wm((int)(k.dec_hp * p->group * p->q.shape[1]));
        switch (k.dec_hp * D) {
        case 64: e = bf ? fa_decode_launch<__nv_bfloat16, 64>(k, wm, blocks, im->stream) : fa_decode_launch<__half, 64>(k, wm, blocks, im->stream); break;
        case 128: e = bf ? fa_decode_launch<__nv_bfloat16, 128>(k, wm, blocks, im->stream) : fa_decode_launch<__half, 128>(k, wm, blocks, im->stream); break;
        default: e = bf ? fa_decode_launch<__nv_bfloat16, 256>(k, wm, blocks, im->stream) : fa_decode_launch<__half, 256>(k, wm, blocks, im->stream); break;
        }
    }
    else if (fast == FWD_F32_TF32) e = D == 64 ? fa_tf32_fwd_launch<64>(k, blocks, im->stream) : fa_tf32_fwd_launch<128>(k, blocks, im->stream);
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
        e = fast == FWD_DECODE ? fa_decode_merge_launch(c, im->stream) : fa_combine_launch(c, im->sms, im->stream);
    }
    if (ws) cudaFreeAsync(ws, im->stream);
    if (e != cudaSuccess) { cudaGetLastError(); return cuda_err(ctx, e, "forward launch"); }
    return FA_OK;
}

