/* forward_fast_d256.cu - the lean FA2 forward kernel of head-dim class 256, fp16 and bf16. */
#include "forward_fast.cuh"
FA_FWD_FAST_INSTANTIATE(256)
