/* topology.c - the memory hierarchy of this machine as hwloc reports it.
 *
 * Read once per process (pthread_once): caches seen by the first core, core count, total
 * memory. When hwloc cannot tell, conservative defaults are used and from_hwloc = 0 so the
 * description says they are guesses.
 */
#include "config.h"
#include <pthread.h>
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
