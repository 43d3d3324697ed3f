/* flashattn.h - exact attention, computed blocked and fused (FlashAttention style).
 *
 * The whole public API. Conventions used in every comment below:
 *   - Tensors are 4-D strided views [batch, seqlen, heads, head_dim] of caller-owned
 *     memory; strides are counted in elements (not bytes), 64-bit; stride[3] must be 1.
 *   - "host" memory is ordinary CPU memory; on a CUDA context every data pointer
 *     (tensors, lse, slopes, sinks, index arrays) is device memory instead.
 *   - Destinations come first, then inputs, then options.
 *   - Every call returns fa_status; on any error nothing is written to the outputs and
 *     fa_last_error() explains the failure in one line naming the argument.
 *   - The library never prints to stdout, never exits, never aborts. Its only output is
 *     the dispatch log: FA_VERBOSE=1 lines on stderr, or fa_set_log_callback's callback.
 *
 * Threads. A context is used by one thread at a time: calls on one context must not
 * overlap (it holds the last error, the describe text and backend state such as a CUDA
 * stream), but a context may move between threads when the caller orders the calls (a
 * mutex, a join). Different contexts are independent and may run concurrently, one per
 * thread, over the same read-only inputs. Everything else is thread-safe: one-time
 * detection (CPU features, caches, the CUDA module) happens once per process, and
 * fa_last_error(NULL) is per thread. A CPU context runs each call on its own OpenMP team
 * (fa_context_set_threads); several contexts busy at once share the machine's cores.
 *
 * Versions. FA_VERSION (MAJOR*10000 + MINOR*100 + PATCH) is the header's version;
 * fa_version() is the library's, at run time: a program may check that they agree.
 */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FLASHATTN_BUILDING)
#  define FA_API __declspec(dllexport)
#elif defined(__GNUC__) && defined(FLASHATTN_BUILDING)
#  define FA_API __attribute__((visibility("default")))
#else
#  define FA_API
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0
#define FA_VERSION (FA_VERSION_MAJOR * 10000 + FA_VERSION_MINOR * 100 + FA_VERSION_PATCH)

/* ---------------------------------------------------------------------------------- */
/* Types                                                                              */
/* ---------------------------------------------------------------------------------- */

typedef enum {
    FA_OK = 0,
    FA_ERR_INVALID_ARG,  /* the call is wrong: never fall back on this            */
    FA_ERR_UNSUPPORTED,  /* valid call this backend/build/device cannot serve      */
    FA_ERR_NO_MEMORY,    /* scratch allocation failed                              */
    FA_ERR_DEVICE,       /* the device or its runtime reported an error            */
    FA_ERR_INTERNAL      /* a bug in flashattn: please report it                   */
} fa_status;

/* Storage types. Arithmetic is always accumulated in fp32. */
typedef enum { FA_F32 = 0, FA_F16, FA_BF16 } fa_dtype;

typedef enum {
    FA_BACKEND_AUTO = 0,   /* CUDA when the module loads and a device exists, else CPU */
    FA_BACKEND_REFERENCE,  /* plain C, the specification (slow, readable)               */
    FA_BACKEND_CPU,        /* OpenMP + SIMD kernels                                     */
    FA_BACKEND_CUDA        /* runtime-loaded CUDA module                                */
} fa_backend;

/* A strided view of caller-owned memory, always 4-D: [batch, seqlen, heads, head_dim].
 * Strides are in elements, 64-bit, and may be 0 only where documented (bias broadcast).
 * stride[3] must be 1. Packed variable-length batches use batch = 1 and
 * seqlen = total tokens (see fa_forward_varlen). */
typedef struct {
    void    *data;
    fa_dtype dtype;
    int64_t  shape[4];
    int64_t  stride[4];
} fa_tensor;

typedef enum {
    FA_CAUSAL_NONE = 0,
    FA_CAUSAL_BOTTOM_RIGHT, /* last query sees the last key (flash-attn >= 2.1): off = Sk - Sq */
    FA_CAUSAL_TOP_LEFT      /* first query sees the first key (torch SDPA):    off = 0       */
} fa_causal;

/* Options. All-zero (fa_options o = {0};) means the defaults, the same as passing NULL.
 * Always start from zero (= {0}, designated initializers or memset): reserved must be 0,
 * else the call is INVALID_ARG. Growth keeps the ABI: a new option takes the place of
 * whole reserved slots at the end (same size and offsets), and its zero value means what
 * the library did before it existed; so a program built against an older header keeps
 * working with a newer library, and a newer program asking for an option an older
 * library lacks gets INVALID_ARG naming the reserved slot, never a silent default.
 * Score order: s = scale * q.k ; softcap ; + ALiBi + bias ; mask ; softmax (with sink) ;
 * dropout on the probabilities (kept ones scaled by 1/(1-p)). */
typedef struct {
    float     scale;           /* 0 -> 1/sqrt(d_qk). Must be finite.                       */
    fa_causal causal;          /* forces the effective window_right to 0                     */
    int       window;          /* 0: no window (left/right ignored); 1: use them             */
    int64_t   window_left;     /* -1 = unbounded, else >= 0. Query i sees keys j with        */
    int64_t   window_right;    /*   i+off-left <= j <= i+off+right (off as for causal)      */
    float     softcap;         /* 0 = off; > 0: s -> softcap * tanh(s / softcap)            */
    const float *alibi_slopes; /* [heads_q] fp32 or NULL: adds -slope * |i + off - j|       */
    const float *sinks;        /* [heads_q] fp32 sink logits or NULL: one extra logit in
                                  each row's softmax denominator, with no value row          */
    const fa_tensor *bias;     /* additive bias [B|1, Sq, H|1, Sk] (shape 1 or stride 0
                                  broadcasts), any dtype, or NULL. fa_forward/fa_backward only */
    float     dropout_p;       /* in [0, 1); 0 = off. Keep-mask from Philox4x32-10 keyed by
                                  (seed, offset, b, h, i, j): identical on every backend      */
    uint64_t  seed, offset;
    int       deterministic;   /* backward bitwise reproducible run to run (CPU: also across
                                  thread counts). The forward always is.                    */
    uint64_t  reserved[8];     /* must be 0: room for future options (see above)            */
} fa_options;

/* ---------------------------------------------------------------------------------- */
/* Context: where to run                                                              */
/* ---------------------------------------------------------------------------------- */

typedef struct fa_context fa_context;

/* Create a context for `backend`. AUTO honours FA_BACKEND=reference|cpu|cuda|auto; an
 * unknown or unavailable value is an error here. FA_CPU_ISA=generic|avx2|avx512|amx caps
 * the CPU kernel set (amx: AMX tiles for bf16, AVX-512 otherwise); asking for a set this
 * CPU or build lacks is FA_ERR_UNSUPPORTED. FA_VERBOSE=1 prints one line per dispatch
 * decision on stderr (see fa_set_log_callback); a reason that repeats, such as why AUTO
 * did not take CUDA, is told once per process.
 * On failure *ctx is set to NULL and fa_last_error(NULL) says why. */
FA_API fa_status   fa_context_create(fa_context **ctx, fa_backend backend);
/* Frees what the context keeps between calls: a CPU context's scratch buffers (reused by
 * the next call, each released after a call that needed more than 256 MiB), a CUDA
 * context's workspace pool. NULL: no-op. */
FA_API void        fa_context_destroy(fa_context *ctx);
FA_API fa_backend  fa_context_backend(const fa_context *ctx);
/* Multi-line, human-readable: backend, ISA or GPU, caches, tiles chosen and why,
 * threads. Valid until the next call on ctx. */
FA_API const char *fa_context_describe(const fa_context *ctx);
/* CPU threads per call; n = 0 (the initial value) is the default: OMP_NUM_THREADS (its
 * first entry) when set, else the least of the core count, the CPUs in the calling
 * thread's affinity mask (both read at each call) and the cgroup v2 CPU quota (cpu.max,
 * rounded up; read once per process). fa_context_describe says which one decided
 * ("default threads: N, from ..."). */
FA_API fa_status   fa_context_set_threads(fa_context *ctx, int n);
FA_API fa_status   fa_context_set_device(fa_context *ctx, int device); /* CUDA             */
FA_API fa_status   fa_context_set_stream(fa_context *ctx, void *stream);/* CUDA; NULL = default */
/* Tile sizes in rows: block_q query rows, block_kv key rows. 0 = automatic. Backends may
 * round them; fa_context_describe reports the effective sizes. */
FA_API fa_status   fa_context_set_tiles(fa_context *ctx, int block_q, int block_kv);
/* Last failure on ctx, or (ctx == NULL) this thread's last context-less failure.
 * Never NULL; "" when there was none. */
FA_API const char *fa_last_error(const fa_context *ctx);
FA_API const char *fa_status_string(fa_status s);
FA_API const char *fa_version_string(void);  /* starts with "MAJOR.MINOR.PATCH" */
FA_API int         fa_version(void);         /* FA_VERSION of the library that runs */

/* Where the dispatch log goes. With fn set, every line that FA_VERBOSE=1 would print on
 * stderr (backend and kernel-set choices with the reasons for each rejected candidate,
 * CUDA kernel launches) is passed to fn(user, line) instead, whatever FA_VERBOSE says:
 * one line per call, without the "flashattn: " prefix or a newline, valid during the
 * call only. The setting is process-wide. fn may be called from any thread that calls
 * flashattn, one call at a time (the library serializes them), and should return quickly
 * without calling flashattn. Once fa_set_log_callback returns, the previous fn is not
 * called again. fa_set_log_callback(NULL, NULL) goes back to stderr under FA_VERBOSE=1;
 * a user pointer with a NULL fn is INVALID_ARG (fa_last_error(NULL) says so). */
typedef void (*fa_log_fn)(void *user, const char *line);
FA_API fa_status   fa_set_log_callback(fa_log_fn fn, void *user);

/* ---------------------------------------------------------------------------------- */
/* Operations: what to run                                                            */
/* ---------------------------------------------------------------------------------- */

/* out [B, Sq, H, d_v] (dtype of q, or F32)      q [B, Sq, H,   d_qk]
 * lse [B, H, Sq] fp32 contiguous, or NULL        k [B, Sk, Hkv, d_qk]
 *                                                v [B, Sk, Hkv, d_v]
 * H % Hkv == 0 (GQA/MQA): query head h reads KV head h / (H / Hkv).
 * lse is the natural-log sum of exp of the scores of each row (with the sink);
 * a fully masked row gives out = 0 and lse = -inf (or the sink logit). */
FA_API fa_status fa_forward(fa_context *ctx, fa_tensor *out, float *lse,
                            const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                            const fa_options *opt);

/* Gradients of fa_forward. dq like q, dk like k, dv like v (each the dtype of q or F32),
 * overwritten. dsinks [H] fp32 or NULL, overwritten (INVALID_ARG when sinks is NULL).
 * dout like out; out and lse as fa_forward returned them (lse required).
 * Gradients through alibi_slopes and bias are not computed. */
FA_API fa_status fa_backward(fa_context *ctx, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv,
                             float *dsinks,
                             const fa_tensor *dout, const fa_tensor *q, const fa_tensor *k,
                             const fa_tensor *v, const fa_tensor *out, const float *lse,
                             const fa_options *opt);

/* Packed batches: q [1, total_q, H, d_qk], k/v [1, total_k, Hkv, d], out [1, total_q, H, d_v].
 * cu_seqlens_q/k: int32 prefix sums of length batch+1 starting at 0 (host on CPU, device on
 * CUDA); sequences may be empty. max_seqlen_q/k are upper bounds of the lengths.
 * lse [H, total_q]. Causal alignment and windows apply per sequence. Rows past
 * cu_seqlens_q[batch] (out, lse, dq) and cu_seqlens_k[batch] (dk, dv) are not touched.
 * opt->bias must be NULL. */
FA_API fa_status fa_forward_varlen(fa_context *ctx, fa_tensor *out, float *lse,
                                   const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                   const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                   int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                   const fa_options *opt);
FA_API fa_status fa_backward_varlen(fa_context *ctx, fa_tensor *dq, fa_tensor *dk,
                                    fa_tensor *dv, float *dsinks, const fa_tensor *dout,
                                    const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                    const fa_tensor *out, const float *lse,
                                    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                    int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                    const fa_options *opt);

/* Inference with a KV cache (no backward).
 * q [B, Sq, H, d_qk]; out [B, Sq, H, d_v]; lse [B, H, Sq] or NULL.
 * Contiguous cache (block_table == NULL): k_cache [B, S_cache, Hkv, d_qk], v_cache
 *   [B, S_cache, Hkv, d_v]; capacity S_cache; max_pages_per_seq ignored.
 * Paged cache: k_cache/v_cache [num_pages, page_size, Hkv, d] (any page_size >= 1) and
 *   block_table int32 [B, max_pages_per_seq]; capacity max_pages_per_seq * page_size;
 *   entries past the pages a sequence uses are ignored (may be -1).
 * cache_seqlens int32 [B]: tokens already in the cache. k_new/v_new [B, S_new, Hkv, d]
 *   (both or neither) are first written into the cache at cache_seqlens[b], then attention
 *   runs over cache_seqlens[b] + S_new keys. Causal/window alignment is bottom-right
 *   (unless TOP_LEFT); for dropout, query t sits at position cache_seqlens[b] + t.
 * opt->bias must be NULL. */
FA_API fa_status fa_forward_kvcache(fa_context *ctx, fa_tensor *out, float *lse,
                                    const fa_tensor *q, fa_tensor *k_cache, fa_tensor *v_cache,
                                    const fa_tensor *k_new, const fa_tensor *v_new,
                                    const int32_t *cache_seqlens, const int32_t *block_table,
                                    int64_t max_pages_per_seq, const fa_options *opt);

/* Merge n >= 1 partial results over disjoint key sets (split-KV, ring attention):
 * out = sum_i exp(lse_i - lse) * out_i, lse = logsumexp_i lse_i.
 * out and every out_parts[i] are [B, S, H, d] (any dtype each); lse and each lse_parts[i]
 * are [B, H, S] fp32 contiguous (lse may be NULL). out_parts (array of views) and lse_parts
 * (array of pointers) live in host memory. A row with every lse_i = -inf gives out = 0,
 * lse = -inf. Sinks are unknown here: pass them to exactly one partial call. */
FA_API fa_status fa_combine(fa_context *ctx, fa_tensor *out, float *lse,
                            const fa_tensor *out_parts, const float *const *lse_parts, int n);

/* What fa_forward (fa_query) or fa_backward (fa_query_backward) would run with these
 * arguments, without running it: *kernel_name gets a string naming the kernel and its
 * ISA/arch ("cpu/avx512 fp32 forward", "cpu/avx512 bf16 decode (...)", "cuda/sm80 fwd
 * bf16 d128 fast 128x64 4 warps"); static on the host backends, on CUDA valid until the
 * context's next call. A call that the backend
 * cannot serve returns FA_ERR_UNSUPPORTED and fa_last_error says why; a bad call returns
 * FA_ERR_INVALID_ARG. The tensors' data pointers are not read. */
FA_API fa_status fa_query(fa_context *ctx, const char **kernel_name,
                          const fa_tensor *out, const float *lse,
                          const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                          const fa_options *opt);
FA_API fa_status fa_query_backward(fa_context *ctx, const char **kernel_name,
                                   const fa_tensor *dq, const fa_tensor *dk,
                                   const fa_tensor *dv, const float *dsinks,
                                   const fa_tensor *dout, const fa_tensor *q,
                                   const fa_tensor *k, const fa_tensor *v,
                                   const fa_tensor *out, const float *lse,
                                   const fa_options *opt);

/* Convenience: a contiguous [b, s, h, d] view of data. */
FA_API fa_tensor fa_tensor_contiguous(void *data, fa_dtype dtype,
                                      int64_t b, int64_t s, int64_t h, int64_t d);

/* Bytes per element of a dtype (0 for an unknown value). */
FA_API size_t fa_dtype_size(fa_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_H */
