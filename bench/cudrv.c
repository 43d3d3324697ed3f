/* cudrv.c - the CUDA driver API through dlopen("libcuda.so.1"), and the bench problem on
 * the device. See cudrv.h. No CUDA header or library is needed to build this file.
 */
#include "config.h"
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cudrv.h"

static struct {
    int tried, loaded;
    char why[200];
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*PrimaryCtxRelease)(CUdevice);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemsetD16)(CUdeviceptr, unsigned short, size_t);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, void *);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUevent ev[2];
    CUdevice dev;
    CUcontext ctx;
    int open;
} D;

const char *cudrv_error(CUresult r)
{
    static char buf[64];
    const char *s = NULL;
    if (D.GetErrorString && D.GetErrorString(r, &s) == 0 && s) return s;
    snprintf(buf, sizeof buf, "CUresult %d", r);
    return buf;
}

static int load(void)
{
    if (D.tried) return D.loaded ? 0 : -1;
    D.tried = 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(D.why, sizeof D.why, "no CUDA driver: dlopen(libcuda.so.1): %s",
                 e ? e : "not found");
        return -1;
    }
    struct { void **fn; const char *name; } syms[] = {
        { (void **)&D.Init, "cuInit" },
        { (void **)&D.DeviceGetCount, "cuDeviceGetCount" },
        { (void **)&D.DeviceGet, "cuDeviceGet" },
        { (void **)&D.DeviceGetName, "cuDeviceGetName" },
        { (void **)&D.DeviceGetAttribute, "cuDeviceGetAttribute" },
        { (void **)&D.DeviceTotalMem, "cuDeviceTotalMem_v2" },
        { (void **)&D.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain" },
        { (void **)&D.PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2" },
        { (void **)&D.CtxPushCurrent, "cuCtxPushCurrent_v2" },
        { (void **)&D.CtxPopCurrent, "cuCtxPopCurrent_v2" },
        { (void **)&D.CtxSynchronize, "cuCtxSynchronize" },
        { (void **)&D.MemAlloc, "cuMemAlloc_v2" },
        { (void **)&D.MemFree, "cuMemFree_v2" },
        { (void **)&D.MemcpyHtoD, "cuMemcpyHtoD_v2" },
        { (void **)&D.MemcpyDtoH, "cuMemcpyDtoH_v2" },
        { (void **)&D.MemcpyDtoD, "cuMemcpyDtoD_v2" },
        { (void **)&D.MemsetD16, "cuMemsetD16_v2" },
        { (void **)&D.MemGetInfo, "cuMemGetInfo_v2" },
        { (void **)&D.GetErrorString, "cuGetErrorString" },
        { (void **)&D.EventCreate, "cuEventCreate" },
        { (void **)&D.EventDestroy, "cuEventDestroy_v2" },
        { (void **)&D.EventRecord, "cuEventRecord" },
        { (void **)&D.EventSynchronize, "cuEventSynchronize" },
        { (void **)&D.EventElapsedTime, "cuEventElapsedTime" },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(h, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(D.why, sizeof D.why, "libcuda.so.1 has no %s (driver too old)",
                     syms[i].name);
            return -1;
        }
    }
    CUresult r = D.Init(0);
    if (r != 0) {
        snprintf(D.why, sizeof D.why, "cuInit: %s", cudrv_error(r));
        return -1;
    }
    D.loaded = 1;
    return 0;
}

int cudrv_open(int device, char *why, size_t len)
{
    if (D.open) {
        snprintf(why, len, "cudrv_open: already open");
        return -1;
    }
    if (load()) {
        snprintf(why, len, "%s", D.why);
        return -1;
    }
    int n = 0;
    CUresult r = D.DeviceGetCount(&n);
    if (r == 0 && device >= n) {
        snprintf(why, len, "no CUDA device %d (%d devices)", device, n);
        return -1;
    }
    if (r == 0) r = D.DeviceGet(&D.dev, device);
    if (r == 0) r = D.PrimaryCtxRetain(&D.ctx, D.dev);
    if (r != 0) {
        snprintf(why, len, "device %d: %s", device, cudrv_error(r));
        return -1;
    }
    r = D.CtxPushCurrent(D.ctx);
    if (r != 0) {
        D.PrimaryCtxRelease(D.dev);
        snprintf(why, len, "cuCtxPushCurrent: %s", cudrv_error(r));
        return -1;
    }
    D.open = 1;
    return 0;
}

void cudrv_close(void)
{
    if (!D.open) return;
    for (int i = 0; i < 2; i++)
        if (D.ev[i]) D.EventDestroy(D.ev[i]);
    D.ev[0] = D.ev[1] = NULL;
    CUcontext c;
    D.CtxPopCurrent(&c);
    D.PrimaryCtxRelease(D.dev);
    D.open = 0;
}

int cudrv_attr(int attr)
{
    int v = -1;
    if (!D.open || D.DeviceGetAttribute(&v, attr, D.dev) != 0) return -1;
    return v;
}

int cudrv_name(char *buf, size_t len)
{
    if (!D.open || D.DeviceGetName(buf, (int)len, D.dev) != 0) {
        snprintf(buf, len, "?");
        return -1;
    }
    return 0;
}

size_t cudrv_total_mem(void)
{
    size_t b = 0;
    if (!D.open || D.DeviceTotalMem(&b, D.dev) != 0) return 0;
    return b;
}

int cudrv_mem_free(size_t *free_bytes)
{
    size_t total;
    return D.open && D.MemGetInfo(free_bytes, &total) == 0 ? 0 : -1;
}

CUresult cudrv_alloc(CUdeviceptr *p, size_t bytes) { return D.MemAlloc(p, bytes); }
CUresult cudrv_free(CUdeviceptr p) { return p ? D.MemFree(p) : 0; }
CUresult cudrv_upload(CUdeviceptr dst, const void *src, size_t bytes)
{
    return D.MemcpyHtoD(dst, src, bytes);
}
CUresult cudrv_download(void *dst, CUdeviceptr src, size_t bytes)
{
    return D.MemcpyDtoH(dst, src, bytes);
}
CUresult cudrv_copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { return D.MemcpyDtoD(dst, src, bytes); }
CUresult cudrv_fill16(CUdeviceptr dst, unsigned short x, size_t n) { return D.MemsetD16(dst, x, n); }
CUresult cudrv_sync(void) { return D.CtxSynchronize(); }

CUresult cudrv_timer_start(void)
{
    CUresult r = 0;
    for (int i = 0; i < 2 && r == 0; i++)
        if (!D.ev[i]) r = D.EventCreate(&D.ev[i], 0);
    return r ? r : D.EventRecord(D.ev[0], NULL);
}

CUresult cudrv_timer_stop(double *seconds)
{
    float ms = 0;
    CUresult r = D.EventRecord(D.ev[1], NULL);
    if (r == 0) r = D.EventSynchronize(D.ev[1]);
    if (r == 0) r = D.EventElapsedTime(&ms, D.ev[0], D.ev[1]);
    *seconds = 1e-3 * ms;
    return r;
}

/* ------------------------------------------------------- the problem on the device --- */

static void sizes(const bench_shape *sh, size_t *nq, size_t *nk, size_t *nl, size_t *es)
{
    *nq = (size_t)(sh->B * sh->Sq * sh->H * sh->d);
    *nk = (size_t)(sh->B * sh->Sk * sh->Hkv * sh->d);
    *nl = (size_t)(sh->B * sh->H * sh->Sq);
    *es = fa_dtype_size(sh->dtype);
}

static void *ptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

int dev_alloc(bench_dev *d, const bench_problem *p, int backward, int upload, char *why,
              size_t len)
{
    const bench_shape *sh = &p->sh;
    size_t nq, nk, nl, es;
    sizes(sh, &nq, &nk, &nl, &es);
    memset(d, 0, sizeof *d);
    d->backward = backward;
    struct { CUdeviceptr *dp; size_t bytes; const void *src; } b[] = {
        { &d->q, nq * es, p->q }, { &d->k, nk * es, p->k }, { &d->v, nk * es, p->v },
        { &d->out, nq * es, NULL }, { &d->lse, nl * sizeof(float), NULL },
        { &d->dout, nq * es, p->dout }, { &d->dq, nq * es, NULL }, { &d->dk, nk * es, NULL },
        { &d->dv, nk * es, NULL } };
    int n = backward ? 9 : 5;
    for (int i = 0; i < n; i++) {
        CUresult r = cudrv_alloc(b[i].dp, b[i].bytes ? b[i].bytes : 1);
        if (r == 0 && upload && b[i].src) r = cudrv_upload(*b[i].dp, b[i].src, b[i].bytes);
        if (r != 0) {
            snprintf(why, len, "device buffer of %zu bytes: %s", b[i].bytes, cudrv_error(r));
            dev_free(d);
            return -1;
        }
        d->bytes += b[i].bytes;
    }
    d->tq = fa_tensor_contiguous(ptr(d->q), sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
    d->tk = fa_tensor_contiguous(ptr(d->k), sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
    d->tv = fa_tensor_contiguous(ptr(d->v), sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
    d->tout = fa_tensor_contiguous(ptr(d->out), sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
    d->lse_ptr = ptr(d->lse);
    if (backward) {
        d->tdout = fa_tensor_contiguous(ptr(d->dout), sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
        d->tdq = fa_tensor_contiguous(ptr(d->dq), sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
        d->tdk = fa_tensor_contiguous(ptr(d->dk), sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
        d->tdv = fa_tensor_contiguous(ptr(d->dv), sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
    }
    return 0;
}

void dev_free(bench_dev *d)
{
    CUdeviceptr all[] = { d->q, d->k, d->v, d->out, d->lse, d->dout, d->dq, d->dk, d->dv };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cudrv_free(all[i]);
    memset(d, 0, sizeof *d);
}

CUresult dev_poison(bench_dev *d, bench_problem *p)
{
    size_t nq, nk, nl, es;
    sizes(&p->sh, &nq, &nk, &nl, &es);
    if (!d->backward) {
        bp_poison_out(p);
        return cudrv_upload(d->out, p->out, nq * es);
    }
    for (size_t i = 0; i < nq; i++) bp_store(p->dq, p->sh.dtype, i, NAN);
    for (size_t i = 0; i < nk; i++) bp_store(p->dk, p->sh.dtype, i, NAN);
    for (size_t i = 0; i < nk; i++) bp_store(p->dv, p->sh.dtype, i, NAN);
    CUresult r = cudrv_upload(d->dq, p->dq, nq * es);
    if (r == 0) r = cudrv_upload(d->dk, p->dk, nk * es);
    if (r == 0) r = cudrv_upload(d->dv, p->dv, nk * es);
    return r;
}

CUresult dev_download(const bench_dev *d, bench_problem *p)
{
    size_t nq, nk, nl, es;
    sizes(&p->sh, &nq, &nk, &nl, &es);
    if (!d->backward) {
        CUresult r = cudrv_download(p->out, d->out, nq * es);
        return r ? r : cudrv_download(p->lse, d->lse, nl * sizeof(float));
    }
    CUresult r = cudrv_download(p->dq, d->dq, nq * es);
    if (r == 0) r = cudrv_download(p->dk, d->dk, nk * es);
    if (r == 0) r = cudrv_download(p->dv, d->dv, nk * es);
    return r;
}
