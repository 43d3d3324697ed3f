/* backward_parts.cuh - the pieces both Hopper backwards use (backward.cuh and
 * backward_ws.cuh): the five products issued on wgmma, P^T and dS^T on the accumulators,
 * the dS stores (stmatrix), dQ's way out (staging boxes and the tensor-map reduce, or
 * atomics) and the final dK/dV stores.
 */
#ifndef FA_CUDA_SM90_BACKWARD_PARTS_CUH
#define FA_CUDA_SM90_BACKWARD_PARTS_CUH

#include "device/problem.cuh"
#include "sm90/tiles.h"

/* The backward's products for one warpgroup, issued, not waited for. Tiles in shared
   memory are swizzled panels of 64 columns (128-byte rows): K and V of BN rows, Q and dO of
   BQ rows, dS [query][key] of BQ rows.
   S^T = K_w Q^T and dP^T = V_w dO^T (the warpgroup's 64 keys from block row kw x the BQ
   queries), two commit groups, S^T first. */
template <typename T, int D, int BN, int BQ>
__device__ __forceinline__ void fa_b90_issue_sdp(float (&sacc)[BQ / 2], float (&pacc)[BQ / 2], uint32_t kaddr,
                                                 uint32_t vaddr, uint32_t qaddr, uint32_t doaddr, int kw)
{
#pragma unroll
    for (int i = 0; i < BQ / 2; i++) { fa_reg_fence(sacc[i]); fa_reg_fence(pacc[i]); }
    fa_wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 16; k++)
        fa_wgmma_ss<BQ>(sacc, fa_gmma_desc(kaddr + (k >> 2) * (BN * 128) + kw * 128 + (k & 3) * 32, 16, 1024),
                        fa_gmma_desc(qaddr + (k >> 2) * (BQ * 128) + (k & 3) * 32, 16, 1024), k > 0, T());
    fa_wgmma_commit();
#pragma unroll
    for (int k = 0; k < D / 16; k++)
        fa_wgmma_ss<BQ>(pacc, fa_gmma_desc(vaddr + (k >> 2) * (BN * 128) + kw * 128 + (k & 3) * 32, 16, 1024),
                        fa_gmma_desc(doaddr + (k >> 2) * (BQ * 128) + (k & 3) * 32, 16, 1024), k > 0, T());
    fa_wgmma_commit();
}

/* dV_w += P^T dO and dK_w += dS^T Q over NKV columns from kvcol0 (A from registers, B read
   N-major: rows = queries), one commit group. */
template <typename T, int NKV, int BQ>
__device__ __forceinline__ void fa_b90_issue_dkdv(float (&dka)[NKV / 2], float (&dva)[NKV / 2], const uint32_t (&pa)[BQ / 16][4],
                                                  const uint32_t (&ga)[BQ / 16][4], uint32_t qaddr, uint32_t doaddr, int kvcol0)
{
#pragma unroll
    for (int i = 0; i < NKV / 2; i++) { fa_reg_fence(dka[i]); fa_reg_fence(dva[i]); }
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
        fa_wgmma_rs<NKV>(dva, pa[kk], fa_gmma_desc(doaddr + (kvcol0 / 64) * (BQ * 128) + kk * 16 * 128, BQ * 128, 1024), 1, T());
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
        fa_wgmma_rs<NKV>(dka, ga[kk], fa_gmma_desc(qaddr + (kvcol0 / 64) * (BQ * 128) + kk * 16 * 128, BQ * 128, 1024), 1, T());
    fa_wgmma_commit();
}

/* dQ[:, col0 .. col0 + DQR) = dS K over the block's BN keys (dS at dsaddr, K read N-major),
   one commit group. */
template <typename T, int DQR, int BN, int BQ>
__device__ __forceinline__ void fa_b90_issue_dq(float (&acc)[DQR / 2], uint32_t dsaddr, uint32_t kaddr, int col0)
{
#pragma unroll
    for (int i = 0; i < DQR / 2; i++) fa_reg_fence(acc[i]);
    fa_wgmma_fence();
    const uint32_t kcol = kaddr + (col0 / 64) * (BN * 128) + (col0 % 64) * 2;
#pragma unroll
    for (int k = 0; k < BN / 16; k++)
        fa_wgmma_sstb<DQR>(acc, fa_gmma_desc(dsaddr + (k >> 2) * (BQ * 128) + (k & 3) * 32, 16, 1024),
                           fa_gmma_desc(kcol + k * 16 * 128, BN * 128, 1024), k > 0, T());
    fa_wgmma_commit();
}

/* dS [query][key] in shared memory (panels of 64 keys x BQ queries, 128-byte swizzle), K-major
   for dQ = dS K, written from the dS^T fragments by transposing matrix stores. Offset of
   this thread's stmatrix address for the warpgroup whose keys start at block row kw: lane
   8 mi + j addresses query row j of matrix mi (keys +8 for odd mi, queries +8 for mi >= 2);
   the swizzle chunk depends on the lane only. */
template <int BQ>
__device__ __forceinline__ uint32_t fa_b90_ds_offset(int kw)
{
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int st_key = kw + warp * 16 + 8 * ((lane / 8) & 1), st_q = 8 * (lane / 16) + lane % 8;
    return (uint32_t)((st_key >> 6) * (BQ * 128) + st_q * 128 + ((((st_key & 63) >> 3) ^ (st_q & 7)) << 4));
}
/* ... and the store: ga[kk][q] is the fragment of keys krow + 8 (q & 1) x queries 16 kk +
   8 (q >> 1) + [0, 8), each transposed store writes its 8 queries as rows of 8 keys (one
   16-byte chunk). st_addr = the tile's address + fa_b90_ds_offset. */
template <int BQ>
__device__ __forceinline__ void fa_b90_store_ds(uint32_t st_addr, const uint32_t (&ga)[BQ / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
        fa_stmatrix_x4_trans(st_addr + kk * 16 * 128, ga[kk][0], ga[kk][1], ga[kk][2], ga[kk][3]);
}

/* P^T = exp2(S^T scale log2e - lse log2e) in place, S^T from the wgmma accumulator of one
   warpgroup (64 keys x BQ queries): element e of n-tile nt is key krow + 8 (e / 2) of the
   block (first key n0), query 8 nt + 2 (lane % 4) + (e & 1) of the tile (first query m0);
   cL: the tile's lse rows. full: no key of the block is hidden from a query of the tile
   (no mask test per element). */
template <int BQ>
__device__ __forceinline__ void fa_b90_p(const fa_cu_fwd &p, const fa_dseq &s, float (&sacc)[BQ / 2], const float *cL,
                                         bool full, int n0, int krow, int m0, float sl2)
{
    const int lane = threadIdx.x % 32;
    if (full) {
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + (lane % 4) * 2 + (e & 1);
                sacc[nt * 4 + e] = fa_exp2(fmaf(sacc[nt * 4 + e], sl2, -cL[c] * FA_LOG2E));
            }
    } else {
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + (lane % 4) * 2 + (e & 1);
                /* fa_dev_visible written out (through it, ptxas emits other code) */
                const int j = n0 + krow + 8 * (e / 2), pos = m0 + c + s.off;
                const bool vis = j < s.sk && (p.window_left < 0 || j >= pos - p.window_left) &&
                                 (p.window_right < 0 || j <= pos + p.window_right);
                sacc[nt * 4 + e] = vis ? fa_exp2(fmaf(sacc[nt * 4 + e], sl2, -cL[c] * FA_LOG2E)) : 0.f;
            }
    }
}

/* dS^T = P^T (dP^T - D) in pacc (dP^T in, dS^T out; cD: the tile's D rows), then P^T and
   dS^T packed to 16-bit A fragments, one per 16 queries. */
template <typename T, int BQ>
__device__ __forceinline__ void fa_b90_ds_pack(const float (&sacc)[BQ / 2], float (&pacc)[BQ / 2], const float *cD,
                                               uint32_t (&pa)[BQ / 16][4], uint32_t (&ga)[BQ / 16][4])
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = nt * 8 + (lane % 4) * 2 + (e & 1);
            pacc[nt * 4 + e] = sacc[nt * 4 + e] * (pacc[nt * 4 + e] - cD[c]);
        }
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            pa[kk][q] = fa_pack2(sacc[8 * kk + 2 * q], sacc[8 * kk + 2 * q + 1], T());
            ga[kk][q] = fa_pack2(pacc[8 * kk + 2 * q], pacc[8 * kk + 2 * q + 1], T());
        }
}

/* One warp's 16 dQ rows (m0 + 16 warp ..) x DQR columns from col0, from the wgmma
   accumulator qacc, added into the fp32 workspace. Rows wholly inside the sequence go
   through this warp's NBOX staging boxes at sdq (fp32, 16 x 32, 128-byte swizzle) and the
   tensor-map reduce, issued by lane 0 after the warp's previous reduce has read the boxes;
   otherwise (tail rows, no tensor map) per-element atomic adds. */
template <int DQR, int XB>
__device__ __forceinline__ void fa_b90_dq_out(const fa_cu_bwd &pb, const fa_dseq &s, int b, int h, int m0, int col0,
                                              const float (&qacc)[DQR / 2], unsigned char *sdq,
                                              const CUtensorMap *dq_map, int dq_tma)
{
    const fa_cu_fwd &p = pb.f;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    constexpr int NBOX = DQR / 32;
    const int qrow0 = m0 + warp * 16;
    if (dq_tma && qrow0 + 16 <= s.sq) {
        if (lane == 0) fa_bulk_wait_read();
        __syncwarp();
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = lane / 4 + 8 * r;      /* row in the box; swizzle row % 8 = lane / 4 */
#pragma unroll
            for (int nt = 0; nt < DQR / 8; nt++) {
                const int col = nt * 8 + (lane % 4) * 2;
                *reinterpret_cast<float2 *>(sdq + (col / 32) * XB + row * 128 + ((((col % 32) / 4) ^ (lane / 4)) << 4) +
                                            (col % 4) * 4) = make_float2(qacc[nt * 4 + 2 * r], qacc[nt * 4 + 2 * r + 1]);
            }
        }
        fa_fence_proxy_async();   /* the generic-proxy stores, seen by the tensor copies */
        __syncwarp();
        if (lane == 0) {
            const int grow = (int)fa_lse_row(p, s, b, h, qrow0);
#pragma unroll
            for (int x = 0; x < NBOX; x++) fa_tma_reduce_add_2d(dq_map, sdq + x * XB, col0 + 32 * x, grow);
            fa_bulk_commit();
        }
    } else {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = qrow0 + lane / 4 + 8 * r;
            if (i >= s.sq) continue;
            float *dq = pb.dq_acc + fa_lse_row(p, s, b, h, i) * p.dqk;
#pragma unroll
            for (int nt = 0; nt < DQR / 8; nt++) {
                const int c = col0 + nt * 8 + (lane % 4) * 2;
                if (c < p.dqk) {
                    atomicAdd(dq + c, qacc[nt * 4 + 2 * r]);
                    atomicAdd(dq + c + 1, qacc[nt * 4 + 2 * r + 1]);
                }
            }
        }
    }
}

/* dK (times scale) and dV of this thread's two key rows (block row krow and krow + 8, first
   key n0) and NKV columns from kvcol0, stored once; rows past the sequence are skipped. */
template <typename T, int NKV>
__device__ __forceinline__ void fa_b90_store_dkdv(const fa_cu_bwd &pb, const fa_dseq &s, int b, int hk, int n0, int krow,
                                                  int kvcol0, const float (&dka)[NKV / 2], const float (&dva)[NKV / 2])
{
    const fa_cu_fwd &p = pb.f;
    const int lane = threadIdx.x % 32;
    const float scale = p.scale;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int j = n0 + krow + 8 * r;
        if (j >= s.sk) continue;
        const int64_t ko = fa_dev_krow(p, s, b, j, hk, pb.dk_sb, pb.dk_ss, pb.dk_sh);
        const int64_t vo = fa_dev_krow(p, s, b, j, hk, pb.dv_sb, pb.dv_ss, pb.dv_sh);
#pragma unroll
        for (int nt = 0; nt < NKV / 8; nt++) {
            const int c = kvcol0 + nt * 8 + (lane % 4) * 2;
            if (c < p.dqk) {
                const float x0 = dka[nt * 4 + 2 * r] * scale, x1 = dka[nt * 4 + 2 * r + 1] * scale;
                if (pb.dk_dtype == FA_CU_F32)
                    *reinterpret_cast<float2 *>(reinterpret_cast<float *>(pb.dk) + ko + c) = make_float2(x0, x1);
                else
                    *reinterpret_cast<uint32_t *>(reinterpret_cast<T *>(pb.dk) + ko + c) = fa_pack2(x0, x1, T());
            }
            if (c < p.dv) {
                const float x0 = dva[nt * 4 + 2 * r], x1 = dva[nt * 4 + 2 * r + 1];
                if (pb.dv_dtype == FA_CU_F32)
                    *reinterpret_cast<float2 *>(reinterpret_cast<float *>(pb.dv) + vo + c) = make_float2(x0, x1);
                else
                    *reinterpret_cast<uint32_t *>(reinterpret_cast<T *>(pb.dv) + vo + c) = fa_pack2(x0, x1, T());
            }
        }
    }
}

#endif /* FA_CUDA_SM90_BACKWARD_PARTS_CUH */
