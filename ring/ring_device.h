/* ring_device.h - where the ring's block calls run, and a CUDA context's tensors staged
 * through host memory.
 *
 * With a reference or CPU context everything is the caller's context and host memory:
 * the block calls and merges run on ctx, nothing is copied. With a CUDA context the ring
 * keeps its state in host memory (the caller's device inputs copied to the host once,
 * the K/V blocks sent from host buffers), merges on an internal CPU context, and runs
 * each block's fa_forward / fa_backward on the CUDA context: its inputs are copied to
 * device scratch before the call and its results back after it. The CUDA runtime
 * (libcudart) is loaded at the first such call ($FA_RING_CUDART, else libcudart.so,
 * libcudart.so.13, libcudart.so.12); without it the call is FA_ERR_UNSUPPORTED.
 */
#ifndef FA_RING_DEVICE_H
#define FA_RING_DEVICE_H

#include <stddef.h>
#include "flashattn.h"

typedef struct {
    int on;               /* staging: ctx is a CUDA context                            */
    fa_context *ctx;      /* the caller's: the block calls                             */
    fa_context *host;     /* merges and host-side calls (ctx itself when !on)          */
    void *dev[12];        /* device scratch of the block calls                         */
    size_t dev_bytes[12];
    const float *slopes;  /* device ALiBi slopes (staging), or NULL                    */
} ring_rt;

/* Sets up rt for ctx; with a CUDA context, loads the runtime, makes the device of
   `device_ptr` current and creates the CPU context. Returns FA_OK or a status with why
   in msg. ring_rt_close frees what it holds (also after a failed open). */
fa_status ring_rt_open(ring_rt *rt, fa_context *ctx, const void *device_ptr, char *msg,
                       size_t len);
void      ring_rt_close(ring_rt *rt);

/* Copies between two views of the same shape and dtype, either side device or host
   (staging only). */
fa_status ring_rt_copy_view(const fa_tensor *dst, const fa_tensor *src, char *msg, size_t len);
fa_status ring_rt_copy(void *dst, const void *src, size_t bytes, char *msg, size_t len);

/* fa_forward / fa_backward of one block on rt->ctx, every tensor and array in host
   memory (out, dq, dk, dv fp32; opt's bias and slopes host arrays). */
fa_status ring_rt_forward(ring_rt *rt, fa_tensor *out, float *lse, const fa_tensor *q,
                          const fa_tensor *k, const fa_tensor *v, const fa_options *opt,
                          char *msg, size_t len);
fa_status ring_rt_backward(ring_rt *rt, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv,
                           const fa_tensor *dout, const fa_tensor *q, const fa_tensor *k,
                           const fa_tensor *v, const fa_tensor *out, const float *lse,
                           const fa_options *opt, char *msg, size_t len);
/* Staging: the device copy of the host ALiBi slopes [H] that block calls pass. */
fa_status ring_rt_set_slopes(ring_rt *rt, const float *host_slopes, int64_t H, char *msg,
                             size_t len);

/* Host stand-ins of a CUDA context's arguments: ring_stage_tensor replaces *t with a
   contiguous host tensor of its shape and dtype (its contents copied when `copy`),
   ring_stage_array does the same for n floats (*p NULL stays NULL). */
typedef struct { void *mem[12]; int n; } ring_stage;
fa_status ring_stage_tensor(ring_stage *sg, fa_tensor *t, int copy, char *msg, size_t len);
fa_status ring_stage_array(ring_stage *sg, const float **p, int64_t n, int copy, char *msg,
                           size_t len);
void      ring_stage_free(ring_stage *sg);

#endif /* FA_RING_DEVICE_H */
