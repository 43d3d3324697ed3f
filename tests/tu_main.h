/* tu_main.h - the end of every Check program's main: run the suite (Check forks each
 * test), print its summary and make the failures the exit status. The suites built on
 * testutil.h get it from there; the kernel-level tests, which link neither libflashattn
 * nor testutil.c, from kernel_sets.h.
 */
#ifndef FA_TEST_TU_MAIN_H
#define FA_TEST_TU_MAIN_H

#include <check.h>

/* Run every test of s; 0 when all pass, else 1. */
static inline int tu_main(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}

#endif
