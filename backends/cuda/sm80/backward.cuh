/* backward.cuh - the FlashAttention-2 style backward kernel (sm80 instructions, runs
 * on sm80..sm90): dK, dV and (atomically) dQ.
 *
 * One thread block = BN = 64 keys of one (sequence, KV head). It loads K_j, V_j once and
 * loops over the query tiles (BQ = 64 rows) of every query head of the KV head's group
 * that can see those keys (causal/window: the others are skipped), so dK_j and dV_j of
 * GQA sum over the group in registers and are stored once, with no workspace.
 * Per query tile (Q_i, dO_i, lse_i, D_i double-buffered with cp.async):
 *   S^T  = K_j Q_i^T                 (warp w: keys 16*(w%4).., all 64 query columns)
 *   dP^T = V_j dO_i^T
 *   per element: the forward's score pipeline (scale, softcap, ALiBi, bias, mask), then
 *   P = exp(S - lse) (lse includes the sinks; lse = -inf rows give P = 0),
 *   Z = dropout factor (0 or 1/(1-p)), dS = P * (dP*Z - D) * (1 - tanh^2) under softcap
 *   dV_j += (P*Z)^T dO_i,  dK_j += dS^T Q_i    (fp32 accumulators in registers)
 *   dS -> shared memory, then dQ_i += dS K_j, added with atomicAdd into an fp32 workspace
 *   (scaled and converted by backward_aux.cu).
 * Head-dim class 256 (and 128): 8 warps, warps w and w+4 own the same 16 keys and split
 * the columns of dK/dV (each recomputes S and dP for its keys: 1.4x the product work of
 * the minimum, but 128 accumulator registers per thread instead of 256).
 */
#ifndef FA_CUDA_SM80_BACKWARD_CUH
#define FA_CUDA_SM80_BACKWARD_CUH

#include <math.h>
#include "device/problem.cuh"
#include "device/tiles.cuh"
#include "philox.h"
#include "sm80/tiles.h"

template <int D> struct fa_bwd_cfg {
    static constexpr int BN = 64, BQ = 64;
    static constexpr int NSPLIT = D <= 64 ? 1 : 2;   /* warps per 16 keys (column split) */
    static constexpr int NW = 4 * NSPLIT, NT = NW * 32, DC = D / NSPLIT;
    static constexpr int SMEM = (2 * BN * D + 4 * BQ * D + BQ * BN) * 2 + 4 * BQ * 4;
    static constexpr int MINB = D <= 64 ? 2 : 1;
};

/* LEAN: the instantiation for calls without softcap, ALiBi, bias or dropout (the common
   set): those per-element stages are compiled out, and the k-loops run to the class dim D
   over zero-filled columns instead of stopping at d_qk / d_v (one basic block per product,
   as in the fast forward). A smaller kernel also misses the instruction cache less: the
   general one stalled on instruction fetch ~1.4 cycles per issue (ncu, d128). */
template <typename T, int D, bool LEAN>
__global__ void __launch_bounds__(fa_bwd_cfg<D>::NT, fa_bwd_cfg<D>::MINB) fa_bwd_kernel(const fa_cu_bwd pb)
{
    typedef fa_bwd_cfg<D> C;
    constexpr int BN = C::BN, BQ = C::BQ, NT = C::NT, DC = C::DC;
    const fa_cu_fwd &p = pb.f;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    T *sK = reinterpret_cast<T *>(fa_smem);
    T *sV = sK + BN * D;
    T *sQ = sV + BN * D;                 /* 2 buffers of BQ x D */
    T *sdO = sQ + 2 * BQ * D;            /* 2 buffers of BQ x D */
    T *sdS = sdO + 2 * BQ * D;           /* [key][query], BN x BQ */
    float *sL = reinterpret_cast<float *>(sdS + BQ * BN);   /* 2 x BQ: lse * log2(e) */
    float *sDs = sL + 2 * BQ;                               /* 2 x BQ: D_i */

    int64_t bid = blockIdx.x;
    int nb;
    if (pb.kv_tile >= 0) nb = pb.kv_tile;
    else { nb = (int)(bid % pb.n_blocks); bid /= pb.n_blocks; }
    const int hk = (int)(bid % p.hkv);
    const int b = (int)(bid / p.hkv);
    const fa_dseq s = fa_dev_seq(p, b);
    const int n0 = nb * BN;
    if (n0 >= s.sk) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kg = warp & 3, cs = warp >> 2;
    const int G = p.group;

    /* Query rows that see any of keys [n0, nlast]: row windows grow with the row. */
    const int nlast = min(n0 + BN, s.sk) - 1;
    int ilo = 0, ihi = s.sq;
    if (p.window_right >= 0) ilo = max(0, n0 - s.off - p.window_right);
    if (p.window_left >= 0) ihi = min(s.sq, nlast - s.off + p.window_left + 1);
    const int mt_lo = ilo / BQ, mt_hi = ihi > ilo ? (ihi + BQ - 1) / BQ : mt_lo;
    const int nq = mt_hi - mt_lo, iters = nq * G;

    const T *kbase = reinterpret_cast<const T *>(p.k), *vbase = reinterpret_cast<const T *>(p.v);
    const int nval = min(BN, s.sk - n0);
    fa_load_tile<D, BN, NT>(sK, nval, p.dqk, [&](int r) {
        return kbase + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh);
    });
    fa_load_tile<D, BN, NT>(sV, nval, p.dv, [&](int r) {
        return vbase + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh);
    });

    auto lse_row = [&](int h, int i) -> int64_t {
        return fa_lse_row(p, s, b, h, i);
    };
    auto load_q = [&](int it, int buf) {
        const int h = hk * G + it / nq, m0 = (mt_lo + it % nq) * BQ;
        const T *qb = reinterpret_cast<const T *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
        const T *ob = reinterpret_cast<const T *>(pb.dout) + s.tb * pb.do_sb + (s.q0 + m0) * pb.do_ss + (int64_t)h * pb.do_sh;
        if (s.sq - m0 >= BQ) {
            fa_load_full<D, BQ, NT>(sQ + buf * BQ * D, qb, p.q_ss, p.dqk);
            fa_load_full<D, BQ, NT>(sdO + buf * BQ * D, ob, pb.do_ss, p.dv);
        } else {
            fa_load_tile<D, BQ, NT>(sQ + buf * BQ * D, s.sq - m0, p.dqk, [&](int r) { return qb + (int64_t)r * p.q_ss; });
            fa_load_tile<D, BQ, NT>(sdO + buf * BQ * D, s.sq - m0, p.dv, [&](int r) { return ob + (int64_t)r * pb.do_ss; });
        }
        for (int r = threadIdx.x; r < BQ; r += NT) {
            const int i = m0 + r;
            float l = INFINITY, d = 0.f;      /* rows past the sequence: P = 0 */
            if (i < s.sq) {
                const int64_t li = lse_row(h, i);
                l = p.lse[li];
                d = pb.dsum[li];
                if (l == -INFINITY) l = INFINITY;   /* fully masked row: P = 0, no gradient */
            }
            sL[buf * BQ + r] = l * FA_LOG2E;
            sDs[buf * BQ + r] = d;
        }
    };

    if (iters > 0) load_q(0, 0);
    fa_cp_async_commit();

    float dka[DC / 8][4], dva[DC / 8][4];
#pragma unroll
    for (int i = 0; i < DC / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[i][e] = dva[i][e] = 0.f;
    const float scale = p.scale;
    const int kq = (p.dqk + 15) / 16, kv_steps = (p.dv + 15) / 16;

    for (int it = 0; it < iters; it++) {
        const int buf = it & 1;
        fa_cp_async_wait_all();
        __syncthreads();
        if (it + 1 < iters) load_q(it + 1, buf ^ 1);
        fa_cp_async_commit();

        const int h = hk * G + it / nq, m0 = (mt_lo + it % nq) * BQ;
        const T *cQ = sQ + buf * BQ * D, *cdO = sdO + buf * BQ * D;
        const float *cL = sL + buf * BQ, *cD = sDs + buf * BQ;

        float sacc[BQ / 8][4], pacc[BQ / 8][4];
#pragma unroll
        for (int i = 0; i < BQ / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) sacc[i][e] = pacc[i][e] = 0.f;
        /* S^T = K Q^T and dP^T = V dO^T (16 keys x 64 queries per warp) */
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            if (!LEAN && kk >= kq) break;
            uint32_t a[4];
            fa_ldmatrix_x4(a, sK + fa_swz<D>(kg * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
            for (int np = 0; np < BQ / 16; np++) {
                uint32_t bb[4];
                fa_ldmatrix_x4(bb, cQ + fa_swz<D>(np * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
                fa_mma(sacc[2 * np], a, bb[0], bb[1], T());
                fa_mma(sacc[2 * np + 1], a, bb[2], bb[3], T());
            }
        }
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            if (!LEAN && kk >= kv_steps) break;
            uint32_t a[4];
            fa_ldmatrix_x4(a, sV + fa_swz<D>(kg * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
            for (int np = 0; np < BQ / 16; np++) {
                uint32_t bb[4];
                fa_ldmatrix_x4(bb, cdO + fa_swz<D>(np * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
                fa_mma(pacc[2 * np], a, bb[0], bb[1], T());
                fa_mma(pacc[2 * np + 1], a, bb[2], bb[3], T());
            }
        }

        /* per element: P, dropout, dS (sacc <- P*Z, pacc <- dS) */
        const float slope = p.alibi ? p.alibi[h] : 0.f;
        fa_dropout_key dk; dk.k0 = p.drop_k0; dk.k1 = p.drop_k1; dk.threshold = p.drop_threshold;
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ic = nt * 8 + (lane % 4) * 2 + (e & 1);
                const int j = n0 + kg * 16 + lane / 4 + 8 * (e / 2), i = m0 + ic;
                float tder;
                const float x = fa_dev_score<!LEAN>(p, s, b, h, i, j, sacc[nt][e] * scale, slope, tder);
                /* fa_dev_visible written out: through the helper, ptxas gives the d256 lean
                   kernel 16 more bytes of stack and 36 more of spill stores (sm_90) */
                const int pos = i + s.off;
                const bool vis = j < s.sk && (p.window_left < 0 || j >= pos - p.window_left) &&
                                 (p.window_right < 0 || j <= pos + p.window_right);
                const float P = vis ? fa_exp2(x * FA_LOG2E - cL[ic]) : 0.f;
                float z = 1.f;
                if (!LEAN && p.dropout_p > 0.f) {
                    uint32_t w[4];
                    fa_dropout_words(&dk, b, h, (int64_t)i + s.drop_i0, j & ~3, w);
                    const uint32_t wj = (j & 2) ? ((j & 1) ? w[3] : w[2]) : ((j & 1) ? w[1] : w[0]);
                    z = wj < dk.threshold ? 0.f : p.keep_scale;
                }
                const float ds = P * (pacc[nt][e] * z - cD[ic]) * tder;
                sacc[nt][e] = P * z;
                pacc[nt][e] = ds;
            }
        }

        /* dV += (P Z)^T dO and dK += dS^T Q: the accumulators are the A fragments' layout */
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            uint32_t a[4], g[4];
            a[0] = fa_pack2(sacc[2 * kk][0], sacc[2 * kk][1], T());
            a[1] = fa_pack2(sacc[2 * kk][2], sacc[2 * kk][3], T());
            a[2] = fa_pack2(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1], T());
            a[3] = fa_pack2(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3], T());
            g[0] = fa_pack2(pacc[2 * kk][0], pacc[2 * kk][1], T());
            g[1] = fa_pack2(pacc[2 * kk][2], pacc[2 * kk][3], T());
            g[2] = fa_pack2(pacc[2 * kk + 1][0], pacc[2 * kk + 1][1], T());
            g[3] = fa_pack2(pacc[2 * kk + 1][2], pacc[2 * kk + 1][3], T());
#pragma unroll
            for (int np = 0; np < DC / 16; np++) {
                const int c16 = cs * (DC / 16) + np;
                uint32_t bb[4];
                if (LEAN || c16 < kv_steps) {
                    fa_ldmatrix_x4_trans(bb, cdO + fa_swz<D>(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8, c16 * 2 + lane / 16));
                    fa_mma(dva[2 * np], a, bb[0], bb[1], T());
                    fa_mma(dva[2 * np + 1], a, bb[2], bb[3], T());
                }
                if (LEAN || c16 < kq) {
                    fa_ldmatrix_x4_trans(bb, cQ + fa_swz<D>(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8, c16 * 2 + lane / 16));
                    fa_mma(dka[2 * np], g, bb[0], bb[1], T());
                    fa_mma(dka[2 * np + 1], g, bb[2], bb[3], T());
                }
            }
        }

        if (pb.dq_acc) {
            /* dS -> shared [key][query]; then dQ_i += dS K_j: warp w takes query rows
               16*(w%4).. and its column half, and adds into the fp32 workspace */
            if (cs == 0) {
#pragma unroll
                for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const int key = kg * 16 + lane / 4 + 8 * r;
                        *reinterpret_cast<uint32_t *>(sdS + fa_swz<BQ>(key, nt) + (lane % 4) * 2) =
                            fa_pack2(pacc[nt][2 * r], pacc[nt][2 * r + 1], T());
                    }
            }
            __syncthreads();
            uint32_t a[BN / 16][4];
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++)
                fa_ldmatrix_x4_trans(a[kk], sdS + fa_swz<BQ>(kk * 16 + (lane / 16) * 8 + lane % 8, kg * 2 + (lane / 8) % 2));
            const int i0 = m0 + kg * 16 + lane / 4;
            float *dq0 = i0 < s.sq ? pb.dq_acc + lse_row(h, i0) * p.dqk : NULL;
            float *dq1 = i0 + 8 < s.sq ? pb.dq_acc + lse_row(h, i0 + 8) * p.dqk : NULL;
#pragma unroll
            for (int np = 0; np < DC / 16; np++) {
                const int c16 = cs * (DC / 16) + np;
                if (c16 >= kq) break;
                float acc[2][4] = { { 0.f, 0.f, 0.f, 0.f }, { 0.f, 0.f, 0.f, 0.f } };
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) {
                    uint32_t bb[4];
                    fa_ldmatrix_x4_trans(bb, sK + fa_swz<D>(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8, c16 * 2 + lane / 16));
                    fa_mma(acc[0], a[kk], bb[0], bb[1], T());
                    fa_mma(acc[1], a[kk], bb[2], bb[3], T());
                }
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int c = c16 * 16 + hf * 8 + (lane % 4) * 2;
                    if (c >= p.dqk) continue;
                    if (dq0) { atomicAdd(dq0 + c, acc[hf][0]); atomicAdd(dq0 + c + 1, acc[hf][1]); }
                    if (dq1) { atomicAdd(dq1 + c, acc[hf][2]); atomicAdd(dq1 + c + 1, acc[hf][3]); }
                }
            }
        }
    }
    fa_cp_async_wait_all();

    /* store dK_j (times scale) and dV_j once; keys no query sees get zeros */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int j = n0 + kg * 16 + lane / 4 + 8 * r;
        if (j >= s.sk) continue;
        const int64_t ko = fa_dev_krow(p, s, b, j, hk, pb.dk_sb, pb.dk_ss, pb.dk_sh);
        const int64_t vo = fa_dev_krow(p, s, b, j, hk, pb.dv_sb, pb.dv_ss, pb.dv_sh);
#pragma unroll
        for (int nt = 0; nt < DC / 8; nt++) {
            const int c = cs * DC + nt * 8 + (lane % 4) * 2;
            if (c < p.dqk) {
                const float x0 = dka[nt][2 * r] * scale, x1 = dka[nt][2 * r + 1] * scale;
                if (pb.dk_dtype == FA_CU_F32)
                    *reinterpret_cast<float2 *>(reinterpret_cast<float *>(pb.dk) + ko + c) = make_float2(x0, x1);
                else
                    *reinterpret_cast<uint32_t *>(reinterpret_cast<T *>(pb.dk) + ko + c) = fa_pack2(x0, x1, T());
            }
            if (c < p.dv) {
                const float x0 = dva[nt][2 * r], x1 = dva[nt][2 * r + 1];
                if (pb.dv_dtype == FA_CU_F32)
                    *reinterpret_cast<float2 *>(reinterpret_cast<float *>(pb.dv) + vo + c) = make_float2(x0, x1);
                else
                    *reinterpret_cast<uint32_t *>(reinterpret_cast<T *>(pb.dv) + vo + c) = fa_pack2(x0, x1, T());
            }
        }
    }
}

template <typename T, int D, bool LEAN>
static cudaError_t fa_bwd_launch_k(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st)
{
    typedef fa_bwd_cfg<D> C;
    cudaError_t e = cudaFuncSetAttribute(fa_bwd_kernel<T, D, LEAN>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    e = cudaFuncSetAttribute(fa_bwd_kernel<T, D, LEAN>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (e != cudaSuccess) return e;
    fa_bwd_kernel<T, D, LEAN><<<(unsigned)blocks, C::NT, C::SMEM, st>>>(p);
    return cudaGetLastError();
}

template <typename T, int D>
cudaError_t fa_bwd_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st)
{
    return fa_bwd_lean(p) ? fa_bwd_launch_k<T, D, true>(p, blocks, st) : fa_bwd_launch_k<T, D, false>(p, blocks, st);
}

#define FA_BWD_INSTANTIATE(D) \
    template cudaError_t fa_bwd_launch<__half, D>(const fa_cu_bwd &, int64_t, cudaStream_t); \
    template cudaError_t fa_bwd_launch<__nv_bfloat16, D>(const fa_cu_bwd &, int64_t, cudaStream_t);

#endif /* FA_CUDA_SM80_BACKWARD_CUH */
