/* checks.cu - the CUDA module's argument checks that are the device's own: device
 * pointers (a host pointer is INVALID_ARG), alignment, and under FA_DEBUG=1 the index
 * arrays read back and checked as lib/validate.c checks host ones.
 */
#include "impl.h"

/* A host pointer is INVALID_ARG (an argument error, never a crash). NULL passes (optional). */
fa_status check_ptr(const fa_context *ctx, const void *ptr, const char *name)
{
    if (!ptr) return FA_OK;
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e != cudaSuccess) { cudaGetLastError(); a.type = cudaMemoryTypeUnregistered; }
    if (a.type == cudaMemoryTypeUnregistered)
        return H->set_error(ctx, FA_ERR_INVALID_ARG,
                            "cuda: %s=%p is host memory; the cuda backend needs device pointers", name, ptr);
    return FA_OK;
}

int aligned16(const fa_tensor *t)
{
    return ((uintptr_t)t->data % 16) == 0 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 &&
           t->stride[2] % 8 == 0;
}

const char *dtname(fa_dtype t) { return t == FA_F16 ? "fp16" : t == FA_BF16 ? "bf16" : "fp32"; }


/* FA_DEBUG=1: read the index arrays back (synchronizes) and check them as validate.c does. */
fa_status debug_check(fa_context *ctx, const fa_problem *p)
{
    if (p->layout == FA_LAYOUT_VARLEN) {
        int64_t n = p->batch + 1;
        int32_t *cq = (int32_t *)malloc(n * 4), *ck = (int32_t *)malloc(n * 4);
        fa_status st = FA_OK;
        if (!cq || !ck) st = H->set_error(ctx, FA_ERR_NO_MEMORY, "cuda: FA_DEBUG: out of host memory");
        else if (cudaMemcpy(cq, p->cu_q, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
                 cudaMemcpy(ck, p->cu_k, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
            st = cuda_err(ctx, cudaGetLastError(), "FA_DEBUG: reading cu_seqlens");
        for (int w = 0; w < 2 && st == FA_OK; w++) {
            const int32_t *c = w ? ck : cq;
            const char *nm = w ? "cu_seqlens_k" : "cu_seqlens_q";
            int64_t tot = w ? p->k.shape[1] : p->q.shape[1], mx = w ? p->max_sk : p->max_sq;
            if (c[0] != 0) st = H->set_error(ctx, FA_ERR_INVALID_ARG, "%s[0]=%d must be 0", nm, c[0]);
            for (int64_t b = 0; b < p->batch && st == FA_OK; b++)
                if (c[b + 1] < c[b] || c[b + 1] - c[b] > mx || c[b + 1] > tot)
                    st = H->set_error(ctx, FA_ERR_INVALID_ARG, "%s[%lld]=%d is not monotonic, over max_seqlen or past the tensor",
                                      nm, (long long)b + 1, c[b + 1]);
        }
        free(cq); free(ck);
        return st;
    }
    if (p->layout == FA_LAYOUT_KVCACHE) {
        int32_t *cs = (int32_t *)malloc(p->batch * 4 + 4);
        int32_t *bt = p->block_table ? (int32_t *)malloc(p->batch * p->max_pages * 4 + 4) : NULL;
        fa_status st = FA_OK;
        if (!cs || (p->block_table && !bt)) st = H->set_error(ctx, FA_ERR_NO_MEMORY, "cuda: FA_DEBUG: out of host memory");
        else if (cudaMemcpy(cs, p->cache_seqlens, p->batch * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
                 (bt && cudaMemcpy(bt, p->block_table, p->batch * p->max_pages * 4, cudaMemcpyDeviceToHost) != cudaSuccess))
            st = cuda_err(ctx, cudaGetLastError(), "FA_DEBUG: reading cache_seqlens/block_table");
        int64_t cap = p->block_table ? p->max_pages * p->page_size : p->k.shape[1];
        for (int64_t b = 0; b < p->batch && st == FA_OK; b++) {
            if (cs[b] < 0 || cs[b] + p->s_new > cap)
                st = H->set_error(ctx, FA_ERR_INVALID_ARG, "cache_seqlens[%lld]=%d: with %lld new rows over the capacity %lld",
                                  (long long)b, cs[b], (long long)p->s_new, (long long)cap);
            if (bt)
                for (int64_t pg = 0; pg * p->page_size < cs[b] + p->s_new && st == FA_OK; pg++) {
                    int32_t e = bt[b * p->max_pages + pg];
                    if (e < 0 || e >= p->k.shape[0])
                        st = H->set_error(ctx, FA_ERR_INVALID_ARG, "block_table[%lld][%lld]=%d out of range [0, %lld)",
                                          (long long)b, (long long)pg, e, (long long)p->k.shape[0]);
                }
        }
        free(cs); free(bt);
        return st;
    }
    return FA_OK;
}

fa_status check_pointers(fa_context *ctx, const fa_problem *p)
{
    fa_status st;
#define CK(ptr, nm) if ((st = check_ptr(ctx, ptr, nm)) != FA_OK) return st
    CK(p->q.data, "q.data"); CK(p->k.data, "k.data"); CK(p->v.data, "v.data");
    CK(p->out.data, "out.data"); CK(p->lse, "lse"); CK(p->alibi, "alibi_slopes"); CK(p->sinks, "sinks");
    if (p->has_bias) CK(p->bias.data, "bias.data");
    CK(p->cu_q, "cu_seqlens_q"); CK(p->cu_k, "cu_seqlens_k");
    CK(p->cache_seqlens, "cache_seqlens"); CK(p->block_table, "block_table");
#undef CK
    return FA_OK;
}

