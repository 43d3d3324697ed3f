/* stress_bad.c - stress_cuda's failing calls (see stress_cuda.c): bad shapes, host
 * pointers, unsupported head dims (fp32 too), bad counts. Each must return the documented
 * status with a one-line message starting with the function's name, leave no CUDA error
 * behind and write nothing (its outputs point into badout_d, poisoned, checked by the loop). */
#include <string.h>
#include "stress_cuda.h"

void *junk_d, *badout_d, *host_junk;
long bad_calls;

/* Call number `which` (< NBAD) of the failing calls on ctx, described in desc; checks its
   status, message and that it left no CUDA error. Returns 1 if all was as documented. */
int bad_call(fa_context *ctx, int which, char *desc, size_t dlen)
{
    fa_status want = FA_ERR_INVALID_ARG, st;
    const char *fn = "fa_forward", *sub = NULL;
    void *J = junk_d, *O = badout_d;
    fa_tensor q = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 64), k = q, v = q, out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 2, 64);
    float *lse = (float *)((char *)O + 65536);
    fa_options so = {0};
    float *jf = (float *)J;
    switch (which) {
    case 0: snprintf(desc, dlen, "fa_forward with k's head dim 32, q's 64");
        k.shape[3] = 32; k.stride[2] = 32; k.stride[1] = 64; k.stride[0] = 1024;
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 1: snprintf(desc, dlen, "fa_forward with 3 query heads and 2 KV heads");
        q = fa_tensor_contiguous(J, FA_BF16, 1, 16, 3, 64); out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 3, 64);
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 2: snprintf(desc, dlen, "fa_forward with q in host memory");
        q.data = host_junk; sub = "host memory";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 3: snprintf(desc, dlen, "fa_forward with out in host memory");
        out.data = host_junk; sub = "host memory";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 4: snprintf(desc, dlen, "fa_forward with head dim 60");
        q = k = v = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 60); out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 2, 60);
        want = FA_ERR_UNSUPPORTED; sub = "head dim";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 5: snprintf(desc, dlen, "fa_forward with head dim 264");
        q = k = v = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 264); out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 2, 264);
        want = FA_ERR_UNSUPPORTED; sub = "head dim";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 6: snprintf(desc, dlen, "fa_forward with fp32 q, k, v of head dim 300");   /* fp32 takes any d up to 256 */
        q = k = v = fa_tensor_contiguous(J, FA_F32, 1, 16, 2, 300); out = fa_tensor_contiguous(O, FA_F32, 1, 16, 2, 300);
        want = FA_ERR_UNSUPPORTED; sub = "head dim";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 7: snprintf(desc, dlen, "fa_forward with q 2 bytes off 16-byte alignment");
        q.data = (char *)J + 2; want = FA_ERR_UNSUPPORTED; sub = "aligned";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 8: case 9: case 10: {
        fa_tensor dq = fa_tensor_contiguous((char *)O + 131072, FA_BF16, 1, 16, 2, 64), dk = dq, dv = dq;
        dk.data = (char *)O + 196608; dv.data = (char *)O + 262144;
        fn = "fa_backward";
        if (which == 8) { snprintf(desc, dlen, "fa_backward with lse NULL"); sub = "lse";
            st = fa_backward(ctx, &dq, &dk, &dv, NULL, &q, &q, &k, &v, &q, NULL, NULL); }
        else if (which == 9) { snprintf(desc, dlen, "fa_backward with dsinks but no sinks"); sub = "dsinks";
            st = fa_backward(ctx, &dq, &dk, &dv, lse, &q, &q, &k, &v, &q, jf, NULL); }
        else { snprintf(desc, dlen, "fa_backward with dq in host memory"); sub = "host memory";
            dq.data = host_junk;
            st = fa_backward(ctx, &dq, &dk, &dv, NULL, &q, &q, &k, &v, &q, jf, NULL); }
        break;
    }
    case 11: case 12: {
        fn = "fa_forward_varlen";
        int32_t *cu = (int32_t *)((char *)J + 8192);   /* junk contents: the call must fail before reading them */
        if (which == 11) { snprintf(desc, dlen, "fa_forward_varlen with cu_seqlens_q in host memory"); sub = "host memory";
            st = fa_forward_varlen(ctx, &out, lse, &q, &k, &v, (const int32_t *)host_junk, cu, 1, 16, 16, NULL); }
        else { snprintf(desc, dlen, "fa_forward_varlen with batch -1"); sub = "batch";
            st = fa_forward_varlen(ctx, &out, lse, &q, &k, &v, cu, cu, -1, 16, 16, NULL); }
        break;
    }
    case 13: case 14: case 15: {
        fn = "fa_forward_kvcache";
        fa_tensor kc = fa_tensor_contiguous((char *)O + 327680, FA_BF16, 1, 64, 2, 64), vc = kc;
        vc.data = (char *)O + 327680 + 16384;
        fa_tensor kn = fa_tensor_contiguous(J, FA_BF16, 1, 2, 2, 64), qq = fa_tensor_contiguous(J, FA_BF16, 1, 2, 2, 64);
        fa_tensor oo = fa_tensor_contiguous(O, FA_BF16, 1, 2, 2, 64);
        int32_t *cs = (int32_t *)((char *)J + 8192);
        if (which == 13) { snprintf(desc, dlen, "fa_forward_kvcache with k_new but no v_new"); sub = "v_new";
            st = fa_forward_kvcache(ctx, &oo, lse, &qq, &kc, &vc, &kn, NULL, cs, NULL, 0, NULL); }
        else if (which == 14) { snprintf(desc, dlen, "fa_forward_kvcache (append) with cache_seqlens in host memory"); sub = "host memory";
            int32_t *hcs = (int32_t *)host_junk;
            st = fa_forward_kvcache(ctx, &oo, lse, &qq, &kc, &vc, &kn, &kn, hcs, NULL, 0, NULL); }
        else { snprintf(desc, dlen, "fa_forward_kvcache (append) with head dim 60"); want = FA_ERR_UNSUPPORTED; sub = "head dim";
            kc = fa_tensor_contiguous((char *)O + 327680, FA_BF16, 1, 64, 2, 60); vc = kc; vc.data = (char *)O + 327680 + 16384;
            kn = qq = fa_tensor_contiguous(J, FA_BF16, 1, 2, 2, 60); oo = fa_tensor_contiguous(O, FA_BF16, 1, 2, 2, 60);
            st = fa_forward_kvcache(ctx, &oo, lse, &qq, &kc, &vc, &kn, &kn, cs, NULL, 0, NULL); }
        break;
    }
    case 16: case 17: {
        fn = "fa_combine";
        fa_tensor parts[33];
        const float *lp[33];
        for (int i = 0; i < 33; i++) { parts[i] = fa_tensor_contiguous(J, FA_F32, 1, 16, 2, 64); lp[i] = jf; }
        fa_tensor oo = fa_tensor_contiguous(O, FA_F32, 1, 16, 2, 64);
        if (which == 16) { snprintf(desc, dlen, "fa_combine with n = 0"); sub = "n=0";
            st = fa_combine(ctx, &oo, lse, parts, lp, 0); }
        else { snprintf(desc, dlen, "fa_combine with 33 parts"); want = FA_ERR_UNSUPPORTED; sub = "33";
            st = fa_combine(ctx, &oo, lse, parts, lp, 33); }
        break;
    }
    default: {
        snprintf(desc, dlen, "fa_backward with head dim 264"); fn = "fa_backward"; want = FA_ERR_UNSUPPORTED; sub = "head dim";
        q = k = v = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 264);
        fa_tensor dq = fa_tensor_contiguous((char *)O + 131072, FA_BF16, 1, 16, 2, 264), dk = dq, dv = dq;
        dk.data = (char *)O + 196608; dv.data = (char *)O + 262144;
        so.deterministic = 1;
        st = fa_backward(ctx, &dq, &dk, &dv, NULL, &q, &q, &k, &v, &q, jf, &so);
        break;
    }
    }
    bad_calls++;
    const char *msg = fa_last_error(ctx);
    size_t fl = strlen(fn);
    cudaError_t ce = cudaGetLastError();
    int ok = 1;
    if (st != want) { failf("%s: status %s, want %s (%s)", desc, fa_status_string(st), fa_status_string(want), msg); ok = 0; }
    else if (strncmp(msg, fn, fl) != 0 || msg[fl] != ':' || strchr(msg, '\n') || (sub && !strstr(msg, sub))) {
        failf("%s: message \"%s\" (want one line starting \"%s:\"%s%s%s)", desc, msg, fn, sub ? " mentioning \"" : "", sub ? sub : "", sub ? "\"" : "");
        ok = 0;
    }
    if (ce != cudaSuccess) { failf("%s: left the CUDA error %s behind", desc, cudaGetErrorName(ce)); ok = 0; }
    return ok;
}
#define NBAD 19
