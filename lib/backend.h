/* backend.h - the backend vtable and the context every backend shares.
 *
 * A backend is a small table of functions over an fa_problem (problem.h). The API layer has
 * validated every argument before a slot is called, so a slot only fails for reasons of its
 * own (no memory, a device error, a case it cannot serve: FA_ERR_UNSUPPORTED with a reason).
 * A slot that fails must not have written any output: allocate first, then compute.
 * Slots marked optional may be NULL.
 */
#ifndef FA_BACKEND_H
#define FA_BACKEND_H

#include <stddef.h>
#include "flashattn.h"
#include "problem.h"
#include "topology.h"

typedef struct fa_backend_ops fa_backend_ops;

struct fa_context {
    fa_backend kind;
    const fa_backend_ops *ops;
    void *impl;                  /* backend-private state                           */
    int threads;                 /* 0 = fa_default_threads()                         */
    int block_q, block_kv;       /* requested tiles, 0 = automatic                   */
    int verbose;                 /* FA_VERBOSE                                       */
    fa_topology topo;            /* caches and cores as hwloc reports them           */
    char err[512];               /* fa_last_error                                    */
    char desc[4096];             /* fa_context_describe                              */
};

struct fa_backend_ops {
    const char *name;            /* "reference", "cpu", "cuda"                        */
    /* optional: set up ctx->impl; UNSUPPORTED with a reason when unavailable */
    fa_status (*init)(fa_context *ctx);
    void      (*fini)(fa_context *ctx);            /* optional */
    /* Append a multi-line description (ISA, tiles and why) to buf. optional */
    void      (*describe)(const fa_context *ctx, char *buf, size_t len);
    /* out (+ lse) from q, k, v. For FA_LAYOUT_KVCACHE the append of k_new/v_new has
       already been done by the api layer. */
    fa_status (*forward)(fa_context *ctx, const fa_problem *p);
    /* dq, dk, dv (+ dsinks) from q, k, v, out, dout, lse_in. */
    fa_status (*backward)(fa_context *ctx, const fa_problem *p);
    /* Which kernel forward (backward = 0) or backward (1) would use; static string. */
    fa_status (*query)(fa_context *ctx, const fa_problem *p, int backward, const char **name);
    /* optional: react to fa_context_set_threads / set_tiles (validated > 0 or 0) */
    fa_status (*set_threads)(fa_context *ctx, int n);
    fa_status (*set_tiles)(fa_context *ctx, int block_q, int block_kv);
    /* 1: tensors, lse and index arrays are device memory. The api layer then never reads
       index array contents (cu_seqlens, cache_seqlens, block_table) on the host; the
       backend checks them itself when FA_DEBUG=1. */
    int device_memory;
    /* optional (required when device_memory): write k_new/v_new [B, s_new, Hkv, d] into
       the cache at cache_seqlens[b] before forward() runs on a KVCACHE problem. */
    fa_status (*kv_append)(fa_context *ctx, const fa_problem *p, const fa_tensor *k_new,
                           const fa_tensor *v_new);
    /* optional (required when device_memory): fa_combine, arguments validated. */
    fa_status (*combine)(fa_context *ctx, fa_tensor *out, float *lse,
                         const fa_tensor *out_parts, const float *const *lse_parts, int n);
    /* optional: set_device / set_stream for device backends */
    fa_status (*set_device)(fa_context *ctx, int device);
    fa_status (*set_stream)(fa_context *ctx, void *stream);
};

/* Backend modules (the CUDA backend) are shared objects loaded with dlopen at context
 * creation. The module exports one C symbol, FA_MODULE_ENTRY, of type fa_module_entry_fn.
 * The library passes its ABI version, the sizes of the shared structs and the host
 * services a module may call (the library's own symbols are hidden); the module returns
 * its ops, or NULL (and fills why[]) when it cannot work with this library. The services
 * struct lives for the life of the process (the module may keep the pointer). */
#define FA_MODULE_ABI 1   /* bump whenever fa_context, fa_problem or fa_backend_ops change */
#define FA_MODULE_ENTRY "fa_module_entry"
typedef struct {
    int    abi;
    size_t sizeof_context, sizeof_problem, sizeof_ops;
    fa_status (*set_error)(const fa_context *ctx, fa_status status, const char *fmt, ...);
    void      (*verbose)(const fa_context *ctx, const char *fmt, ...);
    void      (*appendf)(char *buf, size_t len, const char *fmt, ...);
} fa_host_services;
typedef const fa_backend_ops *(*fa_module_entry_fn)(const fa_host_services *host,
                                                    char *why, size_t why_len);

/* Record a one-line error on ctx (printf-style) and return status. */
fa_status fa_set_error(const fa_context *ctx, fa_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* One dispatch line: to the fa_set_log_callback callback when one is set, else on stderr
   ("flashattn: ...") when ctx->verbose (FA_VERBOSE=1). */
void fa_verbose(const fa_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* 1 when a log line would go somewhere: ctx->verbose (FA_VERBOSE) or a log callback. */
int fa_log_wanted(const fa_context *ctx);

/* The backends compiled into the library. */
extern const fa_backend_ops fa_reference_ops;
extern const fa_backend_ops fa_cpu_ops;

/* appendf into a fixed buffer (describe helpers); never overflows, always terminated. */
void fa_appendf(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif /* FA_BACKEND_H */
