/* cuda_util.c - test_cuda's shared machinery (see cuda_test.h): the random stream,
 * buffer pairs, the PASS/FAIL line, and the bridge to liboracle. */
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "cuda_test.h"
#include "dtype.h"

int fails, passes, quick;
fa_context *cu, *ref;
uint64_t rng = 0x1234567ULL;

double frand(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}


size_t esz(fa_dtype t) { return t == FA_F32 ? 4 : 2; }
const char *dtname(fa_dtype t) { return t == FA_F32 ? "fp32" : t == FA_BF16 ? "bf16" : "fp16"; }

buf mk(size_t n, fa_dtype t, double amp)
{
    buf b = { malloc(n * esz(t) + 64), NULL, n, t };
    for (size_t i = 0; i < n; i++) fa_store(b.h, t, i, (float)(amp * frand()));
    CK(cudaMalloc(&b.d, n * esz(t) + 256));
    CK(cudaMemcpy(b.d, b.h, n * esz(t), cudaMemcpyHostToDevice));
    return b;
}
buf mk_poison(size_t n, fa_dtype t)
{
    buf b = { calloc(n * esz(t) + 256, 1), NULL, n, t };
    CK(cudaMalloc(&b.d, n * esz(t) + 256));
    CK(cudaMemset(b.d, 0xff, n * esz(t) + 256));
    return b;
}
buf mk_zero(size_t n, fa_dtype t)
{
    buf b = mk_poison(n, t);
    CK(cudaMemset(b.d, 0, n * esz(t)));
    memset(b.h, 0, n * esz(t));
    return b;
}
void fr(buf *b) { free(b->h); cudaFree(b->d); b->h = b->d = NULL; }
void pull(buf *b) { CK(cudaMemcpy(b->h, b->d, b->n * esz(b->t) + 256, cudaMemcpyDeviceToHost)); }
fa_tensor view(void *data, fa_dtype t, int64_t B, int64_t S, int64_t H, int64_t D, int transposed)
{
    fa_tensor x = fa_tensor_contiguous(data, t, B, S, H, D);
    if (S == 0) x.stride[0] = H * D;   /* an empty view still needs non-aliasing strides */
    if (transposed) { x.stride[2] = S * D; x.stride[1] = D; }   /* [B, H, S, D] storage */
    return x;
}
int guard_ok(const buf *b)
{
    const unsigned char *g = (const unsigned char *)b->h + b->n * esz(b->t);
    for (int i = 0; i < 256; i++) if (g[i] != 0xff) return 0;
    return 1;
}

double absmax(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

void result(const char *name, int ok, const char *fmt, ...)
{
    va_list ap;
    if (ok) passes++; else fails++;
    if (!ok || !quick) {
        printf("%s %-64s ", ok ? "PASS" : "FAIL", name);
        va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

double *host_rows(const void *h, fa_dtype t, int64_t S, int64_t H, int64_t D, int transposed,
                  int64_t b, int64_t s0, int64_t n)
{
    double *x = malloc(sizeof(double) * (size_t)(n * H * D > 0 ? n * H * D : 1));
    if (!x) { printf("out of memory\n"); exit(2); }
    for (int64_t s = 0; s < n; s++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t d = 0; d < D; d++) {
                int64_t i = transposed ? ((b * H + hh) * S + s0 + s) * D + d
                                       : ((b * S + s0 + s) * H + hh) * D + d;
                x[(s * H + hh) * D + d] = fa_load(h, t, i);
            }
    return x;
}

double *host_all(const buf *b, size_t n)
{
    double *x = malloc(sizeof(double) * (n ? n : 1));
    if (!x) { printf("out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) x[i] = fa_load(b->h, b->t, (int64_t)i);
    return x;
}

double *lse_bhs(const float *l, int64_t B, int64_t H, int64_t S)
{
    double *x = malloc(sizeof(double) * (size_t)(B * H * S > 0 ? B * H * S : 1));
    if (!x) { printf("out of memory\n"); exit(2); }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) x[h * B * S + b * S + i] = l[(b * H + h) * S + i];
    return x;
}

int oracle_ok(const or_oracle *o, or_tensor t, const double *ours, double *ratio)
{
    or_result r;
    int ok = or_check(o, t, ours, &r);
    if (ratio) *ratio = r.bound > 0 ? r.err / r.bound : r.err > 0 ? INFINITY : 0.0;
    if (!ok) {
        char m[512];
        or_result_str(&r, t, m, sizeof m);
        printf("   %s\n", m);
    }
    return ok;
}
