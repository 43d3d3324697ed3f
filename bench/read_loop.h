/* read_loop.h - the read loop that decode cells are measured against, shared by
 * flashattn-bench (decode.c) and the ggml peer (peers/ggml_decode.c) so that both divide
 * by the same loop: a vectorized sum over a buffer larger than L3 on the given threads,
 * and the median of the rounds. Header-only (the peer is built outside the Makefiles);
 * the includer provides `double now_s(void)` and compiles with OpenMP.
 */
#ifndef FA_BENCH_READ_LOOP_H
#define FA_BENCH_READ_LOOP_H

#include <stdlib.h>

double now_s(void);

static volatile float read_loop_sink;   /* the loop's sums: the loads cannot be dropped */

/* One pass of the read loop: the sum of n floats on `threads` threads; seconds. */
static inline double read_pass(const float *buf, size_t n, int threads)
{
    double t0 = now_s();
    float s = 0.0f;
#pragma omp parallel for simd num_threads(threads) reduction(+:s) schedule(static)
    for (size_t i = 0; i < n; i++) s += buf[i];
    read_loop_sink = s;
    return now_s() - t0;
}

static inline int read_loop_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (v is sorted in place). */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, read_loop_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif /* FA_BENCH_READ_LOOP_H */
