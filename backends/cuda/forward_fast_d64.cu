/* forward_fast_d64.cu - the lean FA2 forward kernel of head-dim class 64, fp16 and bf16. */
#include "forward_fast.cuh"
FA_FWD_FAST_INSTANTIATE(64)
