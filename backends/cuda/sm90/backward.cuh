/* backward.cuh - the first Hopper backward (sm_90a): the five products on wgmma, for the lean
 * feature set (no softcap, ALiBi, bias or dropout; masks, GQA, varlen, sinks through
 * backward_aux.cu, deterministic mode kept), head-dim classes 64, 128 and 256.
 *
 * One block = 128 keys of one (sequence, KV head), 2 warpgroups of 64 keys each, looping
 * over the 64-row query tiles of every query head of the group that can see those keys.
 * d256 (SPLIT): dK and dV of 64 keys x 256 columns would need 256 fp32 registers per thread
 * of one warpgroup, so a block is 64 keys and both warpgroups work on all of them: each
 * computes S^T and dP^T (the same values; 14 units of tensor work for 10), owns half of
 * dK/dV's columns, and adds its half of dQ's columns in rounds of 32; warpgroup 0 writes dS.
 * Per query tile (Q_i, dO_i, lse_i, D_i double-buffered with cp.async):
 *   S^T  = K_w Q_i^T, dP^T = V_w dO_i^T      wgmma, both operands in shared memory (K-major)
 *   P^T = exp2(S^T scale log2e - lse_i log2e), dS^T = P^T (dP^T - D_i)   in registers
 *   dV_w += P^T dO_i, dK_w += dS^T Q_i       wgmma, A from registers, B N-major (no copy)
 *   dS^T -> shared memory as dS [query][key] (K-major for the next product; transposing
 *                                            matrix stores, stmatrix .trans)
 *   dQ_i[:, half w] = dS K[:, half w]         wgmma over the block's 128 keys; warpgroup w
 *                                            takes half of the columns; each warp stages its
 *                                            16 rows as fp32 boxes of 16 x 32 (128-byte
 *                                            swizzle) and one lane adds them into the fp32
 *                                            workspace with the tensor-map reduce
 *                                            (cp.reduce.async.bulk.tensor .add); tiles that
 *                                            end past the sequence, and runs without a tensor
 *                                            map, add the warp's elements with red.global
 * lse_i and D_i travel with Q_i and dO_i (4-byte cp.async, zero-filled past the sequence);
 * P^T uses lse_i as stored: a query row no key of a full tile is hidden from has a finite
 * lse, and partial tiles mask element by element.
 * dK (times scale) and dV are stored once at the end. deterministic=1 keeps the sm80
 * scheme: one launch per KV tile, so each dQ element gets one add per launch.
 */
#ifndef FA_CUDA_SM90_BACKWARD_CUH
#define FA_CUDA_SM90_BACKWARD_CUH

#include <string.h>
#include <cuda.h>
#include "device/tiles.cuh"
#include "sm90/backward_parts.cuh"
#include "sm90/tiles.h"

template <int D> struct fa_b90_cfg {
    static constexpr bool SPLIT = D > 128;
    static constexpr int BN = fa_bwd_sm90_bn(D), BQ = FA_BWD_SM90_BQ, NT = 256;
    static constexpr int BXC = FA_BWD_SM90_DQ_BOX_COLS, BXR = FA_BWD_SM90_DQ_BOX_ROWS;
    static constexpr int KB = BN * D * 2, QB = BQ * D * 2, SB = BQ * BN * 2, XB = BXR * BXC * 4;
    static constexpr int DH = D / 2;                      /* dQ columns per warpgroup */
    static constexpr int DQR = SPLIT ? BXC : DH, NR = DH / DQR;   /* dQ columns per round, rounds */
    static constexpr int NBOX = DQR / BXC;                /* staging boxes per warp */
    static constexpr int NKV = SPLIT ? D / 2 : D;         /* dK/dV columns per warpgroup */
    static constexpr int SMEM = fa_bwd_sm90_smem(D);
    static_assert(SMEM == 2 * KB + 4 * QB + SB + 4 * BQ * 4 + 8 * NBOX * XB + 1024,
                  "kernels.h and the kernel disagree on the shared memory");
    static_assert(BQ == 4 * BXR && DQR % BXC == 0 && BXC * 4 == 128, "a warp's dQ rows are whole boxes of 128-byte rows");
    static_assert(BN == (SPLIT ? 64 : 128), "one warpgroup per 64 keys, or both on the same 64");
};

template <typename T, int D>
__global__ void __launch_bounds__(256, 1) fa_bwd_sm90_kernel(const fa_cu_bwd pb, const __grid_constant__ CUtensorMap dq_map, const int dq_tma)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef fa_b90_cfg<D> C;
    constexpr int BN = C::BN, BQ = C::BQ, NT = C::NT, DH = C::DH, DQR = C::DQR, NKV = C::NKV;
    constexpr bool SPLIT = C::SPLIT;
    const fa_cu_fwd &p = pb.f;
    extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
    unsigned char *smem = fa_align1024(fa_smem_raw);
    unsigned char *sK = smem, *sV = sK + C::KB;
    unsigned char *sQ = sV + C::KB;          /* 2 buffers */
    unsigned char *sdO = sQ + 2 * C::QB;     /* 2 buffers */
    unsigned char *sdS = sdO + 2 * C::QB;    /* dS [query][key], 2 blocks of 64 keys */
    float *sL = reinterpret_cast<float *>(sdS + C::SB);   /* 2 x BQ: lse */
    float *sDs = sL + 2 * BQ;                             /* 2 x BQ: D_i */
    unsigned char *sDQ = reinterpret_cast<unsigned char *>(sDs + 2 * BQ);   /* dQ staging boxes, 1 KiB aligned */

    fa_bwd_block blk;
    if (!fa_bwd_block_of<BN, BQ>(pb, blk)) return;
    const fa_dseq &s = blk.s;
    const int b = blk.b, hk = blk.hk, n0 = blk.n0, mt_lo = blk.mt_lo, nq = blk.nq, iters = blk.iters;
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int G = p.group;

    const T *kbase = reinterpret_cast<const T *>(p.k), *vbase = reinterpret_cast<const T *>(p.v);
    const int nval = min(BN, s.sk - n0);
    fa_load_tile90<D, BN, NT, T>(sK, nval, p.dqk, [&](int r) {
        return kbase + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh);
    });
    fa_load_tile90<D, BN, NT, T>(sV, nval, p.dv, [&](int r) {
        return vbase + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh);
    });

    auto lse_row = [&](int h, int i) -> int64_t { return fa_lse_row(p, s, b, h, i); };
    auto load_q = [&](int it, int buf) {
        const int h = hk * G + it / nq, m0 = (mt_lo + it % nq) * BQ;
        const T *qb = reinterpret_cast<const T *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
        const T *ob = reinterpret_cast<const T *>(pb.dout) + s.tb * pb.do_sb + (s.q0 + m0) * pb.do_ss + (int64_t)h * pb.do_sh;
        if (s.sq - m0 >= BQ) {
            fa_load_full90<D, BQ, NT, T>(sQ + buf * C::QB, qb, p.q_ss, p.dqk);
            fa_load_full90<D, BQ, NT, T>(sdO + buf * C::QB, ob, pb.do_ss, p.dv);
        } else {
            fa_load_tile90<D, BQ, NT, T>(sQ + buf * C::QB, s.sq - m0, p.dqk, [&](int r) { return qb + (int64_t)r * p.q_ss; });
            fa_load_tile90<D, BQ, NT, T>(sdO + buf * C::QB, s.sq - m0, p.dv, [&](int r) { return ob + (int64_t)r * pb.do_ss; });
        }
        /* lse and D rows: threads [0, BQ) copy lse, [BQ, 2 BQ) D; zeros past the sequence
           (such rows have zero Q and dO rows: P = 1, dP = 0, dS = 0, no contribution) */
        if ((int)threadIdx.x < 2 * BQ) {
            const int r = threadIdx.x % BQ, which = threadIdx.x / BQ, i = m0 + r;
            const float *src = which ? pb.dsum : p.lse;
            const bool ok = i < s.sq;
            fa_cp_async4((which ? sDs : sL) + buf * BQ + r, ok ? src + lse_row(h, i) : src, ok ? 4 : 0);
        }
    };

    if (iters > 0) load_q(0, 0);
    fa_cp_async_commit();

    float dka[NKV / 2], dva[NKV / 2];                     /* this warpgroup's keys x its NKV columns */
#pragma unroll
    for (int i = 0; i < NKV / 2; i++) dka[i] = dva[i] = 0.f;
    const float sl2 = p.scale * FA_LOG2E;
    const uint32_t kaddr = fa_smem_u32(sK), vaddr = fa_smem_u32(sV), dsaddr = fa_smem_u32(sdS);
    const int kw = SPLIT ? 0 : wg * 64;                   /* this warpgroup's first key in the block */
    const int kvcol0 = SPLIT ? wg * NKV : 0;              /* ... and first dK/dV column */
    const int krow = kw + warp * 16 + lane / 4;           /* this thread's first key row in the block */
    const uint32_t st_addr = dsaddr + fa_b90_ds_offset<BQ>(kw);   /* this thread's dS stores */
    /* this warp's staging: box x (columns wg DH + 32 x) of its 16 rows at sdq + x XB */
    unsigned char *sdq = sDQ + (wg * 4 + warp) * C::NBOX * C::XB;

    fa_cp_async_wait<0>();
    for (int it = 0; it < iters; it++) {
        const int buf = it & 1;
        fa_fence_proxy_async();
        __syncthreads();                  /* tile it (and K, V) visible; tile it-1 fully consumed */
        if (it + 1 < iters) load_q(it + 1, buf ^ 1);
        fa_cp_async_commit();

        const int h = hk * G + it / nq, m0 = (mt_lo + it % nq) * BQ;
        const uint32_t qaddr = fa_smem_u32(sQ + buf * C::QB), doaddr = fa_smem_u32(sdO + buf * C::QB);
        const float *cL = sL + buf * BQ, *cD = sDs + buf * BQ;

        /* S^T = K_w Q^T and dP^T = V_w dO^T (64 keys x 64 queries per warpgroup) */
        float sacc[BQ / 2], pacc[BQ / 2];
        fa_b90_issue_sdp<T, D, BN, BQ>(sacc, pacc, kaddr, vaddr, qaddr, doaddr, kw);
        fa_wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < BQ / 2; i++) fa_reg_fence(sacc[i]);

        /* P^T: element (key krow + 8 (e / 2), query 8 nt + 2 (lane % 4) + (e & 1)) */
        const bool full = n0 + BN <= s.sk &&
                          (p.window_left < 0 || n0 >= m0 + BQ - 1 + s.off - p.window_left) &&
                          (p.window_right < 0 || n0 + BN - 1 <= m0 + s.off + p.window_right);
        fa_b90_p<BQ>(p, s, sacc, cL, full, n0, krow, m0, sl2);
        fa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BQ / 2; i++) fa_reg_fence(pacc[i]);
        uint32_t pa[BQ / 16][4], ga[BQ / 16][4];
        fa_b90_ds_pack<T, BQ>(sacc, pacc, cD, pa, ga);

        /* dV_w += P^T dO and dK_w += dS^T Q over this warpgroup's NKV columns: B read N-major
           (rows = queries) */
        fa_b90_issue_dkdv<T, NKV, BQ>(dka, dva, pa, ga, qaddr, doaddr, kvcol0);

        /* dS [query][key] into shared memory, K-major for dQ = dS K */
        if (!SPLIT || wg == 0) {          /* SPLIT: both warpgroups hold the same dS */
            fa_b90_store_ds<BQ>(st_addr, ga);
            fa_fence_proxy_async();
        }
        __syncthreads();                  /* dS of the block's keys in shared memory */

        /* dQ[:, wg half] = dS K[:, wg half] over the block's keys, in NR rounds of DQR
           columns (d64/d128: one round); round rd+1's product is in flight while round rd
           is handed to the reduce */
        float qacc2[2][DQR / 2];
        auto issue_dq = [&](int rd, float (&acc)[DQR / 2]) {
            fa_b90_issue_dq<T, DQR, BN, BQ>(acc, dsaddr, kaddr, wg * DH + rd * DQR);
        };
        issue_dq(0, qacc2[0]);
#pragma unroll
        for (int rd = 0; rd < C::NR; rd++) {
            const int col0 = wg * DH + rd * DQR;          /* first dQ column of this round */
            float (&qacc)[DQR / 2] = qacc2[rd & 1];
            if (rd + 1 < C::NR) {
                issue_dq(rd + 1, qacc2[(rd + 1) & 1]);
                fa_wgmma_wait<1>();       /* round rd, and (round 0) dK/dV of this tile */
            } else {
                fa_wgmma_wait<0>();
            }
#pragma unroll
            for (int i = 0; i < DQR / 2; i++) fa_reg_fence(qacc[i]);
            if (rd == 0) {
#pragma unroll
                for (int i = 0; i < NKV / 2; i++) { fa_reg_fence(dka[i]); fa_reg_fence(dva[i]); }
#pragma unroll
                for (int kk = 0; kk < BQ / 16; kk++)
#pragma unroll
                    for (int q = 0; q < 4; q++) { fa_reg_fence_u(pa[kk][q]); fa_reg_fence_u(ga[kk][q]); }
                /* tile it+1's copies (issued a tile ago) have landed. Waited for here,
                   before this tile's dQ reduce is issued: the hardware counts cp.async and
                   bulk operations on one scoreboard, so a wait at the next barrier would
                   also wait for the reduce. */
                fa_cp_async_wait<0>();
            }

            fa_b90_dq_out<DQR, C::XB>(pb, s, b, h, m0, col0, qacc, sdq, &dq_map, dq_tma);
        }
    }
    fa_cp_async_wait<0>();
    if (lane == 0) fa_bulk_wait();        /* the dQ adds are complete before the block exits */

    /* store dK (times scale) and dV once; keys no query sees get zeros */
    fa_b90_store_dkdv<T, NKV>(pb, s, b, hk, n0, krow, kvcol0, dka, dva);
#endif
}

template <typename T, int D>
cudaError_t fa_bwd_sm90_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st, const void *dq_map)
{
    typedef fa_b90_cfg<D> C;
    cudaError_t e = cudaFuncSetAttribute(fa_bwd_sm90_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    CUtensorMap m;
    if (dq_map) memcpy(&m, dq_map, sizeof m);
    else memset(&m, 0, sizeof m);
    fa_bwd_sm90_kernel<T, D><<<(unsigned)blocks, C::NT, C::SMEM, st>>>(p, m, dq_map != NULL);
    return cudaGetLastError();
}

#define FA_BWD_SM90_INSTANTIATE(D) \
    template cudaError_t fa_bwd_sm90_launch<__half, D>(const fa_cu_bwd &, int64_t, cudaStream_t, const void *); \
    template cudaError_t fa_bwd_sm90_launch<__nv_bfloat16, D>(const fa_cu_bwd &, int64_t, cudaStream_t, const void *);

#endif /* FA_CUDA_SM90_BACKWARD_CUH */
