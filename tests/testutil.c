/* testutil.c - see testutil.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dtype.h"

/* ---- environment ------------------------------------------------------------------- */
int tu_env_flag(const char *name)
{
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

const char *tu_backend_name(fa_backend b)
{
    switch (b) {
    case FA_BACKEND_AUTO: return "auto";
    case FA_BACKEND_REFERENCE: return "reference";
    case FA_BACKEND_CPU: return "cpu";
    case FA_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

int tu_backends(fa_backend out[8])
{
    const char *e = getenv("FA_TEST_BACKENDS");
    if (!e || !*e) e = "reference,cpu";
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", e);
    for (char *tok = strtok(buf, ", "); tok && n < 8; tok = strtok(NULL, ", ")) {
        if (!strcmp(tok, "reference")) out[n++] = FA_BACKEND_REFERENCE;
        else if (!strcmp(tok, "cpu")) out[n++] = FA_BACKEND_CPU;
        else if (!strcmp(tok, "cuda")) out[n++] = FA_BACKEND_CUDA;
        else if (!strcmp(tok, "auto")) out[n++] = FA_BACKEND_AUTO;
        else {
            fprintf(stderr, "FA_TEST_BACKENDS: unknown backend '%s'\n", tok);
            ck_abort_msg("FA_TEST_BACKENDS: unknown backend '%s'", tok);
        }
    }
    return n;
}

fa_context *tu_ctx(fa_backend b)
{
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, b);
    ck_assert_msg(st == FA_OK && ctx != NULL,
                  "fa_context_create(%s) = %d (%s): %s", tu_backend_name(b), (int)st,
                  fa_status_string(st), fa_last_error(NULL));
    return ctx;
}

void tu_note(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "NOTE: %s\n", buf);
    printf("NOTE: %s\n", buf);
    fflush(stdout);
}

/* ---- rng ------------------------------------------------------------------------------ */
uint64_t tu_next(tu_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_unif(tu_rng *r)
{
    return (double)(tu_next(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}


/* ---- the case runner -------------------------------------------------------------------- */
void tu_case_str(const tu_case *c, char *buf, size_t len)
{
    static const char *cz[] = { "none", "bottom-right", "top-left" };
    static const char *lz[] = { "contig", "transposed", "padded" };
    char sh[160];
    if (c->varlen) {
        int n = snprintf(sh, sizeof sh, "varlen B=%lld lq/lk=", (long long)c->B);
        for (int64_t b = 0; b < c->B && n < 120; b++)
            n += snprintf(sh + n, sizeof sh - (size_t)n, "%lld/%lld,", (long long)c->lq[b],
                          (long long)c->lk[b]);
    } else {
        snprintf(sh, sizeof sh, "B=%lld Sq=%lld Sk=%lld", (long long)c->B, (long long)c->Sq,
                 (long long)c->Sk);
    }
    snprintf(buf, len,
             "[%s] seed=%llu %s H=%lld Hkv=%lld dqk=%lld dv=%lld dtype=%s out=%s layout=%s "
             "causal=%s window=%d(%lld,%lld) scale=%g softcap=%g alibi=%d sinks=%d bias=%d(%s) "
             "dropout=%g(seed %llu off %llu) amp=%g sink_amp=%g lse=%s det=%d nan=%d bwd=%d "
             "extra_rows=%lld slack=%lld tiles=%dx%d threads=%d",
             c->tag ? c->tag : "", (unsigned long long)c->seed, sh, (long long)c->H,
             (long long)c->Hkv, (long long)c->dqk, (long long)c->dv, tu_dtype_name(c->dt),
             tu_dtype_name(c->odt), lz[c->layout], cz[c->causal], c->window,
             (long long)c->wl, (long long)c->wr, (double)c->scale, (double)c->softcap,
             c->alibi, c->sinks, c->bias, tu_dtype_name(c->bias_dt), (double)c->dropout_p,
             (unsigned long long)c->dseed, (unsigned long long)c->doffset,
             c->amp, c->sink_amp, c->no_lse ? "NULL" : "yes", c->deterministic, c->nan_mode,
             c->backward, (long long)c->extra_rows, (long long)c->max_slack, c->tile_q,
             c->tile_kv, c->threads);
}
