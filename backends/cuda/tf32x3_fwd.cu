/* tf32x3_fwd.cu - the fp32 forward on the tensor cores (tf32x3_fwd.cuh), classes 64, 128. */
#include "tf32x3_fwd.cuh"

template cudaError_t fa_tf32_fwd_launch<64>(const fa_cu_fwd &, int64_t, cudaStream_t);
template cudaError_t fa_tf32_fwd_launch<128>(const fa_cu_fwd &, int64_t, cudaStream_t);
