/* forward_fast.cuh - the lean FlashAttention-2 forward for the common feature set: no bias,
 * no ALiBi, no softcap, no dropout, scale > 0 (plan_forward.cu dispatches the general kernel
 * of forward.cuh for everything else). Masks (causal, windows, sequence ends), sinks,
 * GQA/MQA, varlen, the KV cache (contiguous and paged), split-KV and fp32 out are kept:
 * they cost a block-uniform branch per KV tile or live in the prologue/epilogue.
 *
 * FA2's structure (flash_fwd_kernel.h, compute_attn_1rowblock):
 *   - 4 warps; each warp owns MT = BM / 64 row tiles of 16 query rows (d64/d128: 2, so every
 *     K and V fragment read by ldmatrix feeds 2 mma.sync: half the shared-memory traffic
 *     per mma of 16 rows per warp);
 *   - single K and V buffers, overlapped the FA2 way: V[n] is copied (cp.async) while
 *     S = Q K[n]^T is computed, K[n+1] while the softmax and O += P V run;
 *   - Q fragments re-read with ldmatrix per KV tile, as FA2 does by default (kept in
 *     registers, they spill with the uncut loops: d64 255 registers and 104 B of spills,
 *     d128/d256 KBs);
 *   - the k-loops run to the class dim D with no run-time cut at d_qk/d_v (zero-filled
 *     columns): one basic block per product, so ptxas overlaps LDSM and HMMA (+20-25%);
 *   - S, P and O in registers; P goes to the PV mma as A fragments (no shared memory);
 *   - base-2 softmax with scale*log2(e) folded into one FFMA per element.
 * 252-255 registers per thread: 2 blocks of 4 warps per SM. d128 spills 96 B (52 LDL/STL in
 * SASS), d64/d256 none. Tiles per head-dim class:
 *   d64 128x64 (48 KiB smem), d128 128x64 (64 KiB), d256 64x64 (96 KiB, 2 per SM; also fits
 *   the 99 KiB of sm86/sm89).
 */
#ifndef FA_CUDA_SM80_FORWARD_FAST_CUH
#define FA_CUDA_SM80_FORWARD_FAST_CUH

#include <math.h>
#include <limits.h>
#include "device/problem.cuh"
#include "device/tiles.cuh"
#include "sm80/tiles.h"

template <int D> struct fa_ffast_cfg {
    static constexpr int BM = fa_fwd_fast_bm(D), BN = FA_FWD_FAST_BN, NW = 4, NT = NW * 32;
    static constexpr int MT = BM / (16 * NW);            /* 16-row m-tiles per warp */
    /* d256 cuts the QK^T k-loop at d_qk (a run-time break per k-step): without the cut,
       ptxas hoists K fragments until it spills (192 B); with it, no spills. */
    static constexpr int BRK_QK = D >= 256;
    static constexpr int SMEM = (BM + 2 * BN) * D * 2;
    static constexpr int MINB = 2;      /* 2 blocks of 4 warps per SM (<= 255 registers) */
    static_assert(SMEM == fa_fwd_fast_smem(D), "kernels.h and the kernel disagree on the shared memory");
};

template <typename T, int D>
__global__ void __launch_bounds__(fa_ffast_cfg<D>::NT, fa_ffast_cfg<D>::MINB) fa_fwd_fast_kernel(const fa_cu_fwd p)
{
    typedef fa_ffast_cfg<D> C;
    constexpr int BM = C::BM, BN = C::BN, NT = C::NT, MT = C::MT;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    T *sQ = reinterpret_cast<T *>(fa_smem);
    T *sK = sQ + BM * D;
    T *sV = sK + BN * D;

    int64_t bid = blockIdx.x;
    const int mb = (int)(bid % p.m_blocks); bid /= p.m_blocks;
    const int split = (int)(bid % p.n_splits); bid /= p.n_splits;
    const int h = (int)(bid % p.hq);
    const int b = (int)(bid / p.hq);
    const fa_dseq s = fa_dev_seq(p, b);
    const int m0 = mb * BM;
    if (m0 >= s.sq) return;
    const int hk = h / p.group;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    const int last = min(m0 + BM, s.sq) - 1;
    int lo = 0, hi = s.sk;
    if (p.window_left >= 0) lo = max(0, m0 + s.off - p.window_left);
    if (p.window_right >= 0) hi = min(s.sk, last + s.off + p.window_right + 1);
    int nb_lo = lo / BN, nb_hi = hi > lo ? (hi + BN - 1) / BN : nb_lo;
    {
        int total = nb_hi - nb_lo, per = (total + p.n_splits - 1) / p.n_splits;
        nb_lo = min(nb_hi, nb_lo + split * per);
        nb_hi = min(nb_hi, nb_lo + per);
    }
    const int full_lo = p.window_left >= 0 ? last + s.off - p.window_left : 0;
    const int full_hi = p.window_right >= 0 ? min(s.sk, m0 + s.off + p.window_right + 1) : s.sk;

    const T *qbase = reinterpret_cast<const T *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
    const T *kbase = reinterpret_cast<const T *>(p.k) + s.tb * p.k_sb + s.k0 * p.k_ss + (int64_t)hk * p.k_sh;
    const T *vbase = reinterpret_cast<const T *>(p.v) + s.tb * p.v_sb + s.k0 * p.v_ss + (int64_t)hk * p.v_sh;
    const bool paged = p.block_table != nullptr;

    auto load_k = [&](int nb) {
        const int n0 = nb * BN, nval = min(BN, s.sk - n0);
        if (!paged && nval == BN) {
            fa_load_full<D, BN, NT>(sK, kbase + (int64_t)n0 * p.k_ss, p.k_ss, p.dqk);
            return;
        }
        fa_load_tile<D, BN, NT>(sK, nval, p.dqk, [&](int r) {
            return paged ? reinterpret_cast<const T *>(p.k) + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh)
                         : kbase + (int64_t)(n0 + r) * p.k_ss;
        });
    };
    auto load_v = [&](int nb) {
        const int n0 = nb * BN, nval = min(BN, s.sk - n0);
        if (!paged && nval == BN) {
            fa_load_full<D, BN, NT>(sV, vbase + (int64_t)n0 * p.v_ss, p.v_ss, p.dv);
            return;
        }
        fa_load_tile<D, BN, NT>(sV, nval, p.dv, [&](int r) {
            return paged ? reinterpret_cast<const T *>(p.v) + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh)
                         : vbase + (int64_t)(n0 + r) * p.v_ss;
        });
    };

    fa_load_tile<D, BM, NT>(sQ, s.sq - m0, p.dqk, [&](int r) { return qbase + (int64_t)r * p.q_ss; });
    if (nb_lo < nb_hi) load_k(nb_lo);
    fa_cp_async_commit();

    float oacc[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < D / 8; i++) oacc[mt][i][0] = oacc[mt][i][1] = oacc[mt][i][2] = oacc[mt][i][3] = 0.f;
    float rmax[MT][2], rsum[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) rmax[mt][0] = rmax[mt][1] = -INFINITY, rsum[mt][0] = rsum[mt][1] = 0.f;

    const int wrow = warp * 16 * MT;                      /* first row of this warp in the block */
    const float sl2 = p.scale * FA_LOG2E;
    /* Every k-step runs to D even when d_qk or d_v is smaller: the columns past them are
       zero-filled in shared memory, so the extra products add exact zeros, and a run-time
       break per k-step would cut the unrolled loop into basic blocks that ptxas cannot
       schedule across (LDSM -> HMMA latency exposed at every step). */
    const int kq = (p.dqk + 15) / 16;

    for (int nb = nb_lo; nb < nb_hi; nb++) {
        fa_cp_async_wait_all();
        __syncthreads();                 /* K[nb] landed; every warp is done with V[nb-1] */
        load_v(nb);
        fa_cp_async_commit();

        float sacc[MT][BN / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < BN / 8; i++) sacc[mt][i][0] = sacc[mt][i][1] = sacc[mt][i][2] = sacc[mt][i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            if (C::BRK_QK && kk >= kq) break;
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                fa_ldmatrix_x4(a[mt], sQ + fa_swz<D>(wrow + mt * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t bb[4];
                fa_ldmatrix_x4(bb, sK + fa_swz<D>(np * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    fa_mma(sacc[mt][2 * np], a[mt], bb[0], bb[1], T());
                    fa_mma(sacc[mt][2 * np + 1], a[mt], bb[2], bb[3], T());
                }
            }
        }
        fa_cp_async_wait_all();
        __syncthreads();                 /* V[nb] landed; every warp is done with K[nb] */
        if (nb + 1 < nb_hi) load_k(nb + 1);
        fa_cp_async_commit();

        const int n0 = nb * BN;
        if (n0 < full_lo || n0 + BN > full_hi) {
            /* visible keys of row i: [pos - window_left, min(pos + window_right, sk - 1)] */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int pos = m0 + wrow + mt * 16 + lane / 4 + r * 8 + s.off;
                    const int jlo = p.window_left >= 0 ? pos - p.window_left : INT_MIN;
                    const int jhi = p.window_right >= 0 ? min(s.sk - 1, pos + p.window_right) : s.sk - 1;
                    const int c0 = n0 + (lane % 4) * 2;
#pragma unroll
                    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int j = c0 + nt * 8 + e;
                            if (j < jlo || j > jhi) sacc[mt][nt][2 * r + e] = -INFINITY;
                        }
                }
        }
        /* online softmax in base 2: a row lives in the 4 lanes of a quad */
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(sacc[mt][nt][2 * r], sacc[mt][nt][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mnew = fmaxf(rmax[mt][r], mx * sl2);
                const float ms = mnew == -INFINITY ? 0.f : mnew;
                alpha[r] = fa_exp2(rmax[mt][r] - ms);
                rmax[mt][r] = mnew;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) {
                    sacc[mt][nt][2 * r] = fa_exp2(fmaf(sacc[mt][nt][2 * r], sl2, -ms));
                    sacc[mt][nt][2 * r + 1] = fa_exp2(fmaf(sacc[mt][nt][2 * r + 1], sl2, -ms));
                    sum += sacc[mt][nt][2 * r] + sacc[mt][nt][2 * r + 1];
                }
                rsum[mt][r] = rsum[mt][r] * alpha[r] + sum;
            }
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                oacc[mt][i][0] *= alpha[0]; oacc[mt][i][1] *= alpha[0];
                oacc[mt][i][2] *= alpha[1]; oacc[mt][i][3] *= alpha[1];
            }
        }
        /* O += P V: the S accumulators are already the A fragments' layout */
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = fa_pack2(sacc[mt][2 * kk][0], sacc[mt][2 * kk][1], T());
                a[mt][1] = fa_pack2(sacc[mt][2 * kk][2], sacc[mt][2 * kk][3], T());
                a[mt][2] = fa_pack2(sacc[mt][2 * kk + 1][0], sacc[mt][2 * kk + 1][1], T());
                a[mt][3] = fa_pack2(sacc[mt][2 * kk + 1][2], sacc[mt][2 * kk + 1][3], T());
            }
#pragma unroll
            for (int np = 0; np < D / 16; np++) {
                uint32_t bb[4];
                fa_ldmatrix_x4_trans(bb, sV + fa_swz<D>(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8, np * 2 + lane / 16));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    fa_mma(oacc[mt][2 * np], a[mt], bb[0], bb[1], T());
                    fa_mma(oacc[mt][2 * np + 1], a[mt], bb[2], bb[3], T());
                }
            }
        }
    }
    fa_cp_async_wait_all();

    /* epilogue (as forward.cuh): quad row sums, sinks, normalisation, one write */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float fac[2], lse[2];
        int qi[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            qi[r] = m0 + wrow + mt * 16 + lane / 4 + r * 8;
            fa_row_end(p, h, rmax[mt][r], rsum[mt][r], fac[r], lse[r]);
        }
        fa_store_rows<T, D>(p, s, b, h, split, &oacc[mt][0][0], fac, lse, qi[0]);
    }
}

template <typename T, int D>
cudaError_t fa_fwd_fast_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st)
{
    typedef fa_ffast_cfg<D> C;
    cudaError_t e = cudaFuncSetAttribute(fa_fwd_fast_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    e = cudaFuncSetAttribute(fa_fwd_fast_kernel<T, D>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (e != cudaSuccess) return e;
    fa_fwd_fast_kernel<T, D><<<(unsigned)blocks, C::NT, C::SMEM, st>>>(p);
    return cudaGetLastError();
}

#define FA_FWD_FAST_INSTANTIATE(D) \
    template cudaError_t fa_fwd_fast_launch<__half, D>(const fa_cu_fwd &, int64_t, cudaStream_t); \
    template cudaError_t fa_fwd_fast_launch<__nv_bfloat16, D>(const fa_cu_fwd &, int64_t, cudaStream_t);

#endif /* FA_CUDA_SM80_FORWARD_FAST_CUH */
