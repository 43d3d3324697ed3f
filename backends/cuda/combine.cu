/* combine.cu - the small device kernels beside the attention kernels:
 *   fa_combine (public) and the split-KV merge: out = sum_i exp(lse_i - lse) out_i,
 *     lse = logsumexp_i lse_i (and the sink logit, when given, as one more part with a zero
 *     output); the same rules as api.c's host loop (NaN wins the max, an empty part's
 *     zeros are skipped, a row with no part is out 0, lse -inf);
 *   the KV-cache append: k_new/v_new rows into the cache at cache_seqlens[b] (paged aware).
 */
#include <cuda_runtime.h>
#include <math.h>
#include "device/problem.cuh"
#include "kernels.h"

__global__ void fa_combine_kernel(const fa_cu_combine c)
{
    const int64_t rows = (int64_t)c.B * c.S * c.H;
    const int lane = threadIdx.x % 32;
    const int64_t nw = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += nw) {
        const int64_t b = row / ((int64_t)c.S * c.H), s = (row / c.H) % c.S, h = row % c.H;
        const int64_t li = (b * c.H + h) * c.S + s;
        const bool strided = c.o_base != nullptr;
        float m = -INFINITY;
        for (int i = 0; i < c.n; i++) {
            const float l = strided ? c.lse_base[i * c.lse_pstride + li] : c.lse[i][li];
            if (!(l <= m)) m = l;
        }
        const float sink = c.sinks ? c.sinks[h] : -INFINITY;
        if (!(sink <= m)) m = sink;
        float total = 0.f;
        if (m != -INFINITY) {
            for (int i = 0; i < c.n; i++)
                total += expf((strided ? c.lse_base[i * c.lse_pstride + li] : c.lse[i][li]) - m);
            if (c.sinks) total += expf(sink - m);
        }
        const float inv = m == -INFINITY ? 0.f : 1.f / total;
        const int64_t o = b * c.o_sb + s * c.o_ss + h * c.o_sh;
        for (int d = lane; d < c.D; d += 32) {
            float acc = 0.f;
            if (m != -INFINITY)
                for (int i = 0; i < c.n; i++) {
                    const float w = expf((strided ? c.lse_base[i * c.lse_pstride + li] : c.lse[i][li]) - m) * inv;
                    if (w == 0.f) continue;
                    acc += w * (strided ? c.o_base[i * c.o_pstride + b * c.p_sb + s * c.p_ss + h * c.p_sh + d]
                                        : fa_ld_any(c.data[i], c.dtype[i], b * c.sb[i] + s * c.ss[i] + h * c.sh[i] + d));
                }
            fa_st_any(c.out, c.out_dtype, o + d, acc);
        }
        if (c.lse_out && lane == 0) c.lse_out[li] = m == -INFINITY ? -INFINITY : m + logf(total);
    }
}

cudaError_t fa_combine_launch(const fa_cu_combine &c, int sms, cudaStream_t st)
{
    const int64_t rows = (int64_t)c.B * c.S * c.H;
    if (rows == 0) return cudaSuccess;
    int64_t blocks = (rows + 7) / 8;
    if (blocks > (int64_t)sms * 64) blocks = (int64_t)sms * 64;
    fa_combine_kernel<<<(unsigned)blocks, 256, 0, st>>>(c);
    return cudaGetLastError();
}

/* One thread per element of k_new or v_new; es = element size (2 or 4 bytes). */
template <typename E>
__global__ void fa_kv_append_kernel(const fa_cu_fwd p, const fa_cu_append a)
{
    const int64_t per_row = p.dqk + p.dv;
    const int64_t total = (int64_t)p.batch * p.s_new * p.hkv * per_row;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < total;
         x += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = x % per_row, r = x / per_row;
        const int hk = (int)(r % p.hkv); r /= p.hkv;
        const int t = (int)(r % p.s_new);
        const int b = (int)(r / p.s_new);
        fa_dseq s;
        s.tb = b; s.q0 = 0; s.k0 = 0;
        const int j = fa_clampi(p.cache_seqlens[b], 0, p.cache_cap - p.s_new) + t;
        if (c < p.dqk) {
            const E *src = reinterpret_cast<const E *>(a.k_new) + b * a.k_sb + t * a.k_ss + hk * a.k_sh + c;
            reinterpret_cast<E *>(const_cast<void *>(p.k))[fa_dev_krow(p, s, b, j, hk, p.k_sb, p.k_ss, p.k_sh) + c] = *src;
        } else {
            c -= p.dqk;
            const E *src = reinterpret_cast<const E *>(a.v_new) + b * a.v_sb + t * a.v_ss + hk * a.v_sh + c;
            reinterpret_cast<E *>(const_cast<void *>(p.v))[fa_dev_krow(p, s, b, j, hk, p.v_sb, p.v_ss, p.v_sh) + c] = *src;
        }
    }
}

cudaError_t fa_kv_append_launch(const fa_cu_fwd &p, const fa_cu_append &a, int es, int sms, cudaStream_t st)
{
    const int64_t total = (int64_t)p.batch * p.s_new * p.hkv * (p.dqk + p.dv);
    if (total == 0) return cudaSuccess;
    int64_t blocks = (total + 255) / 256;
    if (blocks > (int64_t)sms * 32) blocks = (int64_t)sms * 32;
    if (es == 2) fa_kv_append_kernel<uint16_t><<<(unsigned)blocks, 256, 0, st>>>(p, a);
    else fa_kv_append_kernel<uint32_t><<<(unsigned)blocks, 256, 0, st>>>(p, a);
    return cudaGetLastError();
}

/* A kernel that does nothing: init launches it to learn whether this module has code for
   the device (cudaErrorNoKernelImageForDevice otherwise). */
__global__ void fa_probe_kernel() {}

cudaError_t fa_probe(void)
{
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, fa_probe_kernel);
}
