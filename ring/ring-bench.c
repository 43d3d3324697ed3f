/* ring-bench.c - flashattn-ring-bench: per-rank compute, communication and overlap of
 * fa_ring_forward / fa_ring_backward, for strong and weak scaling tables.
 *
 *   mpirun -np R flashattn-ring-bench [--seq S] [--weak] [--batch B] [--heads H]
 *          [--kv-heads Hkv (default H)] [--dim d] [--dtype f32|bf16|f16] [--causal] [--zigzag]
 *          [--backward] [--reps n] [--backend cpu|reference] [--threads t] [--single]
 *
 * Strong scaling (default): the global sequence is S tokens, each rank holds S/R of them.
 * Weak scaling (--weak): each rank holds S tokens (global S x R). Each rank prints, for
 * the median of --reps timed calls (after one warm-up): its compute time (fa_forward /
 * fa_backward / fa_combine and the sums), its wait (blocked on messages: the
 * communication the compute did not hide), the call's total, the time the same K/V (and
 * dK/dV) messages take around the ring with no compute (comm alone), the communication
 * time hidden behind the compute (overlap_s = comm alone - wait, at least 0; the wait also
 * holds any wait for a slower neighbour) and hidden = overlap_s / comm alone. Rank 0 adds
 * the slowest rank's total and the useful GFLOP/s (4 B H S^2 d, halved when causal,
 * x2.5 for the backward), and one "summary" line of key=value fields for scripts.
 * --single (one rank) times fa_forward / fa_backward over the whole sequence in this one
 * process instead of the ring: the baseline of the same problem without the ring, at any
 * thread count. Every rank also reports where it ran: the CPUs its threads may use and, for
 * each thread, the CPU it last ran on and its affinity mask (/proc, sched_getaffinity).
 * Example for a 16-core host, four threads per rank on four cores of their own:
 *   mpirun -np 4 --bind-to core --map-by core:PE=4 ./ring/flashattn-ring-bench
 *          --seq 16384 --heads 16 --dim 128 --dtype bf16 --causal --zigzag --threads 4
 */
#define _GNU_SOURCE 1   /* sched_getaffinity, CPU_ISSET */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "flashattn_ring.h"

typedef struct {
    int64_t S, B, H, Hkv, d;
    int weak, causal, zigzag, backward, reps, threads, single;
    fa_dtype dt;
    fa_backend backend;
} bench_args;

static int quiet;   /* ranks other than 0 do not repeat rank 0's option errors */

static int bad_opt(const char *opt, const char *val)
{
    if (!quiet) fprintf(stderr, "flashattn-ring-bench: bad option %s%s%s (try --help)\n", opt, val ? " " : "",
            val ? val : "");
    return -1;
}

/* A whole non-negative decimal number (below 2^31); 0 or -1. */
static int num(const char *v, long long *x)
{
    char *end;
    *x = strtoll(v, &end, 10);
    return end == v || *end || *x < 0 || *x > 0x7fffffff ? -1 : 0;
}

static const char usage[] =
    "usage: mpirun -np R flashattn-ring-bench [OPTION]...\n"
    "Per-rank compute, wait and overlap of fa_ring_forward (and fa_ring_backward).\n"
    "  --seq S          global sequence length (default 4096); with --weak, per rank\n"
    "  --weak           weak scaling: each rank holds S tokens\n"
    "  --batch B        batch (default 1)\n"
    "  --heads H        query heads (default 8)\n"
    "  --kv-heads HKV   K/V heads, dividing H (default H)\n"
    "  --dim D          head dim (default 64)\n"
    "  --dtype T        f32, f16 or bf16 (default bf16)\n"
    "  --causal         causal mask (bottom-right)\n"
    "  --zigzag         zigzag layout (default contiguous)\n"
    "  --backward       time fa_ring_backward too\n"
    "  --reps N         timed calls per rank, the median reported (default 5)\n"
    "  --backend NAME   cpu (default) or reference\n"
    "  --threads T      threads per rank (default 0: the library's default)\n"
    "  --single         no ring: fa_forward (fa_backward) over the whole sequence in one\n"
    "                   process (mpirun -np 1), the baseline without the ring\n"
    "  -h, --help       this text\n"
    "docs/ring.md (installed under share/doc/flashattn) explains the columns.\n";

/* 0, 1 for --help, or -1 after one line on stderr naming the bad option. */
static int parse(int argc, char **argv, bench_args *a)
{
    *a = (bench_args){ 4096, 1, 8, 0, 64, 0, 0, 0, 0, 5, 0, 0, FA_BF16, FA_BACKEND_CPU };
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) return 1;
#define NUM(flag, field) if (!strcmp(o, flag) && val) { \
            long long x; \
            if (num(val, &x)) return bad_opt(o, val); \
            a->field = x; i++; continue; }
        NUM("--seq", S) NUM("--batch", B) NUM("--heads", H) NUM("--kv-heads", Hkv)
        NUM("--dim", d) NUM("--reps", reps) NUM("--threads", threads)
#undef NUM
        if (!strcmp(o, "--weak")) { a->weak = 1; continue; }
        if (!strcmp(o, "--causal")) { a->causal = 1; continue; }
        if (!strcmp(o, "--zigzag")) { a->zigzag = 1; continue; }
        if (!strcmp(o, "--backward")) { a->backward = 1; continue; }
        if (!strcmp(o, "--single")) { a->single = 1; continue; }
        if (!strcmp(o, "--dtype") && val) {
            if (strcmp(val, "f32") && strcmp(val, "f16") && strcmp(val, "bf16")) return bad_opt(o, val);
            a->dt = !strcmp(val, "f32") ? FA_F32 : !strcmp(val, "f16") ? FA_F16 : FA_BF16;
            i++;
            continue;
        }
        if (!strcmp(o, "--backend") && val) {
            if (strcmp(val, "cpu") && strcmp(val, "reference")) return bad_opt(o, val);
            a->backend = !strcmp(val, "reference") ? FA_BACKEND_REFERENCE : FA_BACKEND_CPU;
            i++;
            continue;
        }
        return bad_opt(o, "(unknown, or without its value)");
    }
    if (a->Hkv == 0) a->Hkv = a->H;   /* default: as many K/V heads as query heads */
    if (a->H <= 0 || a->Hkv <= 0 || a->H % a->Hkv) return bad_opt("--heads/--kv-heads", "KV heads must divide H");
    if (a->S < 1 || a->B < 1 || a->d < 1 || a->reps < 1) return bad_opt("--seq/--batch/--dim/--reps", "must be >= 1");
    return a->reps >= 1 ? 0 : -1;
}

static void *noise(size_t n, fa_dtype dt)
{
    size_t e = fa_dtype_size(dt);
    unsigned char *p = malloc(n * e + 1);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float f = (float)(x >> 8) / 16777216.0f - 0.5f;
        if (dt == FA_F32) memcpy(p + i * 4, &f, 4);
        else {   /* top half of the fp32 (bf16), or a small fp16 value: both finite */
            uint32_t u;
            memcpy(&u, &f, 4);
            uint16_t h = dt == FA_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(0x3000 | (x >> 22));
            memcpy(p + i * 2, &h, 2);
        }
    }
    return p;
}

/* The messages of one call with no compute: R-1 K/V steps (and R dK/dV steps). */
static double comm_alone(MPI_Comm comm, size_t kv_bytes, size_t dkv_bytes, int backward)
{
    int R, r;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &r);
    if (R == 1) return 0.0;
    char *a = calloc(kv_bytes + dkv_bytes + 1, 1), *b = calloc(kv_bytes + dkv_bytes + 1, 1);
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    for (int t = 0; t < R; t++) {
        MPI_Request rq[4];
        int k = 0;
        if (t < R - 1) {
            MPI_Irecv(b, (int)kv_bytes, MPI_BYTE, (r + R - 1) % R, 1, comm, &rq[k++]);
            MPI_Isend(a, (int)kv_bytes, MPI_BYTE, (r + 1) % R, 1, comm, &rq[k++]);
        }
        if (backward) {
            MPI_Irecv(b + kv_bytes, (int)dkv_bytes, MPI_BYTE, (r + R - 1) % R, 2, comm, &rq[k++]);
            MPI_Isend(a + kv_bytes, (int)dkv_bytes, MPI_BYTE, (r + 1) % R, 2, comm, &rq[k++]);
        }
        MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
    }
    double t = MPI_Wtime() - t0;
    free(a);
    free(b);
    return t;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

#define ROW 7          /* tokens, compute, wait, total, comm alone, overlap, hidden */
#define PLACE 2048     /* one rank's placement line */

/* The CPUs of set as a list ("0-3,8,10-11"). */
static void cpu_list(const cpu_set_t *set, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && n < len; c++) {
        if (!CPU_ISSET(c, set) || (c > 0 && CPU_ISSET(c - 1, set))) continue;
        int last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set)) last++;
        if (last > c) n += (size_t)snprintf(buf + n, len - n, "%s%d-%d", n ? "," : "", c, last);
        else n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", c);
    }
}

/* The CPU thread tid of this process last ran on (field 39 of its /proc stat), or -1. */
static int task_cpu(const char *tid)
{
    char path[300], line[1024];
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *p = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
    for (int field = 2; p && field < 39; field++) p = strchr(p + 1, ' ');
    fclose(f);
    return p ? atoi(p + 1) : -1;
}

/* Where this rank runs: its host, the CPUs its threads may use (the union of their
 * affinity masks: an OpenMP runtime that binds threads narrows the main thread's own) and
 * each thread (the main one, the OpenMP team, MPI's) as cpu{allowed}. */
static void placement(int rank, char *buf, size_t len)
{
    char host[64] = "?", list[256], threads[PLACE] = "";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    cpu_set_t all, set;
    CPU_ZERO(&all);
    size_t n = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && n < sizeof threads && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(list, sizeof list, "?");
        if (sched_getaffinity((pid_t)atoi(e->d_name), sizeof set, &set) == 0) {
            CPU_OR(&all, &all, &set);
            cpu_list(&set, list, sizeof list);
        }
        n += (size_t)snprintf(threads + n, sizeof threads - n, " %d{%s}", task_cpu(e->d_name), list);
    }
    if (d) closedir(d);
    cpu_list(&all, list, sizeof list);
    snprintf(buf, len, "rank %d on %s: cpus %s; threads as cpu{allowed}:%s", rank, host, list, threads);
}

typedef struct {
    fa_tensor q, k, v, out, dout, dq, dk, dv;
    float *lse;
} bench_io;

/* One call: the ring's (with its stats), or with --single fa_forward / fa_backward over the
 * whole sequence in this process (compute = total = the call's time, no wait). */
static fa_status one_call(fa_context *ctx, const bench_args *a, bench_io *t, const fa_ring_layout *L,
                          const fa_options *o, int backward, fa_ring_stats *s)
{
    if (!a->single) {
        fa_status st = backward
            ? fa_ring_backward(ctx, MPI_COMM_WORLD, &t->dq, &t->dk, &t->dv, NULL, &t->dout, &t->q,
                               &t->k, &t->v, &t->out, t->lse, L, o)
            : fa_ring_forward(ctx, MPI_COMM_WORLD, &t->out, t->lse, &t->q, &t->k, &t->v, L, o);
        fa_ring_last_stats(s);
        return st;
    }
    double t0 = MPI_Wtime();
    fa_status st = backward
        ? fa_backward(ctx, &t->dq, &t->dk, &t->dv, NULL, &t->dout, &t->q, &t->k, &t->v, &t->out,
                      t->lse, o)
        : fa_forward(ctx, &t->out, t->lse, &t->q, &t->k, &t->v, o);
    double dt = MPI_Wtime() - t0;
    *s = (fa_ring_stats){ dt, 0.0, dt, 0, 1 };
    return st;
}


/* Rank 0: the table, each rank's placement, the slowest rank, the summary line. */
static void report(const bench_args *a, int R, const double *rows, const char *places)
{
    int64_t Sg = a->weak ? a->S * R : a->S;
    const char *env[3] = { getenv("OMP_PLACES"), getenv("OMP_PROC_BIND"), getenv("OMP_NUM_THREADS") };
    printf("%s %s, %d ranks, %s scaling, global S=%lld, B=%lld H=%lld Hkv=%lld d=%lld, "
           "%s%s, %s\n", a->single ? "single process (no ring)" : "ring",
           a->backward ? "backward" : "forward", R, a->weak ? "weak" : "strong", (long long)Sg,
           (long long)a->B, (long long)a->H, (long long)a->Hkv, (long long)a->d,
           a->causal ? "causal " : "", a->single ? "one call" : a->zigzag ? "zigzag" : "contiguous",
           a->dt == FA_F32 ? "f32" : a->dt == FA_F16 ? "f16" : "bf16");
    printf("threads per rank %d (0: the library's default), OMP_PLACES=%s OMP_PROC_BIND=%s "
           "OMP_NUM_THREADS=%s\n", a->threads, env[0] ? env[0] : "(unset)",
           env[1] ? env[1] : "(unset)", env[2] ? env[2] : "(unset)");
    printf("%5s %8s %11s %11s %11s %11s %11s %7s\n", "rank", "tokens", "compute_s", "wait_s",
           "total_s", "comm_alone", "overlap_s", "hidden");
    double worst = 0.0, cmin = 1e300, cmax = 0.0, wmin = 1e300, wmax = 0.0, comm = 0.0;
    for (int r = 0; r < R; r++) {
        const double *x = rows + ROW * r;
        printf("%5d %8.0f %11.5f %11.5f %11.5f %11.5f %11.5f %7.2f\n", r, x[0], x[1], x[2], x[3],
               x[4], x[5], x[6]);
        worst = x[3] > worst ? x[3] : worst;
        cmin = x[1] < cmin ? x[1] : cmin;
        cmax = x[1] > cmax ? x[1] : cmax;
        wmin = x[2] < wmin ? x[2] : wmin;
        wmax = x[2] > wmax ? x[2] : wmax;
        comm = x[4] > comm ? x[4] : comm;
    }
    for (int r = 0; r < R; r++) printf("placement: %s\n", places + (size_t)PLACE * (size_t)r);
    double flop = 4.0 * (double)a->B * (double)a->H * (double)Sg * (double)Sg * (double)a->d *
                  (a->causal ? 0.5 : 1.0) * (a->backward ? 2.5 : 1.0);
    printf("slowest rank %.5f s, %.2f GFLOP/s useful\n", worst, flop / worst * 1e-9);
    printf("summary mode=%s dir=%s scaling=%s ranks=%d threads=%d S=%lld slowest=%.5f "
           "compute_min=%.5f compute_max=%.5f wait_min=%.5f wait_max=%.5f comm=%.5f gflops=%.2f\n",
           a->single ? "single" : "ring", a->backward ? "backward" : "forward",
           a->weak ? "weak" : "strong", R, a->threads, (long long)Sg, worst, cmin, cmax, wmin,
           wmax, comm, flop / worst * 1e-9);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int R, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    bench_args a;
    quiet = rank != 0;
    int pr = parse(argc, argv, &a);
    if (pr == 0 && a.single && R != 1) pr = bad_opt("--single", "(one process: mpirun -np 1)");
    if (pr != 0) {
        if (pr > 0 && rank == 0) fputs(usage, stdout);
        MPI_Finalize();
        return pr > 0 ? 0 : 2;
    }
    int64_t n = a.weak ? a.S : a.S / R + (rank < a.S % R);
    fa_ring_layout L = { a.zigzag ? FA_RING_ZIGZAG : FA_RING_CONTIGUOUS, { n, 0 }, { n, 0 } };
    if (a.zigzag) { L.q_len[0] = L.kv_len[0] = n / 2; L.q_len[1] = L.kv_len[1] = n - n / 2; }
    fa_context *ctx;
    if (fa_context_create(&ctx, a.backend) != FA_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, fa_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fa_context_set_threads(ctx, a.threads);
    size_t e = fa_dtype_size(a.dt), nq = (size_t)(a.B * n * a.H * a.d), nk = (size_t)(a.B * n * a.Hkv * a.d);
    void *q = noise(nq, a.dt), *k = noise(nk, a.dt), *v = noise(nk, a.dt), *dout = noise(nq, a.dt);
    void *out = malloc(nq * e + 1), *dq = malloc(nq * e + 1), *dk = malloc(nk * e + 1), *dv = malloc(nk * e + 1);
    bench_io io = {
        fa_tensor_contiguous(q, a.dt, a.B, n, a.H, a.d), fa_tensor_contiguous(k, a.dt, a.B, n, a.Hkv, a.d),
        fa_tensor_contiguous(v, a.dt, a.B, n, a.Hkv, a.d), fa_tensor_contiguous(out, a.dt, a.B, n, a.H, a.d),
        fa_tensor_contiguous(dout, a.dt, a.B, n, a.H, a.d), fa_tensor_contiguous(dq, a.dt, a.B, n, a.H, a.d),
        fa_tensor_contiguous(dk, a.dt, a.B, n, a.Hkv, a.d), fa_tensor_contiguous(dv, a.dt, a.B, n, a.Hkv, a.d),
        malloc(sizeof(float) * (size_t)(a.B * a.H * n) + 4)
    };
    fa_options o = { 0 };
    o.causal = a.causal ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_NONE;
    double *tot = malloc(sizeof(double) * (size_t)a.reps);
    fa_ring_stats best = { 0 }, *all = malloc(sizeof(fa_ring_stats) * (size_t)a.reps);
    fa_status st = one_call(ctx, &a, &io, &L, &o, 0, &best);   /* warm-up (and out, lse) */
    for (int i = 0; i < a.reps && st == FA_OK; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        st = one_call(ctx, &a, &io, &L, &o, a.backward, &all[i]);
        tot[i] = all[i].total_s;
    }
    if (st != FA_OK) {
        if (rank == 0) fprintf(stderr, "%s call failed: %s\n", a.single ? "single" : "ring",
                               a.single ? fa_last_error(ctx) : fa_ring_last_error());
        MPI_Finalize();
        return 1;
    }
    qsort(tot, (size_t)a.reps, sizeof *tot, cmp_double);
    for (int i = 0; i < a.reps; i++)
        if (all[i].total_s == tot[a.reps / 2]) best = all[i];
    int64_t nmax = a.weak ? a.S : (a.S + R - 1) / R;
    size_t kvb = (size_t)(a.B * nmax * a.Hkv * 2 * a.d) * e;
    size_t dkvb = (size_t)(a.B * nmax * a.Hkv * 2 * a.d) * sizeof(float);
    double comm = comm_alone(MPI_COMM_WORLD, kvb, dkvb, a.backward);
    double overlap = comm > best.wait_s ? comm - best.wait_s : 0.0;
    double row[ROW] = { (double)n, best.compute_s, best.wait_s, best.total_s, comm, overlap,
                        comm > 0 ? overlap / comm : 1.0 };
    char place[PLACE];
    placement(rank, place, sizeof place);
    double *rows = rank == 0 ? malloc(sizeof(double) * ROW * (size_t)R) : NULL;
    char *places = rank == 0 ? malloc((size_t)PLACE * (size_t)R) : NULL;
    MPI_Gather(row, ROW, MPI_DOUBLE, rows, ROW, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(place, PLACE, MPI_CHAR, places, PLACE, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) report(&a, R, rows, places);
    fa_context_destroy(ctx);
    MPI_Finalize();
    return 0;
}
