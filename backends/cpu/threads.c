/* threads.c - the CPU backend's thread count. */
#include "config.h"
#include "threads.h"

int fa_cpu_threads(const fa_context *ctx)
{
    if (ctx->threads > 0) return ctx->threads;
    if (ctx->topo.cores > 0) return ctx->topo.cores;
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}
