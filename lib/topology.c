/* topology.c - the memory hierarchy of this machine as hwloc reports it, and the default
 * thread count.
 *
 * Read once per process (pthread_once): caches seen by the first core, core count, total
 * memory. When hwloc cannot tell, conservative defaults are used and from_hwloc = 0 so the
 * description says they are guesses. The default thread count honours what an embedding
 * process was given (OMP_NUM_THREADS, its affinity mask, its cgroup's CPU quota) before
 * the machine's core count.
 */
#define _GNU_SOURCE 1   /* sched_getaffinity, CPU_COUNT */
#include "config.h"
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hwloc.h>
#include "topology.h"

static fa_topology fa_topo_cached;
static pthread_once_t fa_topo_once = PTHREAD_ONCE_INIT;

static void fa_topology_probe(void)
{
    fa_topology t;
    memset(&t, 0, sizeof t);
    t.l1d = 32 * 1024; t.l2 = 1024 * 1024; t.l3 = 8 * 1024 * 1024;
    t.cores = 1; t.pus = 1;

    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) {
            int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
            int npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
            if (ncores > 0) t.cores = ncores;
            if (npus > 0) t.pus = npus;
            hwloc_obj_t pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, 0);
            int found = 0;
            /* Walk up from the first PU: each cache above it is one it uses. */
            for (hwloc_obj_t o = pu ? pu->parent : NULL; o; o = o->parent) {
                if (!hwloc_obj_type_is_dcache(o->type) || !o->attr) continue;
                int64_t size = (int64_t)o->attr->cache.size;
                if (size <= 0) continue;
                switch (o->attr->cache.depth) {
                case 1: t.l1d = size; found = 1; break;
                case 2: t.l2 = size; found = 1; break;
                case 3: {
                    t.l3 = size; found = 1;
                    int sharing = hwloc_get_nbobjs_inside_cpuset_by_type(topo, o->cpuset,
                                                                         HWLOC_OBJ_CORE);
                    t.l3_per_core = sharing > 0 ? size / sharing : size;
                    break;
                }
                default: break;
                }
            }
            hwloc_obj_t root = hwloc_get_root_obj(topo);
            if (root) t.dram = (int64_t)root->total_memory;
            t.from_hwloc = found;
        }
        hwloc_topology_destroy(topo);
    }
    if (t.l3_per_core == 0) t.l3_per_core = t.l3 / (t.cores > 0 ? t.cores : 1);
    fa_topo_cached = t;
}

void fa_topology_get(fa_topology *t)
{
    pthread_once(&fa_topo_once, fa_topology_probe);
    *t = fa_topo_cached;
}

/* ---- the default thread count ------------------------------------------------------ */

int fa_cgroup_cpus(const char *cpu_max)
{
    char quota[32];
    long long period = 0;
    if (!cpu_max || sscanf(cpu_max, "%31s %lld", quota, &period) != 2 || period <= 0)
        return -1;
    if (!strcmp(quota, "max")) return 0;
    char *end;
    long long q = strtoll(quota, &end, 10);
    if (*end || q <= 0) return -1;
    long long cpus = (q + period - 1) / period;
    return cpus > INT_MAX ? INT_MAX : (int)cpus;
}

/* The tightest cpu.max limit on the way from this process's cgroup v2 up to the root of
   the cgroup file system (0: none, or not cgroup v2). */
static int fa_cgroup_probe(void)
{
    char rel[640] = "";
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char line[640];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "0::", 3)) {
                snprintf(rel, sizeof rel, "%s", line + 3);
                rel[strcspn(rel, "\n")] = '\0';
                break;
            }
        fclose(f);
    }
    int best = 0;
    for (;;) {
        char path[700], text[64];
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", strcmp(rel, "/") ? rel : "");
        f = fopen(path, "r");
        if (f) {
            if (fgets(text, sizeof text, f)) {
                int n = fa_cgroup_cpus(text);
                if (n > 0 && (best == 0 || n < best)) best = n;
            }
            fclose(f);
        }
        char *slash = strrchr(rel, '/');
        if (!slash || !rel[0] || !strcmp(rel, "/")) break;
        *slash = '\0';   /* the parent; "" is the root */
    }
    return best;
}

static int fa_cgroup_cached;
static pthread_once_t fa_cgroup_once = PTHREAD_ONCE_INIT;
static void fa_cgroup_init(void) { fa_cgroup_cached = fa_cgroup_probe(); }

/* OMP_NUM_THREADS's first entry ("4" or "4,2"), 0 when unset or not a positive number. */
static int fa_omp_num_threads(void)
{
    const char *env = getenv("OMP_NUM_THREADS");
    if (!env) return 0;
    char *end;
    long n = strtol(env, &end, 10);
    while (*end == ' ') end++;
    if (end == env || (*end && *end != ',') || n <= 0) return 0;
    return n > INT_MAX ? INT_MAX : (int)n;
}

int fa_default_threads(char *why, size_t len)
{
    char none[1];
    if (!why) { why = none; len = sizeof none; }
    int omp = fa_omp_num_threads();
    if (omp > 0) {
        snprintf(why, len, "OMP_NUM_THREADS=%d", omp);
        return omp;
    }
    fa_topology t;
    fa_topology_get(&t);
    int n = t.cores > 0 ? t.cores : 1;
    const char *from = "the core count (hwloc)";
    cpu_set_t set;
    int affinity = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
    if (affinity > 0 && affinity < n) { n = affinity; from = "the CPU affinity mask"; }
    pthread_once(&fa_cgroup_once, fa_cgroup_init);
    if (fa_cgroup_cached > 0 && fa_cgroup_cached < n) {
        n = fa_cgroup_cached;
        from = "the cgroup CPU quota (cpu.max)";
    }
    char quota[24] = "none";
    if (fa_cgroup_cached > 0) snprintf(quota, sizeof quota, "%d CPUs", fa_cgroup_cached);
    snprintf(why, len, "%s; cores %d, affinity %d CPUs, cgroup quota %s", from, t.cores,
             affinity, quota);
    return n;
}
