/* tiles.h - tile sizes of a CPU call from the cache sizes (tiles.c). */
#ifndef FA_CPU_TILES_H
#define FA_CPU_TILES_H

#include <stddef.h>
#include <stdint.h>
#include "backend.h"

/* Tiles for a call: bq query rows (Br) and bkv key rows (Bc), both multiples of 16.
   why (optional) receives the formula with its numbers. */
void fa_cpu_tiles(const fa_context *ctx, int backward, int64_t dqk, int64_t dv,
                  int *bq, int *bkv, char *why, size_t whylen);

#endif
