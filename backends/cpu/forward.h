/* forward.h - the CPU forward (forward.c). */
#ifndef FA_CPU_FORWARD_H
#define FA_CPU_FORWARD_H

#include <stdint.h>
#include "backend.h"

/* Split-KV factor of a forward call (shapes only, never threads); rows_per_block and
   heads_per_block (optional) receive the Q block's shape. */
int fa_cpu_fwd_splits(const fa_problem *p, int bq, int bkv, int64_t *rows_per_block,
                      int64_t *heads_per_block);

fa_status fa_cpu_forward(fa_context *ctx, const fa_problem *p);

#endif
