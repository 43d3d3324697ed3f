/* forward.cuh - the FlashAttention-2 style general forward kernel (sm80 instructions, runs
 * on sm80..sm90).
 *
 * One thread block = BM query rows of one (sequence, query head) and one KV split.
 * Memory levels:
 *   shared  Q tile [BM][D] (loaded once), K and V tiles [BN][D] double-buffered with
 *           cp.async: the copy of tile n+1 runs while tile n is computed;
 *   registers  each warp owns 16 query rows: S = Q K^T (16 x BN, fp32), the running row max
 *           and sum, and the output accumulator O (16 x D, fp32);
 *   global  O and LSE written once at the end (or an fp32 partial per KV split).
 * Both products are mma.sync m16n8k16 (fp16 or bf16 in, fp32 accumulate) fed by ldmatrix
 * (ldmatrix.trans for V). The score pipeline per element is problem.h's: scale, softcap,
 * ALiBi, bias, mask (causal/window/sequence end), then the online softmax in base 2,
 * dropout on the probabilities after they were summed (the kept-mask of philox.h).
 * D is the head-dim class (64, 128, 256): d_qk and d_v are any multiples of 8 up to D;
 * the columns past them are zero-filled in shared memory and never stored.
 */
#ifndef FA_CUDA_SM80_FORWARD_CUH
#define FA_CUDA_SM80_FORWARD_CUH

#include <math.h>
#include "device/problem.cuh"
#include "device/tiles.cuh"
#include "philox.h"
#include "sm80/tiles.h"

template <int D> struct fa_fwd_cfg {
    static constexpr int BM = 128, BN = 64, NW = BM / 16, NT = NW * 32;
    static constexpr int SMEM = (BM * D + 4 * BN * D) * 2;   /* Q + 2 x (K, V), 2-byte T */
    /* Blocks per SM the register budget is cut for: d64 fits 2 (<= 128 registers, 16 warps
       per SM); d128/d256 keep the accumulators of 16 rows x D in registers and run 1. */
    static constexpr int MINB = D <= 64 ? 2 : 1;
};

template <typename T, int D>
__global__ void __launch_bounds__(fa_fwd_cfg<D>::NT, fa_fwd_cfg<D>::MINB) fa_fwd_kernel(const fa_cu_fwd p)
{
    typedef fa_fwd_cfg<D> C;
    constexpr int BM = C::BM, BN = C::BN, NT = C::NT;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    T *sQ = reinterpret_cast<T *>(fa_smem);
    T *sK = sQ + BM * D;                 /* 2 buffers of BN x D */
    T *sV = sK + 2 * BN * D;             /* 2 buffers of BN x D */

    /* block -> (b, h, split, m-block), m-block fastest */
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

    /* Keys this block may see: the union of its rows' windows, clamped to [0, sk). */
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
    /* Blocks fully inside every row's window and before sk need no per-element mask:
       row windows grow with the row, so the last row has the largest lo, the first the
       smallest hi. */
    const int full_lo = p.window_left >= 0 ? last + s.off - p.window_left : 0;
    const int full_hi = p.window_right >= 0 ? min(s.sk, m0 + s.off + p.window_right + 1) : s.sk;

    const T *qbase = reinterpret_cast<const T *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
    const T *kbase = reinterpret_cast<const T *>(p.k);
    const T *vbase = reinterpret_cast<const T *>(p.v);

    auto load_kv = [&](int nb, int buf) {
        const int n0 = nb * BN, nval = min(BN, s.sk - n0);
        fa_load_tile<D, BN, NT>(sK + buf * BN * D, nval, p.dqk, [&](int r) {
            return kbase + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh);
        });
        fa_load_tile<D, BN, NT>(sV + buf * BN * D, nval, p.dv, [&](int r) {
            return vbase + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh);
        });
    };

    fa_load_tile<D, BM, NT>(sQ, s.sq - m0, p.dqk, [&](int r) { return qbase + (int64_t)r * p.q_ss; });
    if (nb_lo < nb_hi) load_kv(nb_lo, 0);
    fa_cp_async_commit();

    float oacc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
    float rmax[2] = { -INFINITY, -INFINITY }, rsum[2] = { 0.f, 0.f };

    const int r_in_blk[2] = { warp * 16 + lane / 4, warp * 16 + lane / 4 + 8 };
    const int qi[2] = { m0 + r_in_blk[0], m0 + r_in_blk[1] };      /* row within sequence */
    const float scale = p.scale;
    const float slope = p.alibi ? p.alibi[h] : 0.f;
    const int kq = (p.dqk + 15) / 16, kv_steps = (p.dv + 15) / 16;

    for (int nb = nb_lo; nb < nb_hi; nb++) {
        const int buf = (nb - nb_lo) & 1;
        fa_cp_async_wait_all();
        __syncthreads();
        if (nb + 1 < nb_hi) load_kv(nb + 1, buf ^ 1);
        fa_cp_async_commit();

        const T *cK = sK + buf * BN * D, *cV = sV + buf * BN * D;
        float sacc[BN / 8][4];
#pragma unroll
        for (int i = 0; i < BN / 8; i++) sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            if (kk >= kq) break;
            uint32_t a[4];
            fa_ldmatrix_x4(a, sQ + fa_swz<D>(warp * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t bb[4];
                fa_ldmatrix_x4(bb, cK + fa_swz<D>(np * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
                fa_mma(sacc[2 * np], a, bb[0], bb[1], T());
                fa_mma(sacc[2 * np + 1], a, bb[2], bb[3], T());
            }
        }

        /* scores -> base-2 logits, masked */
        const int n0 = nb * BN;
        const bool need_mask = n0 < full_lo || n0 + BN > full_hi;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e / 2, j = n0 + nt * 8 + (lane % 4) * 2 + (e & 1), i = qi[r];
                float td;
                float x = fa_dev_score(p, s, b, h, i, j, sacc[nt][e] * scale, slope, td);
                if (need_mask) {   /* fa_dev_visible written out (through it, ptxas emits other code) */
                    const int pos = i + s.off;
                    bool vis = j < s.sk && (p.window_left < 0 || j >= pos - p.window_left) &&
                               (p.window_right < 0 || j <= pos + p.window_right);
                    if (!vis) x = -INFINITY;
                }
                sacc[nt][e] = x * FA_LOG2E;
            }
        }
        /* online softmax: each row lives in the 4 lanes of a quad */
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = rmax[r];
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(sacc[nt][2 * r], sacc[nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == -INFINITY ? 0.f : mx;
            alpha[r] = fa_exp2(rmax[r] - ms);
            rmax[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                sacc[nt][2 * r] = fa_exp2(sacc[nt][2 * r] - ms);
                sacc[nt][2 * r + 1] = fa_exp2(sacc[nt][2 * r + 1] - ms);
                sum += sacc[nt][2 * r] + sacc[nt][2 * r + 1];
            }
            rsum[r] = rsum[r] * alpha[r] + sum;
        }
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            oacc[i][0] *= alpha[0]; oacc[i][1] *= alpha[0];
            oacc[i][2] *= alpha[1]; oacc[i][3] *= alpha[1];
        }
        if (p.dropout_p > 0.f) {
            fa_dropout_key dk; dk.k0 = p.drop_k0; dk.k1 = p.drop_k1; dk.threshold = p.drop_threshold;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                const int j = n0 + nt * 8 + (lane % 4) * 2;       /* even: j, j+1 share a word group */
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    uint32_t w[4];
                    fa_dropout_words(&dk, b, h, (int64_t)qi[r] + s.drop_i0, j & ~3, w);
                    const uint32_t w0 = (j & 2) ? w[2] : w[0], w1 = (j & 2) ? w[3] : w[1];
                    if (w0 < dk.threshold) sacc[nt][2 * r] = 0.f;
                    if (w1 < dk.threshold) sacc[nt][2 * r + 1] = 0.f;
                }
            }
        }
        /* O += P V: the S accumulators are already the A fragments' layout */
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[4];
            a[0] = fa_pack2(sacc[2 * kk][0], sacc[2 * kk][1], T());
            a[1] = fa_pack2(sacc[2 * kk][2], sacc[2 * kk][3], T());
            a[2] = fa_pack2(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1], T());
            a[3] = fa_pack2(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3], T());
#pragma unroll
            for (int np = 0; np < D / 16; np++) {
                if (np >= kv_steps) break;
                uint32_t bb[4];
                fa_ldmatrix_x4_trans(bb, cV + fa_swz<D>(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8, np * 2 + lane / 16));
                fa_mma(oacc[2 * np], a, bb[0], bb[1], T());
                fa_mma(oacc[2 * np + 1], a, bb[2], bb[3], T());
            }
        }
    }
    fa_cp_async_wait_all();

    /* epilogue: row sums over the quad, sinks, normalisation, one write of O and LSE */
    float fac[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        fa_row_end(p, h, rmax[r], rsum[r], fac[r], lse[r]);
        fac[r] *= p.keep_scale;
    }
    fa_store_rows<T, D>(p, s, b, h, split, &oacc[0][0], fac, lse, qi[0]);
}

/* Launch one instantiation (instantiated per head-dim class by the stubs gen-stubs.sh writes). */
template <typename T, int D>
cudaError_t fa_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st)
{
    typedef fa_fwd_cfg<D> C;
    cudaError_t e = cudaFuncSetAttribute(fa_fwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    e = cudaFuncSetAttribute(fa_fwd_kernel<T, D>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (e != cudaSuccess) return e;
    fa_fwd_kernel<T, D><<<(unsigned)blocks, C::NT, C::SMEM, st>>>(p);
    return cudaGetLastError();
}

#define FA_FWD_INSTANTIATE(D) \
    template cudaError_t fa_fwd_launch<__half, D>(const fa_cu_fwd &, int64_t, cudaStream_t); \
    template cudaError_t fa_fwd_launch<__nv_bfloat16, D>(const fa_cu_fwd &, int64_t, cudaStream_t);

#endif /* FA_CUDA_SM80_FORWARD_CUH */
