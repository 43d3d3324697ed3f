/* topology.h - the memory hierarchy as hwloc reports it (per core, in bytes). */
#ifndef FA_TOPOLOGY_H
#define FA_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t l1d, l2, l3;   /* data cache sizes in bytes seen by one core (l3: shared size) */
    int64_t l3_per_core;   /* l3 / cores sharing it                                      */
    int     cores;         /* physical cores                                             */
    int     pus;           /* hardware threads                                           */
    int64_t dram;          /* total memory in bytes (0 = unknown)                        */
    int     from_hwloc;    /* 1 when hwloc answered, 0 when these are fallback guesses    */
} fa_topology;

/* Fill t once per process (cached, thread-safe). */
void fa_topology_get(fa_topology *t);

/* The number of threads a CPU context uses by default (fa_context_set_threads(ctx, 0)),
 * the first answer of: OMP_NUM_THREADS (its first entry, when a positive integer); else
 * the least of hwloc's core count, the CPUs in this thread's affinity mask
 * (sched_getaffinity) and the cgroup v2 CPU quota (cpu.max, rounded up). Always >= 1.
 * When why is not NULL it gets one line saying where the number came from. Cheap enough
 * to call per operation: the cgroup quota is read once per process. */
int fa_default_threads(char *why, size_t len);

/* The CPUs a cgroup v2 cpu.max text allows ("max 100000" -> 0 = no limit,
 * "150000 100000" -> 2: quota / period rounded up); -1 when the text is malformed. */
int fa_cgroup_cpus(const char *cpu_max);

#endif /* FA_TOPOLOGY_H */
