/* test_embedding.c - what a program that embeds flashattn relies on:
 *   - the header's FA_VERSION and the library's fa_version() and fa_version_string() agree;
 *   - fa_set_log_callback receives the dispatch lines (with or without FA_VERBOSE), stderr
 *     gets them only under FA_VERBOSE=1 with no callback, and a bad call is INVALID_ARG;
 *   - a reason that repeats (AUTO not taking CUDA) is logged once per process;
 *   - fa_options: a non-zero reserved slot is INVALID_ARG naming it; zero is the default.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

START_TEST(test_version_agrees)
{
    ck_assert_int_eq(FA_VERSION, FA_VERSION_MAJOR * 10000 + FA_VERSION_MINOR * 100 +
                                     FA_VERSION_PATCH);
    ck_assert_int_eq(fa_version(), FA_VERSION);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", fa_version() / 10000, fa_version() / 100 % 100,
             fa_version() % 100);
    ck_assert_msg(strncmp(fa_version_string(), want, strlen(want)) == 0, "%s vs %s",
                  fa_version_string(), want);
    fa_context *ctx = tu_ctx(FA_BACKEND_REFERENCE);
    ck_assert_msg(strncmp(fa_context_describe(ctx), "flashattn ", 10) == 0 &&
                  strstr(fa_context_describe(ctx), want) != NULL, "%s", fa_context_describe(ctx));
    fa_context_destroy(ctx);
}
END_TEST

/* ---- the log ------------------------------------------------------------------------- */

typedef struct {
    char text[8192];
    int lines;
} log_sink;

static void collect(void *user, const char *line)
{
    log_sink *s = user;
    size_t used = strlen(s->text);
    snprintf(s->text + used, sizeof s->text - used, "%s\n", line);
    s->lines++;
}

/* Run fn with stderr sent to a temporary file; return what it wrote (malloc'ed). */
static char *capture_stderr(void (*fn)(void))
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fileno(tmp), 2), 0);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fseek(tmp, 0, SEEK_END);
    long n = ftell(tmp);
    if (n < 0) n = 0;
    char *text = calloc(1, (size_t)n + 1);
    ck_assert_ptr_nonnull(text);
    rewind(tmp);
    if (n > 0 && fread(text, 1, (size_t)n, tmp) != (size_t)n) text[0] = '\0';
    fclose(tmp);
    return text;
}

static void make_cpu_context(void)
{
    fa_context *ctx = tu_ctx(FA_BACKEND_CPU);
    fa_context_destroy(ctx);
}

START_TEST(test_log_callback)
{
    static log_sink sink;
    memset(&sink, 0, sizeof sink);
    /* _i = 0: FA_VERBOSE unset, 1: FA_VERBOSE=1; the callback gets the lines either way
       and stderr gets none of them */
    if (_i) setenv("FA_VERBOSE", "1", 1);
    else unsetenv("FA_VERBOSE");
    ck_assert_int_eq(fa_set_log_callback(collect, &sink), FA_OK);
    char *err = capture_stderr(make_cpu_context);
    ck_assert_msg(strstr(sink.text, "context: backend cpu\n") != NULL, "callback got:\n%s",
                  sink.text);
    ck_assert_msg(strstr(sink.text, "cpu: kernel set ") != NULL, "callback got:\n%s", sink.text);
    ck_assert_msg(strstr(sink.text, "flashattn: ") == NULL, "prefix in:\n%s", sink.text);
    ck_assert_msg(err[0] == '\0', "stderr got: %s", err);
    free(err);
    /* back to stderr: the callback hears nothing more */
    int before = sink.lines;
    ck_assert_int_eq(fa_set_log_callback(NULL, NULL), FA_OK);
    err = capture_stderr(make_cpu_context);
    ck_assert_int_eq(sink.lines, before);
    if (_i)
        ck_assert_msg(strstr(err, "flashattn: context: backend cpu\n") != NULL, "stderr: %s", err);
    else
        ck_assert_msg(err[0] == '\0', "stderr without FA_VERBOSE: %s", err);
    free(err);
    unsetenv("FA_VERBOSE");
}
END_TEST

START_TEST(test_log_callback_bad_call)
{
    int x = 0;
    ck_assert_int_eq(fa_set_log_callback(NULL, &x), FA_ERR_INVALID_ARG);
    ck_assert_msg(strstr(fa_last_error(NULL), "fa_set_log_callback: user is set but fn is NULL"),
                  "%s", fa_last_error(NULL));
}
END_TEST

START_TEST(test_log_once)
{
    /* AUTO with no CUDA device or module (FA_CUDA_MODULE points nowhere) falls back to
       the CPU and says why: once, however many contexts are made */
    setenv("FA_CUDA_MODULE", "/nonexistent/flashattn_cuda.so", 1);
    unsetenv("FA_BACKEND");
    static log_sink sink;
    memset(&sink, 0, sizeof sink);
    ck_assert_int_eq(fa_set_log_callback(collect, &sink), FA_OK);
    for (int i = 0; i < 3; i++) {
        fa_context *ctx = tu_ctx(FA_BACKEND_AUTO);
        ck_assert_int_eq(fa_context_backend(ctx), FA_BACKEND_CPU);
        fa_context_destroy(ctx);
    }
    ck_assert_int_eq(fa_set_log_callback(NULL, NULL), FA_OK);
    const char *first = strstr(sink.text, "auto: cuda rejected: ");
    ck_assert_msg(first != NULL, "log:\n%s", sink.text);
    ck_assert_msg(strstr(first + 1, "auto: cuda rejected: ") == NULL, "told twice:\n%s",
                  sink.text);
    /* dlerror() names the path: the message names it once */
    const char *path = strstr(first, "/nonexistent/flashattn_cuda.so");
    ck_assert_ptr_nonnull(path);
    ck_assert_msg(strstr(path + 1, "/nonexistent/flashattn_cuda.so") == NULL, "%s", first);
    int chosen = 0;
    for (const char *p = sink.text; (p = strstr(p, "auto: cpu chosen")); p++) chosen++;
    ck_assert_int_eq(chosen, 3);
}
END_TEST

/* ---- fa_options growth ------------------------------------------------------------------ */

START_TEST(test_options_reserved)
{
    enum { Bn = 1, Sn = 8, Hn = 2, Dn = 16, N = Bn * Sn * Hn * Dn };
    float q[N], k[N], v[N], o[N];
    tu_rng r = { 3 };
    for (int i = 0; i < N; i++) {
        q[i] = (float)tu_unif(&r); k[i] = (float)tu_unif(&r); v[i] = (float)tu_unif(&r);
    }
    fa_tensor tq = fa_tensor_contiguous(q, FA_F32, Bn, Sn, Hn, Dn);
    fa_tensor tk = fa_tensor_contiguous(k, FA_F32, Bn, Sn, Hn, Dn);
    fa_tensor tv = fa_tensor_contiguous(v, FA_F32, Bn, Sn, Hn, Dn);
    fa_tensor to = fa_tensor_contiguous(o, FA_F32, Bn, Sn, Hn, Dn);
    fa_backend be[8];
    int nb = tu_backends(be);
    for (int bi = 0; bi < nb; bi++) {
        if (be[bi] == FA_BACKEND_CUDA) {
            tu_note("test_options_reserved: cuda not run here (host tensors)");
            continue;
        }
        fa_context *ctx = tu_ctx(be[bi]);
        fa_options opt = { 0 };
        ck_assert_int_eq(fa_forward(ctx, &to, NULL, &tq, &tk, &tv, &opt), FA_OK);
        int n = (int)(sizeof opt.reserved / sizeof opt.reserved[0]);
        ck_assert_int_ge(n, 1);
        for (int i = 0; i < n; i++) {
            memset(&opt, 0, sizeof opt);
            opt.reserved[i] = 1;
            for (int j = 0; j < N; j++) o[j] = 12345.0f;
            ck_assert_int_eq(fa_forward(ctx, &to, NULL, &tq, &tk, &tv, &opt), FA_ERR_INVALID_ARG);
            char want[64];
            snprintf(want, sizeof want, "fa_forward: opt->reserved[%d] is not 0", i);
            ck_assert_msg(strstr(fa_last_error(ctx), want) != NULL, "%s", fa_last_error(ctx));
            for (int j = 0; j < N; j++) ck_assert(o[j] == 12345.0f);   /* nothing written */
        }
        fa_context_destroy(ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("embedding");
    TU_ADD(s, test_version_agrees, 30);
    TCase *tc = tcase_create("test_log_callback");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_log_callback, 0, 2);
    suite_add_tcase(s, tc);
    TU_ADD(s, test_log_callback_bad_call, 30);
    TU_ADD(s, test_log_once, 30);
    TU_ADD(s, test_options_reserved, 30);
    return tu_main(s);
}
