/* simt.cuh - fp32 q/k/v computed with fp32 FMA on the CUDA cores, forward and
 * backward, every feature of the sm80 kernels: the fp32 backward, the forward of head-dim
 * class 256, and the forward of classes 64 and 128 where tf32x3.cuh's shared memory does not fit. The forward of classes 64 and 128
 * runs on the tensor cores (tf32x3.cuh); both share fp32/common.cuh.
 *
 * Plain tf32 on the tensor cores keeps 10 mantissa bits of q and k, so a logit of 20 would
 * carry an error of ~0.01 and out ~1% - far outside the fp32 tolerance of the tests (1e-5
 * of max|out|); tf32x3.cuh splits each operand in two to stay inside it.
 *
 * The arithmetic follows the naive fp32 formulas: logits in natural units, P = exp(x - m)
 * (expf, not the SFU's exp2 of a rounded x log2 e), lse = m + log(l), the backward's
 * P = exp(x - lse). Any head dim from 1 to 256 (tiles zero-filled past d), any 4-byte
 * aligned strides (scalar global loads).
 *
 * Tiles live in shared memory row-major with a pitch of D + 4 floats: a quarter-warp
 * reading float4s of 8 consecutive rows then hits 8 different bank groups.
 * Threads: 256, seen as 16 x 16 (ty = tid / 16, tx = tid % 16). A half-warp shares ty, so
 * row reductions over tx are 4 xor-shuffles.
 *
 * Forward (one block = BM = 64 query rows of one (sequence, head) and one KV split; KV tiles
 * of BN = 32 keys): thread (ty, tx) computes S for rows 4ty..4ty+3 and keys tx, tx+16, runs
 * the online softmax for its 4 rows (shuffles over the half-warp), writes P transposed to
 * shared memory, and accumulates O for its 4 rows and columns 64c + 4tx .. +3.
 * Backward (one block = BN = 32 keys of one (sequence, KV head), looping over the query
 * tiles of BQ rows of every head of the group): thread (ty, tx) computes S^T and dP^T for
 * keys 2ty, 2ty+1 and rows tx + 16r, forms P Z and dS into shared memory, then accumulates
 * dV and dK for its 2 keys and columns 64c + 4tx .. +3, and adds dQ for rows
 * ty*RQ.. (RQ = BQ/16) with atomics into the fp32 workspace (one add per element and
 * launch: deterministic=1 runs one launch per KV tile, as the sm80 kernel does).
 */
#ifndef FA_CUDA_FP32_SIMT_CUH
#define FA_CUDA_FP32_SIMT_CUH

#include <math.h>
#include "fp32/common.cuh"

/* ---- forward ------------------------------------------------------------------------ */
template <int D>
__global__ void __launch_bounds__(FA_F32_NT) fa_f32_fwd_kernel(const fa_cu_fwd p)
{
    constexpr int BM = FA_F32_FWD_BM, BN = FA_F32_FWD_BN, LD = D + 4, PL = BM + 4, NC = D / 64;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    float *sQ = reinterpret_cast<float *>(fa_smem);
    float *sK = sQ + BM * LD, *sV = sK + BN * LD, *sP = sV + BN * LD;   /* sP: [key][row] */

    fa_fwd_block fb;
    if (!fa_fwd_block_of<BM, BN>(p, fb)) return;
    const fa_dseq s = fb.s;
    const int b = fb.b, h = fb.h, hk = fb.hk, split = fb.split, m0 = fb.m0;
    const int nb_lo = fb.nb_lo, nb_hi = fb.nb_hi, full_lo = fb.full_lo, full_hi = fb.full_hi;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

    const float *qbase = reinterpret_cast<const float *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
    const float *kbase = reinterpret_cast<const float *>(p.k), *vbase = reinterpret_cast<const float *>(p.v);
    fa_f32_load<BM, D, LD>(sQ, s.sq - m0, p.dqk, [&](int r) { return qbase + (int64_t)r * p.q_ss; });

    float4 oacc[4][NC];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < NC; c++) oacc[i][c] = make_float4(0.f, 0.f, 0.f, 0.f);
    float rmax[4], rsum[4];
#pragma unroll
    for (int i = 0; i < 4; i++) { rmax[i] = -INFINITY; rsum[i] = 0.f; }
    const float slope = p.alibi ? p.alibi[h] : 0.f;
    const int kq4 = (p.dqk + 3) / 4;

    for (int nb = nb_lo; nb < nb_hi; nb++) {
        const int n0 = nb * BN, nval = min(BN, s.sk - n0);
        __syncthreads();   /* the previous tile's K, V and P are no longer read */
        fa_f32_load<BN, D, LD>(sK, nval, p.dqk, [&](int r) {
            return kbase + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh);
        });
        fa_f32_load<BN, D, LD>(sV, nval, p.dv, [&](int r) {
            return vbase + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh);
        });
        __syncthreads();

        float sc[4][2];
#pragma unroll
        for (int i = 0; i < 4; i++) sc[i][0] = sc[i][1] = 0.f;
#pragma unroll 4
        for (int c4 = 0; c4 < kq4; c4++) {
            float4 qv[4], kv[2];
#pragma unroll
            for (int i = 0; i < 4; i++) qv[i] = *reinterpret_cast<const float4 *>(sQ + (ty * 4 + i) * LD + 4 * c4);
#pragma unroll
            for (int jj = 0; jj < 2; jj++) kv[jj] = *reinterpret_cast<const float4 *>(sK + (tx + 16 * jj) * LD + 4 * c4);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int jj = 0; jj < 2; jj++) sc[i][jj] = fa_f32_dot4(sc[i][jj], qv[i], kv[jj]);
        }

        const bool need_mask = n0 < full_lo || n0 + BN > full_hi;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int qi = m0 + ty * 4 + i;
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                const int j = n0 + tx + 16 * jj;
                float td;
                float x = fa_dev_score(p, s, b, h, qi, j, sc[i][jj] * p.scale, slope, td);
                if (need_mask && !fa_dev_visible(p, s, qi, j)) x = -INFINITY;
                sc[i][jj] = x;
            }
            /* online softmax over the half-warp that holds the row */
            float mx = fmaxf(sc[i][0], sc[i][1]);
#pragma unroll
            for (int o = 1; o < 16; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mnew = fmaxf(rmax[i], mx);
            const float ms = mnew == -INFINITY ? 0.f : mnew;
            const float alpha = expf(rmax[i] - ms);
            rmax[i] = mnew;
            const float p0 = expf(sc[i][0] - ms), p1 = expf(sc[i][1] - ms);
            float sum = p0 + p1;
#pragma unroll
            for (int o = 1; o < 16; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            rsum[i] = rsum[i] * alpha + sum;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                oacc[i][c].x *= alpha; oacc[i][c].y *= alpha; oacc[i][c].z *= alpha; oacc[i][c].w *= alpha;
            }
            sc[i][0] = p0; sc[i][1] = p1;
            if (p.dropout_p > 0.f) {   /* after the sum: l counts every key (as in every backend) */
#pragma unroll
                for (int jj = 0; jj < 2; jj++)
                    if (fa_f32_keep(p, s, b, h, qi, n0 + tx + 16 * jj) == 0.f) sc[i][jj] = 0.f;
            }
        }
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
            *reinterpret_cast<float4 *>(sP + (tx + 16 * jj) * PL + ty * 4) = make_float4(sc[0][jj], sc[1][jj], sc[2][jj], sc[3][jj]);
        __syncthreads();

        /* O += P V over the tile's valid keys */
#pragma unroll 2
        for (int j = 0; j < nval; j++) {
            const float4 pv = *reinterpret_cast<const float4 *>(sP + j * PL + ty * 4);
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const float4 vv = *reinterpret_cast<const float4 *>(sV + j * LD + 64 * c + 4 * tx);
                fa_f32_axpy4(oacc[0][c], pv.x, vv);
                fa_f32_axpy4(oacc[1][c], pv.y, vv);
                fa_f32_axpy4(oacc[2][c], pv.z, vv);
                fa_f32_axpy4(oacc[3][c], pv.w, vv);
            }
        }
    }

    /* epilogue: sinks, normalisation, one write of O and LSE (or the split's fp32 part) */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int qi = m0 + ty * 4 + i;
        if (qi >= s.sq) continue;
        const fa_f32_row_end r = fa_f32_end_row(p, s, b, h, split, qi, rsum[i], rmax[i]);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int c0 = 64 * c + 4 * tx;
            const float x[4] = { oacc[i][c].x * r.fac, oacc[i][c].y * r.fac, oacc[i][c].z * r.fac, oacc[i][c].w * r.fac };
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (c0 + e < p.dv) fa_st_any(r.op, r.odt, r.orow + c0 + e, x[e]);
        }
        if (tx == 0) fa_f32_store_lse(p, r);
    }
}

/* ---- backward ----------------------------------------------------------------------- */
template <int D>
__global__ void __launch_bounds__(FA_F32_NT) fa_f32_bwd_kernel(const fa_cu_bwd pb)
{
    constexpr int BN = FA_F32_BWD_BN, BQ = D >= 128 ? 32 : 64 /* = fa_f32_bwd_bq(D) */, LD = D + 4, PL = BQ + 4, NC = D / 64, RQ = BQ / 16;
    const fa_cu_fwd &p = pb.f;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    float *sK = reinterpret_cast<float *>(fa_smem);
    float *sV = sK + BN * LD, *sQ = sV + BN * LD, *sdO = sQ + BQ * LD;
    float *sPz = sdO + BQ * LD, *sdS = sPz + BN * PL;   /* [key][row] */
    float *sL = sdS + BN * PL, *sDs = sL + BQ;

    fa_bwd_block kb;
    if (!fa_bwd_block_of<BN, BQ>(pb, kb)) return;
    const fa_dseq s = kb.s;
    const int b = kb.b, hk = kb.hk, n0 = kb.n0, mt_lo = kb.mt_lo, nq = kb.nq, iters = kb.iters;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int G = p.group;

    const float *kbase = reinterpret_cast<const float *>(p.k), *vbase = reinterpret_cast<const float *>(p.v);
    const int nval = min(BN, s.sk - n0);
    fa_f32_load<BN, D, LD>(sK, nval, p.dqk, [&](int r) {
        return kbase + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh);
    });
    fa_f32_load<BN, D, LD>(sV, nval, p.dv, [&](int r) {
        return vbase + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh);
    });
    auto lse_row = [&](int h, int i) -> int64_t {
        return fa_lse_row(p, s, b, h, i);
    };

    float4 dka[2][NC], dva[2][NC];
#pragma unroll
    for (int jj = 0; jj < 2; jj++)
#pragma unroll
        for (int c = 0; c < NC; c++) dka[jj][c] = dva[jj][c] = make_float4(0.f, 0.f, 0.f, 0.f);
    const int kq4 = (p.dqk + 3) / 4, kv4 = (p.dv + 3) / 4;

    for (int it = 0; it < iters; it++) {
        const int h = hk * G + it / nq, m0 = (mt_lo + it % nq) * BQ, nr = min(BQ, s.sq - m0);
        const float *qb = reinterpret_cast<const float *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
        const float *ob = reinterpret_cast<const float *>(pb.dout) + s.tb * pb.do_sb + (s.q0 + m0) * pb.do_ss + (int64_t)h * pb.do_sh;
        __syncthreads();   /* the previous query tile is no longer read */
        fa_f32_load<BQ, D, LD>(sQ, nr, p.dqk, [&](int r) { return qb + (int64_t)r * p.q_ss; });
        fa_f32_load<BQ, D, LD>(sdO, nr, p.dv, [&](int r) { return ob + (int64_t)r * pb.do_ss; });
        for (int r = threadIdx.x; r < BQ; r += FA_F32_NT) {
            float l = INFINITY, d = 0.f;   /* rows past the sequence: P = 0 */
            if (r < nr) {
                const int64_t li = lse_row(h, m0 + r);
                l = p.lse[li];
                d = pb.dsum[li];
                if (l == -INFINITY) l = INFINITY;   /* fully masked row: P = 0, no gradient */
            }
            sL[r] = l;
            sDs[r] = d;
        }
        __syncthreads();

        /* S^T and dP^T for keys 2ty, 2ty+1 and rows tx + 16r */
        float sc[2][RQ], dp[2][RQ];
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
            for (int r = 0; r < RQ; r++) sc[jj][r] = dp[jj][r] = 0.f;
#pragma unroll 4
        for (int c4 = 0; c4 < kq4; c4++) {
            float4 kv[2], qv[RQ];
#pragma unroll
            for (int jj = 0; jj < 2; jj++) kv[jj] = *reinterpret_cast<const float4 *>(sK + (2 * ty + jj) * LD + 4 * c4);
#pragma unroll
            for (int r = 0; r < RQ; r++) qv[r] = *reinterpret_cast<const float4 *>(sQ + (tx + 16 * r) * LD + 4 * c4);
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
#pragma unroll
                for (int r = 0; r < RQ; r++) sc[jj][r] = fa_f32_dot4(sc[jj][r], kv[jj], qv[r]);
        }
#pragma unroll 4
        for (int c4 = 0; c4 < kv4; c4++) {
            float4 vv[2], ov[RQ];
#pragma unroll
            for (int jj = 0; jj < 2; jj++) vv[jj] = *reinterpret_cast<const float4 *>(sV + (2 * ty + jj) * LD + 4 * c4);
#pragma unroll
            for (int r = 0; r < RQ; r++) ov[r] = *reinterpret_cast<const float4 *>(sdO + (tx + 16 * r) * LD + 4 * c4);
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
#pragma unroll
                for (int r = 0; r < RQ; r++) dp[jj][r] = fa_f32_dot4(dp[jj][r], vv[jj], ov[r]);
        }

        /* per element: P = exp(x - lse), Z (dropout), dS = P (dP Z - D) tanh' */
        const float slope = p.alibi ? p.alibi[h] : 0.f;
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
            for (int r = 0; r < RQ; r++) {
                const int kl = 2 * ty + jj, rl = tx + 16 * r, j = n0 + kl, i = m0 + rl;
                float td;
                const float x = fa_dev_score(p, s, b, h, i, j, sc[jj][r] * p.scale, slope, td);
                const float P = fa_dev_visible(p, s, i, j) ? expf(x - sL[rl]) : 0.f;
                const float z = p.dropout_p > 0.f ? fa_f32_keep(p, s, b, h, i, j) : 1.f;
                sPz[kl * PL + rl] = P * z;
                sdS[kl * PL + rl] = P * (dp[jj][r] * z - sDs[rl]) * td;
            }
        __syncthreads();

        /* dV += (P Z)^T dO and dK += dS^T Q: keys 2ty, 2ty+1, columns 64c + 4tx.. */
#pragma unroll 2
        for (int r = 0; r < nr; r++) {
            const float pz0 = sPz[(2 * ty) * PL + r], pz1 = sPz[(2 * ty + 1) * PL + r];
            const float ds0 = sdS[(2 * ty) * PL + r], ds1 = sdS[(2 * ty + 1) * PL + r];
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const float4 ov = *reinterpret_cast<const float4 *>(sdO + r * LD + 64 * c + 4 * tx);
                const float4 qv = *reinterpret_cast<const float4 *>(sQ + r * LD + 64 * c + 4 * tx);
                fa_f32_axpy4(dva[0][c], pz0, ov);
                fa_f32_axpy4(dva[1][c], pz1, ov);
                fa_f32_axpy4(dka[0][c], ds0, qv);
                fa_f32_axpy4(dka[1][c], ds1, qv);
            }
        }

        /* dQ_i += dS K_j for rows ty*RQ.., columns 64c + 4tx.., added into the workspace */
        if (pb.dq_acc) {
            float4 acc[RQ][NC];
#pragma unroll
            for (int r = 0; r < RQ; r++)
#pragma unroll
                for (int c = 0; c < NC; c++) acc[r][c] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 2
            for (int j = 0; j < nval; j++) {
                float ds[RQ];
#pragma unroll
                for (int r = 0; r < RQ; r++) ds[r] = sdS[j * PL + ty * RQ + r];
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const float4 kv = *reinterpret_cast<const float4 *>(sK + j * LD + 64 * c + 4 * tx);
#pragma unroll
                    for (int r = 0; r < RQ; r++) fa_f32_axpy4(acc[r][c], ds[r], kv);
                }
            }
#pragma unroll
            for (int r = 0; r < RQ; r++) {
                const int rl = ty * RQ + r;
                if (rl >= nr) continue;
                float *dq = pb.dq_acc + lse_row(h, m0 + rl) * p.dqk;
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const int c0 = 64 * c + 4 * tx;
                    const float x[4] = { acc[r][c].x, acc[r][c].y, acc[r][c].z, acc[r][c].w };
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (c0 + e < p.dqk) atomicAdd(dq + c0 + e, x[e]);
                }
            }
        }
    }

    /* store dK (times scale) and dV once; keys no query sees get zeros */
#pragma unroll
    for (int jj = 0; jj < 2; jj++) {
        const int j = n0 + 2 * ty + jj;
        if (j >= s.sk) continue;
        const int64_t ko = fa_dev_krow(p, s, b, j, hk, pb.dk_sb, pb.dk_ss, pb.dk_sh);
        const int64_t vo = fa_dev_krow(p, s, b, j, hk, pb.dv_sb, pb.dv_ss, pb.dv_sh);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int c0 = 64 * c + 4 * tx;
            const float xk[4] = { dka[jj][c].x, dka[jj][c].y, dka[jj][c].z, dka[jj][c].w };
            const float xv[4] = { dva[jj][c].x, dva[jj][c].y, dva[jj][c].z, dva[jj][c].w };
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (c0 + e < p.dqk) fa_st_any(pb.dk, pb.dk_dtype, ko + c0 + e, xk[e] * p.scale);
                if (c0 + e < p.dv) fa_st_any(pb.dv, pb.dv_dtype, vo + c0 + e, xv[e]);
            }
        }
    }
}

template <int D>
cudaError_t fa_f32_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st)
{
    const int smem = fa_f32_fwd_smem(D);
    cudaError_t e = cudaFuncSetAttribute(fa_f32_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    fa_f32_fwd_kernel<D><<<(unsigned)blocks, FA_F32_NT, smem, st>>>(p);
    return cudaGetLastError();
}

template <int D>
cudaError_t fa_f32_bwd_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st)
{
    const int smem = fa_f32_bwd_smem(D);
    cudaError_t e = cudaFuncSetAttribute(fa_f32_bwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    fa_f32_bwd_kernel<D><<<(unsigned)blocks, FA_F32_NT, smem, st>>>(p);
    return cudaGetLastError();
}

#define FA_F32_FWD_INSTANTIATE(D) template cudaError_t fa_f32_fwd_launch<D>(const fa_cu_fwd &, int64_t, cudaStream_t);
#define FA_F32_BWD_INSTANTIATE(D) template cudaError_t fa_f32_bwd_launch<D>(const fa_cu_bwd &, int64_t, cudaStream_t);

#endif /* FA_CUDA_FP32_SIMT_CUH */
