/* util.c - errors, verbose lines, version and small public helpers. */
#include "config.h"
#include <stdarg.h>
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

void fa_verbose(const fa_context *ctx, const char *fmt, ...)
{
    if (!ctx || !ctx->verbose) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "flashattn: %s\n", line);
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
