/* stress_cuda.c - a stress loop for the CUDA backend, and its > 2^31-element mode.
 *
 * Stress mode (the default):  stress_cuda [SECONDS [SEED [ROUNDS]]]   (60 s, seed 1, no limit)
 *   A pool of small cases (forward dense fast and general kernel, split-KV decode, backward
 *   with deterministic=1 or 0, varlen forward and backward, KV cache contiguous and paged
 *   with and without the append, fa_combine) is drawn from SEED (stress_cases.c). Each
 *   case's inputs are rounded to the storage dtype once; its outputs are checked against
 *   liboracle's oracle of the case with the one tolerance rule, as in test_cuda (a combine:
 *   against its exact sum with the same rule; stress_check.c); the reference backend, run
 *   once on host copies, gives the KV cache after the append (compared bytewise) and the
 *   rows that must stay untouched.
 *   Each round runs up to 4 slots at once: a case on one of 3 contexts (destroyed and
 *   re-created at random) and one of 4 streams (3 created non-blocking, plus the legacy
 *   default stream), set with fa_context_set_stream; the inputs are uploaded, the outputs
 *   poisoned (0xff, plus a 256-byte guard band) and read back with async copies on that
 *   stream, so a call that ran on another stream would race with them. After the round:
 *   every result within the rule's bound, every element written, rows that must
 *   stay untouched untouched, guard bands intact, and bitwise equal to the first result of
 *   the same case (determinism across contexts, streams and concurrent work; backward only
 *   with deterministic=1). Before a slot's good call there may be a failing call on the same
 *   context (stress_bad.c: bad shapes, host pointers, unsupported head dims, bad counts): it must
 *   return the documented status with a one-line message starting with the function's
 *   name, leave no CUDA error behind, write nothing (its outputs point into a poisoned
 *   buffer that is checked after the round), and the good call after it must be right.
 *   Progress every 10 s; a summary at the end. Exit status: 0 all passed, 1 a failure,
 *   2 a setup error (CUDA runtime), 77 no CUDA context (no GPU or no module).
 *
 * Big mode:  stress_cuda big    (stress_big.c; about 26 GB of device memory at the peak; exit
 *   status as above)
 *   64-bit offsets, as tests/test_big.c on the CPU, on the device; each check is the rule
 *   against liboracle's oracle of a reduced problem that gives the checked rows exactly:
 *   K side: k, v [1, 2^25 + 4096, 1, 64] bf16 (2^31 + 262144 elements each), q [1, 3, 2, 64].
 *     (1) bottom-right causal window 300: the queries see only keys past element 2^31;
 *     (2) no mask over every key: k is zero except the last 512 rows, so the zero keys act
 *         as one key carrying mean(v) with logit log(N) (the oracle gets that key, a
 *         bias of log N, and the 512 tail keys); a wrapped offset reads the wrong tail rows;
 *     (3) the same memory as a paged cache [131088, 256, 1, 64], the block_table on the
 *         last two pages, a 2-row append landing past 2^31.
 *   Q side: q, out [1, 2^21 + 64, 16, 64] bf16 (2^31 + 65536 elements), k, v [1, 64, 4, 64].
 *     (4) forward: rows 0, 2^21 - 1, 2^21 (it starts at element 2^31) and the last two,
 *         against the oracle of those rows (no mask: rows are independent);
 *     (5) backward: dout is zero except on those rows, so dk and dv are those rows'
 *         contributions alone and dq is exactly 0 elsewhere: dq of the rows, dk, dv against
 *         the oracle's backward of the rows, and dq of a few other rows exactly 0.
 */
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include "stress_cuda.h"
#include "dtype.h"

double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

uint64_t rng;
uint64_t rnext(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
double frand(void) { return (double)(rnext() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }
int irand(int n) { return (int)(rnext() % (uint64_t)n); }

size_t esz(fa_dtype t) { return t == FA_F32 ? 4 : 2; }
const char *dtn(fa_dtype t) { return t == FA_BF16 ? "bf16" : t == FA_F16 ? "fp16" : "fp32"; }

long fails;
static int printed;
void failf(const char *fmt, ...)
{
    va_list ap;
    fails++;
    if (printed++ >= 60) { if (printed == 61) printf("(further failures not printed)\n"); return; }
    printf("FAIL ");
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------------------------ */
/* The loop                                                                              */
/* ------------------------------------------------------------------------------------ */

#define NCASES 48
#define NCTX 3
#define NSTREAM 4     /* streams[0] = the legacy default stream (NULL) */
#define NSLOT 4

typedef struct {
    scase *c;
    int ctx, stream, ok;
    char *dev;
    unsigned char *stage;
    size_t stage_cap;
} slot;

static size_t dev_layout(const scase *c, size_t *off)
{
    size_t o = 0;
    for (int i = 0; i < c->na; i++) {
        off[i] = o;
        o += (c->a[i].n * c->a[i].es + GUARD + 255) / 256 * 256;
    }
    return o;
}

static int stress(double seconds, uint64_t seed, long max_rounds)
{
    rng = seed;
    if (max_rounds > 0) printf("stress_cuda: seed %llu, %.0f s, %ld rounds at most\n", (unsigned long long)seed, seconds, max_rounds);
    else printf("stress_cuda: seed %llu, %.0f s\n", (unsigned long long)seed, seconds);
    fa_context *ctx[NCTX];
    cudaStream_t streams[NSTREAM];
    long created = 0;
    for (int i = 0; i < NCTX; i++) {
        if (fa_context_create(&ctx[i], FA_BACKEND_CUDA) != FA_OK) { printf("no cuda context: %s\n", fa_last_error(NULL)); return 77; }
        created++;
    }
    streams[0] = NULL;
    for (int i = 1; i < NSTREAM; i++) CK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    printf("%s", fa_context_describe(ctx[0]));
    CK(cudaMalloc(&junk_d, JUNK_BYTES)); CK(cudaMalloc(&badout_d, JUNK_BYTES));
    CK(cudaMemset(badout_d, 0xff, JUNK_BYTES));
    {
        unsigned short *j = malloc(JUNK_BYTES);
        for (size_t i = 0; i < JUNK_BYTES / 2; i++) j[i] = fa_f32_to_bf16((float)frand());
        CK(cudaMemcpy(junk_d, j, JUNK_BYTES, cudaMemcpyHostToDevice));
        free(j);
    }
    host_junk = malloc(JUNK_BYTES);
    memset(host_junk, 0x5a, JUNK_BYTES);
    unsigned char *chk = malloc(JUNK_BYTES);

    scase *pool[NCASES] = { 0 };
    slot sl[NSLOT];
    memset(sl, 0, sizeof sl);
    long rounds = 0, runs = 0, calls = 0, per_kind[K_NKINDS] = { 0 }, made = 0, bad_by[NBAD] = { 0 };
    double t0 = now(), next = t0 + 10;
    while (now() - t0 < seconds && (max_rounds <= 0 || rounds < max_rounds)) {
        int ns = 1 + irand(NSLOT), any_bad = 0;
        for (int s = 0; s < ns; s++) {
            slot *x = &sl[s];
            int id = irand(NCASES);
            if (!pool[id]) { pool[id] = new_case(id); made++; }
            x->c = pool[id];
            x->ctx = irand(NCTX); x->stream = irand(NSTREAM); x->ok = 1;
            fa_context *cx = ctx[x->ctx];
            cudaStream_t strm = streams[x->stream];
            if (fa_context_set_stream(cx, strm) != FA_OK) failf("fa_context_set_stream: %s", fa_last_error(cx));
            if (irand(5) == 0) {   /* a failing call first, on the same context */
                char desc[160];
                int w = irand(NBAD);
                bad_call(cx, w, desc, sizeof desc);
                bad_by[w]++; any_bad = 1; calls++;
            }
            scase *c = x->c;
            size_t off[MAXA], total = dev_layout(c, off), ob = out_bytes(c);
            if (x->stage_cap < ob) {
                if (x->stage) cudaFreeHost(x->stage);
                x->stage_cap = ob + (1 << 16);
                x->stage = hmalloc(x->stage_cap);
            }
            CK(cudaMallocAsync((void **)&x->dev, total + 256, strm));
            CK(cudaMemsetAsync(x->dev, 0xff, total + 256, strm));
            void *p[MAXA];
            for (int i = 0; i < c->na; i++) {
                p[i] = x->dev + off[i];
                if (c->a[i].init && c->a[i].n)
                    CK(cudaMemcpyAsync(p[i], c->a[i].init, c->a[i].n * c->a[i].es, cudaMemcpyHostToDevice, strm));
            }
            fa_status st = call(c, cx, p, 0);
            calls++; runs++; c->runs++; per_kind[c->kind]++;
            if (st != FA_OK) { failf("%s [ctx %d stream %d]: status %s: %s", c->name, x->ctx, x->stream, fa_status_string(st), fa_last_error(cx)); x->ok = 0; }
            unsigned char *g = x->stage;
            for (int i = 0; i < c->na; i++) {
                if (c->a[i].role == A_IN) continue;
                size_t nb = c->a[i].n * c->a[i].es + GUARD;
                CK(cudaMemcpyAsync(g, p[i], nb, cudaMemcpyDeviceToHost, strm));
                g += nb;
            }
            CK(cudaFreeAsync(x->dev, strm));
        }
        CK(cudaDeviceSynchronize());
        for (int s = 0; s < ns; s++) {
            char where[64];
            snprintf(where, sizeof where, "round %ld ctx %d stream %d", rounds, sl[s].ctx, sl[s].stream);
            if (sl[s].ok) check_run(sl[s].c, sl[s].stage, where);
        }
        if (any_bad) {
            CK(cudaMemcpy(chk, badout_d, JUNK_BYTES, cudaMemcpyDeviceToHost));
            if (!all_ff(chk, JUNK_BYTES)) { failf("round %ld: a failing call wrote into its output memory", rounds); CK(cudaMemset(badout_d, 0xff, JUNK_BYTES)); }
            for (size_t i = 0; i < JUNK_BYTES; i++)
                if (((unsigned char *)host_junk)[i] != 0x5a) { failf("round %ld: a failing call wrote into host memory", rounds); memset(host_junk, 0x5a, JUNK_BYTES); break; }
        }
        if (irand(4) == 0) {   /* churn: destroy a context and create a new one */
            int i = irand(NCTX);
            fa_context_destroy(ctx[i]);
            if (fa_context_create(&ctx[i], FA_BACKEND_CUDA) != FA_OK) { failf("fa_context_create: %s", fa_last_error(NULL)); break; }
            created++;
        }
        rounds++;
        if (now() >= next) {
            printf("[%4.0f s] rounds %ld, cases run %ld (%ld of %d made), calls %ld (%ld failing by design), contexts created %ld, failures %ld\n",
                   now() - t0, rounds, runs, made, NCASES, calls, bad_calls, created, fails);
            fflush(stdout);
            next += 10;
        }
    }
    double el = now() - t0;
    for (int i = 0; i < NCTX; i++) fa_context_destroy(ctx[i]);
    CK(cudaDeviceSynchronize());
    long repeated = 0;
    for (int i = 0; i < NCASES; i++) if (pool[i] && pool[i]->runs > 1 && pool[i]->bitwise) repeated++;
    printf("runs by kind:");
    for (int k = 0; k < K_NKINDS; k++) printf(" %s %ld", kind_name[k], per_kind[k]);
    printf("\nfailing calls by kind (of %d):", NBAD);
    for (int w = 0; w < NBAD; w++) printf(" %ld", bad_by[w]);
    printf("\nSUMMARY stress_cuda: seed %llu, %.1f s, %ld rounds, %ld cases run (%ld distinct, %ld compared bitwise "
           "across runs), %ld calls (%ld failing by design), %ld contexts created, %d streams, failures %ld: %s\n",
           (unsigned long long)seed, el, rounds, runs, made, repeated, calls, bad_calls, created, NSTREAM, fails,
           fails ? "FAIL" : "PASS");
    if (rounds == 0) { printf("FAIL no round ran\n"); return 1; }
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (fa_context_create(&refctx, FA_BACKEND_REFERENCE) != FA_OK) { printf("no reference context: %s\n", fa_last_error(NULL)); return 2; }
    if (argc > 1 && !strcmp(argv[1], "big")) return big();
    double secs = argc > 1 ? atof(argv[1]) : 60;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    long max_rounds = argc > 3 ? atol(argv[3]) : 0;
    if (!(secs > 0) || argc > 4) {
        printf("usage: stress_cuda [SECONDS [SEED [ROUNDS]]] | stress_cuda big\n");
        return 2;
    }
    return stress(secs, seed, max_rounds);
}
