/* util.c - errors, verbose lines, version and small public helpers. */
#include "config.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "backend.h"

/* Messages of calls made without a context (fa_context_create): one per thread. */
static _Thread_local char fa_tls_error[512];

fa_status fa_set_error(const fa_context *ctx, fa_status status, const char *fmt, ...)
{
    /* The message buffer is the context's mutable diagnostic state, hence the cast. */
    char *buf = ctx ? ((fa_context *)ctx)->err : fa_tls_error;
    size_t len = ctx ? sizeof ctx->err : sizeof fa_tls_error;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return status;
}

/* ---- log lines: FA_VERBOSE on stderr, or the application's callback ------------------
 * The callback and its user pointer change together under one lock, and every delivery
 * takes that lock too: lines never interleave, and once fa_set_log_callback returns the
 * previous callback is not called again. The lock is recursive so that a callback that
 * calls back into flashattn (and logs) cannot deadlock its own thread. */
static pthread_mutex_t fa_log_lock;
static pthread_once_t fa_log_once = PTHREAD_ONCE_INIT;
static fa_log_fn fa_log_cb;
static void *fa_log_user;
static atomic_int fa_log_set;   /* fa_log_cb != NULL, read without the lock */

static void fa_log_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&fa_log_lock, &a);
    pthread_mutexattr_destroy(&a);
}

FA_API fa_status fa_set_log_callback(fa_log_fn fn, void *user)
{
    if (!fn && user)
        return fa_set_error(NULL, FA_ERR_INVALID_ARG,
                            "fa_set_log_callback: user is set but fn is NULL (pass NULL, NULL "
                            "to go back to FA_VERBOSE on stderr)");
    pthread_once(&fa_log_once, fa_log_init);
    pthread_mutex_lock(&fa_log_lock);
    fa_log_cb = fn;
    fa_log_user = user;
    atomic_store(&fa_log_set, fn != NULL);
    pthread_mutex_unlock(&fa_log_lock);
    return FA_OK;
}

int fa_log_wanted(const fa_context *ctx)
{
    return (ctx && ctx->verbose) || atomic_load(&fa_log_set);
}

void fa_verbose(const fa_context *ctx, const char *fmt, ...)
{
    if (!ctx || !fa_log_wanted(ctx)) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (atomic_load(&fa_log_set)) {
        pthread_once(&fa_log_once, fa_log_init);
        pthread_mutex_lock(&fa_log_lock);
        fa_log_fn fn = fa_log_cb;
        if (fn) fn(fa_log_user, line);
        pthread_mutex_unlock(&fa_log_lock);
        if (fn) return;
    }
    if (ctx->verbose) fprintf(stderr, "flashattn: %s\n", line);
}

void fa_appendf(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strnlen(buf, len);
    if (used + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

FA_API const char *fa_last_error(const fa_context *ctx)
{
    return ctx ? ctx->err : fa_tls_error;
}

FA_API const char *fa_status_string(fa_status s)
{
    switch (s) {
    case FA_OK:              return "ok";
    case FA_ERR_INVALID_ARG: return "invalid argument";
    case FA_ERR_UNSUPPORTED: return "unsupported by this backend";
    case FA_ERR_NO_MEMORY:   return "out of memory";
    case FA_ERR_DEVICE:      return "device error";
    case FA_ERR_INTERNAL:    return "internal error";
    }
    return "unknown status";
}

#define FA_STR2(x) #x
#define FA_STR(x) FA_STR2(x)
FA_API int fa_version(void)
{
    return FA_VERSION;
}

FA_API const char *fa_version_string(void)
{
    return FA_STR(FA_VERSION_MAJOR) "." FA_STR(FA_VERSION_MINOR) "." FA_STR(FA_VERSION_PATCH);
}

FA_API size_t fa_dtype_size(fa_dtype dtype)
{
    switch (dtype) {
    case FA_F32:  return 4;
    case FA_F16:
    case FA_BF16: return 2;
    }
    return 0;
}

FA_API fa_tensor fa_tensor_contiguous(void *data, fa_dtype dtype,
                                      int64_t b, int64_t s, int64_t h, int64_t d)
{
    fa_tensor t;
    t.data = data;
    t.dtype = dtype;
    t.shape[0] = b; t.shape[1] = s; t.shape[2] = h; t.shape[3] = d;
    t.stride[3] = 1;
    t.stride[2] = d;
    t.stride[1] = h * d;
    t.stride[0] = s * h * d;
    return t;
}
