/* threads.h - OpenMP threads of the CPU backend: how many a parallel region uses and
 * which one is running. */
#ifndef FA_CPU_THREADS_H
#define FA_CPU_THREADS_H

#include "backend.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* Threads a parallel region uses: ctx->threads or all cores. threads.c */
int fa_cpu_threads(const fa_context *ctx);

/* The calling thread's number in the enclosing parallel region (0 outside one). */
static inline int fa_cpu_tid(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#endif
