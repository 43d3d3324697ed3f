/* ring_device.c - the ring's block calls on the caller's context, and a CUDA context's
 * tensors staged through host memory (ring_device.h). The CUDA runtime is loaded with
 * dlopen, so that the library builds and runs without CUDA. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring_device.h"

/* ---- the CUDA runtime, loaded once --------------------------------------------------- */
enum { CU_MEMCPY_DEFAULT = 4 };   /* cudaMemcpyDefault: direction from the pointers (UVA) */
typedef struct { int type, device; void *device_ptr, *host_ptr; } cu_attributes;

static struct {
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    int (*memcpy_)(void *, const void *, size_t, int);
    int (*memcpy2d)(void *, size_t, const void *, size_t, size_t, size_t, int);
    int (*sync)(void);
    int (*set_device)(int);
    int (*attributes)(cu_attributes *, const void *);
    const char *(*error_string)(int);
    char why[200];   /* empty when loaded */
} cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void)
{
    const char *env = getenv("FA_RING_CUDART");
    const char *names[] = { env && *env ? env : "libcudart.so", "libcudart.so.13",
                            "libcudart.so.12" };
    void *h = NULL;
    for (size_t i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(cu.why, sizeof cu.why, "the CUDA runtime (%s, libcudart.so.13 or .12) does "
                 "not load: set FA_RING_CUDART to its path", names[0]);
        return;
    }
#define SYM(field, name) \
    if (!(*(void **)&cu.field = dlsym(h, name))) { \
        snprintf(cu.why, sizeof cu.why, "the CUDA runtime lacks %s", name); return; }
    SYM(malloc_, "cudaMalloc") SYM(free_, "cudaFree") SYM(memcpy_, "cudaMemcpy")
    SYM(memcpy2d, "cudaMemcpy2D") SYM(sync, "cudaDeviceSynchronize")
    SYM(set_device, "cudaSetDevice") SYM(attributes, "cudaPointerGetAttributes")
    SYM(error_string, "cudaGetErrorString")
#undef SYM
}

static fa_status cu_check(int err, const char *what, char *msg, size_t len)
{
    if (err == 0) return FA_OK;
    snprintf(msg, len, "%s: CUDA error %d (%s)", what, err, cu.error_string(err));
    return FA_ERR_DEVICE;
}

/* ---- open / close ------------------------------------------------------------------- */
fa_status ring_rt_open(ring_rt *rt, fa_context *ctx, const void *device_ptr, char *msg,
                       size_t len)
{
    memset(rt, 0, sizeof *rt);
    rt->ctx = rt->host = ctx;
    if (!ctx || fa_context_backend(ctx) != FA_BACKEND_CUDA) return FA_OK;
    rt->on = 1;
    rt->host = NULL;
    pthread_once(&cu_once, cu_load);
    if (cu.why[0]) {
        snprintf(msg, len, "staging a CUDA context: %s", cu.why);
        return FA_ERR_UNSUPPORTED;
    }
    if (device_ptr) {   /* the scratch goes on the device of the caller's tensors */
        cu_attributes a = { 0, 0, NULL, NULL };
        fa_status st = cu_check(cu.attributes(&a, device_ptr), "cudaPointerGetAttributes",
                                msg, len);
        if (st == FA_OK) st = cu_check(cu.set_device(a.device), "cudaSetDevice", msg, len);
        if (st != FA_OK) return st;
    }
    if (fa_context_create(&rt->host, FA_BACKEND_CPU) != FA_OK) {
        snprintf(msg, len, "no CPU context for the merges: %s", fa_last_error(NULL));
        return FA_ERR_UNSUPPORTED;
    }
    return FA_OK;
}

void ring_rt_close(ring_rt *rt)
{
    if (!rt->on) return;
    for (int i = 0; i < 12; i++)
        if (rt->dev[i]) cu.free_(rt->dev[i]);
    if (rt->slopes) cu.free_((void *)rt->slopes);
    fa_context_destroy(rt->host);
    memset(rt, 0, sizeof *rt);
}

/* Device scratch slot i of at least `bytes`. */
static void *scratch(ring_rt *rt, int i, size_t bytes, fa_status *st, char *msg, size_t len)
{
    if (*st != FA_OK) return NULL;
    if (rt->dev_bytes[i] < bytes) {
        if (rt->dev[i]) cu.free_(rt->dev[i]);
        rt->dev[i] = NULL;
        rt->dev_bytes[i] = 0;
        *st = cu_check(cu.malloc_(&rt->dev[i], bytes ? bytes : 1), "cudaMalloc", msg, len);
        if (*st != FA_OK) return NULL;
        rt->dev_bytes[i] = bytes;
    }
    return rt->dev[i];
}

static size_t tensor_bytes(const fa_tensor *t)
{
    return (size_t)(t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3]) *
           fa_dtype_size(t->dtype);
}

/* A contiguous device tensor in slot i, shaped as t (dtype dt). */
static fa_tensor dev_like(ring_rt *rt, int i, const fa_tensor *t, fa_dtype dt, fa_status *st,
                          char *msg, size_t len)
{
    fa_tensor d = fa_tensor_contiguous(NULL, dt, t->shape[0], t->shape[1], t->shape[2],
                                       t->shape[3]);
    d.data = scratch(rt, i, tensor_bytes(&d), st, msg, len);
    return d;
}

/* ---- copies ------------------------------------------------------------------------- */
fa_status ring_rt_copy(void *dst, const void *src, size_t bytes, char *msg, size_t len)
{
    if (bytes == 0) return FA_OK;
    return cu_check(cu.memcpy_(dst, src, bytes, CU_MEMCPY_DEFAULT), "cudaMemcpy", msg, len);
}

/* Rows of one batch entry as evenly spaced rows of d elements: the pitch in elements, or
   -1 when the (s, h) rows are not evenly spaced. */
static int64_t row_pitch(const fa_tensor *t)
{
    if (t->shape[2] == 1) return t->shape[1] == 1 ? t->shape[3] : t->stride[1];
    return t->stride[1] == t->shape[2] * t->stride[2] ? t->stride[2] : -1;
}

static fa_status copy_rows(char *dst, int64_t dp, const char *src, int64_t sp, size_t w,
                           int64_t n, size_t esz, char *msg, size_t len)
{
    if (n == 1) { dp = sp = (int64_t)(w / esz); }
    if ((size_t)dp * esz < w || (size_t)sp * esz < w) {   /* not a 2D copy: row by row */
        for (int64_t r = 0; r < n; r++) {
            fa_status st = ring_rt_copy(dst + (size_t)(r * dp) * esz,
                                        src + (size_t)(r * sp) * esz, w, msg, len);
            if (st != FA_OK) return st;
        }
        return FA_OK;
    }
    return cu_check(cu.memcpy2d(dst, (size_t)dp * esz, src, (size_t)sp * esz, w, (size_t)n,
                                CU_MEMCPY_DEFAULT), "cudaMemcpy2D", msg, len);
}

fa_status ring_rt_copy_view(const fa_tensor *dst, const fa_tensor *src, char *msg, size_t len)
{
    int64_t B = src->shape[0], S = src->shape[1], H = src->shape[2], d = src->shape[3];
    if (B * S * H * d == 0) return FA_OK;
    size_t esz = fa_dtype_size(src->dtype), w = (size_t)d * esz;
    int64_t dp = row_pitch(dst), sp = row_pitch(src);
    fa_status st = FA_OK;
    for (int64_t b = 0; b < B && st == FA_OK; b++) {
        char *db = (char *)dst->data + (size_t)(b * dst->stride[0]) * esz;
        const char *sb = (const char *)src->data + (size_t)(b * src->stride[0]) * esz;
        if (dp >= 0 && sp >= 0) {
            st = copy_rows(db, dp, sb, sp, w, S * H, esz, msg, len);
            continue;
        }
        for (int64_t s = 0; s < S && st == FA_OK; s++)
            st = copy_rows(db + (size_t)(s * dst->stride[1]) * esz, dst->stride[2],
                           sb + (size_t)(s * src->stride[1]) * esz, src->stride[2], w, H, esz,
                           msg, len);
    }
    return st;
}

fa_status ring_rt_set_slopes(ring_rt *rt, const float *host_slopes, int64_t H, char *msg,
                             size_t len)
{
    void *p = NULL;
    fa_status st = cu_check(cu.malloc_(&p, sizeof(float) * (size_t)(H > 0 ? H : 1)),
                            "cudaMalloc", msg, len);
    if (st != FA_OK) return st;
    rt->slopes = p;
    return ring_rt_copy(p, host_slopes, sizeof(float) * (size_t)H, msg, len);
}

/* ---- block calls -------------------------------------------------------------------- */
/* The options of a block call on the device: its bias copied into slot `slot`. */
static fa_options dev_options(ring_rt *rt, const fa_options *opt, fa_tensor *bias, int slot,
                              fa_status *st, char *msg, size_t len)
{
    fa_options o = *opt;
    o.alibi_slopes = opt->alibi_slopes ? rt->slopes : NULL;
    if (opt->bias) {   /* the ring's split-ALiBi key terms: [1, n, H, nk], rows stride 0 */
        *bias = *opt->bias;
        size_t bytes = sizeof(float) * (size_t)(bias->shape[2] * bias->shape[3]);
        bias->data = scratch(rt, slot, bytes, st, msg, len);
        if (*st == FA_OK) *st = ring_rt_copy(bias->data, opt->bias->data, bytes, msg, len);
        o.bias = bias;
    }
    return o;
}

static fa_status after_call(fa_status st, fa_context *ctx, const char *what, char *msg,
                            size_t len)
{
    if (st != FA_OK) { snprintf(msg, len, "%s: %s", what, fa_last_error(ctx)); return st; }
    return cu_check(cu.sync(), what, msg, len);
}

fa_status ring_rt_forward(ring_rt *rt, fa_tensor *out, float *lse, const fa_tensor *q,
                          const fa_tensor *k, const fa_tensor *v, const fa_options *opt,
                          char *msg, size_t len)
{
    fa_status st = FA_OK;
    if (!rt->on) {
        st = fa_forward(rt->ctx, out, lse, q, k, v, opt);
        if (st != FA_OK) snprintf(msg, len, "fa_forward on a block: %s", fa_last_error(rt->ctx));
        return st;
    }
    fa_tensor qd = dev_like(rt, 0, q, q->dtype, &st, msg, len);
    fa_tensor kd = dev_like(rt, 1, k, k->dtype, &st, msg, len);
    fa_tensor vd = dev_like(rt, 2, v, v->dtype, &st, msg, len);
    fa_tensor od = dev_like(rt, 3, out, FA_F32, &st, msg, len);
    size_t lb = sizeof(float) * (size_t)(q->shape[0] * q->shape[2] * q->shape[1]);
    float *ld = scratch(rt, 4, lb, &st, msg, len);
    fa_tensor bias;
    fa_options o = dev_options(rt, opt, &bias, 5, &st, msg, len);
    if (st == FA_OK) st = ring_rt_copy_view(&qd, q, msg, len);
    if (st == FA_OK) st = ring_rt_copy_view(&kd, k, msg, len);
    if (st == FA_OK) st = ring_rt_copy_view(&vd, v, msg, len);
    if (st == FA_OK) st = cu_check(cu.sync(), "uploading a block", msg, len);
    if (st == FA_OK)
        st = after_call(fa_forward(rt->ctx, &od, ld, &qd, &kd, &vd, &o), rt->ctx,
                        "fa_forward on a block", msg, len);
    if (st == FA_OK) st = ring_rt_copy_view(out, &od, msg, len);
    if (st == FA_OK) st = ring_rt_copy(lse, ld, lb, msg, len);
    return st;
}

fa_status ring_rt_backward(ring_rt *rt, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv,
                           const fa_tensor *dout, const fa_tensor *q, const fa_tensor *k,
                           const fa_tensor *v, const fa_tensor *out, const float *lse,
                           const fa_options *opt, char *msg, size_t len)
{
    fa_status st = FA_OK;
    if (!rt->on) {
        st = fa_backward(rt->ctx, dq, dk, dv, NULL, dout, q, k, v, out, lse, opt);
        if (st != FA_OK)
            snprintf(msg, len, "fa_backward on a block: %s", fa_last_error(rt->ctx));
        return st;
    }
    fa_tensor qd = dev_like(rt, 0, q, q->dtype, &st, msg, len);
    fa_tensor kd = dev_like(rt, 1, k, k->dtype, &st, msg, len);
    fa_tensor vd = dev_like(rt, 2, v, v->dtype, &st, msg, len);
    fa_tensor od = dev_like(rt, 3, out, out->dtype, &st, msg, len);
    fa_tensor dod = dev_like(rt, 6, dout, dout->dtype, &st, msg, len);
    fa_tensor dqd = dev_like(rt, 7, dq, FA_F32, &st, msg, len);
    fa_tensor dkd = dev_like(rt, 8, dk, FA_F32, &st, msg, len);
    fa_tensor dvd = dev_like(rt, 9, dv, FA_F32, &st, msg, len);
    size_t lb = sizeof(float) * (size_t)(q->shape[0] * q->shape[2] * q->shape[1]);
    float *ld = scratch(rt, 4, lb, &st, msg, len);
    fa_tensor bias;
    fa_options o = dev_options(rt, opt, &bias, 5, &st, msg, len);
    const fa_tensor *ins[5] = { q, k, v, out, dout };
    fa_tensor *devs[5] = { &qd, &kd, &vd, &od, &dod };
    for (int i = 0; i < 5 && st == FA_OK; i++) st = ring_rt_copy_view(devs[i], ins[i], msg, len);
    if (st == FA_OK) st = ring_rt_copy(ld, lse, lb, msg, len);
    if (st == FA_OK) st = cu_check(cu.sync(), "uploading a block", msg, len);
    if (st == FA_OK)
        st = after_call(fa_backward(rt->ctx, &dqd, &dkd, &dvd, NULL, &dod, &qd, &kd, &vd, &od,
                                    ld, &o), rt->ctx, "fa_backward on a block", msg, len);
    if (st == FA_OK) st = ring_rt_copy_view(dq, &dqd, msg, len);
    if (st == FA_OK) st = ring_rt_copy_view(dk, &dkd, msg, len);
    if (st == FA_OK) st = ring_rt_copy_view(dv, &dvd, msg, len);
    return st;
}

/* ---- host stand-ins ----------------------------------------------------------------- */
static void *stage_alloc(ring_stage *sg, size_t bytes, char *msg, size_t len)
{
    void *p = sg->n < 12 ? malloc(bytes ? bytes : 1) : NULL;
    if (!p) { snprintf(msg, len, "no host memory to stage %zu bytes", bytes); return NULL; }
    sg->mem[sg->n++] = p;
    return p;
}

fa_status ring_stage_tensor(ring_stage *sg, fa_tensor *t, int copy, char *msg, size_t len)
{
    fa_tensor h = fa_tensor_contiguous(NULL, t->dtype, t->shape[0], t->shape[1], t->shape[2],
                                       t->shape[3]);
    if (copy && !t->data && tensor_bytes(t)) {   /* fa_query does not read data */
        snprintf(msg, len, "a tensor with elements has data NULL");
        return FA_ERR_INVALID_ARG;
    }
    h.data = stage_alloc(sg, tensor_bytes(&h), msg, len);
    if (!h.data) return FA_ERR_NO_MEMORY;
    fa_status st = copy ? ring_rt_copy_view(&h, t, msg, len) : FA_OK;
    *t = h;
    return st;
}

fa_status ring_stage_array(ring_stage *sg, const float **p, int64_t n, int copy, char *msg,
                           size_t len)
{
    if (!*p) return FA_OK;
    float *h = stage_alloc(sg, sizeof(float) * (size_t)n, msg, len);
    if (!h) return FA_ERR_NO_MEMORY;
    fa_status st = copy ? ring_rt_copy(h, *p, sizeof(float) * (size_t)n, msg, len) : FA_OK;
    *p = h;
    return st;
}

void ring_stage_free(ring_stage *sg)
{
    for (int i = 0; i < sg->n; i++) free(sg->mem[i]);
    sg->n = 0;
}
