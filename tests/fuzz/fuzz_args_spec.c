/* fuzz_args_spec.c - what fuzz_args expects of a call (fuzz_args.h): the spec predicate,
 * sufficient conditions for FA_ERR_INVALID_ARG written from docs/api.md (not from
 * lib/validate.c), and the checks after each call: the status is an fa_status, never
 * UNSUPPORTED or INTERNAL from a host backend's operation, INVALID_ARG where the predicate
 * says so, a failure's message one line that starts with the function's name, and the
 * context still serving a small valid call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_args.h"

int dtype_ok(fa_dtype t) { return t == FA_F32 || t == FA_F16 || t == FA_BF16; }

/* ---- the spec predicate: sufficient conditions for FA_ERR_INVALID_ARG ---------------- */

/* One tensor on its own (docs/api.md, "Strides"): dtype, negative sizes or strides,
   stride[3] != 1, element count or byte extent beyond int64 (only claimed when no
   dimension is 0), an output with stride 0 on a dimension of extent > 1, data NULL on a
   non-empty tensor (except in fa_query*). */
int tensor_bad(const fa_tensor *t, int output, int query)
{
    if (!t) return 1;
    if (!dtype_ok(t->dtype)) return 1;
    int empty = 0;
    for (int d = 0; d < 4; d++) {
        if (t->shape[d] < 0 || t->stride[d] < 0) return 1;
        if (t->shape[d] == 0) empty = 1;
    }
    if (t->stride[3] != 1) return 1;
    if (empty) return 0;
    __int128 numel = 1, span = 0;
    for (int d = 0; d < 4; d++) {
        numel *= t->shape[d];
        if (numel > INT64_MAX) return 1;
        span += (__int128)(t->shape[d] - 1) * t->stride[d];
        if (span > INT64_MAX) return 1;
        if (output && t->shape[d] > 1 && t->stride[d] == 0) return 1;
    }
    if ((span + 1) * (__int128)fa_dtype_size(t->dtype) > INT64_MAX) return 1;
    if (!t->data && !query) return 1;
    return 0;
}

int opts_bad(const fa_options *o, int bias_ok, int query)
{
    if (!o) return 0;
    if (!isfinite(o->scale)) return 1;
    if ((int)o->causal < 0 || (int)o->causal > 2) return 1;
    if (o->window != 0 && o->window != 1) return 1;
    if (o->window && (o->window_left < -1 || o->window_right < -1)) return 1;
    if (!(o->softcap >= 0.0f) || !isfinite(o->softcap)) return 1;
    if (!(o->dropout_p >= 0.0f && o->dropout_p < 1.0f)) return 1;
    if (o->bias && (!bias_ok || tensor_bad(o->bias, 0, query))) return 1;
    return 0;
}

/* q/k/v/out of a forward-type call, all shapes known non-negative. dense: batch and
   lengths are compared too (fa_forward, fa_backward, fa_query*). */
int qkv_bad(const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                   const fa_tensor *o, int dense)
{
    if (k->dtype != q->dtype || v->dtype != q->dtype) return 1;
    if (o->dtype != q->dtype && o->dtype != FA_F32) return 1;
    if (q->shape[3] < 1 || v->shape[3] < 1 || k->shape[3] != q->shape[3]) return 1;
    if (k->shape[2] == 0 && q->shape[2] > 0) return 1;
    if (k->shape[2] > 0 && q->shape[2] % k->shape[2] != 0) return 1;
    if (v->shape[2] != k->shape[2]) return 1;
    if (o->shape[1] != q->shape[1] || o->shape[2] != q->shape[2] || o->shape[3] != v->shape[3])
        return 1;
    if (o->shape[0] != q->shape[0]) return 1;
    if (dense && (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] ||
                  v->shape[1] != k->shape[1]))
        return 1;
    return 0;
}

/* ---- checks ----------------------------------------------------------------------------- */

void fail(const char *fn, const char *what, fa_context *ctx)
{
    fprintf(stderr, "fuzz_args: %s: %s (last error: '%s')\n", fn, what,
            ctx ? fa_last_error(ctx) : fa_last_error(NULL));
    abort();
}

void valid_call_still_works(fa_context *ctx)
{
    float q[2 * 4], o[2 * 4], lse[2];
    for (int i = 0; i < 8; i++) q[i] = 0.25f * (float)(i + 1);
    fa_tensor t = fa_tensor_contiguous(q, FA_F32, 1, 2, 1, 4);
    fa_tensor to = fa_tensor_contiguous(o, FA_F32, 1, 2, 1, 4);
    if (fa_forward(ctx, &to, lse, &t, &t, &t, NULL) != FA_OK)
        fail("fa_forward", "context unusable after a call", ctx);
}

void check_status(fa_context *ctx, fa_status st, const char *fn, int must_fail, int op_call)
{
    if ((int)st < FA_OK || (int)st > FA_ERR_INTERNAL) fail(fn, "status is not an fa_status", ctx);
    if (op_call && (st == FA_ERR_UNSUPPORTED || st == FA_ERR_INTERNAL))
        fail(fn, "UNSUPPORTED/INTERNAL from a host backend", ctx);
    if (must_fail && st != FA_ERR_INVALID_ARG) {
        char m[96];
        snprintf(m, sizeof m, "a call the spec makes invalid returned %d (%s)", (int)st,
                 fa_status_string(st));
        fail(fn, m, ctx);
    }
    if (st != FA_OK) {
        const char *msg = fa_last_error(ctx);
        size_t n = strlen(fn);
        if (strncmp(msg, fn, n) != 0 || msg[n] != ':') fail(fn, "message does not start with the function name", ctx);
        if (strchr(msg, '\n')) fail(fn, "message is not one line", ctx);
    }
}
