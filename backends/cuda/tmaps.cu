/* tmaps.cu - the tensor maps of the Hopper kernels (TMA boxes of q, k, v, dout and the
 * fp32 dQ workspace), encoded by the driver's cuTensorMapEncodeTiled, looked up once per
 * context.
 */
#include "impl.h"

#if FA_SM90A
typedef CUresult (*tmap_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
/* The driver's cuTensorMapEncodeTiled (looked up once), or NULL. */
static void *tmap_encoder(cuda_impl *im)
{
    if (!im->tmap_tried) {
        im->tmap_tried = 1;
        cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            im->tmap_encode = fn;
        else
            cudaGetLastError();
    }
    return im->tmap_encode;
}

/* The tensor map of one 16-bit [batch, seq, heads, cols] tensor for the warp-specialized
   forward: boxes of 64 columns x `rows` rows of one head, 128-byte swizzle, zeros outside.
   Varlen tensors are one sequence of all tokens (batch 1). 0 when the driver cannot encode
   it. */
int qkv_tensor_map(cuda_impl *im, CUtensorMap *m, const fa_tensor *t, int64_t cols, int varlen, int rows)
{
    if (!tmap_encoder(im)) return 0;
    const cuuint64_t dim[4] = { (cuuint64_t)cols, (cuuint64_t)t->shape[1], (cuuint64_t)t->shape[2],
                                varlen ? 1 : (cuuint64_t)t->shape[0] };
    const cuuint64_t stride[3] = { (cuuint64_t)t->stride[1] * 2, (cuuint64_t)t->stride[2] * 2,
                                   (cuuint64_t)(varlen ? t->stride[2] : t->stride[0]) * 2 };
    const cuuint32_t box[4] = { 64, (cuuint32_t)rows, 1, 1 }, es[4] = { 1, 1, 1, 1 };
    memset(m, 0, sizeof *m);
    return ((tmap_encode_fn)im->tmap_encode)(m, t->dtype == FA_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                             4, t->data, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The tensor map of the Hopper backward's fp32 dQ workspace (rows x dqk, boxes of
   FA_BWD_SM90_DQ_BOX_ROWS x FA_BWD_SM90_DQ_BOX_COLS with the 128-byte swizzle), encoded by
   the driver's cuTensorMapEncodeTiled. 0 when the driver has no encoder or the shape does
   not fit the map's limits (row coordinates are 32-bit): the kernel then adds dQ with
   atomics. FA_CUDA_DQ=atomic forces that path (tests/cuda runs the backward under it). */
int dq_tensor_map(cuda_impl *im, CUtensorMap *m, float *dq_acc, int64_t rows, int dqk)
{
    if (im->dq_atomic || !tmap_encoder(im) || rows > INT32_MAX || rows < 1) return 0;
    const cuuint64_t dim[2] = { (cuuint64_t)dqk, (cuuint64_t)rows }, stride[1] = { (cuuint64_t)dqk * sizeof(float) };
    const cuuint32_t box[2] = { FA_BWD_SM90_DQ_BOX_COLS, FA_BWD_SM90_DQ_BOX_ROWS }, es[2] = { 1, 1 };
    memset(m, 0, sizeof *m);
    return ((tmap_encode_fn)im->tmap_encode)(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, dq_acc, dim, stride, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
#endif
