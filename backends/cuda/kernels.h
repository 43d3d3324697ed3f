/* kernels.h - the launchers the host code (cuda.cu) calls; each lives beside its kernel. */
#ifndef FA_CUDA_KERNELS_H
#define FA_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include "params.h"

/* 1 when the build compiled the sm_90a files (configure: 90 in --with-cuda-arch). */
#ifndef FA_SM90A
#define FA_SM90A 0
#endif

/* k_new / v_new views for the KV-cache append ([B, s_new, Hkv, d], strides in elements). */
typedef struct {
    const void *k_new, *v_new;
    int64_t k_sb, k_ss, k_sh, v_sb, v_ss, v_sh;
} fa_cu_append;

/* forward_sm80_dNNN.cu: T = __half or __nv_bfloat16, D = 64, 128, 256. */
template <typename T, int D> cudaError_t fa_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
/* Dynamic shared memory the forward kernel of class D needs (bytes). */
static inline int fa_fwd_smem(int D) { return (128 * D + 4 * 64 * D) * 2; }

/* forward_fast_dNNN.cu: the lean FA2 forward (forward_fast.cuh) for calls without bias,
   ALiBi, softcap or dropout; 4 warps, query rows per block fa_fwd_fast_bm(D), 64 keys per
   KV tile, single K and V buffers. */
template <typename T, int D> cudaError_t fa_fwd_fast_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
#define FA_FWD_FAST_BN 64
#define FA_FWD_FAST_NT 128
static constexpr inline int fa_fwd_fast_bm(int D) { return D >= 256 ? 64 : 128; }
static constexpr inline int fa_fwd_fast_smem(int D) { return (fa_fwd_fast_bm(D) + 2 * FA_FWD_FAST_BN) * D * 2; }

/* forward_sm90_dNNN.cu (built for sm_90a only, FA_SM90A = 1): the Hopper forward
   (forward_sm90.cuh: wgmma for both products, 2 warpgroups, 128 query rows, BN keys per KV
   tile, K/V double-buffered), same feature set as the fast kernel. */
template <typename T, int D> cudaError_t fa_fwd_sm90_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
static constexpr inline int fa_fwd_sm90_bn(int D) { return D >= 256 || D <= 64 ? 64 : 128; }
/* blocks per SM the kernel is compiled for: d64 (tiles 128 x 64, ~100 registers) runs 2 */
static constexpr inline int fa_fwd_sm90_minb(int D) { return D <= 64 ? 2 : 1; }
static constexpr inline int fa_fwd_sm90_smem(int D) { return (128 + 4 * fa_fwd_sm90_bn(D)) * D * 2 + 1024; }
#define FA_FWD_SM90_BM 128
#define FA_FWD_SM90_NT 256

/* forward_sm90ws_dNNN.cu (sm_90a only): the warp-specialized Hopper forward
   (forward_sm90ws.cuh: a TMA producer warp, 2 or 3 consumer warpgroups, mbarriers, a persistent
   grid of `grid` blocks over `tiles` work tiles); maps = the tensor maps of q, k and v
   (3 CUtensorMap); tickets = a device int that is 0 before and after each launch (the
   tile counter). Same feature set as forward_sm90.cuh, paged KV caches excepted. */
template <typename T, int D>
cudaError_t fa_fwd_ws_launch(const fa_cu_fwd &p, int64_t tiles, int grid, const void *maps, int *tickets, int bm, int bn,
                             cudaStream_t st);
/* The tiles compiled, bm query rows (bm / 64 consumer warpgroups) x bn keys: 128 x
   fa_fwd_ws_bn(D) and, where the alternatives are > 0, 128 x fa_fwd_ws_bn_alt(D) and
   fa_fwd_ws_bm_alt(D) x fa_fwd_ws_bn_alt(D) (d64: 128 x 192, 128 x 128, 192 x 128; 192 x 192
   would spill 552 bytes at the 160 registers of 3 consumer warpgroups). cuda.cu picks one
   per call (fwd_ws_tile). */
static constexpr inline int fa_fwd_ws_bn(int D) { return D >= 256 ? 80 : D > 64 ? 128 : 192; }
static constexpr inline int fa_fwd_ws_bn_alt(int D) { return D > 64 ? 0 : 128; }
static constexpr inline int fa_fwd_ws_bm_alt(int D) { return D > 64 ? 0 : 192; }
static constexpr inline bool fa_fwd_ws_has(int D, int bm, int bn)
{
    return (bm == 128 && (bn == fa_fwd_ws_bn(D) || (fa_fwd_ws_bn_alt(D) > 0 && bn == fa_fwd_ws_bn_alt(D)))) ||
           (fa_fwd_ws_bm_alt(D) > 0 && bm == fa_fwd_ws_bm_alt(D) && bn == fa_fwd_ws_bn_alt(D));
}
static constexpr inline int fa_fwd_ws_nt(int bm) { return 128 * (bm / 64 + 1); }
static constexpr inline int fa_fwd_ws_stages(int D, int BN) { return BN * D <= 128 * 128 ? 3 : 2; }
static constexpr inline int fa_fwd_ws_smem(int D, int BM, int BN)
{
    return (BM + 2 * fa_fwd_ws_stages(D, BN) * BN) * D * 2 + 8 * (4 * fa_fwd_ws_stages(D, BN) + 7) + 1024;
}

/* backward_sm90_dNNN.cu (sm_90a only, FA_SM90A = 1): the Hopper backward (backward_sm90.cuh:
   wgmma for the five products, 2 warpgroups, query tiles of 64 rows), lean feature set.
   d64/d128: 128 keys per block, 64 per warpgroup. d256: 64 keys per block, both warpgroups
   on the same keys, each owning half of dK/dV's columns (S^T and dP^T computed by both). */
template <typename T, int D> cudaError_t fa_bwd_sm90_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st, const void *dq_map);
#define FA_BWD_SM90_BQ 64
static constexpr inline int fa_bwd_sm90_bn(int D) { return D > 128 ? 64 : 128; }
/* The dQ staging boxes (fp32, 16 rows x 32 columns, 128-byte swizzle) the tensor-map reduce
   reads: a query tile's BQ x D for d64/d128; one box per warp for d256 (its dQ leaves in
   rounds of 32 columns). dq_map: a CUtensorMap over the fp32 dQ workspace (columns dqk,
   rows in the lse layout, row pitch dqk floats; box 32 x 16, SWIZZLE_128B), or NULL: the
   kernel then adds dQ with per-element atomics. */
#define FA_BWD_SM90_DQ_BOX_COLS 32
#define FA_BWD_SM90_DQ_BOX_ROWS 16
static constexpr inline int fa_bwd_sm90_dq_staging(int D)
{
    return D > 128 ? 8 * FA_BWD_SM90_DQ_BOX_ROWS * FA_BWD_SM90_DQ_BOX_COLS * 4 : FA_BWD_SM90_BQ * D * 4;
}
static constexpr inline int fa_bwd_sm90_smem(int D)
{
    return 2 * fa_bwd_sm90_bn(D) * D * 2 + 4 * FA_BWD_SM90_BQ * D * 2 + FA_BWD_SM90_BQ * fa_bwd_sm90_bn(D) * 2 +
           4 * FA_BWD_SM90_BQ * 4 + fa_bwd_sm90_dq_staging(D) + 1024;
}

/* backward_sm90ws_dNNN.cu (sm_90a only): the warp-specialized Hopper backward
   (backward_sm90ws.cuh: a TMA producer warp, 2 consumer warpgroups of 64 keys each, Q/dO
   tiles in a ring of fa_bwd_ws_stages(D) stages with mbarriers, dS double-buffered), head-dim
   classes 64 and 128, the lean feature set, dense and varlen layouts. maps: the CUtensorMaps
   of q, k, v and dout (boxes of 64 columns x 64 query rows or 128 key rows), dq_map as for
   fa_bwd_sm90_launch (NULL: per-element atomics). */
template <typename T, int D> cudaError_t fa_bwd_ws_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st, const void *maps, const void *dq_map);
#define FA_BWD_WS_NT 384
#define FA_BWD_WS_BN 128
static constexpr inline int fa_bwd_ws_stages(int D) { return D <= 64 ? 3 : 2; }
/* K, V [128][D]; Q and dO [64][D] per stage; dS [64][128] x 2; the dQ staging boxes (64 x D
   fp32); lse and D rows of two query tiles, two copies; barriers: K/V full, Q full and empty per stage. */
static constexpr inline int fa_bwd_ws_smem(int D)
{
    return 2 * FA_BWD_WS_BN * D * 2 + 2 * fa_bwd_ws_stages(D) * FA_BWD_SM90_BQ * D * 2 + 2 * FA_BWD_SM90_BQ * FA_BWD_WS_BN * 2 +
           FA_BWD_SM90_BQ * D * 4 + 2 * 4 * FA_BWD_SM90_BQ * 4 + 8 * (1 + 2 * fa_bwd_ws_stages(D)) + 1024;
}

/* backward_sm80_dNNN.cu: the dK/dV/dQ kernel of head-dim class D (one block = 64 keys of one
   KV head, looping over the query tiles of every query head of its group). */
template <typename T, int D> cudaError_t fa_bwd_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st);
/* The backward runs its lean instantiation when none of softcap, ALiBi, bias or dropout is on. */
static inline bool fa_bwd_lean(const fa_cu_bwd &p)
{
    return !(p.f.softcap > 0.f) && !p.f.alibi && !p.f.bias && !(p.f.dropout_p > 0.f);
}
/* Dynamic shared memory of the backward kernel of class D: K, V tiles [64][D], Q and dO
   tiles [64][D] double-buffered, dS [64][64], lse and D rows (2 x 2 x 64 floats). */
static inline int fa_bwd_smem(int D) { return (2 * 64 * D + 4 * 64 * D + 64 * 64) * 2 + 4 * 64 * 4; }
/* backward_aux.cu: D = rowsum(dO*O) (pre; the caller zeroes dq_acc), dq = scale*dq_acc (post),
   dsinks (fixed-order reduction: deterministic). */
cudaError_t fa_bwd_pre_launch(const fa_cu_bwd &p, cudaStream_t st);
cudaError_t fa_bwd_post_launch(const fa_cu_bwd &p, cudaStream_t st);

/* simt_f32_{fwd,bwd}.cu: the fp32 path (simt_f32.cuh): fp32 q/k/v with fp32 FMA, every
   feature, any head dim up to 256 (classes D = 64/128/256), 256 threads per block.
   Forward: 64 query rows per block, KV tiles of 32 keys; shared memory Q [64][D+4],
   K and V [32][D+4], P [32][68] floats. Backward: 32 keys per block, query tiles of
   fa_f32_bwd_bq(D) rows; K, V [32][D+4], Q, dO [BQ][D+4], P Z and dS [32][BQ+4], lse and
   D rows. */
#define FA_F32_NT 256
#define FA_F32_FWD_BM 64
#define FA_F32_FWD_BN 32
#define FA_F32_BWD_BN 32
static constexpr inline int fa_f32_bwd_bq(int D) { return D >= 128 ? 32 : 64; }
static constexpr inline int fa_f32_fwd_smem(int D)
{
    return (FA_F32_FWD_BM * (D + 4) + 2 * FA_F32_FWD_BN * (D + 4) + FA_F32_FWD_BN * (FA_F32_FWD_BM + 4)) * 4;
}
static constexpr inline int fa_f32_bwd_smem(int D)
{
    return (2 * FA_F32_BWD_BN * (D + 4) + 2 * fa_f32_bwd_bq(D) * (D + 4) + 2 * FA_F32_BWD_BN * (fa_f32_bwd_bq(D) + 4) +
            2 * fa_f32_bwd_bq(D)) * 4;
}
template <int D> cudaError_t fa_f32_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
template <int D> cudaError_t fa_f32_bwd_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st);

/* tf32x3_fwd.cu: the fp32 forward on the tensor cores (tf32x3_fwd.cuh: three tf32
   products per fp32 product), head-dim classes 64 and 128; 8 warps x 16 query rows, KV
   tiles of 32 keys; shared memory Q [128][D+8], K [32][D+8], V [32][D+4] floats. */
#define FA_TF32_NT 256
#define FA_TF32_FWD_BM 128
#define FA_TF32_FWD_BN 32
static constexpr inline int fa_tf32_fwd_smem(int D) { return ((FA_TF32_FWD_BM + FA_TF32_FWD_BN) * (D + 8) + FA_TF32_FWD_BN * (D + 4)) * 4; }
template <int D> cudaError_t fa_tf32_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);

cudaError_t fa_combine_launch(const fa_cu_combine &c, int sms, cudaStream_t st);
cudaError_t fa_kv_append_launch(const fa_cu_fwd &p, const fa_cu_append &a, int es, int sms, cudaStream_t st);
cudaError_t fa_probe(void);

#endif /* FA_CUDA_KERNELS_H */
