/* context.c - create and destroy contexts, pick the backend, the context knobs.
 *
 * Dispatch is decided here once per context: the explicit backend argument wins; AUTO
 * reads FA_BACKEND, else prefers CUDA (when a module and a device exist) and then the CPU.
 * Each decision, and each rejected candidate with its reason, is one FA_VERBOSE line.
 */
#include "config.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"

static const char *fa_backend_name(fa_backend b)
{
    switch (b) {
    case FA_BACKEND_AUTO:      return "auto";
    case FA_BACKEND_REFERENCE: return "reference";
    case FA_BACKEND_CPU:       return "cpu";
    case FA_BACKEND_CUDA:      return "cuda";
    }
    return "?";
}

/* ---- the CUDA module ---------------------------------------------------------------
 * Loaded once per process with dlopen: $FA_CUDA_MODULE if set, else the installed
 * $(pkglibdir)/flashattn_cuda.so. A load failure is remembered with its reason, which is
 * what FA_BACKEND_CUDA answers (UNSUPPORTED) and what AUTO reports when it falls back. */
#ifndef FA_PKGLIBDIR
#  define FA_PKGLIBDIR "/usr/local/lib/flashattn"
#endif
static pthread_once_t fa_cuda_once = PTHREAD_ONCE_INIT;
static const fa_backend_ops *fa_cuda_ops;
static char fa_cuda_why[384];

static void fa_cuda_load(void)
{
    const char *path = getenv("FA_CUDA_MODULE");
    if (!path || !*path) path = FA_PKGLIBDIR "/flashattn_cuda.so";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* dlerror() usually starts with the path already: name it once */
        const char *err = dlerror();
        size_t n = strlen(path);
        if (err && !strncmp(err, path, n) && !strncmp(err + n, ": ", 2)) err += n + 2;
        snprintf(fa_cuda_why, sizeof fa_cuda_why, "cannot load the CUDA module %s: %s%s", path,
                 err ? err : "unknown error",
                 FA_BUILT_CUDA ? "" : " (this build of flashattn has no CUDA backend)");
        return;
    }
    fa_module_entry_fn entry;
    *(void **)&entry = dlsym(h, FA_MODULE_ENTRY);   /* object -> function pointer, POSIX way */
    if (!entry) {
        snprintf(fa_cuda_why, sizeof fa_cuda_why, "%s has no symbol %s: not a flashattn module",
                 path, FA_MODULE_ENTRY);
        dlclose(h);
        return;
    }
    /* static: a module may keep the pointer for the life of the process */
    static const fa_host_services host = {
        .abi = FA_MODULE_ABI, .sizeof_context = sizeof(fa_context),
        .sizeof_problem = sizeof(fa_problem), .sizeof_ops = sizeof(fa_backend_ops),
        .set_error = fa_set_error, .verbose = fa_verbose, .appendf = fa_appendf,
    };
    char why[256] = "";
    fa_cuda_ops = entry(&host, why, sizeof why);
    if (!fa_cuda_ops) {
        snprintf(fa_cuda_why, sizeof fa_cuda_why, "the CUDA module %s refused to load: %s", path,
                 why[0] ? why : "ABI mismatch");
        dlclose(h);
    }
    /* On success the module stays loaded for the life of the process. */
}

static const fa_backend_ops *fa_cuda_module(const char **why)
{
    pthread_once(&fa_cuda_once, fa_cuda_load);
    *why = fa_cuda_why;
    return fa_cuda_ops;
}

static int fa_env_verbose(void)
{
    const char *v = getenv("FA_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* AUTO's reason for not taking CUDA, told once per process (per distinct reason): a
   program that creates many contexts is not told the same thing many times. */
static void fa_tell_cuda_rejected(int verbose, const char *why)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char told[512];   /* fa_last_error(NULL) size: never truncated */
    fa_context tmp = { .verbose = verbose };
    if (!fa_log_wanted(&tmp)) return;
    pthread_mutex_lock(&lock);
    int fresh = strcmp(told, why) != 0;
    if (fresh) snprintf(told, sizeof told, "%s", why);
    pthread_mutex_unlock(&lock);
    if (fresh) fa_verbose(&tmp, "auto: cuda rejected: %s", why);
}

/* Resolve AUTO into a concrete backend; the error is context-less (thread-local). */
static fa_status fa_resolve_backend(fa_backend *b, int verbose)
{
    if (*b != FA_BACKEND_AUTO) return FA_OK;
    const char *env = getenv("FA_BACKEND");
    if (env && *env) {
        if (!strcmp(env, "reference")) *b = FA_BACKEND_REFERENCE;
        else if (!strcmp(env, "cpu")) *b = FA_BACKEND_CPU;
        else if (!strcmp(env, "cuda")) *b = FA_BACKEND_CUDA;
        else if (!strcmp(env, "auto")) *b = FA_BACKEND_AUTO;
        else
            return fa_set_error(NULL, FA_ERR_INVALID_ARG,
                                "fa_context_create: FA_BACKEND=%s is not one of "
                                "reference, cpu, cuda, auto", env);
        if (*b != FA_BACKEND_AUTO) {
            fa_verbose(&(fa_context){ .verbose = verbose }, "backend %s chosen by FA_BACKEND",
                       env);
            return FA_OK;
        }
    }
    return FA_OK;   /* still AUTO: fa_context_create tries CUDA, then the CPU */
}

/* Allocate a context for ops and run its init; errors are context-less. */
static fa_status fa_context_new(fa_context **out, fa_backend kind, const fa_backend_ops *ops,
                                int verbose)
{
    fa_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fa_set_error(NULL, FA_ERR_NO_MEMORY, "fa_context_create: out of memory");
    ctx->kind = kind;
    ctx->ops = ops;
    ctx->verbose = verbose;
    fa_topology_get(&ctx->topo);
    if (ops->init) {
        fa_status st = ops->init(ctx);
        if (st != FA_OK) {
            /* every context-less message starts with the function's name */
            if (strncmp(ctx->err, "fa_context_create:", 18) == 0)
                fa_set_error(NULL, st, "%s", ctx->err);
            else
                fa_set_error(NULL, st, "fa_context_create: backend %s: %s", ops->name,
                             ctx->err[0] ? ctx->err : fa_status_string(st));
            free(ctx);
            return st;
        }
    }
    fa_verbose(ctx, "context: backend %s", ops->name);
    *out = ctx;
    return FA_OK;
}

FA_API fa_status fa_context_create(fa_context **out, fa_backend backend)
{
    if (!out)
        return fa_set_error(NULL, FA_ERR_INVALID_ARG, "fa_context_create: ctx is NULL");
    *out = NULL;
    if ((int)backend < FA_BACKEND_AUTO || (int)backend > FA_BACKEND_CUDA)
        return fa_set_error(NULL, FA_ERR_INVALID_ARG,
                            "fa_context_create: backend=%d is not a fa_backend value",
                            (int)backend);
    int verbose = fa_env_verbose();
    fa_status st = fa_resolve_backend(&backend, verbose);
    if (st != FA_OK) return st;

    if (backend == FA_BACKEND_AUTO) {
        const char *why;
        fa_context *ctx = NULL;
        if (fa_cuda_module(&why)) {
            st = fa_context_new(&ctx, FA_BACKEND_CUDA, fa_cuda_ops, verbose);
            if (st == FA_OK) {
                fa_verbose(ctx, "auto: cuda chosen");
                *out = ctx;
                return FA_OK;
            }
            why = fa_last_error(NULL);
        }
        fa_tell_cuda_rejected(verbose, why);
        st = fa_context_new(out, FA_BACKEND_CPU, &fa_cpu_ops, verbose);
        if (st == FA_OK) fa_verbose(*out, "auto: cpu chosen");
        return st;
    }
    const fa_backend_ops *ops = NULL;
    switch (backend) {
    case FA_BACKEND_REFERENCE: ops = &fa_reference_ops; break;
    case FA_BACKEND_CPU:       ops = &fa_cpu_ops; break;
    default: {
        const char *why;
        ops = fa_cuda_module(&why);
        if (!ops)
            return fa_set_error(NULL, FA_ERR_UNSUPPORTED, "fa_context_create: backend cuda: %s",
                                why);
    }
    }
    return fa_context_new(out, backend, ops, verbose);
}

FA_API void fa_context_destroy(fa_context *ctx)
{
    if (!ctx) return;
    if (ctx->ops && ctx->ops->fini) ctx->ops->fini(ctx);
    free(ctx);
}

FA_API fa_backend fa_context_backend(const fa_context *ctx)
{
    return ctx ? ctx->kind : FA_BACKEND_AUTO;
}

FA_API const char *fa_context_describe(const fa_context *ctx)
{
    if (!ctx) return "(no context)";
    fa_context *c = (fa_context *)ctx;    /* desc is the context's own text buffer */
    const fa_topology *t = &ctx->topo;
    c->desc[0] = '\0';
    fa_appendf(c->desc, sizeof c->desc, "flashattn %s\nbackend: %s\n", fa_version_string(),
               fa_backend_name(ctx->kind));
    fa_appendf(c->desc, sizeof c->desc,
               "memory hierarchy (%s): L1d %lld KiB, L2 %lld KiB per core, L3 %lld KiB "
               "(%lld KiB per core), %d cores, %d hardware threads, DRAM %lld MiB\n",
               t->from_hwloc ? "hwloc" : "defaults, hwloc gave no caches",
               (long long)(t->l1d >> 10), (long long)(t->l2 >> 10), (long long)(t->l3 >> 10),
               (long long)(t->l3_per_core >> 10), t->cores, t->pus,
               (long long)(t->dram >> 20));
    if (ctx->kind == FA_BACKEND_CPU) {
        char why[160];
        int n = fa_default_threads(why, sizeof why);
        fa_appendf(c->desc, sizeof c->desc, "default threads: %d, from %s\n", n, why);
    }
    if (ctx->ops->describe) ctx->ops->describe(ctx, c->desc, sizeof c->desc);
    return ctx->desc;
}

FA_API fa_status fa_context_set_threads(fa_context *ctx, int n)
{
    if (!ctx) return fa_set_error(NULL, FA_ERR_INVALID_ARG, "fa_context_set_threads: ctx is NULL");
    if (n < 0)
        return fa_set_error(ctx, FA_ERR_INVALID_ARG,
                            "fa_context_set_threads: n=%d must be >= 0 (0 = the default)", n);
    if (!ctx->ops->set_threads) {
        if (n > 1)
            return fa_set_error(ctx, FA_ERR_UNSUPPORTED,
                                "fa_context_set_threads: the %s backend runs on one thread",
                                ctx->ops->name);
        ctx->threads = n;
        return FA_OK;
    }
    fa_status st = ctx->ops->set_threads(ctx, n);
    if (st == FA_OK) ctx->threads = n;
    return st;
}

FA_API fa_status fa_context_set_device(fa_context *ctx, int device)
{
    if (!ctx) return fa_set_error(NULL, FA_ERR_INVALID_ARG, "fa_context_set_device: ctx is NULL");
    if (device < 0)
        return fa_set_error(ctx, FA_ERR_INVALID_ARG,
                            "fa_context_set_device: device=%d must be >= 0", device);
    if (ctx->ops->set_device) return ctx->ops->set_device(ctx, device);
    return fa_set_error(ctx, FA_ERR_UNSUPPORTED,
                        "fa_context_set_device: the %s backend has no devices", ctx->ops->name);
}

FA_API fa_status fa_context_set_stream(fa_context *ctx, void *stream)
{
    if (!ctx) return fa_set_error(NULL, FA_ERR_INVALID_ARG, "fa_context_set_stream: ctx is NULL");
    if (ctx->ops->set_stream) return ctx->ops->set_stream(ctx, stream);
    if (!stream) return FA_OK;   /* the default stream: meaningful everywhere */
    return fa_set_error(ctx, FA_ERR_UNSUPPORTED,
                        "fa_context_set_stream: the %s backend has no streams", ctx->ops->name);
}

FA_API fa_status fa_context_set_tiles(fa_context *ctx, int block_q, int block_kv)
{
    if (!ctx) return fa_set_error(NULL, FA_ERR_INVALID_ARG, "fa_context_set_tiles: ctx is NULL");
    if (block_q < 0)
        return fa_set_error(ctx, FA_ERR_INVALID_ARG,
                            "fa_context_set_tiles: block_q=%d must be >= 0 (0 = automatic)",
                            block_q);
    if (block_kv < 0)
        return fa_set_error(ctx, FA_ERR_INVALID_ARG,
                            "fa_context_set_tiles: block_kv=%d must be >= 0 (0 = automatic)",
                            block_kv);
    if (ctx->ops->set_tiles) {
        fa_status st = ctx->ops->set_tiles(ctx, block_q, block_kv);
        if (st != FA_OK) return st;
    }
    ctx->block_q = block_q;
    ctx->block_kv = block_kv;
    return FA_OK;
}
