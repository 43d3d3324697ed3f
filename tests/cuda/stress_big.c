/* stress_big.c - stress_cuda's big mode (see stress_cuda.c): > 2^31-element tensors on the
 * device, each checked with liboracle's rule against the oracle of a reduced problem that
 * gives the checked rows exactly (the rows and keys that matter). */
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "stress_cuda.h"
#include "dtype.h"

/* Big mode's threshold: tensors of 2^FA_BIG_LOG2 + a little elements. 31 is the point of
   the test; a smaller value (e.g. -DFA_BIG_LOG2=22) only checks the harness itself on a
   machine without the memory. */
#ifndef FA_BIG_LOG2
#define FA_BIG_LOG2 31
#endif

static double bf(uint16_t x) { return (double)fa_bf16_to_f32(x); }

/* n floats or bf16 values as doubles (malloc'd) */
static double *f2d(const float *x, size_t n)
{
    double *d = malloc(sizeof(double) * (n + 1));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static double *b2d(const uint16_t *x, size_t n)
{
    double *d = malloc(sizeof(double) * (n + 1));
    for (size_t i = 0; i < n; i++) d[i] = bf(x[i]);
    return d;
}

/* liboracle's oracle of a reduced problem that gives the big call's checked rows exactly:
   one sequence, bf16 inputs q [sq][hq][d], k, v [sk][hkv][d] (as doubles), bias
   [hq][sq][sk] or NULL, dout like q (backward) or NULL; causal, window and scale from op
   (scale 0: 1/sqrt(d)); results in odt. Takes the arrays (freed here). */
static void big_oracle(or_oracle *o, fa_dtype odt, double *q, double *k, double *v, double *dout, double *bias,
                       int sq, int sk, int hq, int hkv, int d, const fa_options *op)
{
    or_seq_data s;
    memset(&s, 0, sizeof s);
    s.q = q; s.k = k; s.v = v; s.dout = dout; s.bias = bias; s.sq = sq; s.sk = sk;
    or_problem p;
    memset(&p, 0, sizeof p);
    p.nseq = 1; p.nq = sq; p.nk = sk; p.hq = hq; p.hkv = hkv; p.dqk = p.dv = d;
    p.dt = FA_BF16; p.odt = odt;
    p.scale = op && op->scale != 0.f ? op->scale : 1.0 / sqrt((double)d);
    if (op) { p.causal = op->causal; p.window = op->window; p.wl = op->window_left; p.wr = op->window_right; }
    p.seqs = &s;
    if (or_compute(&p, dout != NULL, o)) { printf("oracle: out of memory\n"); exit(2); }
    free(q); free(k); free(v); free(dout); free(bias);
}

/* ours (n floats in the oracle's layout of t) against o with the rule; a failure's words
   are appended to why. Returns 1 if within the bound. */
static int big_ok(const or_oracle *o, or_tensor t, const float *ours, char *why, size_t len)
{
    const int64_t n = or_count(o, t);
    double *x = f2d(ours, (size_t)n);
    or_result r;
    int ok = or_check(o, t, x, &r);
    free(x);
    if (!ok) {
        size_t at = strlen(why);
        if (at < len) { why[at] = ' '; or_result_str(&r, t, why + at + 1, len - at - 1); }
    }
    return ok;
}

static void big_result(const char *what, int ok, double secs, const char *fmt, ...)
{
    va_list ap;
    printf("%s %-58s %6.2f s  ", ok ? "PASS" : "FAIL", what, secs);
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!ok) fails++;
}

/* fill n bf16 elements at dev with blk[x % P] (P elements, uploaded once, doubled on device) */
static void fill_repeat(uint16_t *dev, size_t n, const uint16_t *blk, size_t P)
{
    CK(cudaMemcpy(dev, blk, (P < n ? P : n) * 2, cudaMemcpyHostToDevice));
    for (size_t filled = P; filled < n; ) {
        size_t c = filled < n - filled ? filled : n - filled;
        CK(cudaMemcpy(dev + filled, dev, c * 2, cudaMemcpyDeviceToDevice));
        filled += c;
    }
}

int big(void)
{
    fa_context *cu;
    if (fa_context_create(&cu, FA_BACKEND_CUDA) != FA_OK) { printf("no cuda context: %s\n", fa_last_error(NULL)); return 77; }
    printf("%s", fa_context_describe(cu));
    double T0 = now(), t;
    rng = 777;
    enum { D = 64, SQ = 3, HQ = 2, TAIL = 512, WL = 300, P = 1048573 };
    const int64_t SK = ((int64_t)1 << (FA_BIG_LOG2 - 6)) + 4096, N = SK - TAIL;
    const size_t n = (size_t)SK * D;
    printf("big: k, v [1, %lld, 1, %d] bf16: %zu elements each (2^%d + %zu), %.2f GiB each\n", (long long)SK, D, n, FA_BIG_LOG2,
           n - ((size_t)1 << FA_BIG_LOG2), (double)n * 2 / (1 << 30));
    uint16_t *k_d, *v_d, *q_d;
    float *o_d, *l_d;
    CK(cudaMalloc((void **)&k_d, n * 2)); CK(cudaMalloc((void **)&v_d, n * 2));
    CK(cudaMalloc((void **)&q_d, SQ * HQ * D * 2)); CK(cudaMalloc((void **)&o_d, SQ * HQ * D * 4)); CK(cudaMalloc((void **)&l_d, HQ * SQ * 4));
    uint16_t *ktail = malloc((size_t)TAIL * D * 2), *blk = malloc((size_t)P * 2), q[SQ * HQ * D];
    for (int x = 0; x < TAIL * D; x++) ktail[x] = fa_f32_to_bf16((float)(2.0 * frand()));
    for (int x = 0; x < P; x++) blk[x] = fa_f32_to_bf16((float)frand());
    for (int x = 0; x < SQ * HQ * D; x++) q[x] = fa_f32_to_bf16((float)(1.5 * frand()));
    CK(cudaMemset(k_d, 0, n * 2));
    CK(cudaMemcpy(k_d + (size_t)N * D, ktail, (size_t)TAIL * D * 2, cudaMemcpyHostToDevice));
    fill_repeat(v_d, n, blk, P);
    CK(cudaMemcpy(q_d, q, sizeof q, cudaMemcpyHostToDevice));
#define KV(row, c) ((row) >= N ? ktail[((row) - N) * D + (c)] : (uint16_t)0)
#define VV(row, c) blk[((size_t)(row) * D + (size_t)(c)) % P]
    /* mean of v over the zero-key rows */
    double vmean[D] = { 0 };
    {
        double *tb = malloc(sizeof(double) * P);
        for (int x = 0; x < P; x++) tb[x] = bf(blk[x]);
        size_t r = 0;
        for (int64_t j = 0; j < N; j++)
            for (int c = 0; c < D; c++) { vmean[c] += tb[r]; if (++r == P) r = 0; }
        for (int c = 0; c < D; c++) vmean[c] /= (double)N;
        free(tb);
    }
    printf("big: set up in %.1f s\n", now() - T0);
    fa_tensor tq = fa_tensor_contiguous(q_d, FA_BF16, 1, SQ, HQ, D);
    fa_tensor tk = fa_tensor_contiguous(k_d, FA_BF16, 1, SK, 1, D), tv = fa_tensor_contiguous(v_d, FA_BF16, 1, SK, 1, D);
    fa_tensor to = fa_tensor_contiguous(o_d, FA_F32, 1, SQ, HQ, D);
    float out[SQ * HQ * D], lse[HQ * SQ];
    fa_status st;
    or_oracle orc;
    char why[1200];
    int ok;

    /* 1. window: keys past element 2^31 only */
    {
        fa_options op = {0};
        op.causal = FA_CAUSAL_BOTTOM_RIGHT; op.window = 1; op.window_left = WL; op.window_right = -1;
        t = now();
        CK(cudaMemset(o_d, 0xff, sizeof out));
        st = fa_forward(cu, &to, l_d, &tq, &tk, &tv, &op);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out, o_d, sizeof out, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(lse, l_d, sizeof lse, cudaMemcpyDeviceToHost));
        const int64_t nw = SQ + WL, j0 = SK - nw;
        uint16_t *kw = malloc(nw * D * 2), *vw = malloc(nw * D * 2);
        for (int64_t j = 0; j < nw; j++) for (int c = 0; c < D; c++) { kw[j * D + c] = KV(j0 + j, c); vw[j * D + c] = VV(j0 + j, c); }
        big_oracle(&orc, FA_F32, b2d(q, SQ * HQ * D), b2d(kw, (size_t)nw * D), b2d(vw, (size_t)nw * D), NULL, NULL, SQ, (int)nw, HQ,
                   1, D, &op);
        free(kw); free(vw);
        why[0] = 0;
        ok = big_ok(&orc, OR_OUT, out, why, sizeof why);
        ok &= big_ok(&orc, OR_LSE, lse, why, sizeof why);
        or_free(&orc);
        big_result("k/v side: causal window 300, keys past element 2^31", st == FA_OK && ok, now() - t, "%s%s%s",
                   st == FA_OK ? "" : " cuda: ", st == FA_OK ? "" : fa_last_error(cu), ok ? "within the rule" : why);
    }
    /* 2. full: every key; the zero keys compressed into one key with logit log N */
    {
        float *qf = malloc(sizeof(float) * SQ * HQ * D);
        const int64_t nf = 1 + TAIL;
        float *kf = calloc((size_t)nf * D, 4), *vf = malloc((size_t)nf * D * 4), *bias = calloc((size_t)SQ * HQ * nf, 4);
        for (int x = 0; x < SQ * HQ * D; x++) qf[x] = (float)bf(q[x]);
        for (int c = 0; c < D; c++) vf[c] = (float)vmean[c];
        for (int64_t j = 1; j < nf; j++)
            for (int c = 0; c < D; c++) { kf[j * D + c] = (float)bf(KV(N + j - 1, c)); vf[j * D + c] = (float)bf(VV(N + j - 1, c)); }
        for (int i = 0; i < SQ; i++) for (int h = 0; h < HQ; h++) bias[(i * HQ + h) * nf] = (float)log((double)N);
        double dmax = 0;
        for (int i = 0; i < SQ * HQ; i++)
            for (int64_t j = 1; j < nf; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++) dot += (double)qf[i * D + c] * kf[j * D + c];
                if (dot > dmax) dmax = dot;
            }
        fa_options op = {0};
        op.scale = (float)((log((double)N) + 2.0) / dmax);   /* the tail and the zero keys both carry weight */
        t = now();
        CK(cudaMemset(o_d, 0xff, sizeof out));
        st = fa_forward(cu, &to, l_d, &tq, &tk, &tv, &op);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out, o_d, sizeof out, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(lse, l_d, sizeof lse, cudaMemcpyDeviceToHost));
        double *bh = calloc((size_t)HQ * SQ * nf, sizeof(double));   /* the oracle's [H][Sq][Sk] */
        for (int i = 0; i < SQ; i++) for (int h = 0; h < HQ; h++) bh[((size_t)h * SQ + i) * nf] = bias[(i * HQ + h) * nf];
        big_oracle(&orc, FA_F32, f2d(qf, SQ * HQ * D), f2d(kf, (size_t)nf * D), f2d(vf, (size_t)nf * D), NULL, bh, SQ, (int)nf, HQ,
                   1, D, &op);
        /* the rule on the reduced problem (1 + 512 keys); the device sums 2^25 + 4096 keys in
           fp32, which the rule's fp32 floors (and its bf16 naive model) cover; a wrapped
           offset moves the result by O(max|out|) */
        why[0] = 0;
        ok = big_ok(&orc, OR_OUT, out, why, sizeof why);
        ok &= big_ok(&orc, OR_LSE, lse, why, sizeof why);
        or_free(&orc);
        big_result("k/v side: no mask, all 2^25 + 4096 keys", st == FA_OK && ok, now() - t, "%s%s%s",
                   st == FA_OK ? "" : " cuda: ", st == FA_OK ? "" : fa_last_error(cu), ok ? "within the rule" : why);
        free(qf); free(kf); free(vf); free(bias);
    }
    /* 3. paged cache over the same memory: the last two pages, a 2-row append past 2^31 */
    {
        const int64_t PS = 256, NP = SK / PS;
        fa_tensor pk = fa_tensor_contiguous(k_d, FA_BF16, NP, PS, 1, D), pv = fa_tensor_contiguous(v_d, FA_BF16, NP, PS, 1, D);
        uint16_t kn[2 * D], vn[2 * D];
        for (int x = 0; x < 2 * D; x++) { kn[x] = fa_f32_to_bf16((float)frand()); vn[x] = fa_f32_to_bf16((float)frand()); }
        int32_t hcs[1] = { 300 }, hbt[2] = { (int32_t)(NP - 2), (int32_t)(NP - 1) }, *dcs, *dbt;
        uint16_t *kn_d, *vn_d;
        CK(cudaMalloc((void **)&dcs, 4)); CK(cudaMalloc((void **)&dbt, 8));
        CK(cudaMalloc((void **)&kn_d, sizeof kn)); CK(cudaMalloc((void **)&vn_d, sizeof vn));
        CK(cudaMemcpy(dcs, hcs, 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dbt, hbt, 8, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(kn_d, kn, sizeof kn, cudaMemcpyHostToDevice)); CK(cudaMemcpy(vn_d, vn, sizeof vn, cudaMemcpyHostToDevice));
        fa_tensor tkn = fa_tensor_contiguous(kn_d, FA_BF16, 1, 2, 1, D), tvn = fa_tensor_contiguous(vn_d, FA_BF16, 1, 2, 1, D);
        fa_options op = {0};
        op.causal = FA_CAUSAL_BOTTOM_RIGHT;
        t = now();
        CK(cudaMemset(o_d, 0xff, sizeof out));
        st = fa_forward_kvcache(cu, &to, l_d, &tq, &pk, &pv, &tkn, &tvn, dcs, dbt, 2, &op);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out, o_d, sizeof out, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(lse, l_d, sizeof lse, cudaMemcpyDeviceToHost));
        uint16_t back[4 * D];
        const size_t row0 = (size_t)((NP - 1) * PS + 44);   /* cache positions 300, 301 */
        CK(cudaMemcpy(back, k_d + row0 * D, 2 * D * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(back + 2 * D, v_d + row0 * D, 2 * D * 2, cudaMemcpyDeviceToHost));
        int landed = !memcmp(back, kn, sizeof kn) && !memcmp(back + 2 * D, vn, sizeof vn);
        const int64_t nk = 302, first = (NP - 2) * PS;   /* the two pages are consecutive rows */
        uint16_t *kc = malloc(nk * D * 2), *vc = malloc(nk * D * 2);
        for (int64_t j = 0; j < nk; j++)
            for (int c = 0; c < D; c++) {
                kc[j * D + c] = j < 300 ? KV(first + j, c) : kn[(j - 300) * D + c];
                vc[j * D + c] = j < 300 ? VV(first + j, c) : vn[(j - 300) * D + c];
            }
        big_oracle(&orc, FA_F32, b2d(q, SQ * HQ * D), b2d(kc, (size_t)nk * D), b2d(vc, (size_t)nk * D), NULL, NULL, SQ, (int)nk, HQ,
                   1, D, &op);
        why[0] = 0;
        ok = big_ok(&orc, OR_OUT, out, why, sizeof why);
        ok &= big_ok(&orc, OR_LSE, lse, why, sizeof why);
        or_free(&orc);
        big_result("k/v side: paged cache, last 2 pages, append past 2^31", st == FA_OK && landed && ok, now() - t,
                   "appended rows %s, %s", landed ? "in place" : "NOT in place", ok ? "within the rule" : why);
        free(kc); free(vc);
        cudaFree(dcs); cudaFree(dbt); cudaFree(kn_d); cudaFree(vn_d);
    }
    CK(cudaFree(k_d)); CK(cudaFree(v_d));
#undef KV
#undef VV

    /* 4, 5. q side: q, out, dout, dq of 2^31 + 65536 elements */
    {
        enum { HB = 16, HKB = 4, SKB = 64, NR = 5, NZ = 4, P2 = 1048571 };
        const int64_t SQB = ((int64_t)1 << (FA_BIG_LOG2 - 10)) + 64;
        const size_t nq = (size_t)SQB * HB * D, row_el = (size_t)HB * D;
        const int64_t rows[NR] = { 0, ((int64_t)1 << (FA_BIG_LOG2 - 10)) - 1, (int64_t)1 << (FA_BIG_LOG2 - 10), SQB - 2, SQB - 1 };
        const int64_t zrows[NZ] = { 1, (int64_t)1 << (FA_BIG_LOG2 - 11), ((int64_t)1 << (FA_BIG_LOG2 - 10)) + 1, SQB - 3 };
        printf("big: q, out, dout, dq [1, %lld, %d, %d] bf16: %zu elements each (2^%d + %zu)\n", (long long)SQB, HB, D, nq, FA_BIG_LOG2,
               nq - ((size_t)1 << FA_BIG_LOG2));
        uint16_t *qb_d, *ob_d, *do_d, *dq_d, *kb_d, *vb_d;
        float *lb_d, *dk_d, *dv_d;
        CK(cudaMalloc((void **)&qb_d, nq * 2)); CK(cudaMalloc((void **)&ob_d, nq * 2));
        CK(cudaMalloc((void **)&lb_d, (size_t)HB * SQB * 4));
        CK(cudaMalloc((void **)&kb_d, SKB * HKB * D * 2)); CK(cudaMalloc((void **)&vb_d, SKB * HKB * D * 2));
        uint16_t *blk2 = malloc((size_t)P2 * 2), kb[SKB * HKB * D], vb[SKB * HKB * D];
        for (int x = 0; x < P2; x++) blk2[x] = fa_f32_to_bf16((float)(1.5 * frand()));
        for (int x = 0; x < SKB * HKB * D; x++) { kb[x] = fa_f32_to_bf16((float)(2 * frand())); vb[x] = fa_f32_to_bf16((float)frand()); }
        fill_repeat(qb_d, nq, blk2, P2);
        CK(cudaMemcpy(kb_d, kb, sizeof kb, cudaMemcpyHostToDevice)); CK(cudaMemcpy(vb_d, vb, sizeof vb, cudaMemcpyHostToDevice));
        CK(cudaMemset(ob_d, 0xff, nq * 2)); CK(cudaMemset(lb_d, 0xff, (size_t)HB * SQB * 4));
        uint16_t *qr = malloc(NR * row_el * 2), *orr = malloc(NR * row_el * 2), *dor = malloc(NR * row_el * 2);
        for (int i = 0; i < NR; i++)
            for (size_t e = 0; e < row_el; e++) qr[i * row_el + e] = blk2[((size_t)rows[i] * row_el + e) % P2];
        fa_tensor bq = fa_tensor_contiguous(qb_d, FA_BF16, 1, SQB, HB, D), bo = fa_tensor_contiguous(ob_d, FA_BF16, 1, SQB, HB, D);
        fa_tensor bk = fa_tensor_contiguous(kb_d, FA_BF16, 1, SKB, HKB, D), bv = fa_tensor_contiguous(vb_d, FA_BF16, 1, SKB, HKB, D);
        t = now();
        st = fa_forward(cu, &bo, lb_d, &bq, &bk, &bv, NULL);
        CK(cudaDeviceSynchronize());
        double tf = now() - t;
        float got[NR * HB * D], lgot[HB * NR];
        for (int i = 0; i < NR; i++) {
            CK(cudaMemcpy(orr + i * row_el, ob_d + (size_t)rows[i] * row_el, row_el * 2, cudaMemcpyDeviceToHost));
            for (int h = 0; h < HB; h++) CK(cudaMemcpy(&lgot[h * NR + i], lb_d + (size_t)h * SQB + rows[i], 4, cudaMemcpyDeviceToHost));
        }
        for (size_t e = 0; e < NR * row_el; e++) got[e] = fa_bf16_to_f32(orr[e]);
        /* the rows are independent (no mask): the oracle of those rows alone */
        big_oracle(&orc, FA_BF16, b2d(qr, NR * row_el), b2d(kb, SKB * HKB * D), b2d(vb, SKB * HKB * D), NULL, NULL, NR, SKB, HB,
                   HKB, D, NULL);
        why[0] = 0;
        ok = big_ok(&orc, OR_OUT, got, why, sizeof why);
        ok &= big_ok(&orc, OR_LSE, lgot, why, sizeof why);
        or_free(&orc);
        big_result("q side: forward, rows 0, 2^21-1, 2^21 (element 2^31), last two", st == FA_OK && ok, tf, "%s%s%s",
                   st == FA_OK ? "" : " cuda: ", st == FA_OK ? "" : fa_last_error(cu), ok ? "within the rule" : why);

        /* 5. backward with dout zero except on the checked rows */
        CK(cudaMalloc((void **)&do_d, nq * 2)); CK(cudaMalloc((void **)&dq_d, nq * 2));
        CK(cudaMalloc((void **)&dk_d, SKB * HKB * D * 4)); CK(cudaMalloc((void **)&dv_d, SKB * HKB * D * 4));
        CK(cudaMemset(do_d, 0, nq * 2)); CK(cudaMemset(dq_d, 0xff, nq * 2));
        CK(cudaMemset(dk_d, 0xff, SKB * HKB * D * 4)); CK(cudaMemset(dv_d, 0xff, SKB * HKB * D * 4));
        for (size_t e = 0; e < NR * row_el; e++) dor[e] = fa_f32_to_bf16((float)frand());
        for (int i = 0; i < NR; i++) CK(cudaMemcpy(do_d + (size_t)rows[i] * row_el, dor + i * row_el, row_el * 2, cudaMemcpyHostToDevice));
        fa_tensor bdo = fa_tensor_contiguous(do_d, FA_BF16, 1, SQB, HB, D), bdq = fa_tensor_contiguous(dq_d, FA_BF16, 1, SQB, HB, D);
        fa_tensor bdk = fa_tensor_contiguous(dk_d, FA_F32, 1, SKB, HKB, D), bdv = fa_tensor_contiguous(dv_d, FA_F32, 1, SKB, HKB, D);
        t = now();
        st = fa_backward(cu, &bdq, &bdk, &bdv, NULL, &bdo, &bq, &bk, &bv, &bo, lb_d, NULL);
        CK(cudaDeviceSynchronize());
        double tb = now() - t;
        float gdq[NR * HB * D], gdk[SKB * HKB * D], gdv[SKB * HKB * D];
        uint16_t tmp[HB * D];
        int zeros_ok = 1;
        for (int i = 0; i < NR; i++) {
            CK(cudaMemcpy(tmp, dq_d + (size_t)rows[i] * row_el, row_el * 2, cudaMemcpyDeviceToHost));
            for (size_t e = 0; e < row_el; e++) gdq[i * row_el + e] = fa_bf16_to_f32(tmp[e]);
        }
        for (int i = 0; i < NZ; i++) {
            CK(cudaMemcpy(tmp, dq_d + (size_t)zrows[i] * row_el, row_el * 2, cudaMemcpyDeviceToHost));
            for (size_t e = 0; e < row_el; e++) if (fa_bf16_to_f32(tmp[e]) != 0.0f) zeros_ok = 0;
        }
        CK(cudaMemcpy(gdk, dk_d, sizeof gdk, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(gdv, dv_d, sizeof gdv, cudaMemcpyDeviceToHost));
        /* the oracle's backward of the rows (dk, dv: those rows' contributions alone); dq is
           bf16 and dk, dv fp32, so two oracles, one per output dtype */
        why[0] = 0;
        big_oracle(&orc, FA_BF16, b2d(qr, NR * row_el), b2d(kb, SKB * HKB * D), b2d(vb, SKB * HKB * D), b2d(dor, NR * row_el), NULL,
                   NR, SKB, HB, HKB, D, NULL);
        ok = big_ok(&orc, OR_DQ, gdq, why, sizeof why);
        or_free(&orc);
        big_oracle(&orc, FA_F32, b2d(qr, NR * row_el), b2d(kb, SKB * HKB * D), b2d(vb, SKB * HKB * D), b2d(dor, NR * row_el), NULL,
                   NR, SKB, HB, HKB, D, NULL);
        ok &= big_ok(&orc, OR_DK, gdk, why, sizeof why);
        ok &= big_ok(&orc, OR_DV, gdv, why, sizeof why);
        or_free(&orc);
        big_result("q side: backward, dout zero but on those rows", st == FA_OK && zeros_ok && ok, tb, "other dq rows %s, %s%s%s",
                   zeros_ok ? "0" : "NOT 0", ok ? "within the rule" : why, st == FA_OK ? "" : " cuda: ",
                   st == FA_OK ? "" : fa_last_error(cu));
        free(blk2); free(qr); free(orr); free(dor);
        cudaFree(qb_d); cudaFree(ob_d); cudaFree(lb_d); cudaFree(kb_d); cudaFree(vb_d);
        cudaFree(do_d); cudaFree(dq_d); cudaFree(dk_d); cudaFree(dv_d);
    }
    free(ktail); free(blk);
    cudaFree(q_d); cudaFree(o_d); cudaFree(l_d);
    fa_context_destroy(cu);
    printf("SUMMARY stress_cuda big: %ld failed, %.1f s in all: %s\n", fails, now() - T0, fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
