/* test_determinism.c - the determinism guarantees of docs/api.md.
 *   - fa_forward bitwise equal over 50 repeats, on every backend under test;
 *   - fa_backward with deterministic = 1 bitwise equal over 50 repeats;
 *   - cpu backend: forward and deterministic backward bitwise equal across thread counts
 *     1, 2 and the machine's maximum (fa_context_set_threads), including shapes where a
 *     split-KV decision could be made (decode: Sq = 1, long Sk).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

typedef struct {
    int64_t B, H, Hkv, Sq, Sk, d;
    fa_dtype dt;
    int feats;
} det_shape;

static const det_shape SHAPES[] = {
    { 2, 4, 2, 67, 131, 64, FA_F16, 0 },
    { 1, 8, 1, 1, 3000, 64, FA_BF16, 1 },      /* decode, long Sk: split-KV candidate */
    { 1, 2, 2, 200, 173, 80, FA_F32, 1 },
    { 3, 2, 1, 33, 33, 32, FA_BF16, 2 },
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

typedef struct {
    tu_buf *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse, *dsinks, sinks[8], slopes[8];
    fa_options opt;
} det_bufs;

static void det_setup(const det_shape *s, det_bufs *x, uint64_t seed)
{
    tu_rng r = { seed };
    x->q = tu_buf_new(s->dt, s->B, s->Sq, s->H, s->d, TL_CONTIG);
    x->k = tu_buf_new(s->dt, s->B, s->Sk, s->Hkv, s->d, TL_CONTIG);
    x->v = tu_buf_new(s->dt, s->B, s->Sk, s->Hkv, s->d, TL_CONTIG);
    x->out = tu_buf_new(s->dt, s->B, s->Sq, s->H, s->d, TL_CONTIG);
    x->dout = tu_buf_new(s->dt, s->B, s->Sq, s->H, s->d, TL_CONTIG);
    x->dq = tu_buf_new(FA_F32, s->B, s->Sq, s->H, s->d, TL_CONTIG);
    x->dk = tu_buf_new(FA_F32, s->B, s->Sk, s->Hkv, s->d, TL_CONTIG);
    x->dv = tu_buf_new(s->dt, s->B, s->Sk, s->Hkv, s->d, TL_CONTIG);
    tu_fill(x->q, &r, 1.0); tu_fill(x->k, &r, 1.0); tu_fill(x->v, &r, 1.0); tu_fill(x->dout, &r, 1.0);
    x->lse = calloc((size_t)(s->B * s->H * s->Sq + 1), sizeof(float));
    x->dsinks = calloc(8, sizeof(float));
    for (int h = 0; h < 8; h++) { x->sinks[h] = (float)tu_unif(&r); x->slopes[h] = 0.05f * (float)(h + 1); }
    memset(&x->opt, 0, sizeof x->opt);
    x->opt.deterministic = 1;
    if (s->feats >= 1) {
        x->opt.causal = FA_CAUSAL_BOTTOM_RIGHT; x->opt.sinks = x->sinks; x->opt.softcap = 10.0f;
    }
    if (s->feats >= 2) {
        x->opt.dropout_p = 0.2f; x->opt.seed = 11; x->opt.alibi_slopes = x->slopes;
        x->opt.window = 1; x->opt.window_left = 9; x->opt.window_right = 2;
    }
}

static void det_free(det_bufs *x)
{
    tu_buf_free(x->q); tu_buf_free(x->k); tu_buf_free(x->v); tu_buf_free(x->out);
    tu_buf_free(x->dout); tu_buf_free(x->dq); tu_buf_free(x->dk); tu_buf_free(x->dv);
    free(x->lse); free(x->dsinks);
}

/* One forward + backward; returns a malloc'd byte image of all outputs. */
static unsigned char *det_once(fa_context *ctx, const det_shape *s, det_bufs *x, size_t *len,
                               const char *what)
{
    int64_t nl = s->B * s->H * s->Sq;
    fa_status st = fa_forward(ctx, &x->out->t, x->lse, &x->q->t, &x->k->t, &x->v->t, &x->opt);
    ck_assert_msg(st == FA_OK, "%s: forward: %s", what, fa_last_error(ctx));
    st = fa_backward(ctx, &x->dq->t, &x->dk->t, &x->dv->t, x->opt.sinks ? x->dsinks : NULL,
                     &x->dout->t, &x->q->t, &x->k->t, &x->v->t, &x->out->t, x->lse, &x->opt);
    ck_assert_msg(st == FA_OK, "%s: backward: %s", what, fa_last_error(ctx));
    tu_buf *bufs[4] = { x->out, x->dq, x->dk, x->dv };
    size_t n = (size_t)nl * 4 + 8 * 4;
    for (int i = 0; i < 4; i++) n += bufs[i]->nel * bufs[i]->esz;
    unsigned char *img = malloc(n), *p = img;
    memcpy(p, x->lse, (size_t)nl * 4); p += nl * 4;
    memcpy(p, x->dsinks, 8 * 4); p += 8 * 4;
    if (!x->opt.sinks) memset(p - 32, 0, 32);
    for (int i = 0; i < 4; i++) { memcpy(p, bufs[i]->base, bufs[i]->nel * bufs[i]->esz); p += bufs[i]->nel * bufs[i]->esz; }
    *len = n;
    return img;
}

static void first_diff(const unsigned char *a, const unsigned char *b, size_t n, char *m, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) { snprintf(m, len, "first differing byte %zu of %zu", i, n); return; }
    snprintf(m, len, "equal");
}

START_TEST(test_repeat_bitwise)
{
    const det_shape *s = &SHAPES[_i];
    int reps = 50;
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        /* the reference backend is slow: fewer repeats of the largest shapes there */
        int n = (bes[bi] == FA_BACKEND_REFERENCE && s->Sq * s->Sk > 20000) ? 10 : reps;
        det_bufs x;
        det_setup(s, &x, 6000 + (uint64_t)_i);
        fa_context *ctx = tu_ctx(bes[bi]);
        size_t len0, len;
        char what[128], m[128];
        snprintf(what, sizeof what, "%s shape %d", tu_backend_name(bes[bi]), _i);
        unsigned char *ref = det_once(ctx, s, &x, &len0, what);
        for (int rep = 1; rep < n; rep++) {
            unsigned char *img = det_once(ctx, s, &x, &len, what);
            if (memcmp(ref, img, len0) != 0) {
                first_diff(ref, img, len0, m, sizeof m);
                ck_abort_msg("%s: repeat %d differs from repeat 0 (%s)", what, rep, m);
            }
            free(img);
        }
        free(ref);
        fa_context_destroy(ctx);
        det_free(&x);
    }
}
END_TEST

START_TEST(test_threads_bitwise)
{
    const det_shape *s = &SHAPES[_i];
    fa_backend bes[8];
    int nb = tu_backends(bes), have_cpu = 0;
    for (int bi = 0; bi < nb; bi++) have_cpu |= bes[bi] == FA_BACKEND_CPU;
    if (!have_cpu) {
        if (_i == 0) tu_note("test_determinism: thread-count test needs the cpu backend in FA_TEST_BACKENDS");
        return;
    }
    long maxt = sysconf(_SC_NPROCESSORS_ONLN);
    if (maxt < 1) maxt = 1;
    int counts[4] = { 1, 2, (int)maxt, 0 };
    det_bufs x;
    det_setup(s, &x, 6100 + (uint64_t)_i);
    fa_context *ctx = tu_ctx(FA_BACKEND_CPU);
    unsigned char *ref = NULL;
    size_t len0 = 0;
    for (int t = 0; t < 4; t++) {
        fa_status st = fa_context_set_threads(ctx, counts[t]);
        ck_assert_msg(st == FA_OK, "set_threads(%d): %s", counts[t], fa_last_error(ctx));
        for (int rep = 0; rep < 3; rep++) {
            size_t len;
            char what[64], m[128];
            snprintf(what, sizeof what, "cpu shape %d threads %d", _i, counts[t]);
            unsigned char *img = det_once(ctx, s, &x, &len, what);
            if (!ref) { ref = img; len0 = len; continue; }
            if (memcmp(ref, img, len0) != 0) {
                first_diff(ref, img, len0, m, sizeof m);
                ck_abort_msg("%s (repeat %d) differs from 1 thread (%s)", what, rep, m);
            }
            free(img);
        }
    }
    free(ref);
    fa_context_destroy(ctx);
    det_free(&x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("determinism");
    TCase *tc = tcase_create("test_repeat_bitwise");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_repeat_bitwise, 0, N_SHAPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("test_threads_bitwise");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_threads_bitwise, 0, N_SHAPES);
    suite_add_tcase(s, tc);
    return tu_main(s);
}
