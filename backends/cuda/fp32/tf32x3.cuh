/* tf32x3.cuh - the fp32 forward on the tensor cores: each fp32 operand x is split into
 * big = tf32(x) (rounded to nearest, 10 mantissa bits) and small = tf32(x - big), and every
 * product a b is taken as big_a big_b + big_a small_b + small_a big_b (three mma.sync
 * m16n8k8 tf32 with fp32 accumulation; the dropped small_a small_b is ~2^-22 of |a b|).
 * That keeps the tests' fp32 tolerance (1e-5 of max|out|) where plain tf32 would not.
 *
 * How the products are summed matters as much as the split. An m16n8k8 tf32 mma (H100/H200)
 * does not round its sum to nearest: it aligns the 8 exact products and the accumulator to
 * the largest exponent, keeps two bits below fp32's 24 (a model with these numbers
 * reproduces the H200's errors to two digits), and truncates the result toward zero. Each mma into a running accumulator so moves
 * it towards zero by up to an ulp of the accumulator, always the same way. Taking all three
 * products of every k-step into the score accumulator (48 such truncations for d 128) gave
 * scores, and so lse, off by up to ~1.2 of the fp32 rule's bound (a single key: lse is the
 * score). So S = Q K^T takes each k-step's three products into a zeroed fragment, cross
 * products first (they are ~2^-11 of the big one: their own truncations are negligible),
 * and adds that fragment to the running score with an fp32 add, which rounds to nearest:
 * the truncations then happen at the size of one k-step's 8 products, not of the whole
 * dot product, and the adds' roundings do not all lean one way. Cost: 4 fp32 adds per
 * k-step and 8-key tile of S (+3 % instructions at d 128), 4 registers. O += P V keeps one
 * accumulator: a k-step is 8 keys and P <= 1, so its error stays well inside out's bound.
 *
 * The split is three plain instructions (fa_tf32_split).
 * Layout (head-dim classes 64 and 128; 256 runs simt.cuh): one block = 128 query rows
 * of one (sequence, head) and one KV split, 8 warps x 16 rows; KV tiles of 32 keys.
 * Shared memory holds Q [128][D+8], K [32][D+8] and V [32][D+4] as fp32 (pitches chosen
 * so that the fragment loads below fall in different banks); operands
 * are split as they are loaded into fragments. K and V arrive by cp.async, each copy
 * overlapping the other tensor's product.
 * m16n8k8 fragments (g = lane / 4, t = lane % 4): A a0 (g, t) a1 (g+8, t) a2 (g, t+4)
 * a3 (g+8, t+4); B b0 (k t, n g) b1 (k t+4, n g); C c0 c1 (g, 2t..2t+1) c2 c3 (g+8, ..).
 * S's C fragment becomes P V's A fragment without any exchange by reading the 8 keys of a
 * k-step in the order 0 2 4 6 1 3 5 7: A column t is key 2t, column t+4 key 2t+1, so
 * a0 = c0, a1 = c2, a2 = c1, a3 = c3, and V's B fragment takes rows 2t and 2t+1.
 * The score pipeline, the online softmax (natural units, expf), dropout, sinks and the
 * epilogue are fp32/common.cuh's and problem.cuh's, per element.
 */
#ifndef FA_CUDA_FP32_TF32X3_CUH
#define FA_CUDA_FP32_TF32X3_CUH

#include "fp32/common.cuh"

/* x = big + small: big = x rounded to tf32 (half an ulp added to the bits, the 13 low bits
   cleared: ties away from zero), small = x - big exactly (fp32). The tensor cores read tf32
   operands from the top 19 bits of the register, so small enters the product truncated to
   tf32 (at most 2^-10 of |small| <= 2^-21 |x| lost). Three full-rate integer/fp32
   instructions; cvt.rna.tf32.f32 twice cost more issue slots and (ncu, d128 S8k) left the
   warps stalled on its latency. */
__device__ __forceinline__ void fa_tf32_split(float x, uint32_t &big, uint32_t &small)
{
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big));
}

/* Asynchronous copy (cp.async) of rows [0, R) x columns [0, D) into a tile of pitch LD
   floats, by NT threads; rows >= nvalid and columns >= ncols are zero-filled. vec: 16-byte
   copies (rows 16-byte aligned and ncols a multiple of 4: fa_cu_fwd.f32_vec), else 4-byte
   ones. safe: any valid global address (the source operand of a zero-fill). */
template <int R, int D, int LD, int NT, typename RowFn>
__device__ __forceinline__ void fa_f32_load_async(float *dst, int nvalid, int ncols, bool vec, const float *safe,
                                                  RowFn rowptr)
{
    if (vec) {
        constexpr int C4 = D / 4;
        for (int idx = threadIdx.x; idx < R * C4; idx += NT) {
            const int r = idx / C4, c = (idx % C4) * 4;
            const bool ok = r < nvalid && c < ncols;
            fa_cp_async16(dst + r * LD + c, ok ? rowptr(r) + c : safe, ok ? 16 : 0);
        }
    } else {
        for (int idx = threadIdx.x; idx < R * D; idx += NT) {
            const int r = idx / D, c = idx % D;
            const bool ok = r < nvalid && c < ncols;
            fa_cp_async4(dst + r * LD + c, ok ? rowptr(r) + c : safe, ok ? 4 : 0);
        }
    }
}

template <int D>
__global__ void __launch_bounds__(FA_TF32_NT, 2) fa_tf32_fwd_kernel(const fa_cu_fwd p)
{
    constexpr int BM = FA_TF32_FWD_BM, BN = FA_TF32_FWD_BN, LD = D + 8, LDV = D + 4, NT = BN / 8;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    float *sQ = reinterpret_cast<float *>(fa_smem);
    float *sK = sQ + BM * LD, *sV = sK + BN * LD;   /* sV: pitch LDV */

    fa_fwd_block fb;
    if (!fa_fwd_block_of<BM, BN>(p, fb)) return;
    const fa_dseq s = fb.s;
    const int b = fb.b, h = fb.h, hk = fb.hk, split = fb.split, m0 = fb.m0;
    const int nb_lo = fb.nb_lo, nb_hi = fb.nb_hi, full_lo = fb.full_lo, full_hi = fb.full_hi;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

    const float *qbase = reinterpret_cast<const float *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
    const float *kbase = reinterpret_cast<const float *>(p.k), *vbase = reinterpret_cast<const float *>(p.v);
    fa_f32_load<BM, D, LD, FA_TF32_NT>(sQ, s.sq - m0, p.dqk, [&](int r) { return qbase + (int64_t)r * p.q_ss; });

    float oacc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
    float rmax[2] = { -INFINITY, -INFINITY }, rsum[2] = { 0.f, 0.f };
    const int qi[2] = { m0 + warp * 16 + g, m0 + warp * 16 + g + 8 };
    const float *q0 = sQ + (warp * 16 + g) * LD, *q1 = q0 + 8 * LD;
    const float slope = p.alibi ? p.alibi[h] : 0.f;
    const int kq = (p.dqk + 7) / 8, kv = (p.dv + 7) / 8;

    /* K and V tiles stream through single buffers, FlashAttention-2's way: V(n) is copied
       while S(n) = Q K(n)^T is computed, K(n+1) while the softmax and P V(n) run. Every
       step commits one cp.async group (empty ones included), so "wait_group 1" always
       means "all but the newest". */
    auto load_k = [&](int nb) {
        const int n0 = nb * BN;
        fa_f32_load_async<BN, D, LD, FA_TF32_NT>(sK, min(BN, s.sk - n0), p.dqk, p.f32_vec, kbase, [&](int r) {
            return kbase + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh);
        });
    };
    auto load_v = [&](int nb) {
        const int n0 = nb * BN;
        fa_f32_load_async<BN, D, LDV, FA_TF32_NT>(sV, min(BN, s.sk - n0), p.dv, p.f32_vec, vbase, [&](int r) {
            return vbase + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh);
        });
    };
    if (nb_lo < nb_hi) load_k(nb_lo);
    fa_cp_async_commit();

    for (int nb = nb_lo; nb < nb_hi; nb++) {
        const int n0 = nb * BN, nval = min(BN, s.sk - n0);
        load_v(nb);                 /* the previous P V finished with sV (barrier at its end) */
        fa_cp_async_commit();
        asm volatile("cp.async.wait_group 1;\n" ::);   /* K(nb) has landed */
        __syncthreads();

        /* S = Q K^T: 16 rows x 32 keys per warp */
        float sacc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < D / 8; ks++) {
            if (ks >= kq) break;
            /* the k-step's 8 columns in the order 0 2 4 6 1 3 5 7 (A column t = column 2t,
               t+4 = 2t+1; B likewise): each lane's two values of a row are adjacent, one
               64-bit load (pitch D+8: the 32 lanes' pairs fill the 32 banks twice) */
            const int c = ks * 8 + 2 * t;
            const float2 qa = *reinterpret_cast<const float2 *>(q0 + c), qb = *reinterpret_cast<const float2 *>(q1 + c);
            const float a[4] = { qa.x, qb.x, qa.y, qb.y };
            uint32_t ab[4], as[4];
#pragma unroll
            for (int e = 0; e < 4; e++) fa_tf32_split(a[e], ab[e], as[e]);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float2 kr = *reinterpret_cast<const float2 *>(sK + (nt * 8 + g) * LD + c);
                uint32_t bb0, bs0, bb1, bs1;
                fa_tf32_split(kr.x, bb0, bs0);
                fa_tf32_split(kr.y, bb1, bs1);
                float st[4] = { 0.f, 0.f, 0.f, 0.f };   /* this k-step's part (see the top) */
                fa_mma_tf32(st, as, bb0, bb1);
                fa_mma_tf32(st, ab, bs0, bs1);
                fa_mma_tf32(st, ab, bb0, bb1);
#pragma unroll
                for (int e = 0; e < 4; e++) sacc[nt][e] += st[e];
            }
        }

        __syncthreads();            /* every warp is done with sK */
        if (nb + 1 < nb_hi) load_k(nb + 1);
        fa_cp_async_commit();

        /* scores -> logits, masked; online softmax over the quad that holds a row */
        const bool need_mask = n0 < full_lo || n0 + BN > full_hi;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = qi[e / 2], j = n0 + nt * 8 + 2 * t + (e & 1);
                float td;
                float x = fa_dev_score(p, s, b, h, i, j, sacc[nt][e] * p.scale, slope, td);
                if (need_mask && !fa_dev_visible(p, s, i, j)) x = -INFINITY;
                sacc[nt][e] = x;
            }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = rmax[r];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(sacc[nt][2 * r], sacc[nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == -INFINITY ? 0.f : mx;
            alpha[r] = expf(rmax[r] - ms);
            rmax[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                sacc[nt][2 * r] = expf(sacc[nt][2 * r] - ms);
                sacc[nt][2 * r + 1] = expf(sacc[nt][2 * r + 1] - ms);
                sum += sacc[nt][2 * r] + sacc[nt][2 * r + 1];
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            rsum[r] = rsum[r] * alpha[r] + sum;
        }
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            oacc[i][0] *= alpha[0]; oacc[i][1] *= alpha[0];
            oacc[i][2] *= alpha[1]; oacc[i][3] *= alpha[1];
        }
        if (p.dropout_p > 0.f) {   /* after the sum: l counts every key (as in every backend) */
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (fa_f32_keep(p, s, b, h, qi[e / 2], n0 + nt * 8 + 2 * t + (e & 1)) == 0.f) sacc[nt][e] = 0.f;
        }

        asm volatile("cp.async.wait_group 1;\n" ::);   /* V(nb) has landed */
        __syncthreads();

        /* O += P V: k-step ks = keys 8ks.. in the order 0 2 4 6 1 3 5 7 (see the top) */
#pragma unroll
        for (int ks = 0; ks < NT; ks++) {
            if (ks * 8 >= nval) break;
            const float a[4] = { sacc[ks][0], sacc[ks][2], sacc[ks][1], sacc[ks][3] };
            uint32_t ab[4], as[4];
#pragma unroll
            for (int e = 0; e < 4; e++) fa_tf32_split(a[e], ab[e], as[e]);
            const float *v0 = sV + (ks * 8 + 2 * t) * LDV + g, *v1 = v0 + LDV;
#pragma unroll
            for (int nt = 0; nt < D / 8; nt++) {
                if (nt >= kv) break;
                uint32_t bb0, bs0, bb1, bs1;
                fa_tf32_split(v0[nt * 8], bb0, bs0);
                fa_tf32_split(v1[nt * 8], bb1, bs1);
                fa_mma_tf32(oacc[nt], as, bb0, bb1);
                fa_mma_tf32(oacc[nt], ab, bs0, bs1);
                fa_mma_tf32(oacc[nt], ab, bb0, bb1);
            }
        }
        __syncthreads();            /* every warp is done with sV */
    }
    fa_cp_async_wait_all();

    /* epilogue (fp32/common.cuh's fa_f32_end_row): sinks, normalisation, one write of O and LSE */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = qi[r];
        if (i >= s.sq) continue;
        const fa_f32_row_end e = fa_f32_end_row(p, s, b, h, split, i, rsum[r], rmax[r]);
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            const int c = nt * 8 + 2 * t;
            if (c < p.dv) fa_st_any(e.op, e.odt, e.orow + c, oacc[nt][2 * r] * e.fac);
            if (c + 1 < p.dv) fa_st_any(e.op, e.odt, e.orow + c + 1, oacc[nt][2 * r + 1] * e.fac);
        }
        if (t == 0) fa_f32_store_lse(p, e);
    }
}

template <int D>
cudaError_t fa_tf32_fwd_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st)
{
    const int smem = fa_tf32_fwd_smem(D);
    cudaError_t e = cudaFuncSetAttribute(fa_tf32_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    fa_tf32_fwd_kernel<D><<<(unsigned)blocks, FA_TF32_NT, smem, st>>>(p);
    return cudaGetLastError();
}

#define FA_TF32_FWD_INSTANTIATE(D) template cudaError_t fa_tf32_fwd_launch<D>(const fa_cu_fwd &, int64_t, cudaStream_t);

#endif /* FA_CUDA_FP32_TF32X3_CUH */
