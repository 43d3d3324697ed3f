/* decode.h - the CPU decode path (decode.c): fa_forward_kvcache calls with a few new
 * tokens per sequence (and fa_forward calls of that shape), where reading K and V once is
 * the whole cost. */
#ifndef FA_CPU_DECODE_H
#define FA_CPU_DECODE_H

#include "backend.h"

/* Why a forward call does not take the decode path: FA_CPU_DECODE_OK (it does),
   FA_CPU_DECODE_SHAPE (not decode-shaped: a varlen call, or more than 16 query rows per
   sequence; nothing to say), or a reason the decode path leaves to the general loop nest,
   named by fa_cpu_decode_reason. */
enum {
    FA_CPU_DECODE_OK = 0,
    FA_CPU_DECODE_SHAPE,
    FA_CPU_DECODE_BIAS,
    FA_CPU_DECODE_DROPOUT,
    FA_CPU_DECODE_ROWS,
    FA_CPU_DECODE_NREASONS
};
int fa_cpu_decode_why(const fa_problem *p);
const char *fa_cpu_decode_reason(int why);

/* Key splits of a decode call (shapes only, never threads). */
int fa_cpu_decode_splits(const fa_problem *p);

/* The decode forward; call only when fa_cpu_decode_why(p) is FA_CPU_DECODE_OK. */
fa_status fa_cpu_decode(fa_context *ctx, const fa_problem *p);

#endif
