/* ring-bench.c - flashattn-ring-bench: per-rank compute, communication and overlap of
 * fa_ring_forward / fa_ring_backward, for strong and weak scaling tables.
 *
 *   mpirun -np R flashattn-ring-bench [--seq S] [--weak] [--batch B] [--heads H]
 *          [--kv-heads Hkv (default H)] [--dim d] [--dtype f32|bf16|f16] [--causal] [--zigzag]
 *          [--backward] [--reps n] [--backend cpu|reference] [--threads t]
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
 * x2.5 for the backward).
 * Example for a 16-core host, one thread per rank:
 *   mpirun -np 4 --bind-to core --map-by core:PE=4 ./ring/flashattn-ring-bench
 *          --seq 16384 --heads 16 --dim 128 --dtype bf16 --causal --zigzag --threads 4
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashattn_ring.h"

typedef struct {
    int64_t S, B, H, Hkv, d;
    int weak, causal, zigzag, backward, reps, threads;
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
    "  -h, --help       this text\n"
    "docs/ring.md (installed under share/doc/flashattn) explains the columns.\n";

/* 0, 1 for --help, or -1 after one line on stderr naming the bad option. */
static int parse(int argc, char **argv, bench_args *a)
{
    *a = (bench_args){ 4096, 1, 8, 0, 64, 0, 0, 0, 0, 5, 0, FA_BF16, FA_BACKEND_CPU };
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

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int R, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    bench_args a;
    quiet = rank != 0;
    const int pr = parse(argc, argv, &a);
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
    size_t e = fa_dtype_size(a.dt);
    void *q = noise((size_t)(a.B * n * a.H * a.d), a.dt), *k = noise((size_t)(a.B * n * a.Hkv * a.d), a.dt);
    void *v = noise((size_t)(a.B * n * a.Hkv * a.d), a.dt), *dout = noise((size_t)(a.B * n * a.H * a.d), a.dt);
    void *out = malloc((size_t)(a.B * n * a.H * a.d) * e + 1), *dq = malloc((size_t)(a.B * n * a.H * a.d) * e + 1);
    void *dk = malloc((size_t)(a.B * n * a.Hkv * a.d) * e + 1), *dv = malloc((size_t)(a.B * n * a.Hkv * a.d) * e + 1);
    float *lse = malloc(sizeof(float) * (size_t)(a.B * a.H * n) + 4);
    fa_tensor tq = fa_tensor_contiguous(q, a.dt, a.B, n, a.H, a.d);
    fa_tensor tk = fa_tensor_contiguous(k, a.dt, a.B, n, a.Hkv, a.d);
    fa_tensor tv = fa_tensor_contiguous(v, a.dt, a.B, n, a.Hkv, a.d);
    fa_tensor to = fa_tensor_contiguous(out, a.dt, a.B, n, a.H, a.d);
    fa_tensor tdo = fa_tensor_contiguous(dout, a.dt, a.B, n, a.H, a.d);
    fa_tensor tdq = fa_tensor_contiguous(dq, a.dt, a.B, n, a.H, a.d);
    fa_tensor tdk = fa_tensor_contiguous(dk, a.dt, a.B, n, a.Hkv, a.d);
    fa_tensor tdv = fa_tensor_contiguous(dv, a.dt, a.B, n, a.Hkv, a.d);
    fa_options o = { 0 };
    o.causal = a.causal ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_NONE;
    double *tot = malloc(sizeof(double) * (size_t)a.reps);
    fa_ring_stats best = { 0 }, *all = malloc(sizeof(fa_ring_stats) * (size_t)a.reps);
    fa_status st = fa_ring_forward(ctx, MPI_COMM_WORLD, &to, lse, &tq, &tk, &tv, &L, &o);
    for (int i = 0; i < a.reps && st == FA_OK; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        st = a.backward
             ? fa_ring_backward(ctx, MPI_COMM_WORLD, &tdq, &tdk, &tdv, NULL, &tdo, &tq, &tk, &tv,
                                &to, lse, &L, &o)
             : fa_ring_forward(ctx, MPI_COMM_WORLD, &to, lse, &tq, &tk, &tv, &L, &o);
        fa_ring_last_stats(&all[i]);
        tot[i] = all[i].total_s;
    }
    if (st != FA_OK) {
        if (rank == 0) fprintf(stderr, "ring call failed: %s\n", fa_ring_last_error());
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
    double row[7] = { (double)n, best.compute_s, best.wait_s, best.total_s, comm, overlap,
                      comm > 0 ? overlap / comm : 1.0 };
    double *rows = rank == 0 ? malloc(sizeof(double) * 7 * (size_t)R) : NULL;
    MPI_Gather(row, 7, MPI_DOUBLE, rows, 7, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int64_t Sg = a.weak ? a.S * R : a.S;
        printf("ring %s, %d ranks, %s scaling, global S=%lld, B=%lld H=%lld Hkv=%lld d=%lld, "
               "%s%s, %s\n", a.backward ? "backward" : "forward", R, a.weak ? "weak" : "strong",
               (long long)Sg, (long long)a.B, (long long)a.H, (long long)a.Hkv, (long long)a.d,
               a.causal ? "causal " : "", a.zigzag ? "zigzag" : "contiguous",
               a.dt == FA_F32 ? "f32" : a.dt == FA_F16 ? "f16" : "bf16");
        printf("%5s %8s %11s %11s %11s %11s %11s %7s\n", "rank", "tokens", "compute_s",
               "wait_s", "total_s", "comm_alone", "overlap_s", "hidden");
        double worst = 0.0;
        for (int r = 0; r < R; r++) {
            double *x = rows + 7 * r;
            printf("%5d %8.0f %11.5f %11.5f %11.5f %11.5f %11.5f %7.2f\n", r, x[0], x[1], x[2],
                   x[3], x[4], x[5], x[6]);
            if (x[3] > worst) worst = x[3];
        }
        double flop = 4.0 * (double)a.B * (double)a.H * (double)Sg * (double)Sg * (double)a.d *
                      (a.causal ? 0.5 : 1.0) * (a.backward ? 2.5 : 1.0);
        printf("slowest rank %.5f s, %.2f GFLOP/s useful\n", worst, flop / worst * 1e-9);
    }
    fa_context_destroy(ctx);
    MPI_Finalize();
    return 0;
}
