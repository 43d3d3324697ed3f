/* common.cuh - what the fp32 kernels share (simt.cuh's forward and backward, tf32x3.cuh's
 * forward): scalar tile loads, float4 arithmetic, the dropout factor and the end of a
 * forward row in natural units (expf, logf).
 */
#ifndef FA_CUDA_FP32_COMMON_CUH
#define FA_CUDA_FP32_COMMON_CUH

#include <math.h>
#include "device/problem.cuh"
#include "philox.h"
#include "fp32/tiles.h"

/* Rows [0, R) x columns [0, D) of a tile with row pitch LD floats, from global rows
   rowptr(r), by NT threads; rows >= nvalid and columns >= ncols are zero. */
template <int R, int D, int LD, int NT = FA_F32_NT, typename RowFn>
__device__ __forceinline__ void fa_f32_load(float *dst, int nvalid, int ncols, RowFn rowptr)
{
    constexpr int C4 = D / 4;
    for (int idx = threadIdx.x; idx < R * C4; idx += NT) {
        const int r = idx / C4, c = (idx % C4) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < nvalid && c < ncols) {
            const float *src = rowptr(r) + c;
            v.x = src[0];
            if (c + 1 < ncols) v.y = src[1];
            if (c + 2 < ncols) v.z = src[2];
            if (c + 3 < ncols) v.w = src[3];
        }
        *reinterpret_cast<float4 *>(dst + r * LD + c) = v;
    }
}

__device__ __forceinline__ float fa_f32_dot4(float acc, const float4 a, const float4 b)
{
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    return fmaf(a.w, b.w, acc);
}
__device__ __forceinline__ void fa_f32_axpy4(float4 &acc, float a, const float4 b)
{
    acc.x = fmaf(a, b.x, acc.x);
    acc.y = fmaf(a, b.y, acc.y);
    acc.z = fmaf(a, b.z, acc.z);
    acc.w = fmaf(a, b.w, acc.w);
}

/* Dropout factor of (b, h, i, j): 0 where philox.h's keep-mask drops it, else keep_scale. */
__device__ __forceinline__ float fa_f32_keep(const fa_cu_fwd &p, const fa_dseq &s, int b, int h, int i, int j)
{
    fa_dropout_key dk;
    dk.k0 = p.drop_k0; dk.k1 = p.drop_k1; dk.threshold = p.drop_threshold;
    uint32_t w[4];
    fa_dropout_words(&dk, b, h, (int64_t)i + s.drop_i0, j & ~3, w);
    const uint32_t wj = (j & 2) ? ((j & 1) ? w[3] : w[2]) : ((j & 1) ? w[1] : w[0]);   /* no local array */
    return wj < dk.threshold ? 0.f : p.keep_scale;
}

/* The end of query row i of the fp32 forwards: the row's sum l and max m (natural units)
   become fac (what the accumulator is multiplied by: 1/l with the sink, 0 for a fully
   masked row, NaN where the row met a NaN, times the dropout scale) and lse; op/odt/orow
   address the output row and li its lse (the split's fp32 part under split-KV). */
struct fa_f32_row_end {
    float *op;
    int64_t orow, li;
    int odt;
    float fac, lse;
};
__device__ __forceinline__ fa_f32_row_end fa_f32_end_row(const fa_cu_fwd &p, const fa_dseq &s, int b, int h, int split,
                                                         int i, float l, float m)
{
    fa_f32_row_end e;
    if (p.sinks && p.n_splits == 1) {
        const float sk = p.sinks[h], M = fmaxf(m, sk);
        const float em = m == -INFINITY ? 0.f : expf(m - M);
        l = l * em + expf(sk - M);
        e.fac = em / l;
        e.lse = M + logf(l);
    } else if (m == -INFINITY || l == 0.f) {
        e.fac = 0.f;
        e.lse = -INFINITY;
    } else {
        e.fac = 1.f / l;
        e.lse = m + logf(l);
    }
    if (m != m || l != l) { e.fac = __int_as_float(0x7fc00000); e.lse = e.fac; }
    e.fac *= p.keep_scale;
    if (p.n_splits > 1) {
        const int64_t rows = (int64_t)p.batch * p.hq * p.sq, row = ((int64_t)b * p.hq + h) * p.sq + i;
        e.op = p.o_part; e.odt = FA_CU_F32;
        e.orow = ((int64_t)split * rows + row) * p.dv;
        e.li = (int64_t)split * rows + row;
    } else {
        e.op = reinterpret_cast<float *>(p.out); e.odt = p.out_dtype;
        e.orow = s.tb * p.o_sb + (s.q0 + i) * p.o_ss + (int64_t)h * p.o_sh;
        e.li = fa_lse_row(p, s, b, h, i);
    }
    return e;
}
__device__ __forceinline__ void fa_f32_store_lse(const fa_cu_fwd &p, const fa_f32_row_end &e)
{
    if (p.n_splits > 1) p.lse_part[e.li] = e.lse;
    else if (p.lse) p.lse[e.li] = e.lse;
}

#endif /* FA_CUDA_FP32_COMMON_CUH */
