/* rc_device.c - device copies for test_ring on a CUDA context (ring_check.h): the CUDA
 * runtime loaded with dlopen ($FA_RING_CUDART, else libcudart.so, .so.13, .so.12), the
 * same runtime the ring library stages through. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring_check.h"

static struct {
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    int (*memcpy_)(void *, const void *, size_t, int);
    int loaded;
} cu;

int rc_dev_load(char *msg, size_t len)
{
    if (cu.loaded) return 0;
    const char *env = getenv("FA_RING_CUDART");
    const char *names[] = { env && *env ? env : "libcudart.so", "libcudart.so.13",
                            "libcudart.so.12" };
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(msg, len, "the CUDA runtime does not load (set FA_RING_CUDART)");
        return -1;
    }
    *(void **)&cu.malloc_ = dlsym(h, "cudaMalloc");
    *(void **)&cu.free_ = dlsym(h, "cudaFree");
    *(void **)&cu.memcpy_ = dlsym(h, "cudaMemcpy");
    if (!cu.malloc_ || !cu.free_ || !cu.memcpy_) {
        snprintf(msg, len, "the CUDA runtime lacks cudaMalloc, cudaFree or cudaMemcpy");
        return -1;
    }
    cu.loaded = 1;
    return 0;
}

void *rc_dev_put(const void *host, size_t bytes)
{
    void *d = NULL;
    if (cu.malloc_(&d, bytes ? bytes : 1) != 0) return NULL;
    if (bytes && cu.memcpy_(d, host, bytes, 4) != 0) { cu.free_(d); return NULL; }
    return d;
}

int rc_dev_get(void *host, const void *dev, size_t bytes)
{
    return bytes && cu.memcpy_(host, dev, bytes, 4) != 0 ? -1 : 0;
}

void rc_dev_free(void *dev)
{
    if (dev && cu.free_) cu.free_(dev);
}

/* Elements a view spans, from its first to its last. */
static size_t extent(const fa_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < 4; i++) {
        if (t->shape[i] == 0) return 0;
        n += (t->shape[i] - 1) * t->stride[i];
    }
    return (size_t)n;
}

fa_tensor rc_dev_view(const fa_tensor *t, void **dmem)
{
    fa_tensor d = *t;
    *dmem = rc_dev_put(t->data, extent(t) * fa_dtype_size(t->dtype));
    d.data = *dmem;
    return d;
}

/* rc_buf on the device: the whole buffer, guard bands and poison included. */
fa_tensor rc_dev_buf(const rc_buf *b, void **dmem)
{
    fa_tensor d = b->t;
    *dmem = rc_dev_put(b->base, b->bytes);
    d.data = *dmem ? (char *)*dmem + b->guard : NULL;
    return d;
}

int rc_dev_buf_back(rc_buf *b, void *dmem)
{
    int rc = dmem ? rc_dev_get(b->base, dmem, b->bytes) : -1;
    rc_dev_free(dmem);
    return rc;
}

fa_options rc_dev_options(const fa_options *o, int64_t H, void **mem)
{
    fa_options d = *o;
    mem[0] = o->sinks ? rc_dev_put(o->sinks, sizeof(float) * (size_t)H) : NULL;
    mem[1] = o->alibi_slopes ? rc_dev_put(o->alibi_slopes, sizeof(float) * (size_t)H) : NULL;
    d.sinks = mem[0];
    d.alibi_slopes = mem[1];
    return d;
}
