/* threads.c - the CPU backend's thread count: fa_context_set_threads's, else the
 * process default (lib/topology.c: OMP_NUM_THREADS, the affinity mask, the cgroup quota,
 * the core count). */
#include "config.h"
#include "threads.h"
#include "topology.h"

int fa_cpu_threads(const fa_context *ctx)
{
    if (ctx->threads > 0) return ctx->threads;
    return fa_default_threads(NULL, 0);
}
