/* varlen_train.c - one training step on a packed batch of sequences of different lengths:
 * fa_forward_varlen, a squared-error loss, fa_backward_varlen, a gradient step on q, k and
 * v, and the loss again. The forward and the gradients are checked against a plain C
 * computation (double precision) written out below, and the step must lower the loss.
 * Build against an installed flashattn:
 *   cc varlen_train.c $(pkg-config --cflags --libs flashattn) -o varlen_train
 */
#include <flashattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NSEQ = 3, H = 2, D = 16 };
static const int32_t cu[NSEQ + 1] = { 0, 7, 7 + 13, 7 + 13 + 4 };   /* lengths 7, 13, 4 */
#define TOTAL 24

/* Plain causal attention of one sequence (rows [t0, t0 + n) of the packed tensors), one
 * head, and its gradients given dout; double precision, the textbook formulas:
 *   P = softmax(scale * Q K^T, causal), O = P V,
 *   dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = scale dS K,
 *   dK = scale dS^T Q. */
static void plain_attention(const float *q, const float *k, const float *v, const float *dout,
                            int t0, int n, int h, double *o, double *dq, double *dk, double *dv)
{
    const double scale = 1.0 / sqrt((double)D);
#define AT(x, t, d) (x)[(((size_t)(t0 + (t))) * H + h) * D + (d)]
    double *p = calloc((size_t)n * n, sizeof *p);
    for (int i = 0; i < n; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int d = 0; d < D; d++) s += (double)AT(q, i, d) * AT(k, j, d);
            p[i * n + j] = s * scale;
            if (p[i * n + j] > m) m = p[i * n + j];
        }
        for (int j = 0; j <= i; j++) sum += (p[i * n + j] = exp(p[i * n + j] - m));
        for (int j = 0; j <= i; j++) p[i * n + j] /= sum;
        for (int d = 0; d < D; d++) {
            double acc = 0;
            for (int j = 0; j <= i; j++) acc += p[i * n + j] * AT(v, j, d);
            AT(o, i, d) = acc;
        }
    }
    for (int i = 0; i < n; i++) {
        double rowdot = 0;
        for (int d = 0; d < D; d++) rowdot += (double)AT(dout, i, d) * AT(o, i, d);
        for (int j = 0; j <= i; j++) {
            double dp = 0;
            for (int d = 0; d < D; d++) dp += (double)AT(dout, i, d) * AT(v, j, d);
            double ds = p[i * n + j] * (dp - rowdot);
            for (int d = 0; d < D; d++) {
                AT(dv, j, d) += p[i * n + j] * AT(dout, i, d);
                AT(dq, i, d) += scale * ds * AT(k, j, d);
                AT(dk, j, d) += scale * ds * AT(q, i, d);
            }
        }
    }
#undef AT
    free(p);
}

static double max_diff(const float *a, const double *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= m)) m = e;   /* NaN counts as the largest */
    }
    return m;
}

/* loss = 0.5 * sum (out - target)^2 */
static double loss_of(const float *out, const float *target, int n)
{
    double l = 0;
    for (int i = 0; i < n; i++) l += 0.5 * ((double)out[i] - target[i]) * ((double)out[i] - target[i]);
    return l;
}

int main(void)
{
    enum { N = TOTAL * H * D };
    static float q[N], k[N], v[N], out[N], target[N], dout[N], dq[N], dk[N], dv[N];
    static float lse[H * TOTAL];
    static double o_ref[N], dq_ref[N], dk_ref[N], dv_ref[N];
    for (int i = 0; i < N; i++) {
        q[i] = sinf(0.37f * i);
        k[i] = cosf(0.23f * i);
        v[i] = sinf(0.05f * i + 1.0f);
        target[i] = cosf(0.11f * i) * 0.5f;
    }
    fa_context *ctx;
    if (fa_context_create(&ctx, FA_BACKEND_AUTO) != FA_OK) {
        fprintf(stderr, "varlen_train: no context: %s\n", fa_last_error(NULL));
        return 1;
    }
    if (fa_context_backend(ctx) == FA_BACKEND_CUDA) {   /* this example uses host memory */
        fa_context_destroy(ctx);
        if (fa_context_create(&ctx, FA_BACKEND_CPU) != FA_OK) {
            fprintf(stderr, "varlen_train: no CPU context: %s\n", fa_last_error(NULL));
            return 1;
        }
    }
    /* packed: batch 1, TOTAL tokens */
    fa_tensor tq = fa_tensor_contiguous(q, FA_F32, 1, TOTAL, H, D);
    fa_tensor tk = fa_tensor_contiguous(k, FA_F32, 1, TOTAL, H, D);
    fa_tensor tv = fa_tensor_contiguous(v, FA_F32, 1, TOTAL, H, D);
    fa_tensor to = fa_tensor_contiguous(out, FA_F32, 1, TOTAL, H, D);
    fa_tensor tdo = fa_tensor_contiguous(dout, FA_F32, 1, TOTAL, H, D);
    fa_tensor tdq = fa_tensor_contiguous(dq, FA_F32, 1, TOTAL, H, D);
    fa_tensor tdk = fa_tensor_contiguous(dk, FA_F32, 1, TOTAL, H, D);
    fa_tensor tdv = fa_tensor_contiguous(dv, FA_F32, 1, TOTAL, H, D);
    fa_options opt = { .causal = FA_CAUSAL_BOTTOM_RIGHT };
    const int max_len = 13;
    int ok = 1;

    fa_status st = fa_forward_varlen(ctx, &to, lse, &tq, &tk, &tv, cu, cu, NSEQ, max_len,
                                     max_len, &opt);
    if (st == FA_OK) {
        for (int i = 0; i < N; i++) dout[i] = out[i] - target[i];   /* d loss / d out */
        st = fa_backward_varlen(ctx, &tdq, &tdk, &tdv, NULL, &tdo, &tq, &tk, &tv, &to, lse,
                                cu, cu, NSEQ, max_len, max_len, &opt);
    }
    if (st != FA_OK) {
        fprintf(stderr, "varlen_train: %s\n", fa_last_error(ctx));
        fa_context_destroy(ctx);
        return 1;
    }
    for (int s = 0; s < NSEQ; s++)
        for (int h = 0; h < H; h++)
            plain_attention(q, k, v, dout, cu[s], cu[s + 1] - cu[s], h, o_ref, dq_ref, dk_ref,
                            dv_ref);
    double e_out = max_diff(out, o_ref, N), e_dq = max_diff(dq, dq_ref, N);
    double e_dk = max_diff(dk, dk_ref, N), e_dv = max_diff(dv, dv_ref, N);
    printf("varlen_train: %s backend, %d sequences (lengths 7, 13, 4), max |error| vs plain C: "
           "out %.2e, dq %.2e, dk %.2e, dv %.2e\n",
           fa_context_backend(ctx) == FA_BACKEND_CPU ? "cpu" : "reference", NSEQ, e_out, e_dq,
           e_dk, e_dv);
    ok = e_out < 1e-4 && e_dq < 1e-4 && e_dk < 1e-4 && e_dv < 1e-4;

    /* one gradient step, then the loss again */
    double before = loss_of(out, target, N);
    const float lr = 0.5f;
    for (int i = 0; i < N; i++) { q[i] -= lr * dq[i]; k[i] -= lr * dk[i]; v[i] -= lr * dv[i]; }
    st = fa_forward_varlen(ctx, &to, lse, &tq, &tk, &tv, cu, cu, NSEQ, max_len, max_len, &opt);
    double after = loss_of(out, target, N);
    printf("varlen_train: loss %.6f -> %.6f after one step (lr %.1f)\n", before, after, lr);
    ok = ok && st == FA_OK && after < before;

    fa_context_destroy(ctx);
    printf("%s\n", ok ? "varlen_train: ok" : "varlen_train: FAILED");
    return ok ? 0 : 1;
}
