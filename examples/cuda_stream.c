/* cuda_stream.c - attention on the GPU: q, k, v in device memory (bf16), the work queued on
 * a stream of the program's own, the result copied back and compared with the reference
 * backend run on the same inputs on the host.
 * Exits 77 (the automake "skipped" status) with a "skipped: ..." line when it cannot run:
 * built without the CUDA runtime, no CUDA device at run time, or a flashattn without its
 * CUDA backend.
 * Build against an installed flashattn and the CUDA runtime:
 *   cc -DFA_EXAMPLE_CUDA cuda_stream.c $(pkg-config --cflags --libs flashattn) \
 *      -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcudart -o cuda_stream
 */
#include <flashattn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP 77

#ifndef FA_EXAMPLE_CUDA
int main(void)
{
    printf("cuda_stream: skipped: built without the CUDA runtime\n");
    return SKIP;
}
#else
#include <cuda_runtime.h>

enum { B = 2, S = 256, H = 4, D = 64, N = B * S * H * D };

static uint16_t to_bf16(float f)   /* round to nearest even */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
        fprintf(stderr, "cuda_stream: %s: %s\n", #call, cudaGetErrorString(e_)); \
        return 1; } } while (0)

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("cuda_stream: skipped: no CUDA device\n");
        return SKIP;
    }
    fa_context *gpu, *ref;
    if (fa_context_create(&gpu, FA_BACKEND_CUDA) != FA_OK) {
        printf("cuda_stream: skipped: %s\n", fa_last_error(NULL));
        return SKIP;
    }
    if (fa_context_create(&ref, FA_BACKEND_REFERENCE) != FA_OK) {
        fprintf(stderr, "cuda_stream: %s\n", fa_last_error(NULL));
        return 1;
    }
    static uint16_t q[N], k[N], v[N];
    static float out[N], expect[N];
    for (int i = 0; i < N; i++) {
        q[i] = to_bf16(sinf(0.37f * i));
        k[i] = to_bf16(cosf(0.11f * i));
        v[i] = to_bf16(sinf(0.05f * i + 1.0f));
    }
    cudaStream_t stream;
    void *dq, *dk, *dv, *dout;
    CU(cudaSetDevice(0));
    CU(cudaStreamCreate(&stream));
    CU(cudaMalloc(&dq, sizeof q));
    CU(cudaMalloc(&dk, sizeof k));
    CU(cudaMalloc(&dv, sizeof v));
    CU(cudaMalloc(&dout, sizeof out));
    CU(cudaMemcpyAsync(dq, q, sizeof q, cudaMemcpyHostToDevice, stream));
    CU(cudaMemcpyAsync(dk, k, sizeof k, cudaMemcpyHostToDevice, stream));
    CU(cudaMemcpyAsync(dv, v, sizeof v, cudaMemcpyHostToDevice, stream));

    fa_options opt = { .causal = FA_CAUSAL_BOTTOM_RIGHT };
    fa_tensor tq = fa_tensor_contiguous(dq, FA_BF16, B, S, H, D);
    fa_tensor tk = fa_tensor_contiguous(dk, FA_BF16, B, S, H, D);
    fa_tensor tv = fa_tensor_contiguous(dv, FA_BF16, B, S, H, D);
    fa_tensor to = fa_tensor_contiguous(dout, FA_F32, B, S, H, D);
    int ok = fa_context_set_device(gpu, 0) == FA_OK &&
             fa_context_set_stream(gpu, stream) == FA_OK &&
             fa_forward(gpu, &to, NULL, &tq, &tk, &tv, &opt) == FA_OK;
    if (!ok) fprintf(stderr, "cuda_stream: %s\n", fa_last_error(gpu));
    /* queued on our stream: copy back on it, then wait */
    CU(cudaMemcpyAsync(out, dout, sizeof out, cudaMemcpyDeviceToHost, stream));
    CU(cudaStreamSynchronize(stream));

    fa_tensor hq = fa_tensor_contiguous(q, FA_BF16, B, S, H, D);
    fa_tensor hk = fa_tensor_contiguous(k, FA_BF16, B, S, H, D);
    fa_tensor hv = fa_tensor_contiguous(v, FA_BF16, B, S, H, D);
    fa_tensor he = fa_tensor_contiguous(expect, FA_F32, B, S, H, D);
    if (ok && fa_forward(ref, &he, NULL, &hq, &hk, &hv, &opt) != FA_OK) {
        fprintf(stderr, "cuda_stream: reference: %s\n", fa_last_error(ref));
        ok = 0;
    }
    double err = 0;
    for (int i = 0; ok && i < N; i++) {
        double e = fabs((double)out[i] - expect[i]);
        if (!(e <= err)) err = e;
    }
    /* bf16 inputs, fp32 accumulation on both sides; the GPU rounds P to bf16 for P V */
    ok = ok && err < 2e-2;
    printf("cuda_stream: forward on device 0 through a stream: max |error| vs the reference "
           "backend %.2e\n", err);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout);
    cudaStreamDestroy(stream);
    fa_context_destroy(gpu);
    fa_context_destroy(ref);
    printf("%s\n", ok ? "cuda_stream: ok" : "cuda_stream: FAILED");
    return ok ? 0 : 1;
}
#endif
