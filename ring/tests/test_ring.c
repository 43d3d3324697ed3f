/* test_ring.c - fa_ring_forward / fa_ring_backward against the oracle, on every rank.
 *
 * Run under mpirun with any number of ranks (ring-np.sh runs 1 to 4). Each rank builds the
 * same whole-sequence problem, takes its shard by the case's layout, runs the ring, and
 * checks its rows of out, lse, dq, dk, dv and dsinks (ring_check.h gives the rule). Then
 * the error cases: a rank given a wrong argument, options the ring does not serve, ranks
 * that disagree, and a rank that fails during the compute phase: every rank must return
 * the same error and leave its outputs untouched.
 *
 * FA_TEST_BACKENDS=reference,cpu (the default) picks the backends; cuda (on a GPU machine)
 * runs the cases on device copies, through the ring's host staging. Exit status 0 when
 * every check on every rank passed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring_check.h"

static int R, rank_, ctx_first;

static const rc_case cases[] = {
    /* name            B  H Hkv dqk dv  dt      odt     causal                   kind               unev empty kvd sinks softcap det seed padded */
    { "plain",         2, 4, 4, 16, 16, FA_F32, FA_F32, FA_CAUSAL_NONE,         FA_RING_CONTIGUOUS, 0, -1, 0, 0, 0.0f, 0, 11, 0, 0, 0, 0, 0 },
    { "causal-tl",     1, 4, 2, 16, 8,  FA_F32, FA_F32, FA_CAUSAL_TOP_LEFT,     FA_RING_CONTIGUOUS, 1, -1, 0, 0, 0.0f, 0, 12, 0, 0, 0, 0, 0 },
    { "causal-br-sq>sk", 1, 2, 1, 8, 8, FA_F32, FA_F32, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_CONTIGUOUS, 1, 1, -4, 1, 0.0f, 0, 13, 0, 0, 0, 0, 0 },
    { "zigzag-br-sq>sk", 1, 4, 2, 8, 8, FA_F32, FA_F32, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_ZIGZAG, 1, -1, -5, 0, 0.0f, 0, 21, 0, 0, 0, 0, 0 },
    { "causal-br-sk>sq", 2, 4, 2, 8, 16, FA_F32, FA_F32, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_CONTIGUOUS, 1, 0, 3, 0, 0.0f, 1, 14, 0, 0, 0, 0, 0 },
    { "zigzag-tl",     1, 8, 2, 16, 16, FA_F32, FA_F32, FA_CAUSAL_TOP_LEFT,     FA_RING_ZIGZAG,     0, -1, 0, 1, 0.0f, 1, 15, 0, 0, 0, 0, 0 },
    { "zigzag-br-uneven", 1, 4, 1, 16, 16, FA_F32, FA_F32, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_ZIGZAG, 1, 2, 2, 1, 5.0f, 0, 16, 0, 0, 0, 0, 0 },
    { "zigzag-noncausal-bf16", 2, 4, 2, 32, 32, FA_BF16, FA_F32, FA_CAUSAL_NONE, FA_RING_ZIGZAG, 1, 3, 1, 0, 0.0f, 0, 17, 0, 0, 0, 0, 0 },
    { "causal-f16-out-f16", 1, 4, 4, 16, 16, FA_F16, FA_F16, FA_CAUSAL_TOP_LEFT, FA_RING_ZIGZAG, 1, -1, 0, 1, 0.0f, 1, 18, 0, 0, 0, 0, 0 },
    { "strided-zigzag-br", 2, 4, 2, 8, 16, FA_BF16, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_ZIGZAG, 1, 1, 1, 0, 0.0f, 0, 19, 1, 0, 0, 0, 0 },
    { "long-zigzag-br", 1, 4, 2, 32, 32, FA_BF16, FA_F32, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_ZIGZAG, 2, -1, 3, 1, 0.0f, 1, 22, 0, 0, 0, 0, 0 },
    { "long-causal-tl", 1, 2, 1, 64, 64, FA_F32, FA_F32, FA_CAUSAL_TOP_LEFT, FA_RING_CONTIGUOUS, 2, 2, -7, 0, 0.0f, 0, 23, 0, 0, 0, 0, 0 },
    { "strided-plain",     1, 2, 2, 16, 8, FA_F32, FA_F32, FA_CAUSAL_NONE, FA_RING_CONTIGUOUS, 1, -1, 2, 1, 0.0f, 0, 20, 1, 0, 0, 0, 0 },
    /* windows and ALiBi, at global positions                                         window wl wr alibi */
    { "window-tl",     1, 4, 2, 16, 16, FA_F32, FA_F32, FA_CAUSAL_TOP_LEFT, FA_RING_CONTIGUOUS, 1, -1, 0, 0, 0.0f, 0, 31, 0, 1, 5, -1, 0 },
    { "window-sym-zigzag", 2, 4, 2, 8, 8, FA_F32, FA_F32, FA_CAUSAL_NONE, FA_RING_ZIGZAG, 1, 1, 0, 1, 0.0f, 0, 32, 0, 1, 3, 4, 0 },
    { "window-right-only", 1, 2, 1, 8, 16, FA_F32, FA_F32, FA_CAUSAL_NONE, FA_RING_CONTIGUOUS, 1, -1, -3, 0, 0.0f, 0, 33, 0, 1, -1, 2, 0 },
    { "window-br-long", 1, 4, 2, 32, 32, FA_BF16, FA_F32, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_ZIGZAG, 2, -1, 3, 1, 0.0f, 1, 34, 0, 1, 37, 0, 0 },
    { "alibi-tl-zigzag", 1, 4, 4, 16, 16, FA_F32, FA_F32, FA_CAUSAL_TOP_LEFT, FA_RING_ZIGZAG, 1, -1, 0, 0, 0.0f, 0, 35, 0, 0, 0, 0, 1 },
    { "alibi-noncausal", 2, 4, 2, 8, 8, FA_F32, FA_F32, FA_CAUSAL_NONE, FA_RING_CONTIGUOUS, 1, 2, 2, 1, 0.0f, 1, 36, 0, 0, 0, 0, 1 },
    { "alibi-window-br", 1, 4, 2, 16, 8, FA_BF16, FA_F32, FA_CAUSAL_BOTTOM_RIGHT, FA_RING_CONTIGUOUS, 2, 1, -6, 0, 3.0f, 0, 37, 0, 1, 45, 0, 1 },
    { "alibi-window-sym", 1, 2, 2, 16, 16, FA_F32, FA_F32, FA_CAUSAL_NONE, FA_RING_ZIGZAG, 1, -1, 1, 1, 0.0f, 0, 38, 1, 1, 4, 9, 1 },
    { "alibi-long-zigzag", 1, 2, 1, 32, 32, FA_F32, FA_F32, FA_CAUSAL_NONE, FA_RING_ZIGZAG, 2, -1, -2, 0, 0.0f, 1, 39, 0, 0, 0, 0, 1 },
};

static fa_context *make_ctx(fa_backend b)
{
    fa_context *ctx = NULL;
    if (fa_context_create(&ctx, b) != FA_OK) return NULL;
    if (b == FA_BACKEND_CPU) fa_context_set_threads(ctx, 1);   /* ranks share the cores */
    return ctx;
}

static int bitwise_equal(const rc_buf *a, const rc_buf *b)
{
    return a->bytes == b->bytes && memcmp(a->base, b->base, a->bytes) == 0;
}

/* A CUDA context's device copies of one case: inputs (views) and outputs (rc_bufs, lse
   and dsinks arrays), copied back after each call. */
typedef struct { int dev, n; void *mem[16]; } devs;

static fa_tensor in_view(devs *d, const fa_tensor *t)
{
    if (!d->dev) return *t;
    fa_tensor x = rc_dev_view(t, &d->mem[d->n]);
    d->n++;
    return x;
}

static fa_tensor out_view(devs *d, const rc_buf *b, void **m)
{
    *m = NULL;
    return d->dev ? rc_dev_buf(b, m) : b->t;
}

static float *out_array(devs *d, float *host, size_t bytes)
{
    return d->dev ? rc_dev_put(host, bytes) : host;
}

/* The device's results into host memory (nothing to do on the host backends). */
static int back(devs *d, rc_buf *b, void *m, float *host, float *dev, size_t bytes)
{
    if (!d->dev) return 0;
    int rc = b ? rc_dev_buf_back(b, m) : 0;
    if (host) rc |= rc_dev_get(host, dev, bytes);
    return rc;
}

static void devs_free(devs *d)
{
    for (int i = 0; i < d->n; i++) rc_dev_free(d->mem[i]);
    d->n = 0;
}

static int run_backward(fa_context *ctx, devs *d, const char *tag, const rc_problem *p,
                        const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                        const fa_tensor *dout, const fa_tensor *out, const float *lse,
                        const fa_options *o, rc_buf *dq, rc_buf *dk, rc_buf *dv, float *ds)
{
    const rc_case *c = &p->c;
    void *m[3];
    fa_tensor tdq = out_view(d, dq, &m[0]), tdk = out_view(d, dk, &m[1]);
    fa_tensor tdv = out_view(d, dv, &m[2]);
    float *tds = c->sinks ? out_array(d, ds, sizeof(float) * 64) : NULL;
    fa_status st = fa_ring_backward(ctx, MPI_COMM_WORLD, &tdq, &tdk, &tdv, tds, dout,
                                    q, k, v, out, lse, &p->layout, o);
    int bad = back(d, dq, m[0], NULL, NULL, 0) | back(d, dk, m[1], NULL, NULL, 0) |
              back(d, dv, m[2], ds, tds, c->sinks ? sizeof(float) * 64 : 0);
    if (d->dev && tds) rc_dev_free(tds);
    if (st != FA_OK || bad) {
        printf("FAIL rank %d %s: fa_ring_backward %s: %s\n", rank_, tag, fa_status_string(st),
               bad ? "copying the results back failed" : fa_ring_last_error());
        return 1;
    }
    return 0;
}

static int run_case(fa_context *ctx, const char *bname, const rc_case *c)
{
    char tag[128], msg[320];
    snprintf(tag, sizeof tag, "%s/%s/np%d", bname, c->name, R);
    rc_problem p;
    if (rc_build(&p, c, R, rank_, ctx, msg, sizeof msg) != 0) {
        printf("FAIL rank %d %s: %s\n", rank_, tag, msg);
        rc_free(&p);
        return 1;
    }
    int f = 0;
    if (rank_ == 0 && ctx_first)
        printf("case %s np%d: Sq=%lld Sk=%lld, this rank %lld q rows, %lld k rows\n", c->name,
               R, (long long)p.Sq, (long long)p.Sk, (long long)p.nq, (long long)p.nk);
    devs d = { fa_context_backend(ctx) == FA_BACKEND_CUDA, 0, { 0 } };
    void *mem[4], *om[2] = { NULL, NULL };
    fa_tensor hq = rc_view(p.lq, c->dt, c->B, p.nq, c->H, c->dqk, c->padded, &mem[0]);
    fa_tensor hk = rc_view(p.lk, c->dt, c->B, p.nk, c->Hkv, c->dqk, c->padded, &mem[1]);
    fa_tensor hv = rc_view(p.lv, c->dt, c->B, p.nk, c->Hkv, c->dv, c->padded, &mem[2]);
    fa_tensor hdo = rc_view(p.ldout, c->dt, c->B, p.nq, c->H, c->dv, c->padded, &mem[3]);
    fa_tensor q = in_view(&d, &hq), k = in_view(&d, &hk), v = in_view(&d, &hv);
    fa_tensor dout = in_view(&d, &hdo);
    fa_options o = d.dev ? rc_dev_options(&p.opt, c->H, om) : p.opt;
    rc_buf out, dq, dk, dv, dq2, dk2, dv2;
    rc_buf_new(&out, c->odt, c->B, p.nq, c->H, c->dv);
    size_t lbytes = sizeof(float) * (size_t)(c->B * c->H * p.nq) + 4;
    float *lse = malloc(lbytes), *dlse = NULL;
    float ds[64], ds2[64];
    void *outm;
    fa_tensor to = out_view(&d, &out, &outm);
    float *tl = out_array(&d, lse, lbytes);
    fa_status st = fa_ring_forward(ctx, MPI_COMM_WORLD, &to, tl, &q, &k, &v, &p.layout, &o);
    int bad = back(&d, &out, outm, lse, tl, lbytes);
    if (d.dev) dlse = tl;   /* the backward reads the forward's device lse */
    fa_tensor fout = d.dev ? rc_dev_view(&out.t, &d.mem[d.n++]) : out.t;
    if (st != FA_OK || bad) {
        printf("FAIL rank %d %s: fa_ring_forward %s: %s\n", rank_, tag, fa_status_string(st),
               bad ? "copying the results back failed" : fa_ring_last_error());
        f++;
        goto done_fwd;
    }
    f += rc_check_forward(&p, tag, &out, lse);
    fa_ring_stats rs;
    fa_ring_last_stats(&rs);
    if (rs.bytes_sent != rc_expected_kv_bytes(&p)) {
        printf("FAIL rank %d %s: the forward sent %lld K/V bytes, %lld expected\n", rank_, tag,
               (long long)rs.bytes_sent, (long long)rc_expected_kv_bytes(&p));
        f++;
    }
    rc_buf_new(&dq, c->odt, c->B, p.nq, c->H, c->dqk);
    rc_buf_new(&dk, c->odt, c->B, p.nk, c->Hkv, c->dqk);
    rc_buf_new(&dv, c->odt, c->B, p.nk, c->Hkv, c->dv);
    const float *bl = d.dev ? dlse : lse;
    if (run_backward(ctx, &d, tag, &p, &q, &k, &v, &dout, &fout, bl, &o, &dq, &dk, &dv, ds))
        f++;
    else
        f += rc_check_backward(&p, tag, &dq, &dk, &dv, c->sinks ? ds : NULL);
    if (c->deterministic) {   /* the same call again: bitwise the same gradients */
        rc_buf_new(&dq2, c->odt, c->B, p.nq, c->H, c->dqk);
        rc_buf_new(&dk2, c->odt, c->B, p.nk, c->Hkv, c->dqk);
        rc_buf_new(&dv2, c->odt, c->B, p.nk, c->Hkv, c->dv);
        if (run_backward(ctx, &d, tag, &p, &q, &k, &v, &dout, &fout, bl, &o, &dq2, &dk2, &dv2,
                         ds2) ||
            !bitwise_equal(&dq, &dq2) || !bitwise_equal(&dk, &dk2) ||
            !bitwise_equal(&dv, &dv2) ||
            (c->sinks && memcmp(ds, ds2, sizeof(float) * (size_t)c->H) != 0)) {
            printf("FAIL rank %d %s: a second deterministic backward differs\n", rank_, tag);
            f++;
        }
        rc_buf_free(&dq2); rc_buf_free(&dk2); rc_buf_free(&dv2);
    }
    rc_buf_free(&dq); rc_buf_free(&dk); rc_buf_free(&dv);
done_fwd:
    if (d.dev) { rc_dev_free(tl); rc_dev_free(om[0]); rc_dev_free(om[1]); }
    devs_free(&d);
    rc_buf_free(&out);
    free(lse);
    for (int i = 0; i < 4; i++) free(mem[i]);
    rc_free(&p);
    return f;
}

/* ---- errors ------------------------------------------------------------------------- */
typedef enum {
    E_BAD_LAYOUT, E_BAD_KIND, E_RANK_DIFFERS, E_DROPOUT, E_WINDOW_DIFFERS, E_ALIBI_DIFFERS,
    E_BIAS,
    E_BAD_DROPOUT, E_NULL_OUT, E_COMPUTE_FAIL, E_DSINKS_NO_SINKS, E_COUNT
} err_kind;

static const char *err_name[E_COUNT] = {
    "layout sum wrong on the last rank", "bad layout kind on rank 0",
    "heads differ on the last rank", "dropout", "window_left differs on the last rank",
    "alibi_slopes NULL on the last rank only", "bias",
    "dropout_p = 1.5", "out NULL on the last rank", "q data NULL on the last rank (compute)",
    "dsinks without sinks"
};

static fa_status expected(err_kind e)
{
    return e == E_DROPOUT || e == E_BIAS ? FA_ERR_UNSUPPORTED : FA_ERR_INVALID_ARG;
}

/* One erroneous call (forward, or backward for dsinks): every rank must return the
   expected status and leave its outputs as they were. */
static int run_error(fa_context *ctx, const char *bname, err_kind e)
{
    enum { B = 1, H = 4, D = 8, N = 5 };
    int last = rank_ == R - 1;
    float qd[B * N * 2 * H * D], kd[B * N * H * D], vd[B * N * H * D], dod[B * N * H * D];
    for (size_t i = 0; i < sizeof qd / sizeof qd[0]; i++) qd[i] = (float)((i * 7919) % 13) / 13.0f;
    for (size_t i = 0; i < sizeof kd / sizeof kd[0]; i++)
        kd[i] = vd[i] = dod[i] = (float)((i * 104729) % 17) / 17.0f - 0.5f;
    int64_t h = (e == E_RANK_DIFFERS && last && R > 1) ? 2 * H : H;
    fa_tensor q = fa_tensor_contiguous(qd, FA_F32, B, N, h, D);
    fa_tensor k = fa_tensor_contiguous(kd, FA_F32, B, N, H, D);
    fa_tensor v = fa_tensor_contiguous(vd, FA_F32, B, N, H, D);
    fa_tensor dout = fa_tensor_contiguous(dod, FA_F32, B, N, h, D);
    fa_ring_layout L = { FA_RING_CONTIGUOUS, { N, 0 }, { N, 0 } };
    if (e == E_BAD_LAYOUT && last) L.q_len[0] = N - 1;
    if (e == E_BAD_KIND && rank_ == 0) L.kind = (fa_ring_kind)7;
    if (e == E_COMPUTE_FAIL && last) q.data = NULL;
    float slopes[2 * H] = { 0.5f }, bias_d[N * N] = { 0 };
    fa_tensor bias = fa_tensor_contiguous(bias_d, FA_F32, 1, N, 1, N);
    fa_options o = { 0 };
    if (e == E_DROPOUT) o.dropout_p = 0.1f;
    if (e == E_BAD_DROPOUT) o.dropout_p = 1.5f;
    if (e == E_WINDOW_DIFFERS) { o.window = 1; o.window_left = last ? 3 : 2; o.window_right = 0; }
    if (e == E_ALIBI_DIFFERS && !last) o.alibi_slopes = slopes;
    if (e == E_BIAS) o.bias = &bias;
    rc_buf out;
    rc_buf_new(&out, FA_F32, B, N, h, D);
    float lse[B * 2 * H * N];
    memset(lse, 0xff, sizeof lse);
    fa_status st;
    int untouched;
    if (e == E_DSINKS_NO_SINKS) {
        rc_buf dq, dk, dv;
        rc_buf_new(&dq, FA_F32, B, N, h, D);
        rc_buf_new(&dk, FA_F32, B, N, H, D);
        rc_buf_new(&dv, FA_F32, B, N, H, D);
        float ds[2 * H];
        memset(ds, 0xff, sizeof ds);
        fa_tensor o_t = fa_tensor_contiguous(dod, FA_F32, B, N, h, D);
        st = fa_ring_backward(ctx, MPI_COMM_WORLD, &dq.t, &dk.t, &dv.t, ds, &dout, &q, &k, &v,
                              &o_t, lse, &L, &o);
        untouched = rc_all_poison(&dq) && rc_all_poison(&dk) && rc_all_poison(&dv);
        for (int i = 0; i < 2 * H; i++) untouched &= isnan(ds[i]);
        rc_buf_free(&dq); rc_buf_free(&dk); rc_buf_free(&dv);
    } else {
        fa_tensor *outp = (e == E_NULL_OUT && last) ? NULL : &out.t;
        st = fa_ring_forward(ctx, MPI_COMM_WORLD, outp, lse, &q, &k, &v, &L, &o);
        untouched = rc_all_poison(&out);
        for (size_t i = 0; i < sizeof lse / sizeof lse[0]; i++) untouched &= isnan(lse[i]);
    }
    rc_buf_free(&out);
    fa_status want = expected(e);
    if ((e == E_RANK_DIFFERS || e == E_WINDOW_DIFFERS || e == E_ALIBI_DIFFERS) && R == 1)
        want = FA_OK;   /* nothing differs with one rank */
    int f = 0;
    if (st != want) {
        printf("FAIL rank %d %s/error '%s'/np%d: got %s, want %s (%s)\n", rank_, bname,
               err_name[e], R, fa_status_string(st), fa_status_string(want),
               fa_ring_last_error());
        f++;
    } else if (want != FA_OK && (!untouched || !*fa_ring_last_error())) {
        printf("FAIL rank %d %s/error '%s'/np%d: outputs written or no message\n", rank_, bname,
               err_name[e], R);
        f++;
    }
    return f;
}

static int backend_wanted(const char *name)
{
    const char *env = getenv("FA_TEST_BACKENDS");
    if (!env || !*env) env = "reference,cpu";
    size_t n = strlen(name);
    for (const char *s = env; (s = strstr(s, name)) != NULL; s += n)
        if ((s == env || s[-1] == ',') && (s[n] == ',' || s[n] == 0)) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    const struct { fa_backend b; const char *name; } backends[] = {
        { FA_BACKEND_REFERENCE, "reference" }, { FA_BACKEND_CPU, "cpu" },
        { FA_BACKEND_CUDA, "cuda" } };
    int fails = 0, checks = 0;
    for (size_t bi = 0; bi < 3; bi++) {
        if (!backend_wanted(backends[bi].name)) continue;
        fa_context *ctx = make_ctx(backends[bi].b);
        if (!ctx) {
            printf("FAIL rank %d: no %s context: %s\n", rank_, backends[bi].name,
                   fa_last_error(NULL));
            fails++;
            continue;
        }
        ctx_first = bi == 0;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, checks++)
            fails += run_case(ctx, backends[bi].name, &cases[i]);
        if (backends[bi].b == FA_BACKEND_CUDA) {   /* they pass host arrays */
            if (rank_ == 0) printf("cuda: the error cases run on the host backends only\n");
        } else {
            for (int e = 0; e < E_COUNT; e++, checks++)
                fails += run_error(ctx, backends[bi].name, (err_kind)e);
        }
        fa_context_destroy(ctx);
    }
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("test_ring np=%d: %d calls per rank, %d failures over all ranks\n", R, checks,
               total);
    MPI_Finalize();
    return total == 0 && checks > 0 ? 0 : 1;
}
