/* problem.cuh - lib/problem.h on the device, shared by every kernel: dtype conversions,
 * the per-sequence view (fa_problem_seq), key rows (fa_krow), lse rows (fa_lse_index), the
 * score pipeline (fa_softcap, fa_alibi, bias) and the mask (fa_visible), the end of a
 * softmax row (sinks, lse) and its one write, and which (sequence, head, rows or keys) a
 * block works on.
 *
 * problem.h reads index arrays through host pointers; here the same arrays are device
 * memory, and their contents are clamped so that bad contents can never move an access
 * outside the tensors (the API leaves their checking to FA_DEBUG=1, but out-of-range
 * contents must never become out-of-bounds accesses).
 */
#ifndef FA_CUDA_PROBLEM_CUH
#define FA_CUDA_PROBLEM_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>
#include "params.h"
#include "device/ptx.cuh"

#define FA_LOG2E 1.4426950408889634f
#define FA_LN2   0.6931471805599453f

/* ---- storage types ------------------------------------------------------------------ */
template <typename T> struct fa_vec2;
template <> struct fa_vec2<__half> { typedef __half2 type; };
template <> struct fa_vec2<__nv_bfloat16> { typedef __nv_bfloat162 type; };

__device__ __forceinline__ uint32_t fa_pack2(float a, float b, __half)
{
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ uint32_t fa_pack2(float a, float b, __nv_bfloat16)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* Load one element of any storage dtype as fp32 (bias, combine parts). */
__device__ __forceinline__ float fa_ld_any(const void *base, int dtype, int64_t idx)
{
    if (dtype == FA_CU_F16) return __half2float(reinterpret_cast<const __half *>(base)[idx]);
    if (dtype == FA_CU_BF16)
        return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(base)[idx]);
    return reinterpret_cast<const float *>(base)[idx];
}
__device__ __forceinline__ void fa_st_any(void *base, int dtype, int64_t idx, float x)
{
    if (dtype == FA_CU_F16) reinterpret_cast<__half *>(base)[idx] = __float2half_rn(x);
    else if (dtype == FA_CU_BF16)
        reinterpret_cast<__nv_bfloat16 *>(base)[idx] = __float2bfloat16_rn(x);
    else reinterpret_cast<float *>(base)[idx] = x;
}

/* ---- the sequence view (problem.h's fa_problem_seq, on the device) -------------------- */
struct fa_dseq {
    int64_t tb, q0, k0;
    int sq, sk, off, drop_i0;
};

__device__ __forceinline__ int fa_clampi(int x, int lo, int hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

__device__ __forceinline__ fa_dseq fa_dev_seq(const fa_cu_fwd &p, int b)
{
    fa_dseq s;
    s.tb = b; s.q0 = 0; s.k0 = 0; s.drop_i0 = 0;
    if (p.layout == FA_CU_VARLEN) {
        s.tb = 0;
        int q0 = fa_clampi(p.cu_q[b], 0, p.total_q), q1 = fa_clampi(p.cu_q[b + 1], q0, p.total_q);
        int k0 = fa_clampi(p.cu_k[b], 0, p.total_k), k1 = fa_clampi(p.cu_k[b + 1], k0, p.total_k);
        s.q0 = q0; s.sq = q1 - q0; s.k0 = k0; s.sk = k1 - k0;
    } else if (p.layout == FA_CU_KVCACHE) {
        int c = fa_clampi(p.cache_seqlens[b], 0, p.cache_cap - p.s_new);
        s.sq = p.sq; s.sk = c + p.s_new; s.drop_i0 = c;
    } else {
        s.sq = p.sq; s.sk = p.sk;
    }
    s.off = p.top_left ? 0 : s.sk - s.sq;
    return s;
}

/* Element offset of key row j of KV head hk in a key-side tensor (paged aware). */
__device__ __forceinline__ int64_t fa_dev_krow(const fa_cu_fwd &p, const fa_dseq &s, int b, int j,
                                               int hk, int64_t sb, int64_t ss, int64_t sh)
{
    if (p.block_table) {
        int pg = p.block_table[(int64_t)b * p.max_pages + j / p.page_size];
        pg = fa_clampi(pg, 0, p.num_pages - 1);
        return (int64_t)pg * sb + (int64_t)(j % p.page_size) * ss + (int64_t)hk * sh;
    }
    return s.tb * sb + (s.k0 + j) * ss + (int64_t)hk * sh;
}

/* Row of query i of head h in the lse layout (lse, the backward's D_i and fp32 dQ
   workspace): head-major over all tokens for varlen, [b][h][i] otherwise. */
__device__ __forceinline__ int64_t fa_lse_row(const fa_cu_fwd &p, const fa_dseq &s, int b, int h, int i)
{
    return p.layout == FA_CU_VARLEN ? (int64_t)h * p.total_q + s.q0 + i : ((int64_t)b * p.hq + h) * p.sq + i;
}

/* ---- the score pipeline and the mask ----------------------------------------------------- */
/* problem.h's score pipeline after the scaled product x = scale q.k of query row i and key
   j (within the sequence) of head h: softcap (fa_softcap), ALiBi (fa_alibi; slope =
   alibi[h]), bias (fa_bias_index); tder = d softcap(x) / dx (1 without softcap), for the
   backward. FEATURES = false (the lean instantiations): none of the three, x as it is. */
template <bool FEATURES = true>
__device__ __forceinline__ float fa_dev_score(const fa_cu_fwd &p, const fa_dseq &s, int b, int h, int i, int j, float x,
                                              float slope, float &tder)
{
    tder = 1.f;
    if (!FEATURES) return x;
    if (p.softcap > 0.f) {
        const float t = tanhf(x / p.softcap);
        x = p.softcap * t;
        tder = 1.f - t * t;
    }
    if (p.alibi) x -= slope * fabsf((float)(i + s.off - j));
    if (p.bias && i < s.sq && j < s.sk)
        x += fa_ld_any(p.bias, p.bias_dtype, (int64_t)b * p.bias_sb + (int64_t)i * p.bias_ss + (int64_t)h * p.bias_sh + j);
    return x;
}

/* Is key j visible to query row i (problem.h's fa_visible, and j before the sequence end)? */
__device__ __forceinline__ bool fa_dev_visible(const fa_cu_fwd &p, const fa_dseq &s, int i, int j)
{
    const int pos = i + s.off;
    return j < s.sk && (p.window_left < 0 || j >= pos - p.window_left) && (p.window_right < 0 || j <= pos + p.window_right);
}

/* ---- the end of a row -------------------------------------------------------------------- */
/* The end of one query row's online softmax in the mma fragment layouts (a row lives in the
   4 lanes of a quad): the quad's partial sums added up, the sink (when the call has one
   and is not split), then fac (what O's row is multiplied by) and lse; NaN in both when the
   row saw one, fac 0 and lse -inf when it saw no key. m = the running max (base 2, scaled),
   l = this thread's partial sum. */
__device__ __forceinline__ void fa_row_end(const fa_cu_fwd &p, int h, float m, float l, float &fac, float &lse)
{
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (p.sinks && p.n_splits == 1) {
        const float sk2 = p.sinks[h] * FA_LOG2E;
        const float M = fmaxf(m, sk2);
        const float em = m == -INFINITY ? 0.f : fa_exp2(m - M);
        l = l * em + fa_exp2(sk2 - M);
        fac = em / l;
        /* a row that saw no key: lse is the sink logit itself, not its round trip
           through base 2 */
        lse = m == -INFINITY ? p.sinks[h] : M * FA_LN2 + logf(l);
    } else if (m == -INFINITY || l == 0.f) {
        fac = 0.f;
        lse = -INFINITY;
    } else {
        fac = 1.f / l;
        lse = m * FA_LN2 + logf(l);
    }
    if (m != m || l != l) { fac = __int_as_float(0x7fc00000); lse = fac; }
}

/* The one write of two query rows, row0 and row0 + 8, of O and their lse (or, split-KV, of
   this split's fp32 part and lse part). acc is the rows' O accumulator in the m16n8 C
   fragment layout, flat: element 4 nt + 2 r + e is column nt * 8 + (lane % 4) * 2 + e of
   row row0 + 8 r; fac and lse come from fa_row_end. Rows past the sequence are not
   written. */
template <typename T, int D>
__device__ __forceinline__ void fa_store_rows(const fa_cu_fwd &p, const fa_dseq &s, int b, int h, int split,
                                              const float *acc, const float (&fac)[2], const float (&lse)[2], int row0)
{
    const int lane = threadIdx.x % 32;
    if (p.n_splits > 1) {
        /* fp32 partial [split][(b*H + h)*Sq + i][dv] (dense and kvcache layouts only) */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = row0 + r * 8;
            if (i >= s.sq) continue;
            const int64_t row = ((int64_t)b * p.hq + h) * p.sq + i;
            const int64_t rows = (int64_t)p.batch * p.hq * p.sq;
            float *o = p.o_part + ((int64_t)split * rows + row) * p.dv;
#pragma unroll
            for (int nt = 0; nt < D / 8; nt++) {
                const int c = nt * 8 + (lane % 4) * 2;
                if (c < p.dv)
                    *reinterpret_cast<float2 *>(o + c) =
                        make_float2(acc[4 * nt + 2 * r] * fac[r], acc[4 * nt + 2 * r + 1] * fac[r]);
            }
            if (lane % 4 == 0) p.lse_part[(int64_t)split * rows + row] = lse[r];
        }
        return;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = row0 + r * 8;
        if (i >= s.sq) continue;
        const int64_t orow = s.tb * p.o_sb + (s.q0 + i) * p.o_ss + (int64_t)h * p.o_sh;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            const int c = nt * 8 + (lane % 4) * 2;
            if (c >= p.dv) continue;
            const float x0 = acc[4 * nt + 2 * r] * fac[r], x1 = acc[4 * nt + 2 * r + 1] * fac[r];
            if (p.out_dtype == FA_CU_F32)
                *reinterpret_cast<float2 *>(reinterpret_cast<float *>(p.out) + orow + c) = make_float2(x0, x1);
            else
                *reinterpret_cast<uint32_t *>(reinterpret_cast<T *>(p.out) + orow + c) = fa_pack2(x0, x1, T());
        }
        if (p.lse && lane % 4 == 0) p.lse[fa_lse_row(p, s, b, h, i)] = lse[r];
    }
}

/* ---- where a block sits ---------------------------------------------------------------- */
/* Keys visible to every query row in [first, last]: [full_lo, full_hi). Row windows grow
   with the row, so the last row has the largest lower bound and the first the smallest
   upper one; a KV tile inside needs no per-element mask. */
__device__ __forceinline__ void fa_fwd_full_range(const fa_cu_fwd &p, const fa_dseq &s, int first, int last,
                                                  int &full_lo, int &full_hi)
{
    full_lo = p.window_left >= 0 ? last + s.off - p.window_left : 0;
    full_hi = p.window_right >= 0 ? min(s.sk, first + s.off + p.window_right + 1) : s.sk;
}

/* A forward block: block (work tile) index -> (b, h, KV split, m-block), m-block fastest; m0 and last
   = its first and last query rows; [nb_lo, nb_hi) = the KV tiles of BN keys its rows can
   see (the union of their windows clamped to [0, sk), then this split's share);
   [full_lo, full_hi) = fa_fwd_full_range of its rows. false: the block has no rows. */
struct fa_fwd_block {
    fa_dseq s;
    int b, h, hk, split, m0, last, nb_lo, nb_hi, full_lo, full_hi;
};
template <int BM, int BN>
__device__ __forceinline__ bool fa_fwd_block_at(const fa_cu_fwd &p, fa_fwd_block &k, int64_t bid)
{
    const int mb = (int)(bid % p.m_blocks); bid /= p.m_blocks;
    k.split = (int)(bid % p.n_splits); bid /= p.n_splits;
    k.h = (int)(bid % p.hq);
    k.b = (int)(bid / p.hq);
    k.s = fa_dev_seq(p, k.b);
    k.m0 = mb * BM;
    if (k.m0 >= k.s.sq) return false;
    k.hk = k.h / p.group;
    const fa_dseq &s = k.s;
    k.last = min(k.m0 + BM, s.sq) - 1;
    int lo = 0, hi = s.sk;
    if (p.window_left >= 0) lo = max(0, k.m0 + s.off - p.window_left);
    if (p.window_right >= 0) hi = min(s.sk, k.last + s.off + p.window_right + 1);
    int nb_lo = lo / BN, nb_hi = hi > lo ? (hi + BN - 1) / BN : nb_lo;
    const int total = nb_hi - nb_lo, per = (total + p.n_splits - 1) / p.n_splits;
    nb_lo = min(nb_hi, nb_lo + k.split * per);
    k.nb_lo = nb_lo;
    k.nb_hi = min(nb_hi, nb_lo + per);
    fa_fwd_full_range(p, s, k.m0, k.last, k.full_lo, k.full_hi);
    return true;
}
/* the block of this CUDA block (one work tile per block) */
template <int BM, int BN>
__device__ __forceinline__ bool fa_fwd_block_of(const fa_cu_fwd &p, fa_fwd_block &k)
{
    return fa_fwd_block_at<BM, BN>(p, k, blockIdx.x);
}

/* A backward block: BN keys (first key n0, KV tile nb) of KV head hk of sequence b, and the
   query tiles of BQ rows that can see them, mt_lo .. mt_lo + nq - 1 of each of the group's
   G query heads (iters = nq G tiles, head-major). Grid: one block per (b, hk, nb), nb
   fastest, or (deterministic) one launch per KV tile pb.kv_tile over (b, hk). false: the
   tile starts past the sequence (the block has nothing to do). */
struct fa_bwd_block {
    fa_dseq s;
    int b, hk, nb, n0, mt_lo, nq, iters;
};
template <int BN, int BQ>
__device__ __forceinline__ bool fa_bwd_block_of(const fa_cu_bwd &pb, fa_bwd_block &k)
{
    const fa_cu_fwd &p = pb.f;
    int64_t bid = blockIdx.x;
    if (pb.kv_tile >= 0) k.nb = pb.kv_tile;
    else { k.nb = (int)(bid % pb.n_blocks); bid /= pb.n_blocks; }
    k.hk = (int)(bid % p.hkv);
    k.b = (int)(bid / p.hkv);
    k.s = fa_dev_seq(p, k.b);
    k.n0 = k.nb * BN;
    if (k.n0 >= k.s.sk) return false;
    const int nlast = min(k.n0 + BN, k.s.sk) - 1;
    int ilo = 0, ihi = k.s.sq;
    if (p.window_right >= 0) ilo = max(0, k.n0 - k.s.off - p.window_right);
    if (p.window_left >= 0) ihi = min(k.s.sq, nlast - k.s.off + p.window_left + 1);
    k.mt_lo = ilo / BQ;
    const int mt_hi = ihi > ilo ? (ihi + BQ - 1) / BQ : k.mt_lo;
    k.nq = mt_hi - k.mt_lo;
    k.iters = k.nq * p.group;
    return true;
}

#endif /* FA_CUDA_PROBLEM_CUH */
