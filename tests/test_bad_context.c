/* test_bad_context.c - the context functions and the environment given bad values.
 *
 * fa_context_create with a backend outside the enum or a NULL ctx, FA_BACKEND and
 * FA_CPU_ISA set to unknown names, and each fa_context_set_* knob with bad and good
 * values on every backend under test: the status and a message naming the argument, and
 * the context still serving a valid call of the shared fixture (bad_fixture.h) afterwards.
 * The operations' own arguments are broken in test_bad_input.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_fixture.h"

/* Context functions: bad backend enum, FA_BACKEND=bogus, set_threads(-1), set_tiles(-1, ..),
   NULL ctx for each. */
START_TEST(test_bad_context_args)
{
    fa_context *ctx = (fa_context *)0x1;
    fa_status st = fa_context_create(&ctx, (fa_backend)42);
    ck_assert_msg(st == FA_ERR_INVALID_ARG, "create(backend=42) = %d", (int)st);
    ck_assert_msg(ctx == NULL, "create failure must set *ctx = NULL");
    ck_assert_msg(names_arg(fa_last_error(NULL), "backend"), "create(42): '%s' does not name 'backend'",
                  fa_last_error(NULL));
    ck_assert_msg(strncmp(fa_last_error(NULL), "fa_context_create", 17) == 0, "message '%s'",
                  fa_last_error(NULL));
    st = fa_context_create(NULL, FA_BACKEND_REFERENCE);
    ck_assert_msg(st == FA_ERR_INVALID_ARG, "create(NULL) = %d", (int)st);
    ck_assert_msg(names_arg(fa_last_error(NULL), "ctx"), "create(NULL): '%s' does not name ctx",
                  fa_last_error(NULL));

    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        ctx = tu_ctx(bes[bi]);
        st = fa_context_set_threads(ctx, -1);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: set_threads(-1) = %d", be, (int)st);
        ck_assert_msg(names_arg(fa_last_error(ctx), "n"), "%s: set_threads(-1): '%s'", be, fa_last_error(ctx));
        st = fa_context_set_tiles(ctx, -1, 16);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: set_tiles(-1, 16) = %d", be, (int)st);
        ck_assert_msg(names_arg(fa_last_error(ctx), "block_q"), "%s: set_tiles: '%s'", be, fa_last_error(ctx));
        st = fa_context_set_tiles(ctx, 16, -7);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: set_tiles(16, -7) = %d", be, (int)st);
        ck_assert_msg(names_arg(fa_last_error(ctx), "block_kv"), "%s: set_tiles: '%s'", be, fa_last_error(ctx));
        st = fa_context_set_device(ctx, -1);
        ck_assert_msg(st == FA_ERR_INVALID_ARG || st == FA_ERR_UNSUPPORTED,
                      "%s: set_device(-1) = %d", be, (int)st);
        /* still usable */
        mem_t *m = malloc(sizeof *m);
        mem_fill(m);
        fx f;
        fx_init(&f, m, F_FWD);
        st = fx_call(ctx, &f, F_FWD);
        ck_assert_msg(st == FA_OK, "%s: forward after bad context calls: %s", be, fa_last_error(ctx));
        free(m);
        fa_context_destroy(ctx);
    }
    ck_assert_int_eq(fa_context_set_threads(NULL, 1), FA_ERR_INVALID_ARG);
    ck_assert_int_eq(fa_context_set_tiles(NULL, 1, 1), FA_ERR_INVALID_ARG);
    ck_assert_int_eq(fa_context_set_device(NULL, 0), FA_ERR_INVALID_ARG);
    ck_assert_int_eq(fa_context_set_stream(NULL, NULL), FA_ERR_INVALID_ARG);
    fa_context_destroy(NULL);
}
END_TEST

START_TEST(test_bad_env_backend)
{
    /* runs in a forked child (Check's default): the environment change stays here */
    setenv("FA_BACKEND", "bogus", 1);
    fa_context *ctx = (fa_context *)0x1;
    fa_status st = fa_context_create(&ctx, FA_BACKEND_AUTO);
    ck_assert_msg(st == FA_ERR_INVALID_ARG, "FA_BACKEND=bogus: create(AUTO) = %d (%s)", (int)st,
                  fa_last_error(NULL));
    ck_assert(ctx == NULL);
    ck_assert_msg(strstr(fa_last_error(NULL), "FA_BACKEND") != NULL,
                  "FA_BACKEND=bogus: message '%s' does not name FA_BACKEND", fa_last_error(NULL));
    /* an explicit backend wins over FA_BACKEND (docs/api-functions.md) */
    st = fa_context_create(&ctx, FA_BACKEND_REFERENCE);
    ck_assert_msg(st == FA_OK, "explicit reference with FA_BACKEND=bogus: %s", fa_last_error(NULL));
    fa_context_destroy(ctx);
    setenv("FA_BACKEND", "reference", 1);
    st = fa_context_create(&ctx, FA_BACKEND_AUTO);
    ck_assert_msg(st == FA_OK && fa_context_backend(ctx) == FA_BACKEND_REFERENCE,
                  "FA_BACKEND=reference: AUTO gave %d", st == FA_OK ? (int)fa_context_backend(ctx) : -1);
    fa_context_destroy(ctx);
    setenv("FA_BACKEND", "cpu", 1);
    st = fa_context_create(&ctx, FA_BACKEND_AUTO);
    ck_assert_msg(st == FA_OK && fa_context_backend(ctx) == FA_BACKEND_CPU,
                  "FA_BACKEND=cpu: AUTO: %s", fa_last_error(NULL));
    fa_context_destroy(ctx);
    setenv("FA_CPU_ISA", "bogus", 1);
    unsetenv("FA_BACKEND");
    st = fa_context_create(&ctx, FA_BACKEND_CPU);
    ck_assert_msg(st == FA_ERR_INVALID_ARG || st == FA_ERR_UNSUPPORTED,
                  "FA_CPU_ISA=bogus: create(CPU) = %d, want an error", (int)st);
    ck_assert_msg(strstr(fa_last_error(NULL), "FA_CPU_ISA") != NULL, "message '%s'", fa_last_error(NULL));
}
END_TEST

/* The context knobs on the host backends: set_device / set_stream / set_threads /
   set_tiles, good and bad values, and the context still works after each. */
START_TEST(test_context_knobs)
{
    fa_backend bes[8];
    int nb = tu_backends(bes);
    mem_t *m = malloc(sizeof *m);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        int host = bes[bi] == FA_BACKEND_REFERENCE || bes[bi] == FA_BACKEND_CPU;
        fa_status st = fa_context_set_device(ctx, -1);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: set_device(-1) = %d", be, (int)st);
        ck_assert_msg(names_arg(fa_last_error(ctx), "device") &&
                      strncmp(fa_last_error(ctx), "fa_context_set_device:", 22) == 0,
                      "%s: set_device(-1): '%s'", be, fa_last_error(ctx));
        st = fa_context_set_device(ctx, INT32_MIN);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: set_device(INT_MIN) = %d", be, (int)st);
        if (host) {
            st = fa_context_set_device(ctx, 0);
            ck_assert_msg(st == FA_ERR_UNSUPPORTED, "%s: set_device(0) on a host backend = %d", be, (int)st);
            st = fa_context_set_stream(ctx, (void *)(uintptr_t)0x1000);
            ck_assert_msg(st == FA_ERR_UNSUPPORTED, "%s: set_stream(non-NULL) on a host backend = %d",
                          be, (int)st);
            ck_assert_msg(strncmp(fa_last_error(ctx), "fa_context_set_stream:", 22) == 0,
                          "%s: set_stream: '%s'", be, fa_last_error(ctx));
            ck_assert_int_eq(fa_context_set_stream(ctx, NULL), FA_OK);
        }
        st = fa_context_set_threads(ctx, INT32_MIN);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: set_threads(INT_MIN) = %d", be, (int)st);
        st = fa_context_set_threads(ctx, 2);
        ck_assert_msg(st == (bes[bi] == FA_BACKEND_REFERENCE ? FA_ERR_UNSUPPORTED : FA_OK),
                      "%s: set_threads(2) = %d", be, (int)st);
        ck_assert_int_eq(fa_context_set_threads(ctx, 0), FA_OK);
        st = fa_context_set_tiles(ctx, INT32_MIN, 0);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: set_tiles(INT_MIN, 0) = %d", be, (int)st);
        /* odd and large positive tiles are accepted (rounded); the context still computes */
        static const int tiles[][2] = { { 1, 1 }, { 3, 5 }, { 17, 1000 }, { 100000, 100000 } };
        for (int t = 0; t < 4; t++) {
            st = fa_context_set_tiles(ctx, tiles[t][0], tiles[t][1]);
            ck_assert_msg(st == FA_OK, "%s: set_tiles(%d, %d) = %d: %s", be, tiles[t][0],
                          tiles[t][1], (int)st, fa_last_error(ctx));
            mem_fill(m);
            fx f;
            fx_init(&f, m, F_FWD);
            st = fx_call(ctx, &f, F_FWD);
            ck_assert_msg(st == FA_OK, "%s: forward with tiles %dx%d: %d %s", be, tiles[t][0],
                          tiles[t][1], (int)st, fa_last_error(ctx));
            fx_init(&f, m, F_BWD);
            st = fx_call(ctx, &f, F_BWD);
            ck_assert_msg(st == FA_OK, "%s: backward with tiles %dx%d: %d %s", be, tiles[t][0],
                          tiles[t][1], (int)st, fa_last_error(ctx));
        }
        ck_assert_int_eq(fa_context_set_tiles(ctx, 0, 0), FA_OK);
        ck_assert_msg(fa_context_describe(ctx) && *fa_context_describe(ctx), "%s: describe", be);
        fa_context_destroy(ctx);
    }
    free(m);
    ck_assert_int_eq((int)fa_dtype_size((fa_dtype)7), 0);
    ck_assert_int_eq((int)fa_dtype_size((fa_dtype)-1), 0);
    ck_assert_msg(fa_status_string((fa_status)99) != NULL, "fa_status_string(99) is NULL");
    ck_assert_msg(fa_context_backend(NULL) == FA_BACKEND_AUTO, "fa_context_backend(NULL)");
    ck_assert_msg(fa_context_describe(NULL) != NULL, "fa_context_describe(NULL) is NULL");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bad_context");
    TU_ADD(s, test_bad_context_args, 30);
    TU_ADD(s, test_bad_env_backend, 30);
    TU_ADD(s, test_context_knobs, 60);
    return tu_main(s);
}
