/* validate.h - argument checks: public arguments in, a validated fa_problem out.
 *
 * Each builder checks every argument of one public call (messages name the argument as it
 * is spelled in flashattn.h and start with the function's name), resolves the options
 * (default scale, causal folded into the window, bias broadcast as stride 0, dropout key)
 * and fills *p. Nothing is written anywhere but *p and ctx's error message.
 * bias_ok: the call accepts opt->bias (fa_forward, fa_backward).
 * describe_only: the call only describes the operation (fa_query, fa_query_backward) and
 * never touches the data, so data pointers may be NULL.
 */
#ifndef FA_VALIDATE_H
#define FA_VALIDATE_H

#include "backend.h"

fa_status fa_build_forward(fa_context *ctx, const char *fn, fa_problem *p,
                           const fa_tensor *out, const float *lse, const fa_tensor *q,
                           const fa_tensor *k, const fa_tensor *v, const fa_options *opt,
                           int bias_ok, int describe_only);

fa_status fa_build_backward(fa_context *ctx, const char *fn, fa_problem *p,
                            const fa_tensor *dq, const fa_tensor *dk, const fa_tensor *dv,
                            const float *dsinks, const fa_tensor *dout, const fa_tensor *q,
                            const fa_tensor *k, const fa_tensor *v, const fa_tensor *out,
                            const float *lse, const fa_options *opt, int bias_ok,
                            int describe_only);

/* Turns a dense problem built above into a varlen one and checks the index arrays. */
fa_status fa_build_varlen(fa_context *ctx, const char *fn, fa_problem *p,
                          const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                          int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k);

fa_status fa_build_kvcache(fa_context *ctx, const char *fn, fa_problem *p,
                           const fa_tensor *out, const float *lse, const fa_tensor *q,
                           const fa_tensor *k_cache, const fa_tensor *v_cache,
                           const fa_tensor *k_new, const fa_tensor *v_new,
                           const int32_t *cache_seqlens, const int32_t *block_table,
                           int64_t max_pages_per_seq, const fa_options *opt);

fa_status fa_check_combine(fa_context *ctx, const char *fn, const fa_tensor *out,
                           const fa_tensor *out_parts, const float *const *lse_parts, int n);

#endif /* FA_VALIDATE_H */
