/* hello.c - the smallest flashattn program: one attention call, then one wrong call.
 * Build against an installed flashattn:
 *   cc hello.c $(pkg-config --cflags --libs flashattn) -o hello
 */
#include <flashattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { B = 1, S = 128, H = 4, D = 64 };
    float *q = malloc(sizeof(float) * B * S * H * D), *k = malloc(sizeof(float) * B * S * H * D);
    float *v = malloc(sizeof(float) * B * S * H * D), *o = malloc(sizeof(float) * B * S * H * D);
    float lse[B * H * S];
    for (int i = 0; i < B * S * H * D; i++) {
        q[i] = sinf(0.37f * i); k[i] = cosf(0.11f * i); v[i] = sinf(0.05f * i + 1.0f);
    }
    fa_context *ctx;
    if (fa_context_create(&ctx, FA_BACKEND_AUTO) != FA_OK) {
        fprintf(stderr, "no context: %s\n", fa_last_error(NULL));
        return 1;
    }
    fa_tensor tq = fa_tensor_contiguous(q, FA_F32, B, S, H, D);
    fa_tensor tk = fa_tensor_contiguous(k, FA_F32, B, S, H, D);
    fa_tensor tv = fa_tensor_contiguous(v, FA_F32, B, S, H, D);
    fa_tensor to = fa_tensor_contiguous(o, FA_F32, B, S, H, D);
    fa_options opt = { .causal = FA_CAUSAL_BOTTOM_RIGHT };
    fa_status st = fa_forward(ctx, &to, lse, &tq, &tk, &tv, &opt);
    printf("flashattn %s: forward %s, out[0] = %.6f, lse[0] = %.6f\n", fa_version_string(),
           fa_status_string(st), o[0], lse[0]);
    /* Causal row 0 sees only key 0: its output is v[0, 0, 0, :] exactly. */
    int ok = st == FA_OK && fabsf(o[0] - v[0]) < 1e-6f;

    fa_tensor bad_k = fa_tensor_contiguous(k, FA_F32, B, S, 3, D);   /* 3 does not divide 4 */
    st = fa_forward(ctx, &to, lse, &tq, &bad_k, &tv, NULL);
    printf("mismatched heads: %s: %s\n", fa_status_string(st), fa_last_error(ctx));
    ok = ok && st == FA_ERR_INVALID_ARG;

    fa_context_destroy(ctx);
    free(q); free(k); free(v); free(o);
    printf("%s\n", ok ? "hello: ok" : "hello: FAILED");
    return ok ? 0 : 1;
}
