/* backward_sm80_d256.cu - the backward kernel of head-dim class 256, fp16 and bf16 (one file per
   class so that a parallel make compiles them side by side). */
#include "backward_sm80.cuh"
FA_BWD_INSTANTIATE(256)
