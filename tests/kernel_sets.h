/* kernel_sets.h - what the kernel-level tests share (test_kernels.c, the softmax and AMX
 * packing kernels; test_masked_products.c, the products over partly masked tiles): the CPU
 * kernel sets linked into them (generic always, AVX2 and AVX-512 where configure built
 * them) and which of those this CPU and OS can run, one xorshift random stream, and the
 * run of a suite (tu_main.h). A set that cannot run here is named on stderr, never passed
 * silently.
 */
#ifndef FA_TEST_KERNEL_SETS_H
#define FA_TEST_KERNEL_SETS_H

#include "kernels.h"
#include "tu_main.h"

typedef struct {
    const char *name;
    const fa_cpu_kernels *k;
    int ok;                /* this CPU and OS run it */
    int fma;               /* forms scale s - m with one FMA */
} kset;

extern kset sets[3];
extern int nsets;

/* Fill sets[]; a note on stderr, naming the program, for each set this CPU or OS cannot run. */
void find_sets(const char *prog);
double unif(void);   /* [0, 1) */

#endif
