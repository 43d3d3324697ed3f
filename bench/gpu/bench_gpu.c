/* bench_gpu.c - the GPU sweep of PERFORMANCE.md on the CUDA backend: bf16 and fp16,
 * 16k tokens (B = 16384/S), hidden 2048 (H = 2048/d), d in {64,128,256},
 * S in {512..16k}, causal and not, forward and backward (dout = q's buffer; out and lse
 * from the forward). CUDA events around each call, median of REPS after
 * WARM warm-ups; inputs rotate over 2 sets (each tensor 64 MiB > the 60 MiB L2).
 * FLOPs = 4*B*H*S*S*d, halved for causal; backward 2.5x.
 * Output: CSV lines "ours,dir,dtype,d,S,causal,ms,tflops" on stdout.
 * Inputs: random fp16 bit patterns (magnitudes 2^-3..2, random signs; read as bf16 they are
 * finite too), not constants: constant or zero data lowers the tensor cores' power draw and
 * can time faster than real data.
 * Half a second of forwards (bf16 d128 S4k) runs before the first timed cell.
 * Usage: bench_gpu [quick] [fwd] [dN] [SN] [cN] [bf16|fp16|fp32]
 *   fwd: forward only; dN, SN, cN, bf16/fp16: only the cells with that head dim, sequence
 *   length, causal flag or dtype (for profilers: e.g. `bench_gpu d128 S8192 c0 bf16`).
 *   fp32: the fp32 cells instead (not in the default sweep; inputs uniform in +-[1/4, 2]).
 * FA_CUDA_FWD=general in the environment times the general forward kernel (cuda.cu).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "flashattn.h"

#define WARM 3
#define REPS 10
static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv)
{
    int quick = 0, fwd_only = 0, only_d = 0, only_s = 0, only_c = -1, only_t = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "quick")) quick = 1;
        else if (!strcmp(argv[i], "fwd")) fwd_only = 1;
        else if (!strcmp(argv[i], "bf16")) only_t = 0;
        else if (!strcmp(argv[i], "fp16")) only_t = 1;
        else if (!strcmp(argv[i], "fp32")) only_t = 2;
        else if (argv[i][0] == 'd' && atoi(argv[i] + 1) > 0) only_d = atoi(argv[i] + 1);
        else if (argv[i][0] == 'S' && atoi(argv[i] + 1) > 0) only_s = atoi(argv[i] + 1);
        else if (argv[i][0] == 'c' && (argv[i][1] == '0' || argv[i][1] == '1') && !argv[i][2]) only_c = argv[i][1] - '0';
        else { fprintf(stderr, "bench_gpu: unknown argument '%s'\n", argv[i]); return 2; }
    }
    fa_context *ctx;
    if (fa_context_create(&ctx, FA_BACKEND_CUDA) != FA_OK) { fprintf(stderr, "no cuda: %s\n", fa_last_error(NULL)); return 77; }
    fprintf(stderr, "%s\n", fa_context_describe(ctx));
    const size_t tok = 16384, hidden = 2048, bytes = tok * hidden * 2;
    void *buf[2][4];
    unsigned short *host = (unsigned short *)malloc(bytes);
    if (!host) { fprintf(stderr, "malloc failed\n"); return 1; }
    unsigned long long x = 0x9e3779b97f4a7c15ull;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 4; i++) {
            if (cudaMalloc(&buf[s][i], bytes) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
            for (size_t e = 0; e < bytes / 2; e++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                unsigned r = (unsigned)(x >> 32);
                host[e] = (unsigned short)((r & 0x83ffu) | ((12u + ((r >> 10) & 3u)) << 10));
            }
            cudaMemcpy(buf[s][i], host, bytes, cudaMemcpyHostToDevice);
        }
    free(host);
    /* fp32 cells: their own buffers of 4-byte elements */
    void *fbuf[2][4] = { { NULL } };
    if (only_t == 2) {
        float *fh = (float *)malloc(bytes * 2);
        if (!fh) { fprintf(stderr, "malloc failed\n"); return 1; }
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 4; i++) {
                if (cudaMalloc(&fbuf[s][i], bytes * 2) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
                for (size_t e = 0; e < bytes / 2; e++) {
                    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                    unsigned r = (unsigned)(x >> 32);
                    float m = 0.25f + 1.75f * (float)(r & 0xffffu) / 65535.f;
                    fh[e] = (r >> 31) ? -m : m;
                }
                cudaMemcpy(fbuf[s][i], fh, bytes * 2, cudaMemcpyHostToDevice);
            }
        free(fh);
    }
    void *grad[3];
    for (int i = 0; i < 3; i++)
        if (cudaMalloc(&grad[i], only_t == 2 ? bytes * 2 : bytes) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    float *lse[2];
    cudaMalloc((void **)&lse[0], tok * 256 * 4); cudaMalloc((void **)&lse[1], tok * 256 * 4);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    static const int Ss[] = { 512, 1024, 2048, 4096, 8192, 16384 }, ds[] = { 64, 128, 256 };
    /* half a second of forwards first: the first cells are timed at the clocks of a busy GPU,
       not during its ramp from idle (torch's script gets the same through its own earlier
       cells) */
    {
        fa_tensor q = fa_tensor_contiguous(buf[0][0], FA_BF16, 4, 4096, 16, 128), k = fa_tensor_contiguous(buf[0][1], FA_BF16, 4, 4096, 16, 128);
        fa_tensor v = fa_tensor_contiguous(buf[0][2], FA_BF16, 4, 4096, 16, 128), out = fa_tensor_contiguous(buf[0][3], FA_BF16, 4, 4096, 16, 128);
        fa_options o = {0};
        float el = 0.f;
        cudaEventRecord(e0, 0);
        for (int r = 0; r < 1000 && el < 500.f; r++) {
            if (fa_forward(ctx, &out, lse[0], &q, &k, &v, &o) != FA_OK) break;
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&el, e0, e1);
        }
    }
    printf("who,dir,dtype,d,S,causal,ms,tflops\n");
    for (int ti = 0; ti < 3; ti++)
        for (int di = 0; di < 3; di++)
            for (int si = 0; si < 6; si++)
                for (int c = 0; c < 2; c++) {
                    if (quick && (si % 2 || ti == 1)) continue;
                    if ((ti == 2) != (only_t == 2)) continue;   /* fp32 only when asked for */
                    if ((only_d && ds[di] != only_d) || (only_s && Ss[si] != only_s) || (only_c >= 0 && c != only_c) ||
                        (only_t >= 0 && ti != only_t))
                        continue;
                    fa_dtype t = ti == 2 ? FA_F32 : ti ? FA_F16 : FA_BF16;
                    void *(*bs)[4] = ti == 2 ? fbuf : buf;
                    int d = ds[di], S = Ss[si], B = (int)(tok / S), H = (int)(hidden / d);
                    fa_options o = {0};
                    o.causal = c ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
                    float ms[REPS];
                    fa_status st = FA_OK;
                    for (int r = 0; r < WARM + REPS && st == FA_OK; r++) {
                        int s = r & 1;
                        fa_tensor q = fa_tensor_contiguous(bs[s][0], t, B, S, H, d), k = fa_tensor_contiguous(bs[s][1], t, B, S, H, d);
                        fa_tensor v = fa_tensor_contiguous(bs[s][2], t, B, S, H, d), out = fa_tensor_contiguous(bs[s][3], t, B, S, H, d);
                        cudaEventRecord(e0, 0);
                        st = fa_forward(ctx, &out, lse[s], &q, &k, &v, &o);
                        cudaEventRecord(e1, 0);
                        cudaEventSynchronize(e1);
                        if (r >= WARM) cudaEventElapsedTime(&ms[r - WARM], e0, e1);
                    }
                    double fl = 4.0 * B * H * (double)S * S * d / (c ? 2 : 1);
                    const char *tn = t == FA_BF16 ? "bf16" : t == FA_F16 ? "fp16" : "fp32";
                    if (st != FA_OK) { printf("ours,fwd,%s,%d,%d,%d,nan,nan\n", tn, d, S, c); fprintf(stderr, "fwd: %s\n", fa_last_error(ctx)); }
                    else {
                        qsort(ms, REPS, sizeof(float), cmpf);
                        float m = ms[REPS / 2];
                        printf("ours,fwd,%s,%d,%d,%d,%.4f,%.1f\n", tn, d, S, c, m, fl / (m * 1e-3) / 1e12);
                    }
                    /* backward: dout = q's buffer, out and lse from the forward of the same set */
                    if (fwd_only) { fflush(stdout); continue; }
                    st = FA_OK;
                    for (int r = 0; r < WARM + REPS && st == FA_OK; r++) {
                        int s = r & 1;
                        fa_tensor q = fa_tensor_contiguous(bs[s][0], t, B, S, H, d), k = fa_tensor_contiguous(bs[s][1], t, B, S, H, d);
                        fa_tensor v = fa_tensor_contiguous(bs[s][2], t, B, S, H, d), out = fa_tensor_contiguous(bs[s][3], t, B, S, H, d);
                        fa_tensor gq = fa_tensor_contiguous(grad[0], t, B, S, H, d), gk = fa_tensor_contiguous(grad[1], t, B, S, H, d);
                        fa_tensor gv = fa_tensor_contiguous(grad[2], t, B, S, H, d);
                        cudaEventRecord(e0, 0);
                        st = fa_backward(ctx, &gq, &gk, &gv, NULL, &q, &q, &k, &v, &out, lse[s], &o);
                        cudaEventRecord(e1, 0);
                        cudaEventSynchronize(e1);
                        if (r >= WARM) cudaEventElapsedTime(&ms[r - WARM], e0, e1);
                    }
                    if (st != FA_OK) { printf("ours,bwd,%s,%d,%d,%d,nan,nan\n", tn, d, S, c); fprintf(stderr, "bwd: %s\n", fa_last_error(ctx)); }
                    else {
                        qsort(ms, REPS, sizeof(float), cmpf);
                        float m = ms[REPS / 2];
                        printf("ours,bwd,%s,%d,%d,%d,%.4f,%.1f\n", tn, d, S, c, m, 2.5 * fl / (m * 1e-3) / 1e12);
                    }
                    fflush(stdout);
                }
    cudaError_t e = cudaDeviceSynchronize();
    fprintf(stderr, "final device status: %s\n", cudaGetErrorString(e));
    fa_context_destroy(ctx);
    return 0;
}
