/* test_threads.c - threads: the default thread count and the thread-safety rule.
 *   - the default thread count: OMP_NUM_THREADS wins and fa_context_describe says so; a
 *     one-CPU affinity mask gives one thread; the cgroup v2 cpu.max parser;
 *   - one context per thread, many threads running fa_forward and fa_backward at once on
 *     the reference and CPU backends: every result is bitwise the single-threaded one;
 *   - one context shared by threads that take turns (a mutex): the same results;
 *   - fa_last_error(NULL) is per thread.
 */
#define _GNU_SOURCE 1   /* sched_getaffinity */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "topology.h"

/* ---- the default thread count --------------------------------------------------------- */

START_TEST(test_default_threads_omp)
{
    setenv("OMP_NUM_THREADS", "1", 1);
    fa_context *ctx = tu_ctx(FA_BACKEND_CPU);
    const char *d = fa_context_describe(ctx);
    ck_assert_msg(strstr(d, "default threads: 1, from OMP_NUM_THREADS=1\n") != NULL,
                  "describe lacks the OMP_NUM_THREADS line:\n%s", d);
    ck_assert_msg(strstr(d, "threads: 1 (the default)") != NULL, "describe:\n%s", d);
    /* an explicit count wins over the default */
    ck_assert_int_eq(fa_context_set_threads(ctx, 3), FA_OK);
    d = fa_context_describe(ctx);
    ck_assert_msg(strstr(d, "threads: 3 (fa_context_set_threads)") != NULL, "describe:\n%s", d);
    fa_context_destroy(ctx);
    /* "4,2" (nested levels): the first entry; garbage is ignored */
    setenv("OMP_NUM_THREADS", "4,2", 1);
    char why[160];
    ck_assert_int_eq(fa_default_threads(why, sizeof why), 4);
    ck_assert_str_eq(why, "OMP_NUM_THREADS=4");
    setenv("OMP_NUM_THREADS", "lots", 1);
    ck_assert_int_ge(fa_default_threads(why, sizeof why), 1);
    ck_assert_msg(strstr(why, "OMP_NUM_THREADS") == NULL, "%s", why);
    unsetenv("OMP_NUM_THREADS");
}
END_TEST

START_TEST(test_default_threads_affinity)
{
    unsetenv("OMP_NUM_THREADS");
    cpu_set_t old, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof old, &old), 0);
    int first = 0;
    while (!CPU_ISSET(first, &old)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    char why[160];
    int n = fa_default_threads(why, sizeof why);
    ck_assert_int_eq(n, 1);
    fa_topology t;
    fa_topology_get(&t);
    if (t.cores > 1)   /* on a one-core machine the core count decides first */
        ck_assert_msg(strncmp(why, "the CPU affinity mask;", 22) == 0, "%s", why);
    ck_assert_msg(strstr(why, "affinity 1 CPUs") != NULL, "%s", why);
    fa_context *ctx = tu_ctx(FA_BACKEND_CPU);
    const char *d = fa_context_describe(ctx);
    ck_assert_msg(strstr(d, "default threads: 1, from ") != NULL, "describe:\n%s", d);
    fa_context_destroy(ctx);
    ck_assert_int_eq(sched_setaffinity(0, sizeof old, &old), 0);
    /* the whole mask again: at most the cores and the CPUs of the mask */
    n = fa_default_threads(why, sizeof why);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, CPU_COUNT(&old));
    ck_assert_int_le(n, t.cores);
}
END_TEST

START_TEST(test_cgroup_cpu_max)
{
    ck_assert_int_eq(fa_cgroup_cpus("max 100000\n"), 0);
    ck_assert_int_eq(fa_cgroup_cpus("100000 100000\n"), 1);
    ck_assert_int_eq(fa_cgroup_cpus("150000 100000"), 2);   /* 1.5 CPUs: rounded up */
    ck_assert_int_eq(fa_cgroup_cpus("50000 100000"), 1);
    ck_assert_int_eq(fa_cgroup_cpus("400000 100000"), 4);
    ck_assert_int_eq(fa_cgroup_cpus(""), -1);
    ck_assert_int_eq(fa_cgroup_cpus("max"), -1);
    ck_assert_int_eq(fa_cgroup_cpus("12x 100000"), -1);
    ck_assert_int_eq(fa_cgroup_cpus("-5 100000"), -1);
    ck_assert_int_eq(fa_cgroup_cpus("5000 0"), -1);
    ck_assert_int_eq(fa_cgroup_cpus(NULL), -1);
}
END_TEST

/* ---- concurrent calls ----------------------------------------------------------------- */

enum { B = 2, S = 80, H = 4, HKV = 2, D = 48, NQ = B * S * H * D, NK = B * S * HKV * D,
       NT = 6, ROUNDS = 3 };

typedef struct {
    float q[NQ], k[NK], v[NK], dout[NQ];
} inputs;

typedef struct {
    float out[NQ], lse[B * H * S], dq[NQ], dk[NK], dv[NK];
} results;

static inputs in;

static void fill_inputs(void)
{
    tu_rng r = { 77 };
    for (int i = 0; i < NQ; i++) { in.q[i] = (float)tu_unif(&r); in.dout[i] = (float)tu_unif(&r); }
    for (int i = 0; i < NK; i++) { in.k[i] = (float)tu_unif(&r); in.v[i] = (float)tu_unif(&r); }
}

/* Forward then deterministic backward of the shared inputs into res; FA_OK or a status. */
static fa_status compute(fa_context *ctx, results *res)
{
    fa_tensor q = fa_tensor_contiguous(in.q, FA_F32, B, S, H, D);
    fa_tensor k = fa_tensor_contiguous(in.k, FA_F32, B, S, HKV, D);
    fa_tensor v = fa_tensor_contiguous(in.v, FA_F32, B, S, HKV, D);
    fa_tensor dout = fa_tensor_contiguous(in.dout, FA_F32, B, S, H, D);
    fa_tensor out = fa_tensor_contiguous(res->out, FA_F32, B, S, H, D);
    fa_tensor dq = fa_tensor_contiguous(res->dq, FA_F32, B, S, H, D);
    fa_tensor dk = fa_tensor_contiguous(res->dk, FA_F32, B, S, HKV, D);
    fa_tensor dv = fa_tensor_contiguous(res->dv, FA_F32, B, S, HKV, D);
    fa_options opt = { .causal = FA_CAUSAL_BOTTOM_RIGHT, .deterministic = 1 };
    fa_status st = fa_forward(ctx, &out, res->lse, &q, &k, &v, &opt);
    if (st != FA_OK) return st;
    return fa_backward(ctx, &dq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, res->lse, &opt);
}

typedef struct {
    fa_backend backend;
    fa_context *shared;        /* NULL: the worker makes its own context */
    pthread_mutex_t *turn;     /* taken around each call on the shared context */
    const results *expect;
    int mismatches, failures;
    char err[256];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    fa_context *ctx = w->shared;
    if (!ctx && fa_context_create(&ctx, w->backend) != FA_OK) {
        snprintf(w->err, sizeof w->err, "create: %s", fa_last_error(NULL));
        w->failures++;
        return NULL;
    }
    results *res = malloc(sizeof *res);
    for (int round = 0; round < ROUNDS && res; round++) {
        memset(res, 0xff, sizeof *res);   /* NaN everywhere: every value must be written */
        if (w->turn) pthread_mutex_lock(w->turn);
        fa_status st = compute(ctx, res);
        if (st != FA_OK) snprintf(w->err, sizeof w->err, "%s", fa_last_error(ctx));
        if (w->turn) pthread_mutex_unlock(w->turn);
        if (st != FA_OK) { w->failures++; continue; }
        if (memcmp(res, w->expect, sizeof *res) != 0) w->mismatches++;
    }
    if (!res) w->failures++;
    free(res);
    if (!w->shared) fa_context_destroy(ctx);
    return NULL;
}

static void run_workers(fa_backend be, int shared)
{
    fill_inputs();
    results *expect = malloc(sizeof *expect);
    ck_assert_ptr_nonnull(expect);
    fa_context *ctx = tu_ctx(be);
    ck_assert_int_eq(compute(ctx, expect), FA_OK);
    for (int i = 0; i < NQ; i++) ck_assert(isfinite(expect->out[i]) && isfinite(expect->dq[i]));
    pthread_mutex_t turn = PTHREAD_MUTEX_INITIALIZER;
    worker w[NT];
    pthread_t th[NT];
    for (int t = 0; t < NT; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].backend = be;
        w[t].expect = expect;
        w[t].shared = shared ? ctx : NULL;
        w[t].turn = shared ? &turn : NULL;
        ck_assert_int_eq(pthread_create(&th[t], NULL, work, &w[t]), 0);
    }
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) {
        ck_assert_msg(w[t].failures == 0, "%s thread %d: %s", tu_backend_name(be), t, w[t].err);
        ck_assert_msg(w[t].mismatches == 0, "%s thread %d: %d of %d rounds differ from the "
                      "single-threaded result", tu_backend_name(be), t, w[t].mismatches, ROUNDS);
    }
    fa_context_destroy(ctx);
    free(expect);
}

static const fa_backend host_backends[2] = { FA_BACKEND_REFERENCE, FA_BACKEND_CPU };

START_TEST(test_context_per_thread)
{
    run_workers(host_backends[_i], 0);
}
END_TEST

START_TEST(test_context_shared_in_turns)
{
    run_workers(host_backends[_i], 1);
}
END_TEST

static void *fail_without_context(void *arg)
{
    fa_context *bad = NULL;
    /* a context-less failure on this thread only */
    int *ok = arg;
    *ok = fa_context_create(&bad, (fa_backend)99) == FA_ERR_INVALID_ARG &&
          strstr(fa_last_error(NULL), "backend=99") != NULL;
    return NULL;
}

START_TEST(test_last_error_per_thread)
{
    fa_context *ctx = NULL;
    ck_assert_int_eq(fa_context_create(&ctx, (fa_backend)-7), FA_ERR_INVALID_ARG);
    char mine[512];
    snprintf(mine, sizeof mine, "%s", fa_last_error(NULL));
    ck_assert_msg(strstr(mine, "backend=-7") != NULL, "%s", mine);
    pthread_t th;
    int ok = 0;
    ck_assert_int_eq(pthread_create(&th, NULL, fail_without_context, &ok), 0);
    pthread_join(th, NULL);
    ck_assert(ok);
    ck_assert_str_eq(fa_last_error(NULL), mine);   /* the other thread's failure is not ours */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("threads");
    TU_ADD(s, test_default_threads_omp, 60);
    TU_ADD(s, test_default_threads_affinity, 60);
    TU_ADD(s, test_cgroup_cpu_max, 10);
    TCase *tc = tcase_create("test_context_per_thread");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_context_per_thread, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("test_context_shared_in_turns");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_context_shared_in_turns, 0, 2);
    suite_add_tcase(s, tc);
    TU_ADD(s, test_last_error_per_thread, 30);
    return tu_main(s);
}
