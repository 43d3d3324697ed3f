/* measure.c - clocks, peak RSS, hardware cache-miss counters, and the IO model.
 *
 * Memory traffic is reported two ways and never mixed up:
 *   "modeled"  the IO-complexity model of the FlashAttention paper (Dao et al. 2022, Thm 2),
 *              counted in bytes for this shape: standard attention reads and writes the
 *              S x S matrix, Theta(N d + N^2); flash re-reads K and V once per block of Br
 *              query rows, Theta(N^2 d^2 / M) with Br = M / (4 d) for a cache of M elements.
 *   "measured" last-level-cache read misses x 64 bytes from perf_event_open (or the generic
 *              cache-miss event), counted over the timed runs of this process and its
 *              threads, when the kernel lets us open the counter.
 */
#include "config.h"
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "bench.h"

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- perf counters --- */

static int perf_fd = -1;
static char perf_why[160] = "perf_init was not called";
static const char *perf_event_name = "";

static int perf_open(uint32_t type, uint64_t config)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = type;
    a.config = config;
    a.disabled = 1;
    a.inherit = 1;            /* threads created after this point are counted too */
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

int perf_init(void)
{
    const char *off = getenv("FA_BENCH_NO_PERF");
    if (off && *off && strcmp(off, "0")) {
        snprintf(perf_why, sizeof perf_why, "disabled by FA_BENCH_NO_PERF");
        return -1;
    }
    perf_fd = perf_open(PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_LL |
                                                (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                                                (PERF_COUNT_HW_CACHE_RESULT_MISS << 16));
    perf_event_name = "LL read misses";
    if (perf_fd < 0) {
        int e1 = errno;
        perf_fd = perf_open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES);
        perf_event_name = "cache misses";
        if (perf_fd < 0) {
            snprintf(perf_why, sizeof perf_why, "%s", strerror(e1));
            if (errno != e1)
                snprintf(perf_why + strlen(perf_why), sizeof perf_why - strlen(perf_why),
                         "; generic cache-misses: %s", strerror(errno));
            return -1;
        }
    }
    perf_why[0] = '\0';
    return 0;
}

const char *perf_reason(void)
{
    return perf_why;
}

void perf_start(void)
{
    if (perf_fd < 0) return;
    ioctl(perf_fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0);
}

double perf_stop_bytes(void)
{
    if (perf_fd < 0) return -1;
    ioctl(perf_fd, PERF_EVENT_IOC_DISABLE, 0);
    uint64_t n = 0;
    if (read(perf_fd, &n, sizeof n) != (ssize_t)sizeof n) return -1;
    return (double)n * 64.0;
}

/* ------------------------------------------------------------------------ RSS ----- */

int rss_reset_peak(void)
{
    malloc_trim(0);          /* give freed heap back, so reused blocks count as growth */
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) return 0;
    int ok = write(fd, "5", 1) == 1;    /* 5: reset the peak RSS to the current RSS */
    close(fd);
    return ok;
}

long rss_peak_kib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

long rss_now_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = -1;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* ------------------------------------------------------------------ caches -------- */

/* The library prints "memory hierarchy (hwloc): L1d 48 KiB, L2 2048 KiB per core, L3 ..."
 * in fa_context_describe; read the numbers from there so the bench marks the same cache
 * sizes the tile choice used. Fall back to sysconf when the line is absent. */
void caches_from_describe(const char *desc, bench_caches *c)
{
    memset(c, 0, sizeof *c);
    const char *s = desc ? strstr(desc, "L1d ") : NULL;
    long long l1 = 0, l2 = 0, l3 = 0, l3c = 0, dram = 0;
    int cores = 0, pus = 0;
    if (s && sscanf(s, "L1d %lld KiB, L2 %lld KiB per core, L3 %lld KiB (%lld KiB per core), "
                       "%d cores, %d hardware threads, DRAM %lld MiB",
                    &l1, &l2, &l3, &l3c, &cores, &pus, &dram) >= 3) {
        c->l1d = (long)(l1 << 10), c->l2 = (long)(l2 << 10), c->l3 = (long)(l3 << 10);
        c->l3_per_core = (long)(l3c << 10);
        c->cores = cores, c->pus = pus, c->dram = dram << 20;
        snprintf(c->source, sizeof c->source, "fa_context_describe");
    } else {
        snprintf(c->source, sizeof c->source, "sysconf (describe had no cache line)");
    }
#ifdef _SC_LEVEL1_DCACHE_SIZE
    if (c->l1d <= 0) c->l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (c->l2 <= 0) c->l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (c->l3 <= 0) c->l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    if (c->l1d <= 0) c->l1d = 32 << 10;
    if (c->l2 <= 0) c->l2 = 1 << 20;
    if (c->l3 <= 0) c->l3 = 8 << 20;
    if (c->pus <= 0) c->pus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (c->cores <= 0) c->cores = c->pus;
    if (c->dram <= 0) c->dram = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
}

/* --------------------------------------------------------------- the IO model ----- */

/* Visible (query, key) pairs per head: the useful-FLOP count / (4 d). */
static double pairs(const bench_shape *sh)
{
    return bp_flops(sh, 0) / (4.0 * (double)sh->B * (double)sh->H * (double)sh->d);
}

/* Standard attention per head: read Q, K, V and write O (N d each, storage dtype), and the
 * N x N fp32 matrix written (S), read and written (softmax), read (P V): 4 N^2. */
double io_model_standard(const bench_shape *sh)
{
    double es = (double)fa_dtype_size(sh->dtype), d = (double)sh->d;
    double per_head = es * d * (2.0 * sh->Sq + 2.0 * sh->Sk) + 4.0 * 4.0 * pairs(sh);
    return per_head * (double)sh->B * (double)sh->H;
}

/* The unfused backward per head: read Q, K, V, dO and write dQ, dK, dV (storage dtype),
 * and ten passes over an N x N fp32 matrix: S written, soft-maxed (read + write), P read
 * for dV, dP written, P and dP read and dS written, dS read for dQ and again for dK. */
double io_model_standard_bwd(const bench_shape *sh)
{
    double es = (double)fa_dtype_size(sh->dtype), d = (double)sh->d;
    double per_head = es * d * (4.0 * sh->Sq + 6.0 * sh->Sk) + 10.0 * 4.0 * pairs(sh);
    return per_head * (double)sh->B * (double)sh->H;
}

/* Flash per head: Q read once and O written once (2 N d); K and V read once per block of
 * br query rows that stays in cache: 2 d * pairs / br, at least 2 Sk d. With br = M/(4d)
 * this is the paper's Theta(N^2 d^2 / M). */
double io_model_flash(const bench_shape *sh, long br)
{
    double es = (double)fa_dtype_size(sh->dtype), d = (double)sh->d;
    if (br < 1) br = 1;
    double kv = 2.0 * d * pairs(sh) / (double)br;
    if (kv < 2.0 * d * (double)sh->Sk) kv = 2.0 * d * (double)sh->Sk;
    return es * (2.0 * d * (double)sh->Sq + kv) * (double)sh->B * (double)sh->H;
}
