/* backward_sm90_d256.cu - the Hopper (sm_90a, wgmma) backward of head-dim class 256, fp16 and bf16. */
#include "backward_sm90.cuh"
FA_BWD_SM90_INSTANTIATE(256)
