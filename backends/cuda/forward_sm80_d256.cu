/* forward_sm80_d256.cu - the forward kernel of head-dim class 256, fp16 and bf16 (one file per
   class so that a parallel make compiles them side by side). */
#include "forward_sm80.cuh"
FA_FWD_INSTANTIATE(256)
