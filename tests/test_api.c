/* test_api.c - the context and helper functions, empty problems, defaults.
 *   version string vs FA_VERSION_* macros, status strings, fa_last_error(NULL) after a
 *   failed create, fa_context_destroy(NULL), CUDA UNSUPPORTED with a reason in a CPU-only
 *   build, AUTO picks cpu, describe, set_threads / set_tiles, fa_query / fa_query_backward
 *   name a kernel (without reading data), fa_tensor_contiguous, fa_dtype_size, opt NULL ==
 *   all-zero options, and empty problems (B, H, Sq, Sk = 0; varlen batch 0) return FA_OK
 *   and write exactly what they must.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dtype.h"

START_TEST(test_version)
{
    const char *v = fa_version_string();
    ck_assert(v != NULL);
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", FA_VERSION_MAJOR, FA_VERSION_MINOR, FA_VERSION_PATCH);
    ck_assert_msg(strncmp(v, want, strlen(want)) == 0, "version '%s' does not start with %s", v, want);
    char next = v[strlen(want)];
    ck_assert_msg(next == '\0' || !(next >= '0' && next <= '9'), "version '%s'", v);
}
END_TEST

START_TEST(test_status_strings)
{
    fa_status all[] = { FA_OK, FA_ERR_INVALID_ARG, FA_ERR_UNSUPPORTED, FA_ERR_NO_MEMORY,
                        FA_ERR_DEVICE, FA_ERR_INTERNAL };
    for (int i = 0; i < 6; i++) {
        const char *s = fa_status_string(all[i]);
        ck_assert_msg(s && *s, "status %d has no string", (int)all[i]);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(s, fa_status_string(all[j])) != 0, "statuses %d and %d share '%s'", i, j, s);
    }
    ck_assert(fa_status_string((fa_status)99) != NULL);
}
END_TEST

START_TEST(test_context_basics)
{
    fa_context_destroy(NULL);
    ck_assert(fa_last_error(NULL) != NULL);
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        ck_assert_msg(fa_context_backend(ctx) == bes[bi], "%s: fa_context_backend = %d", be,
                      (int)fa_context_backend(ctx));
        const char *d = fa_context_describe(ctx);
        ck_assert_msg(d && strlen(d) > 10, "%s: describe '%s'", be, d ? d : "(null)");
        ck_assert_msg(fa_last_error(ctx) && fa_last_error(ctx)[0] == '\0', "%s: fresh context has error '%s'",
                      be, fa_last_error(ctx));
        ck_assert_msg(fa_context_set_tiles(ctx, 0, 0) == FA_OK, "%s: set_tiles(0,0): %s", be, fa_last_error(ctx));
        ck_assert_msg(fa_context_set_tiles(ctx, 16, 32) == FA_OK, "%s: set_tiles(16,32): %s", be, fa_last_error(ctx));
        ck_assert_msg(fa_context_set_tiles(ctx, 7, 13) == FA_OK, "%s: set_tiles(7,13): %s", be, fa_last_error(ctx));
        if (bes[bi] == FA_BACKEND_CPU) {
            for (int n = 0; n <= 3; n++)
                ck_assert_msg(fa_context_set_threads(ctx, n) == FA_OK, "cpu: set_threads(%d): %s", n,
                              fa_last_error(ctx));
        }
        fa_context_destroy(ctx);
    }
}
END_TEST

START_TEST(test_cuda_unsupported)
{
    fa_context *ctx = (fa_context *)0x1;
    fa_status st = fa_context_create(&ctx, FA_BACKEND_CUDA);
    ck_assert_msg(st == FA_ERR_UNSUPPORTED, "create(CUDA) in a CPU-only build = %d (%s)", (int)st,
                  fa_last_error(NULL));
    ck_assert(ctx == NULL);
    const char *e = fa_last_error(NULL);
    ck_assert_msg(e && strlen(e) > 10, "create(CUDA): no reason given ('%s')", e ? e : "(null)");
    ck_assert_msg(strncmp(e, "fa_context_create", 17) == 0, "reason '%s' does not start with the function", e);
}
END_TEST

START_TEST(test_auto_backend)
{
    unsetenv("FA_BACKEND");
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, FA_BACKEND_AUTO);
    ck_assert_msg(st == FA_OK, "create(AUTO): %s", fa_last_error(NULL));
    ck_assert_msg(fa_context_backend(ctx) == FA_BACKEND_CPU, "AUTO without CUDA picked %d",
                  (int)fa_context_backend(ctx));
    fa_context_destroy(ctx);
}
END_TEST

START_TEST(test_helpers)
{
    ck_assert_uint_eq(fa_dtype_size(FA_F32), 4);
    ck_assert_uint_eq(fa_dtype_size(FA_F16), 2);
    ck_assert_uint_eq(fa_dtype_size(FA_BF16), 2);
    ck_assert_uint_eq(fa_dtype_size((fa_dtype)17), 0);
    int x;
    fa_tensor t = fa_tensor_contiguous(&x, FA_BF16, 2, 3, 5, 7);
    ck_assert(t.data == &x && t.dtype == FA_BF16);
    ck_assert(t.shape[0] == 2 && t.shape[1] == 3 && t.shape[2] == 5 && t.shape[3] == 7);
    ck_assert(t.stride[3] == 1 && t.stride[2] == 7 && t.stride[1] == 35 && t.stride[0] == 105);
}
END_TEST

START_TEST(test_query)
{
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        /* data pointers are not read: NULL data is fine for fa_query */
        fa_tensor q = fa_tensor_contiguous(NULL, FA_BF16, 2, 100, 8, 128);
        fa_tensor k = fa_tensor_contiguous(NULL, FA_BF16, 2, 300, 2, 128);
        fa_tensor v = k, out = q;
        fa_options opt;
        memset(&opt, 0, sizeof opt);
        opt.causal = FA_CAUSAL_BOTTOM_RIGHT;
        const char *name = NULL;
        fa_status st = fa_query(ctx, &name, &out, NULL, &q, &k, &v, &opt);
        ck_assert_msg(st == FA_OK, "%s: fa_query: %d %s", be, (int)st, fa_last_error(ctx));
        ck_assert_msg(name && strlen(name) > 3, "%s: fa_query kernel name '%s'", be, name ? name : "(null)");
        float lse_dummy;
        name = NULL;
        st = fa_query_backward(ctx, &name, &q, &k, &v, NULL, &out, &q, &k, &v, &out, &lse_dummy, &opt);
        ck_assert_msg(st == FA_OK, "%s: fa_query_backward: %d %s", be, (int)st, fa_last_error(ctx));
        ck_assert_msg(name && strlen(name) > 3, "%s: fa_query_backward kernel name '%s'", be,
                      name ? name : "(null)");
        fa_context_destroy(ctx);
    }
}
END_TEST

/* opt == NULL is the all-zero options: bitwise identical results. */
START_TEST(test_null_options)
{
    tu_rng r = { 8080 };
    tu_buf *q = tu_buf_new(FA_F16, 2, 33, 4, 40, TL_CONTIG), *k = tu_buf_new(FA_F16, 2, 45, 2, 40, TL_CONTIG);
    tu_buf *v = tu_buf_new(FA_F16, 2, 45, 2, 40, TL_CONTIG);
    tu_buf *o1 = tu_buf_new(FA_F32, 2, 33, 4, 40, TL_CONTIG), *o2 = tu_buf_new(FA_F32, 2, 33, 4, 40, TL_CONTIG);
    tu_fill(q, &r, 1); tu_fill(k, &r, 1); tu_fill(v, &r, 1);
    float l1[2 * 4 * 33], l2[2 * 4 * 33];
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        fa_context *ctx = tu_ctx(bes[bi]);
        fa_options z;
        memset(&z, 0, sizeof z);
        tu_poison(o1); tu_poison(o2);
        ck_assert(fa_forward(ctx, &o1->t, l1, &q->t, &k->t, &v->t, NULL) == FA_OK);
        ck_assert(fa_forward(ctx, &o2->t, l2, &q->t, &k->t, &v->t, &z) == FA_OK);
        ck_assert_msg(memcmp(o1->base, o2->base, o1->nel * 4) == 0 && memcmp(l1, l2, sizeof l1) == 0,
                      "%s: opt NULL and all-zero options differ", tu_backend_name(bes[bi]));
        /* scale 0 means 1/sqrt(d): same as passing it explicitly */
        z.scale = (float)(1.0 / sqrt(40.0));
        ck_assert(fa_forward(ctx, &o2->t, l2, &q->t, &k->t, &v->t, &z) == FA_OK);
        for (size_t e = 0; e < o1->nel; e++) {
            float a, b;
            memcpy(&a, o1->base + e * 4, 4); memcpy(&b, o2->base + e * 4, 4);
            ck_assert_msg(isnan(a) == isnan(b) && (isnan(a) || fabsf(a - b) <= 1e-6f),
                          "%s: default scale differs from 1/sqrt(d)", tu_backend_name(bes[bi]));
        }
        fa_context_destroy(ctx);
    }
    tu_buf_free(q); tu_buf_free(k); tu_buf_free(v); tu_buf_free(o1); tu_buf_free(o2);
}
END_TEST

/* Empty problems: valid, FA_OK, rows of out = 0 and lse = -inf (or the sink). */
START_TEST(test_empty_problems)
{
    static const struct { int64_t B, H, Hkv, Sq, Sk; int sinks, backward; const char *tag; } E[] = {
        { 0, 4, 2, 5, 7, 0, 1, "B=0" }, { 2, 0, 0, 5, 7, 0, 1, "H=0" },
        { 2, 4, 2, 0, 7, 1, 1, "Sq=0" }, { 2, 4, 2, 5, 0, 0, 1, "Sk=0" },
        { 2, 4, 2, 5, 0, 1, 1, "Sk=0 sinks" }, { 0, 4, 1, 0, 0, 1, 1, "all 0" },
    };
    if (_i < (int)(sizeof E / sizeof E[0])) {
        size_t i = (size_t)_i;
        tu_case c;
        memset(&c, 0, sizeof c);
        c.tag = E[i].tag; c.seed = 9000 + i;
        c.B = E[i].B; c.H = E[i].H; c.Hkv = E[i].Hkv; c.Sq = E[i].Sq; c.Sk = E[i].Sk;
        c.dqk = c.dv = 16; c.dt = c.odt = FA_BF16; c.wl = c.wr = -1;
        c.sinks = E[i].sinks; c.backward = E[i].backward; c.causal = FA_CAUSAL_BOTTOM_RIGHT;
        tu_run(&c);
        return;
    }
    /* varlen with batch 0 */
    tu_case c;
    memset(&c, 0, sizeof c);
    static const int64_t none[1] = { 0 };
    c.tag = "varlen batch=0"; c.varlen = 1; c.B = 0; c.lq = none; c.lk = none; c.extra_rows = 3;
    c.H = 2; c.Hkv = 1; c.dqk = c.dv = 8; c.dt = c.odt = FA_F16; c.wl = c.wr = -1; c.backward = 1;
    tu_run(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api");
    TU_ADD(s, test_version, 10);
    TU_ADD(s, test_status_strings, 10);
    TU_ADD(s, test_context_basics, 30);
    TU_ADD(s, test_cuda_unsupported, 10);
    TU_ADD(s, test_auto_backend, 10);
    TU_ADD(s, test_helpers, 10);
    TU_ADD(s, test_query, 30);
    TU_ADD(s, test_null_options, 30);
    TCase *tc = tcase_create("test_empty_problems");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_empty_problems, 0, 7);
    suite_add_tcase(s, tc);
    return tu_main(s);
}
