/* cudrv.h - the few pieces of the CUDA driver API the bench uses, loaded at run time.
 *
 * flashattn-bench is built without CUDA: the CUDA rung opens libcuda.so.1 with dlopen when
 * it runs and calls the driver through the pointers below. The library's CUDA module works
 * in the primary context of its device (through the CUDA runtime), so the bench retains
 * that same primary context and makes it current while it allocates, copies and waits.
 * The types and constants are declared here, with the values of the driver's cuda.h.
 */
#ifndef FA_BENCH_CUDRV_H
#define FA_BENCH_CUDRV_H

#include <stddef.h>
#include "bench.h"

typedef int CUresult;                          /* 0 = CUDA_SUCCESS                      */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct CUevent_st *CUevent;

/* CUdevice_attribute values used by the hierarchy section */
enum {
    CUDRV_ATTR_MAX_SHARED_PER_BLOCK = 8,
    CUDRV_ATTR_CLOCK_RATE = 13,                /* kHz                                   */
    CUDRV_ATTR_SM_COUNT = 16,
    CUDRV_ATTR_MEMORY_CLOCK_RATE = 36,         /* kHz                                   */
    CUDRV_ATTR_MEMORY_BUS_WIDTH = 37,          /* bits                                  */
    CUDRV_ATTR_L2_SIZE = 38,                   /* bytes                                 */
    CUDRV_ATTR_CC_MAJOR = 75,
    CUDRV_ATTR_CC_MINOR = 76,
    CUDRV_ATTR_MAX_SHARED_PER_SM = 81,
    CUDRV_ATTR_MAX_SHARED_PER_BLOCK_OPTIN = 97
};

/* Open the driver (once per process) and make the primary context of `device` current on
 * this thread. Returns 0, or -1 with the reason in `why` (one line). */
int    cudrv_open(int device, char *why, size_t len);
void   cudrv_close(void);                      /* pop and release the primary context  */
const char *cudrv_error(CUresult r);           /* cuGetErrorString, or the number       */

int    cudrv_attr(int attr);                   /* -1 when the driver refuses            */
int    cudrv_name(char *buf, size_t len);
size_t cudrv_total_mem(void);
int    cudrv_mem_free(size_t *free_bytes);     /* cuMemGetInfo; 0 = ok                  */
CUresult cudrv_alloc(CUdeviceptr *p, size_t bytes);
CUresult cudrv_free(CUdeviceptr p);
CUresult cudrv_upload(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cudrv_download(void *dst, CUdeviceptr src, size_t bytes);
CUresult cudrv_copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes);   /* device to device */
CUresult cudrv_fill16(CUdeviceptr dst, unsigned short x, size_t n);     /* n 16-bit words   */
CUresult cudrv_sync(void);                     /* cuCtxSynchronize                      */
/* Device time of the work queued on the default stream between start and stop: two CUDA
 * events around it (stop waits for the second). */
CUresult cudrv_timer_start(void);
CUresult cudrv_timer_stop(double *seconds);

/* ---- the bench problem on the device ---------------------------------------------- */

/* Device copies of q, k, v, out, lse (and dout, dq, dk, dv when `backward`), the same
 * contiguous layouts as bench_problem, with fa_tensor views of them. */
typedef struct {
    CUdeviceptr q, k, v, out, lse, dout, dq, dk, dv;
    fa_tensor tq, tk, tv, tout, tdout, tdq, tdk, tdv;
    float *lse_ptr;
    int backward;
    size_t bytes;                              /* device bytes of all of the above      */
} bench_dev;

/* Allocate (and with `p` data, upload q, k, v, dout). 0, or -1 with the reason. */
int    dev_alloc(bench_dev *d, const bench_problem *p, int backward, int upload, char *why,
                 size_t len);
void   dev_free(bench_dev *d);
/* Poison the device outputs (out, or dq/dk/dv) with the NaN pattern of the host ones. */
CUresult dev_poison(bench_dev *d, bench_problem *p);
/* Outputs back into p->out and p->lse (forward) or p->dq, dk, dv (backward). */
CUresult dev_download(const bench_dev *d, bench_problem *p);

#endif /* FA_BENCH_CUDRV_H */
