/* backward.h - the CPU backward (backward.c). */
#ifndef FA_CPU_BACKWARD_H
#define FA_CPU_BACKWARD_H

#include "backend.h"

fa_status fa_cpu_backward(fa_context *ctx, const fa_problem *p);

#endif
