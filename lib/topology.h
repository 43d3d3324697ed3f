/* topology.h - the memory hierarchy as hwloc reports it (per core, in bytes). */
#ifndef FA_TOPOLOGY_H
#define FA_TOPOLOGY_H

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

#endif /* FA_TOPOLOGY_H */
