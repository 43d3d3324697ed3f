/* kernels.h - the launchers the host code calls, each defined beside its kernel and
 * instantiated per head-dim class by the stubs gen-stubs.sh writes; the tile tables of the
 * three kernel families (sm80/, sm90/, fp32/).
 */
#ifndef FA_CUDA_KERNELS_H
#define FA_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include "params.h"
#include "sm80/tiles.h"
#include "sm90/tiles.h"
#include "fp32/tiles.h"

/* 1 when the build compiled the sm_90a files (configure: 90 in --with-cuda-arch). */
#ifndef FA_SM90A
#define FA_SM90A 0
#endif

/* k_new / v_new views for the KV-cache append ([B, s_new, Hkv, d], strides in elements). */
typedef struct {
    const void *k_new, *v_new;
    int64_t k_sb, k_ss, k_sh, v_sb, v_ss, v_sh;
} fa_cu_append;

/* ---- sm80/: T = __half or __nv_bfloat16, D = 64, 128, 256 -------------------------------- */
/* forward.cuh: the general forward, every feature */
template <typename T, int D> cudaError_t fa_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
/* forward_fast.cuh: the lean FA2 forward for calls without bias, ALiBi, softcap or dropout */
template <typename T, int D> cudaError_t fa_fwd_fast_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
/* backward.cuh: the dK/dV/dQ kernel (one block = 64 keys of one KV head, looping over the
   query tiles of every query head of its group) */
template <typename T, int D> cudaError_t fa_bwd_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st);

/* ---- sm90/ (built for sm_90a only, FA_SM90A = 1) ------------------------------------------ */
/* forward.cuh: the first Hopper forward (wgmma for both products, 2 warpgroups, K/V
   double-buffered by cp.async), the fast kernel's feature set; serves paged KV caches */
template <typename T, int D> cudaError_t fa_fwd_sm90_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
/* forward_ws.cuh: the warp-specialized Hopper forward (a TMA producer warp, 2 or 3 consumer
   warpgroups, mbarriers, a persistent grid of `grid` blocks over `tiles` work tiles); maps =
   the tensor maps of q, k and v (3 CUtensorMap); tickets = a device int that is 0 before and
   after each launch (the tile counter). Same feature set, paged KV caches excepted. */
template <typename T, int D>
cudaError_t fa_fwd_ws_launch(const fa_cu_fwd &p, int64_t tiles, int grid, const void *maps, int *tickets, int bm, int bn,
                             cudaStream_t st);
/* backward.cuh: the first Hopper backward (wgmma for the five products, 2 warpgroups), the
   lean feature set; d256 (and d64/d128 when the driver cannot encode the q/k/v/dout tensor
   maps). dq_map: a CUtensorMap over the fp32 dQ workspace (columns dqk, rows in the lse
   layout, row pitch dqk floats; box 32 x 16, SWIZZLE_128B), or NULL: the kernel then adds
   dQ with per-element atomics. */
template <typename T, int D> cudaError_t fa_bwd_sm90_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st, const void *dq_map);
/* backward_ws.cuh: the warp-specialized Hopper backward, d64 and d128, the lean feature
   set, dense and varlen layouts. maps: the CUtensorMaps of q, k, v and dout (boxes of 64
   columns x 64 query rows or 128 key rows), dq_map as above. */
template <typename T, int D> cudaError_t fa_bwd_ws_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st, const void *maps, const void *dq_map);

/* ---- fp32/: D = 64, 128, 256 (tf32x3: 64, 128) ------------------------------------------- */
/* simt.cuh: fp32 q/k/v with fp32 FMA, every feature, any head dim up to 256 */
template <int D> cudaError_t fa_f32_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);
template <int D> cudaError_t fa_f32_bwd_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st);
/* tf32x3.cuh: the fp32 forward on the tensor cores (three tf32 products per fp32 product) */
template <int D> cudaError_t fa_tf32_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st);

/* ---- the kernels every path shares -------------------------------------------------------- */
/* backward_aux.cu: D = rowsum(dO*O) (pre; the caller zeroes dq_acc), dq = scale*dq_acc (post),
   dsinks (fixed-order reduction: deterministic). */
cudaError_t fa_bwd_pre_launch(const fa_cu_bwd &p, cudaStream_t st);
cudaError_t fa_bwd_post_launch(const fa_cu_bwd &p, cudaStream_t st);
/* combine.cu: fa_combine and the split-KV merge; the KV-cache append; the module's probe */
cudaError_t fa_combine_launch(const fa_cu_combine &c, int sms, cudaStream_t st);
cudaError_t fa_kv_append_launch(const fa_cu_fwd &p, const fa_cu_append &a, int es, int sms, cudaStream_t st);
cudaError_t fa_probe(void);

#endif /* FA_CUDA_KERNELS_H */
