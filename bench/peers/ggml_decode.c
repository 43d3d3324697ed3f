/* ggml_decode.c - llama.cpp/ggml's CPU flash attention (ggml_flash_attn_ext) on the decode
 * cells of `flashattn-bench --mode decode` (bench/decode.c): one new token per sequence
 * against a long cache, GQA 32:8, d = 128, B = 8 x 8k and B = 1 x 64k, fp32, bf16 and fp16
 * caches (ggml's CPU flash attention takes all three). The tensors are laid out as
 * llama.cpp's graph hands them over: q f32, the cache token-major ([B][S][Hkv][d], as
 * flashattn-bench's) seen through a permuted view, one stream per sequence (q->ne[3] = B),
 * no mask (every cell is visible); --head-major stores the cache [B][Hkv][S][d] instead,
 * each head's rows contiguous, where ggml's kernel (one query head at a time over its KV
 * head's rows) streams instead of striding. Each cell is checked once against a
 * double-precision computation here, then timed in alternating rounds (one graph compute,
 * one pass of a read loop: a vectorized sum over a buffer larger than L3 on the same
 * threads); medians. The lines print the K and V bytes read once per second (B x S x Hkv x
 * d x 2 x element size, flashattn-bench's count) and the read loop's rate, so they line up
 * with flashattn-bench's decode lines.
 *
 * ggml is not a dependency of flashattn and this program is not built by the project's
 * Makefiles. To build it against a ggml build (llama.cpp's source tree in $LLAMA, e.g.
 * from PyPI's llama_cpp_python sdist under vendor/llama.cpp):
 *   cmake -S $LLAMA -B $GGML_BUILD -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
 *     -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
 *     -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
 *     -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=ON \
 *     -DCMAKE_C_FLAGS='-march=x86-64-v4 -mtune=generic' \
 *     -DCMAKE_CXX_FLAGS='-march=x86-64-v4 -mtune=generic' -DGGML_AVX=ON -DGGML_AVX2=ON \
 *     -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON \
 *     -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
 *   cmake --build $GGML_BUILD --target ggml-base ggml-cpu
 *   cc -O2 -fopenmp bench/peers/ggml_decode.c -I$LLAMA/ggml/include -L$GGML_BUILD/bin \
 *     -Wl,-rpath,$GGML_BUILD/bin -lggml-base -lggml-cpu -lm -o ggml_decode
 * Run: ./ggml_decode [--threads N] [--rounds N] [--cells 1,3,...] [--head-major]
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ggml.h"
#include "ggml-cpu.h"
#include "../read_loop.h"   /* the read loop flashattn-bench divides by */

enum { H = 32, HKV = 8, D = 128, MAXROUNDS = 99 };

typedef struct { int64_t B, S; enum ggml_type t; const char *name; } cell;

/* flashattn-bench's decode cells, in its order. */
static const cell cells[] = {
    { 8, 8192, GGML_TYPE_F32, "f32" },  { 1, 65536, GGML_TYPE_F32, "f32" },
    { 8, 8192, GGML_TYPE_BF16, "bf16" }, { 1, 65536, GGML_TYPE_BF16, "bf16" },
    { 8, 8192, GGML_TYPE_F16, "f16" },  { 1, 65536, GGML_TYPE_F16, "f16" },
};
#define NCELLS (int)(sizeof cells / sizeof cells[0])

/* --head-major: the cache stored [B][Hkv][S][d], each head's rows contiguous (not
   llama.cpp's layout; ggml's kernel then streams each head); else [B][S][Hkv][d]. */
static int head_major;

/* The element offset of row j of KV head hk of sequence b in a cache of c's shape. */
static size_t kv_offset(const cell *c, int64_t b, int hk, int64_t j)
{
    int64_t row = head_major ? (b * HKV + hk) * c->S + j : (b * c->S + j) * HKV + hk;
    return (size_t)row * D;
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Deterministic uniform values in [-1, 1). */
static float uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* n floats stored as type t at dst, and back (the values the kernel sees). */
static void store_row(enum ggml_type t, const float *x, void *dst, int64_t n)
{
    if (t == GGML_TYPE_F32) memcpy(dst, x, (size_t)n * sizeof *x);
    else if (t == GGML_TYPE_F16) ggml_fp32_to_fp16_row(x, dst, n);
    else ggml_fp32_to_bf16_row(x, dst, n);
}

static void load_row(enum ggml_type t, const void *src, float *x, int64_t n)
{
    if (t == GGML_TYPE_F32) memcpy(x, src, (size_t)n * sizeof *x);
    else if (t == GGML_TYPE_F16) ggml_fp16_to_fp32_row(src, x, n);
    else ggml_bf16_to_fp32_row(src, x, n);
}

/* Fill a [B][S][Hkv][d] cache of type t with uniform values. */
static void fill_cache(const cell *c, void *data, uint64_t seed)
{
    float row[HKV * D];
    size_t es = ggml_type_size(c->t);
    for (int64_t r = 0; r < c->B * c->S; r++) {
        for (int i = 0; i < HKV * D; i++) row[i] = uniform(&seed);
        store_row(c->t, row, (char *)data + (size_t)r * HKV * D * es, HKV * D);
    }
}

/* The largest |out - ref| over every (b, h) row, ref in doubles from the stored cache
   values and the f32 queries; *mag the largest |ref|. -1 on no memory. */
static double check(const cell *c, const float *q, const void *k, const void *v,
                    const float *out, double *mag)
{
    size_t es = ggml_type_size(c->t);
    double *kd = malloc(sizeof(double) * (size_t)(c->S * D));
    double *vd = malloc(sizeof(double) * (size_t)(c->S * D));
    double *p = malloc(sizeof(double) * (size_t)c->S);
    double err = 0.0, scale = 1.0 / sqrt((double)D);
    *mag = 0.0;
    if (!kd || !vd || !p) err = -1.0;
    for (int64_t b = 0; err >= 0 && b < c->B; b++)
        for (int hk = 0; hk < HKV; hk++) {
            float row[D];
            for (int64_t j = 0; j < c->S; j++) {
                size_t off = kv_offset(c, b, hk, j) * es;
                load_row(c->t, (const char *)k + off, row, D);
                for (int e = 0; e < D; e++) kd[j * D + e] = row[e];
                load_row(c->t, (const char *)v + off, row, D);
                for (int e = 0; e < D; e++) vd[j * D + e] = row[e];
            }
            for (int h = hk * (H / HKV); h < (hk + 1) * (H / HKV); h++) {
                const float *qr = q + (b * H + h) * D;
                double m = -INFINITY, sum = 0.0, o[D] = { 0 };
                for (int64_t j = 0; j < c->S; j++) {
                    double s = 0.0;
                    for (int e = 0; e < D; e++) s += qr[e] * kd[j * D + e];
                    p[j] = s * scale;
                    if (p[j] > m) m = p[j];
                }
                for (int64_t j = 0; j < c->S; j++) {
                    double w = exp(p[j] - m);
                    sum += w;
                    for (int e = 0; e < D; e++) o[e] += w * vd[j * D + e];
                }
                const float *got = out + (b * H + h) * D;   /* out is [B][1][H][d] */
                for (int e = 0; e < D; e++) {
                    double ref = o[e] / sum, d = fabs(got[e] - ref);
                    if (!(d <= err)) err = d;   /* NaN sticks */
                    if (fabs(ref) > *mag) *mag = fabs(ref);
                }
            }
        }
    free(kd);
    free(vd);
    free(p);
    return err;
}

/* The bound the check holds ggml to, a fraction of the largest |ref| (mag): the reference
   takes the cache values as stored, so what is left is ggml's rounding of q to the cache
   type and its sums; with an fp16 cache ggml also accumulates P V in fp16, some 5% of
   |ref| at 64k. A wrong head or row is off by about |ref| and fails at every type. */
static double bound(enum ggml_type t, double mag)
{
    return mag * (t == GGML_TYPE_F32 ? 0x1p-14 : t == GGML_TYPE_BF16 ? 0x1p-7 : 0x1p-3);
}

static void *alloc64(size_t n)
{
    return aligned_alloc(64, (n + 63) / 64 * 64);
}

/* One cell: build the graph, check, time. Returns 1 when the check failed. */
static int run_cell(const cell *c, int threads, int rounds, const float *buf, size_t nbuf,
                    struct ggml_threadpool *tp)
{
    char shape[64];
    snprintf(shape, sizeof shape, "B=%lld x %lldk %s", (long long)c->B,
             (long long)(c->S / 1024), c->name);
    struct ggml_init_params ip = { 32 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL,
                                   true };   /* tensor data: the buffers below */
    struct ggml_context *ctx = ggml_init(ip);
    size_t es = ggml_type_size(c->t), nkv = (size_t)(c->B * c->S * HKV * D);
    float *q = alloc64(sizeof(float) * (size_t)(c->B * H * D));
    float *out = alloc64(sizeof(float) * (size_t)(c->B * H * D));
    void *k = alloc64(nkv * es), *v = alloc64(nkv * es), *work = NULL;
    int failed = 0;
    if (!ctx || !q || !out || !k || !v) {
        printf("  %-18s n/a: no memory for the cache\n", shape);
        goto done;
    }
    uint64_t seed = 7;
    for (int64_t i = 0; i < c->B * H * D; i++) q[i] = uniform(&seed);
    fill_cache(c, k, 11);
    fill_cache(c, v, 13);
    /* llama.cpp's shapes: q [d, H, 1, B] and the cache [d, Hkv, S, B], each permuted
       (0, 2, 1, 3) into [d, tokens, heads, B]; a head-major cache is [d, S, Hkv, B]. */
    struct ggml_tensor *tq = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, 1, c->B);
    struct ggml_tensor *tk = head_major ? ggml_new_tensor_4d(ctx, c->t, D, c->S, HKV, c->B)
                                        : ggml_new_tensor_4d(ctx, c->t, D, HKV, c->S, c->B);
    struct ggml_tensor *tv = head_major ? ggml_new_tensor_4d(ctx, c->t, D, c->S, HKV, c->B)
                                        : ggml_new_tensor_4d(ctx, c->t, D, HKV, c->S, c->B);
    tq->data = q;
    tk->data = k;
    tv->data = v;
    if (!head_major) {
        tk = ggml_permute(ctx, tk, 0, 2, 1, 3);
        tv = ggml_permute(ctx, tv, 0, 2, 1, 3);
    }
    struct ggml_tensor *fa = ggml_flash_attn_ext(ctx, ggml_permute(ctx, tq, 0, 2, 1, 3), tk, tv,
                                                 NULL, 1.0f / sqrtf((float)D), 0.0f, 0.0f);
    fa->data = out;
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, fa);
    struct ggml_cplan plan = ggml_graph_plan(gf, threads, tp);
    if (plan.work_size > 0 && !(work = alloc64(plan.work_size))) {
        printf("  %-18s n/a: no memory for ggml's work buffer\n", shape);
        goto done;
    }
    plan.work_data = work;
    double mag = 0.0, err = -1.0;
    if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS) {
        printf("  %-18s FAILED: ggml_graph_compute\n", shape);
        failed = 1;
        goto done;
    }
    if ((err = check(c, q, k, v, out, &mag)) < 0 || !(err <= bound(c->t, mag))) {
        printf("  %-18s FAILED: the double-precision check (max abs err %.1e, bound %.1e%s)\n",
               shape, err, bound(c->t, mag), err < 0 ? "; no memory for the check" : "");
        failed = 1;
        goto done;
    }
    double tk_s[MAXROUNDS], tr_s[MAXROUNDS];
    ggml_graph_compute(gf, &plan);   /* warm-up */
    read_pass(buf, nbuf, threads);
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        ggml_graph_compute(gf, &plan);
        tk_s[r] = now_s() - t0;
        tr_s[r] = read_pass(buf, nbuf, threads);
    }
    double kv = 2.0 * (double)nkv * (double)es;
    double gk = kv / median(tk_s, rounds) / 1e9;
    double gr = (double)nbuf * 4.0 / median(tr_s, rounds) / 1e9;
    printf("  %-18s KV %7.1f MB  %6.2f GB/s  read loop %6.2f GB/s  ratio %.2f  "
           "(ggml_flash_attn_ext; check err %.1e <= %.1e, |ref| max %.1e)\n",
           shape, kv / 1e6, gk, gr, gk / gr, err, bound(c->t, mag), mag);
done:
    fflush(stdout);
    free(work);
    free(q);
    free(out);
    free(k);
    free(v);
    if (ctx) ggml_free(ctx);
    return failed;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ggml_decode [--threads N] [--rounds N] [--cells LIST] [--head-major]\n"
               "  --threads N   threads for ggml and the read loop (default: all cores)\n"
               "  --rounds N    timed rounds per cell, 3 to %d (default 9, flashattn-bench's)\n"
               "  --head-major  the cache stored [B, Hkv, S, d] (default [B, S, Hkv, d], as\n"
               "                llama.cpp's cache and flashattn-bench's)\n"
               "  --cells LIST  comma-separated cell numbers (default: all):\n", MAXROUNDS);
    for (int i = 0; i < NCELLS; i++)
        fprintf(f, "                  %d  B=%lld x %lldk %s\n", i + 1, (long long)cells[i].B,
                (long long)(cells[i].S / 1024), cells[i].name);
}

/* Parses an integer in [lo, hi]; 0 on success. */
static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || x < lo || x > hi) return 1;
    *out = (int)x;
    return 0;
}

int main(int argc, char **argv)
{
    int threads = omp_get_num_procs(), rounds = 9, want[NCELLS];
    for (int i = 0; i < NCELLS; i++) want[i] = 1;
    for (int a = 1; a < argc; a++) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[a], "--threads")) {
            if (parse_int(v, 1, 4096, &threads)) goto bad;
            a++;
        } else if (!strcmp(argv[a], "--head-major")) {
            head_major = 1;
        } else if (!strcmp(argv[a], "--rounds")) {
            if (parse_int(v, 3, MAXROUNDS, &rounds)) goto bad;
            a++;
        } else if (!strcmp(argv[a], "--cells")) {
            char list[256];
            if (!v || strlen(v) >= sizeof list) goto bad;
            strcpy(list, v);
            for (int i = 0; i < NCELLS; i++) want[i] = 0;
            for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                int n;
                if (parse_int(t, 1, NCELLS, &n)) goto bad;
                want[n - 1] = 1;
            }
            a++;
        } else {
            goto bad;
        }
        continue;
    bad:
        fprintf(stderr, "ggml_decode: bad option or value at '%s'\n", argv[a]);
        usage(stderr);
        return 2;
    }
    /* The read loop's buffer: 512 MiB, or 4 x L3 when that is more (flashattn-bench's). */
    size_t nbuf = (size_t)512 << 20 >> 2;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && (size_t)l3 > nbuf) nbuf = (size_t)l3;
    float *buf = alloc64(nbuf * sizeof(float));
    if (!buf) {
        fprintf(stderr, "ggml_decode: no memory for the read loop's buffer\n");
        return 1;
    }
    for (size_t i = 0; i < nbuf; i++) buf[i] = (float)(i & 7);
    ggml_cpu_init();
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
    printf("\n== Decode: ggml_flash_attn_ext (ggml %s), 1 new token, H=32 Hkv=8 d=128, no mask, "
           "cache %s; KV bytes read once per second against a read loop (medians of "
           "alternating rounds, %d threads) ==\nggml cpu:\n", ggml_version(),
           head_major ? "[B, Hkv, S, d]" : "[B, S, Hkv, d]", threads);
    int failed = 0;
    for (int i = 0; i < NCELLS; i++)
        if (want[i]) failed |= run_cell(&cells[i], threads, rounds, buf, nbuf, tp);
    ggml_threadpool_free(tp);
    free(buf);
    return failed;
}
