/* test_cuda.c - the CUDA backend against liboracle, on the GPU machine.
 *
 * Each case draws random inputs (one seeded stream; the seed is printed), rounds them to
 * the storage dtype, copies them to the device, poisons the outputs (NaN bytes, plus a
 * guard band past the end), runs the CUDA backend, and checks every output (out, lse, dq,
 * dk, dv, dsinks) against the double-precision oracle of the same rounded inputs with the
 * project's one tolerance rule (liboracle, tests/oracle/oracle.h: 2x, for gradients 3x,
 * the error of same-precision naive models plus a floor of one rounding of the output
 * dtype and the fp32 roundoff of the result's terms; fp32 inputs capped at 1e-5 relative;
 * exact zeros / -inf for fully masked rows). The checks share tests/cuda/cuda_util.c;
 * the dense cases are in cuda_dense.c, the packed ones (varlen, KV cache) in
 * cuda_varlen.c, the decode kernel's (KV cache with 1-16 new tokens) in cuda_decode.c.
 * Also: every output element written (no poison left), guard band untouched, rows that
 * must stay untouched (varlen past cu_seqlens[batch]) untouched, the KV cache after the
 * append equal to the reference backend's, forward bitwise deterministic, the dropout
 * keep-mask identical to the CPU and reference backends, fa_combine equal to the whole
 * forward, UNSUPPORTED / INVALID_ARG where documented.
 * Backward: the reference backend's forward gives out (fp32) and lse, the CUDA
 * backward's inputs; deterministic=1 repeated bitwise.
 * Usage: test_cuda [quick|san|decode|decode-san]  (exit status 0 = all passed, 77 = no CUDA context)
 *   decode: the decode kernel's cases and the KV-cache cases of the sweep (chunked prefill
 *   into paged caches included) only; decode-san:
 *   the decode cases of san alone;
 *   quick: a subset of the sweep (prints failures only); san: a handful of small cases that
 *   run every kernel once (forward fast and general, d64/d128/d256, split-KV, varlen,
 *   backward incl. deterministic and dsinks, varlen backward, KV-cache append contiguous and
 *   paged, fa_combine; the fp32 FMA kernels: forward general and odd d, split-KV decode,
 *   backward deterministic with dsinks and odd d, paged KV cache), for compute-sanitizer
 *   (tests/cuda/sanitize.sh).
 * Built on the development machine by bench/gpu/build-kit.sh: test_cuda.c, cuda_util.c,
 * cuda_dense.c, cuda_varlen.c, cuda_decode.c and liboracle's sources, with gcc and CUDA's headers.
 */
#include <math.h>
#include <string.h>
#include "cuda_test.h"
#include "dtype.h"

/* fa_combine on the device: Sk split in n parts, merged, against the whole forward (fp32:
   the 1e-5 rule at max|out| and 1 + |lse|, both sides being fp32 reductions of one input). */
static void run_combine(fa_dtype t, int n)
{
    char name[96];
    snprintf(name, sizeof name, "combine %s %d parts", dtname(t), n);
    int B = 2, Sq = 77, Sk = 300, H = 4, d = 64;
    buf q = mk((size_t)B * Sq * H * d, t, 2.0), k = mk((size_t)B * Sk * H * d, t, 2.0), v = mk((size_t)B * Sk * H * d, t, 1.0);
    buf ow = mk_poison((size_t)B * Sq * H * d, FA_F32), lw = mk_poison((size_t)B * H * Sq, FA_F32);
    buf oc = mk_poison((size_t)B * Sq * H * d, FA_F32), lc = mk_poison((size_t)B * H * Sq, FA_F32);
    fa_tensor tq = fa_tensor_contiguous(q.d, t, B, Sq, H, d);
    fa_tensor tk = fa_tensor_contiguous(k.d, t, B, Sk, H, d), tv = fa_tensor_contiguous(v.d, t, B, Sk, H, d);
    fa_tensor tow = fa_tensor_contiguous(ow.d, FA_F32, B, Sq, H, d);
    fa_forward(cu, &tow, (float *)lw.d, &tq, &tk, &tv, NULL);
    fa_tensor parts[8];
    float *lp[8];
    buf pb[8], lb[8];
    for (int i = 0; i < n; i++) {
        int s0 = Sk * i / n, s1 = Sk * (i + 1) / n;
        pb[i] = mk_poison((size_t)B * Sq * H * d, FA_F32); lb[i] = mk_poison((size_t)B * H * Sq, FA_F32);
        fa_tensor pk = tk, pv = tv;
        pk.data = (char *)k.d + (size_t)s0 * H * d * esz(t); pk.shape[1] = s1 - s0;
        pv.data = (char *)v.d + (size_t)s0 * H * d * esz(t); pv.shape[1] = s1 - s0;
        parts[i] = fa_tensor_contiguous(pb[i].d, FA_F32, B, Sq, H, d);
        lp[i] = (float *)lb[i].d;
        fa_forward(cu, &parts[i], lp[i], &tq, &pk, &pv, NULL);
    }
    fa_tensor toc = fa_tensor_contiguous(oc.d, FA_F32, B, Sq, H, d);
    fa_status st = fa_combine(cu, &toc, (float *)lc.d, parts, (const float *const *)lp, n);
    CK(cudaDeviceSynchronize());
    pull(&ow); pull(&lw); pull(&oc); pull(&lc);
    double err = 0, lerr = 0, mo = absmax((float *)ow.h, ow.n);
    for (size_t i = 0; i < ow.n; i++) {   /* NaN (an unwritten element) counts as infinite */
        double e = fabs(((float *)ow.h)[i] - ((float *)oc.h)[i]);
        err = fmax(err, isnan(e) ? INFINITY : e);
    }
    for (size_t i = 0; i < lw.n; i++) {
        double e = fabs(((float *)lw.h)[i] - ((float *)lc.h)[i]) / (t == FA_F32 ? 1 + fabs(((float *)lw.h)[i]) : 1);
        lerr = fmax(lerr, isnan(e) ? INFINITY : e);
    }
    double tol = t == FA_F32 ? 1e-5 * mo + 1e-7 : 1e-2, ltol = t == FA_F32 ? 1e-5 : 1e-4;
    result(name, st == FA_OK && err <= tol && lerr <= ltol, "err %.3g tol %.3g lse %.3g", err, tol, lerr);
    for (int i = 0; i < n; i++) { fr(&pb[i]); fr(&lb[i]); }
    fr(&q); fr(&k); fr(&v); fr(&ow); fr(&lw); fr(&oc); fr(&lc);
}

/* Dropout keep-mask equality: V = identity rows, so out[i][j] = 0 exactly where (i, j) was
   dropped; compare the zero pattern with the CPU and reference backends. */
static void run_dropout_mask(fa_dtype t)
{
    int B = 2, Sq = 200, Sk = 64, H = 3, d = 64;
    char n1[120];
    buf q = mk((size_t)B * Sq * H * d, t, 0.3), k = mk((size_t)B * Sk * H * d, t, 0.3), v = mk((size_t)B * Sk * H * d, t, 0);
    for (int b = 0; b < B; b++) for (int j = 0; j < Sk; j++) for (int h = 0; h < H; h++) for (int c = 0; c < d; c++)
        fa_store(v.h, t, (((size_t)b * Sk + j) * H + h) * d + c, j == c ? 1.0f : 0.0f);
    CK(cudaMemcpy(v.d, v.h, v.n * esz(t), cudaMemcpyHostToDevice));
    buf o = mk_poison((size_t)B * Sq * H * d, FA_F32);
    fa_options op = {0};
    op.dropout_p = 0.3f; op.seed = 0x123456789abcULL; op.offset = 99;
    fa_tensor tq = fa_tensor_contiguous(q.d, t, B, Sq, H, d), tk = fa_tensor_contiguous(k.d, t, B, Sk, H, d);
    fa_tensor tv = fa_tensor_contiguous(v.d, t, B, Sk, H, d), to = fa_tensor_contiguous(o.d, FA_F32, B, Sq, H, d);
    fa_status st = fa_forward(cu, &to, NULL, &tq, &tk, &tv, &op);
    CK(cudaDeviceSynchronize());
    pull(&o);
    for (int w = 0; w < 2; w++) {
        fa_context *c2 = NULL;
        snprintf(n1, sizeof n1, "dropout keep-mask %s bit-identical with the %s", dtname(t), w ? "cpu backend" : "reference");
        if (fa_context_create(&c2, w ? FA_BACKEND_CPU : FA_BACKEND_REFERENCE) != FA_OK) { result(n1, 0, "no context"); continue; }
        float *oh = malloc(o.n * 4);
        fa_tensor hq = fa_tensor_contiguous(q.h, t, B, Sq, H, d), hk = fa_tensor_contiguous(k.h, t, B, Sk, H, d);
        fa_tensor hv = fa_tensor_contiguous(v.h, t, B, Sk, H, d), ho = fa_tensor_contiguous(oh, FA_F32, B, Sq, H, d);
        fa_status s2 = fa_forward(c2, &ho, NULL, &hq, &hk, &hv, &op);
        size_t diff = 0, zeros = 0;
        for (size_t i = 0; i < o.n; i++) {
            int z1 = ((float *)o.h)[i] == 0.0f, z2 = oh[i] == 0.0f;
            zeros += z2; diff += z1 != z2;
        }
        result(n1, st == FA_OK && s2 == FA_OK && diff == 0 && zeros > o.n / 10, "mismatches %g, dropped %g of %g",
               (double)diff, (double)zeros, (double)o.n);
        free(oh);
        fa_context_destroy(c2);
    }
    fr(&q); fr(&k); fr(&v); fr(&o);
}

static void run_status_checks(void)
{
    buf q = mk(2 * 16 * 2 * 64, FA_BF16, 1), o = mk_poison(2 * 16 * 2 * 64, FA_BF16);
    fa_tensor tq = fa_tensor_contiguous(q.d, FA_BF16, 2, 16, 2, 64), to = fa_tensor_contiguous(o.d, FA_BF16, 2, 16, 2, 64);
    const char *kn = NULL;
    fa_status st = fa_query(cu, &kn, &to, NULL, &tq, &tq, &tq, NULL);
    printf("query: %s -> %s\n", fa_status_string(st), kn ? kn : fa_last_error(cu));
    result("query names a kernel", st == FA_OK && kn && strstr(kn, "cuda/"), "");
    {   /* fp32: any head dim up to 256 on the FMA kernels, > 256 refused. Fresh buffers sized
           for the largest view (d 300); zero inputs (no random draw: the sweep's inputs stay
           as they were), so out is exactly 0 */
        size_t nf = 16 * 2 * 300;
        buf fq = mk_zero(nf, FA_F32), fo = mk_poison(nf, FA_F32), fg = mk_poison(3 * nf, FA_F32), fl = mk_poison(64, FA_F32);
        fa_tensor f59 = fa_tensor_contiguous(fq.d, FA_F32, 1, 16, 2, 59), fo59 = fa_tensor_contiguous(fo.d, FA_F32, 1, 16, 2, 59);
        kn = NULL;
        st = fa_query(cu, &kn, &fo59, (float *)fl.d, &f59, &f59, &f59, NULL);
        printf("fp32 d59 query: %s -> %s\n", fa_status_string(st), st == FA_OK && kn ? kn : fa_last_error(cu));
        result("fp32 d=59: query names an fp32 kernel", st == FA_OK && kn && strstr(kn, "cuda/") && strstr(kn, "fp32"), "");
        st = fa_forward(cu, &fo59, (float *)fl.d, &f59, &f59, &f59, NULL);
        CK(cudaDeviceSynchronize());
        if (st != FA_OK) printf("fp32 d59: %s: %s\n", fa_status_string(st), fa_last_error(cu));
        pull(&fo);
        int zero = 1;
        for (size_t i = 0; i < 16 * 2 * 59; i++) if (((float *)fo.h)[i] != 0.0f) zero = 0;
        result("fp32 d=59 forward -> OK, out written (0 for zero inputs)", st == FA_OK && zero, "");
        fa_tensor g59[3];   /* dq, dk, dv: disjoint thirds of fg */
        for (int i = 0; i < 3; i++) g59[i] = fa_tensor_contiguous((float *)fg.d + i * nf, FA_F32, 1, 16, 2, 59);
        st = fa_query_backward(cu, &kn, &g59[0], &g59[1], &g59[2], NULL, &f59, &f59, &f59, &f59, &fo59, (float *)fl.d, NULL);
        printf("fp32 d59 query_backward: %s -> %s\n", fa_status_string(st), st == FA_OK ? kn : fa_last_error(cu));
        result("fp32 d=59: query_backward names a kernel", st == FA_OK && kn && strstr(kn, "cuda/"), "");
        fa_tensor f300 = fa_tensor_contiguous(fq.d, FA_F32, 1, 16, 2, 300), fo300 = fa_tensor_contiguous(fo.d, FA_F32, 1, 16, 2, 300);
        st = fa_forward(cu, &fo300, NULL, &f300, &f300, &f300, NULL);
        printf("fp32 d300: %s: %s\n", fa_status_string(st), fa_last_error(cu));
        result("fp32 d=300 -> UNSUPPORTED, reason names the head dim",
               st == FA_ERR_UNSUPPORTED && strstr(fa_last_error(cu), "head dim"), "");
        fa_tensor g300[3];
        for (int i = 0; i < 3; i++) g300[i] = fa_tensor_contiguous((float *)fg.d + i * nf, FA_F32, 1, 16, 2, 300);
        st = fa_query_backward(cu, &kn, &g300[0], &g300[1], &g300[2], NULL, &f300, &f300, &f300, &f300, &fo300, (float *)fl.d, NULL);
        printf("fp32 backward d300: %s: %s\n", fa_status_string(st), fa_last_error(cu));
        result("fp32 backward d=300 -> UNSUPPORTED, reason names the head dim",
               st == FA_ERR_UNSUPPORTED && strstr(fa_last_error(cu), "head dim"), "");
        fr(&fq); fr(&fo); fr(&fg); fr(&fl);
    }
    fa_tensor d59 = fa_tensor_contiguous(q.d, FA_BF16, 1, 16, 2, 59), o59 = fa_tensor_contiguous(o.d, FA_BF16, 1, 16, 2, 59);
    st = fa_forward(cu, &o59, NULL, &d59, &d59, &d59, NULL);
    printf("bf16 d59: %s: %s\n", fa_status_string(st), fa_last_error(cu));
    result("bf16 d=59 -> UNSUPPORTED with a reason", st == FA_ERR_UNSUPPORTED, "");
    fa_tensor hq = tq; hq.data = q.h;
    st = fa_forward(cu, &to, NULL, &hq, &tq, &tq, NULL);
    printf("host pointer: %s: %s\n", fa_status_string(st), fa_last_error(cu));
    result("host pointer -> INVALID_ARG", st == FA_ERR_INVALID_ARG, "");
    float *lse; CK(cudaMalloc((void **)&lse, 4096));
    st = fa_query_backward(cu, &kn, &tq, &tq, &tq, NULL, &tq, &tq, &tq, &tq, &tq, lse, NULL);
    printf("query_backward: %s -> %s\n", fa_status_string(st), st == FA_OK ? kn : fa_last_error(cu));
    result("query_backward names a kernel", st == FA_OK && kn && strstr(kn, "cuda/"), "");
    {   /* compute capability 9.0 with the sm_90a kernels built: the d64 lean backward is the
           warp-specialized kernel, so the sweep tests that kernel, not another */
        int dev = 0, maj = 0, mnr = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&mnr, cudaDevAttrComputeCapabilityMinor, dev);
        const int hopper = strstr(fa_context_describe(cu), "backward on this chip: cuda/sm90") != NULL;
        if (maj == 9 && mnr == 0) {
            if (hopper)
                result("cc 9.0: query_backward names the warp-specialized backward (d64)",
                       st == FA_OK && kn && strstr(kn, "warp-specialized"), "%s", st == FA_OK ? kn : "");
            else
                printf("SKIP cc 9.0 backward name check: this build has no sm_90a kernels (--with-cuda-arch without 90)\n");
        }
        /* ... and the d64 forward's tile is the measured choice (sm90/tiles.h, fa_fwd_ws_pick): 192 x
           128 on 3 consumer warpgroups without a mask from 512 queries, 128 x 128 under a
           causal mask up to 2048 keys, 128 x 192 after. Queries only: q's pointer with
           larger shapes is never read. */
        const int ws = strstr(fa_context_describe(cu), "since then warp-specialized for every layout") != NULL;
        if (maj == 9 && mnr == 0) {
            if (ws) {
                static const struct { int S; fa_causal c; const char *tile, *what; } tc[] = {
                    { 512, FA_CAUSAL_NONE, "wgmma 192x128 ", "3 consumer" },
                    { 512, FA_CAUSAL_BOTTOM_RIGHT, "wgmma 128x128 ", "2 consumer" },
                    { 4096, FA_CAUSAL_BOTTOM_RIGHT, "wgmma 128x192 ", "2 consumer" },
                };
                for (int i = 0; i < 3; i++) {
                    fa_tensor big = fa_tensor_contiguous(q.d, FA_BF16, 1, tc[i].S, 2, 64);
                    fa_options co = {0};
                    co.causal = tc[i].c;
                    const char *fk = NULL;
                    fa_status fs = fa_query(cu, &fk, &big, NULL, &big, &big, &big, &co);
                    char what[96];
                    snprintf(what, sizeof what, "cc 9.0: d64 S%d causal %d forward on the %s tile", tc[i].S, (int)tc[i].c, tc[i].tile);
                    result(what, fs == FA_OK && fk && strstr(fk, tc[i].tile) && strstr(fk, tc[i].what), "%s",
                           fs == FA_OK && fk ? fk : fa_last_error(cu));
                }
            } else {
                printf("SKIP cc 9.0 forward tile check: no warp-specialized forward in this build\n");
            }
        }
    }
    st = fa_query_backward(cu, &kn, &d59, &d59, &d59, NULL, &o59, &d59, &d59, &d59, &o59, lse, NULL);
    printf("backward bf16 d59: %s: %s\n", fa_status_string(st), fa_last_error(cu));
    result("backward bf16 d=59 -> UNSUPPORTED with a reason", st == FA_ERR_UNSUPPORTED, "");
    result("set_threads -> UNSUPPORTED", fa_context_set_threads(cu, 4) == FA_ERR_UNSUPPORTED, "");
    cudaFree(lse);
    fr(&q); fr(&o);
}

/* One context, forward calls alternating between two streams with no host synchronization
   in between: every output must equal the first bit for bit (the kernels are deterministic).
   The shapes have more work tiles than an H200 has SMs, so the warp-specialized Hopper
   forward takes tiles from its context's counter, which the calls share; the case checks
   that a launch on one stream does not run into the previous launch on the other. */
static void run_stream_switch(fa_dtype t, fa_causal causal)
{
    enum { N = 6 };
    const int B = 4, S = 1024, H = 16, D = 128;
    const size_t n = (size_t)B * S * H * D;
    char name[128];
    snprintf(name, sizeof name, "stream switch %s B%d S%d H%d d%d c%d, %d calls on 2 streams", dtname(t), B, S, H, D,
             (int)causal, N);
    buf q = mk(n, t, 2.0), k = mk(n, t, 2.0), v = mk(n, t, 1.0), o[N];
    for (int i = 0; i < N; i++) o[i] = mk_poison(n, t);
    cudaStream_t st[2];
    CK(cudaStreamCreateWithFlags(&st[0], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&st[1], cudaStreamNonBlocking));
    CK(cudaDeviceSynchronize());
    fa_tensor tq = view(q.d, t, B, S, H, D, 0), tk = view(k.d, t, B, S, H, D, 0), tv = view(v.d, t, B, S, H, D, 0);
    fa_options opt = {0};
    opt.causal = causal;
    int ok = 1;
    for (int i = 0; i < N && ok; i++) {
        fa_tensor to = view(o[i].d, t, B, S, H, D, 0);
        ok = fa_context_set_stream(cu, st[i % 2]) == FA_OK && fa_forward(cu, &to, NULL, &tq, &tk, &tv, &opt) == FA_OK;
        if (!ok) printf("   %s\n", fa_last_error(cu));
    }
    CK(cudaDeviceSynchronize());
    fa_context_set_stream(cu, NULL);
    int differ = 0;
    for (int i = 0; i < N && ok; i++) {
        pull(&o[i]);
        if (i > 0 && memcmp(o[i].h, o[0].h, n * esz(t))) differ++;
        if (!guard_ok(&o[i])) ok = 0;
    }
    /* (the values themselves are the dense sweep's business; this case is about ordering) */
    result(name, ok && !differ, "%d of %d outputs differ from the first", differ, N - 1);
    for (int i = 0; i < N; i++) fr(&o[i]);
    fr(&q); fr(&k); fr(&v);
    CK(cudaStreamDestroy(st[0]));
    CK(cudaStreamDestroy(st[1]));
}

/* k_new / v_new longer than the cache (contiguous: S_new > the cache's rows; paged: S_new >
   max_pages_per_seq * page_size): INVALID_ARG from the shapes alone, the caches and out
   untouched. */
static void run_kvcache_overlong(int page)
{
    char name[128];
    snprintf(name, sizeof name, "kvcache k_new longer than the cache (page %d) -> INVALID_ARG, nothing written", page);
    const int B = 2, H = 2, d = 64, cap = 16, snew = cap + 1;
    const int maxp = page ? cap / page : 0, npages = page ? B * maxp : 0;
    const size_t nc = page ? (size_t)npages * page * H * d : (size_t)B * cap * H * d, no = (size_t)B * H * d;
    buf kc = mk(nc, FA_BF16, 1.0), vc = mk(nc, FA_BF16, 1.0), kn = mk((size_t)B * snew * H * d, FA_BF16, 1.0);
    buf vn = mk((size_t)B * snew * H * d, FA_BF16, 1.0), q = mk(no, FA_BF16, 1.0), o = mk_poison(no, FA_BF16);
    int32_t cs[2] = { 0, 0 }, bt[16], *dcs, *dbt = NULL;
    for (int i = 0; i < B * maxp; i++) bt[i] = i;
    CK(cudaMalloc((void **)&dcs, sizeof cs)); CK(cudaMemcpy(dcs, cs, sizeof cs, cudaMemcpyHostToDevice));
    if (page) { CK(cudaMalloc((void **)&dbt, sizeof bt)); CK(cudaMemcpy(dbt, bt, sizeof bt, cudaMemcpyHostToDevice)); }
    fa_tensor tkc = fa_tensor_contiguous(kc.d, FA_BF16, page ? npages : B, page ? page : cap, H, d);
    fa_tensor tvc = fa_tensor_contiguous(vc.d, FA_BF16, page ? npages : B, page ? page : cap, H, d);
    fa_tensor tkn = fa_tensor_contiguous(kn.d, FA_BF16, B, snew, H, d), tvn = fa_tensor_contiguous(vn.d, FA_BF16, B, snew, H, d);
    fa_tensor tq = fa_tensor_contiguous(q.d, FA_BF16, B, 1, H, d), to = fa_tensor_contiguous(o.d, FA_BF16, B, 1, H, d);
    fa_status st = fa_forward_kvcache(cu, &to, NULL, &tq, &tkc, &tvc, &tkn, &tvn, dcs, dbt, maxp, NULL);
    const char *msg = fa_last_error(cu);
    CK(cudaDeviceSynchronize());
    const size_t cb = nc * 2;
    unsigned char *k2 = malloc(cb), *v2 = malloc(cb), *o2 = malloc(no * 2);
    CK(cudaMemcpy(k2, kc.d, cb, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(v2, vc.d, cb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o2, o.d, no * 2, cudaMemcpyDeviceToHost));
    int untouched = !memcmp(k2, kc.h, cb) && !memcmp(v2, vc.h, cb);
    for (size_t i = 0; i < no * 2; i++) untouched = untouched && o2[i] == 0xff;
    result(name, st == FA_ERR_INVALID_ARG && strstr(msg, "k_new") && untouched, "status %d: %s", (int)st, msg);
    free(k2); free(v2); free(o2);
    cudaFree(dcs); cudaFree(dbt);
    fr(&kc); fr(&vc); fr(&kn); fr(&vn); fr(&q); fr(&o);
}

/* The Hopper backward's dQ by per-element atomics instead of the tensor-map reduce (the
   path it takes when the driver cannot encode the map): a context created under the test
   hook FA_CUDA_DQ=atomic runs the warp-specialized (d64, d128) and the first (d256) Hopper
   backward that way. Other chips and builds: the hook changes nothing, the cases still run. */
static void run_dq_atomic(void)
{
    fa_context *saved = cu, *c2 = NULL;
    setenv("FA_CUDA_DQ", "atomic", 1);
    fa_status st = fa_context_create(&c2, FA_BACKEND_CUDA);
    unsetenv("FA_CUDA_DQ");
    if (st != FA_OK) { result("FA_CUDA_DQ=atomic: context", 0, "%s", fa_last_error(NULL)); return; }
    const char *desc = fa_context_describe(c2);
    if (strstr(desc, "backward on this chip: cuda/sm90"))
        result("FA_CUDA_DQ=atomic: describe names the atomic dQ", strstr(desc, "FA_CUDA_DQ=atomic") != NULL, "");
    cu = c2;
    for (int i = 0; i < 3; i++) {
        const int d = 64 << i;
        dcase b = { "dQ by atomics", i == 1 ? FA_F16 : FA_BF16, 1, 100, 150, 2, 1, d, d, FA_CAUSAL_BOTTOM_RIGHT,
                    0, 0, 0, 0, 0, 0, i == 0, 0, 0, 0 };
        run_backward(&b, i == 2);
    }
    cu = saved;
    fa_context_destroy(c2);
}

/* The compute-sanitizer sweep: each kernel at least once, small grids (racecheck is slow). */
static void run_san(void)
{
    static const int d3[3] = { 64, 128, 256 };
    for (int i = 0; i < 3; i++) {
        int d = d3[i];
        fa_dtype t = i == 1 ? FA_F16 : FA_BF16;
        dcase f = { "san fast", t, 1, 130, 200, 2, 1, d, d, (fa_causal)i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
        run_dense(&f);
        dcase g = f;
        g.name = "san general (softcap, alibi, window)"; g.softcap = 5.0f; g.alibi = 1; g.window = 1; g.wl = 60; g.wr = 10;
        run_dense(&g);
        dcase b = { "san", t, 1, 100, 150, 2, 1, d, d, FA_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, i == 0, 0, 0, 0 };
        run_backward(&b, i == 1);
        if (d <= 128) {   /* 10 query tiles per block (the case above has 4): the warp-specialized
                             backward's stage ring (3 stages at d64, 2 at d128) and the drift
                             form's barrier parities go round several times */
            dcase w = b;
            w.name = "san ring wrap"; w.Sq = 300; w.causal = FA_CAUSAL_NONE; w.sinks = 0;
            run_backward(&w, 0);
        }
    }
    dcase dec = { "san decode (split-kv)", FA_BF16, 1, 1, 600, 2, 2, 128, 128, FA_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    run_dense(&dec);
    run_decode_san();
    dcase dr = { "san dropout+bias+sinks, out fp32", FA_F16, 1, 70, 90, 2, 2, 64, 64, FA_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0.2f, 0, 1, 1, 0, 1 };
    run_dense(&dr);
    dcase dbw = dr;
    dbw.name = "san dropout+bias+sinks, grads fp32";
    run_backward(&dbw, 1);
    run_varlen(FA_BF16, 4, 64, FA_CAUSAL_BOTTOM_RIGHT);
    run_varlen_bwd(FA_F16, 3, 128, FA_CAUSAL_NONE, 1);
    run_kvcache(FA_BF16, 2, 1, 1, 16, 128, FA_CAUSAL_BOTTOM_RIGHT, 4, 1);
    run_kvcache(FA_F16, 2, 8, 8, 0, 64, FA_CAUSAL_BOTTOM_RIGHT, 4, 4);
    /* chunked prefill into 16-row pages: per-page TMA boxes and a partial tile by rows */
    run_kvcache(FA_BF16, 2, 130, 0, 16, 128, FA_CAUSAL_BOTTOM_RIGHT, 4, 2);
    run_combine(FA_BF16, 3);
    /* the fp32 FMA kernels */
    dcase f32 = { "san general (softcap, alibi, window, sinks)", FA_F32, 1, 130, 200, 2, 1, 128, 128, FA_CAUSAL_BOTTOM_RIGHT,
                  1, 60, 10, 5.0f, 0, 1, 1, 0, 0, 0 };
    run_dense(&f32);
    dcase f59 = { "san odd d, transposed", FA_F32, 1, 70, 90, 2, 2, 59, 59, FA_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0 };
    run_dense(&f59);
    dcase fdec = { "san decode (split-kv)", FA_F32, 1, 1, 600, 2, 2, 64, 64, FA_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    run_dense(&fdec);
    dcase fb = { "san sinks", FA_F32, 1, 100, 150, 2, 1, 64, 64, FA_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0 };
    run_backward(&fb, 1);
    dcase fb59 = { "san odd d, dropout+bias", FA_F32, 1, 70, 90, 2, 2, 111, 59, FA_CAUSAL_NONE, 0, 0, 0, 0, 0.2f, 0, 0, 1, 0, 0 };
    run_backward(&fb59, 0);
    run_varlen(FA_F32, 4, 59, FA_CAUSAL_BOTTOM_RIGHT);
    run_kvcache(FA_F32, 2, 1, 1, 16, 64, FA_CAUSAL_BOTTOM_RIGHT, 4, 1);
    run_dq_atomic();
}

/* fp32 q/k/v (the FMA kernels): the sweep again, with the head dims fp16/bf16 refuse (1, 59,
   111, and 111/59). Runs after the fp16/bf16 sweep, so that their inputs (one random
   stream) stay what they were. quick: d64 and d59 dense, d59 forward features, d64
   backward features, two page sizes. */
static void sweep_f32(void)
{
    static const int pairs[][2] = { {1,1}, {1,239}, {239,1}, {113,203}, {128,217}, {256,512}, {1023,1024}, {0,5}, {5,0} };
    static const int dims[][2] = { {64,64}, {128,128}, {256,256}, {1,1}, {59,59}, {111,111}, {192,128}, {64,32}, {8,8}, {111,59} };
    int np = sizeof pairs / sizeof pairs[0], nd = sizeof dims / sizeof dims[0];
    for (int di = 0; di < nd; di++)
        for (int pi = 0; pi < np; pi++)
            for (int ci = 0; ci < 3; ci++) {
                if (quick && (pi % 3 != 0 || (di != 0 && di != 4))) continue;
                if (pairs[pi][0] * pairs[pi][1] > 300000 && di > 1) continue;
                dcase c = { "dense", FA_F32, 2, pairs[pi][0], pairs[pi][1], 3, 3, dims[di][0], dims[di][1],
                            (fa_causal)ci, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
                if (pairs[pi][0] * pairs[pi][1] > 300000) c.B = 1;
                run_dense(&c);
            }
    static const int fd[3] = { 64, 128, 59 };
    for (int i = 0; i < 3; i++) if (!quick || fd[i] == 59) features_fwd(FA_F32, fd[i]);
    run_varlen(FA_F32, 11, 64, FA_CAUSAL_NONE);
    if (!quick) run_varlen(FA_F32, 11, 128, FA_CAUSAL_BOTTOM_RIGHT);
    if (!quick) run_varlen(FA_F32, 1, 128, FA_CAUSAL_TOP_LEFT);
    run_varlen(FA_F32, 11, 59, FA_CAUSAL_BOTTOM_RIGHT);
    static const int pages[] = { 0, 1, 7, 16, 256 };
    for (int pi = 0; pi < 5; pi++) {
        if (quick && pi != 0 && pi != 2) continue;
        run_kvcache(FA_F32, 3, 1, 0, pages[pi], 128, FA_CAUSAL_NONE, 8, 2);         /* decode, split-KV */
        run_kvcache(FA_F32, 3, 1, 1, pages[pi], 64, FA_CAUSAL_BOTTOM_RIGHT, 8, 8);  /* decode + append */
        run_kvcache(FA_F32, 2, 16, 16, pages[pi], 128, FA_CAUSAL_BOTTOM_RIGHT, 4, 1);   /* chunked prefill + append */
        run_kvcache(FA_F32, 2, 16, 0, pages[pi], 59, FA_CAUSAL_BOTTOM_RIGHT, 4, 2);     /* chunked prefill, odd d */
        if (!quick) run_kvcache(FA_F32, 4, 150, 150, pages[pi], 256, FA_CAUSAL_BOTTOM_RIGHT, 2, 2);
    }
    if (quick) run_combine(FA_F32, 3);
    else { run_combine(FA_F32, 2); run_combine(FA_F32, 5); }
    run_dropout_mask(FA_F32);
    /* backward */
    static const int bpairs[][2] = { {1,1}, {1,239}, {239,1}, {113,203}, {128,217}, {256,512}, {300,100}, {0,5}, {5,0} };
    static const int bdims[][2] = { {64,64}, {128,128}, {256,256}, {1,1}, {59,59}, {111,111}, {192,128}, {64,32}, {111,59} };
    int nbp = sizeof bpairs / sizeof bpairs[0], nbd = sizeof bdims / sizeof bdims[0];
    for (int di = 0; di < nbd; di++)
        for (int pi = 0; pi < nbp; pi++)
            for (int ci = 0; ci < 3; ci++) {
                if (quick && (pi % 3 != 0 || (di != 0 && di != 4))) continue;
                if (di > 2 && pi % 2) continue;
                dcase c = { "dense", FA_F32, 2, bpairs[pi][0], bpairs[pi][1], 2, 2, bdims[di][0], bdims[di][1],
                            (fa_causal)ci, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
                run_backward(&c, 0);
            }
    for (int di = 0; di < 3; di++)
        if (!quick || di == 0) features_bwd(FA_F32, di == 0 ? 64 : di == 1 ? 128 : 256);
    run_varlen_bwd(FA_F32, 9, 64, FA_CAUSAL_NONE, 0);
    run_varlen_bwd(FA_F32, 9, 59, FA_CAUSAL_TOP_LEFT, 1);
    if (!quick) run_varlen_bwd(FA_F32, 9, 128, FA_CAUSAL_BOTTOM_RIGHT, 1);
    if (!quick) run_varlen_bwd(FA_F32, 9, 256, FA_CAUSAL_BOTTOM_RIGHT, 0);
}

/* The KV-cache cases of the sweep: decode, decode + append and chunked prefill over
   contiguous caches and pages of 1, 7, 16 and 256 rows; then chunked prefill into paged
   caches: on Hopper the warp-specialized forward loads a page per TMA box (pages of
   8-256 rows that divide the KV tile or are multiples of it), while 24-row pages (a box
   would cross a page) and d256's 80-key tiles with 64-256-row pages take the first Hopper
   forward. */
static void run_kvcache_sweep(void)
{
    static const int pages[] = { 0, 1, 7, 16, 256 };
    for (int pi = 0; pi < 5; pi++) {
        run_kvcache(FA_BF16, 3, 1, 0, pages[pi], 128, FA_CAUSAL_NONE, 8, 2);
        run_kvcache(FA_F16, 3, 1, 1, pages[pi], 64, FA_CAUSAL_BOTTOM_RIGHT, 8, 8);
        run_kvcache(FA_BF16, 2, 16, 16, pages[pi], 128, FA_CAUSAL_BOTTOM_RIGHT, 4, 1);
        if (!quick) run_kvcache(FA_F16, 4, 150, 150, pages[pi], 256, FA_CAUSAL_BOTTOM_RIGHT, 2, 2);
    }
    static const int ppages[] = { 8, 16, 24, 64, 128, 256 };
    for (int pi = 0; pi < 6; pi++) {
        run_kvcache(FA_BF16, 3, 200, 200, ppages[pi], 128, FA_CAUSAL_BOTTOM_RIGHT, 8, 2);
        run_kvcache(FA_F16, 2, 130, 0, ppages[pi], 64, FA_CAUSAL_NONE, 4, 4);
        if (!quick) run_kvcache(FA_BF16, 2, 96, 96, ppages[pi], 256, FA_CAUSAL_TOP_LEFT, 4, 1);
    }
}

int main(int argc, char **argv)
{
    int san = argc > 1 && !strcmp(argv[1], "san");
    int decode_only = argc > 1 && !strcmp(argv[1], "decode"), decode_san = argc > 1 && !strcmp(argv[1], "decode-san");
    quick = san || decode_san || (argc > 1 && !strcmp(argv[1], "quick"));
    if (argc > 1 && !quick && !decode_only) { printf("usage: test_cuda [quick|san|decode|decode-san]\n"); return 2; }
    if (fa_context_create(&cu, FA_BACKEND_CUDA) != FA_OK) { printf("no cuda context: %s\n", fa_last_error(NULL)); return 77; }
    if (fa_context_create(&ref, FA_BACKEND_REFERENCE) != FA_OK) { printf("no reference context\n"); return 2; }
    printf("%s\n", fa_context_describe(cu));
    printf("seed 0x%llx\n", (unsigned long long)rng);
    run_status_checks();
    run_kvcache_overlong(0);
    run_kvcache_overlong(4);
    if (san || decode_san) {
        if (san) run_san();
        else run_decode_san();
        printf("%d passed, %d failed\n", passes, fails);
        fa_context_destroy(cu);
        fa_context_destroy(ref);
        return fails ? 1 : 0;
    }
    if (decode_only) {   /* the decode kernel's cases and the KV-cache cases of the sweep */
        run_decode_suite();
        run_kvcache_sweep();
        printf("%d passed, %d failed\n", passes, fails);
        fa_context_destroy(cu);
        fa_context_destroy(ref);
        return fails ? 1 : 0;
    }
    run_stream_switch(FA_BF16, FA_CAUSAL_NONE);
    run_stream_switch(FA_F16, FA_CAUSAL_BOTTOM_RIGHT);
    static const int pairs[][2] = { {1,1}, {1,239}, {239,1}, {3,799}, {799,3}, {113,203}, {128,217}, {256,512}, {512,256}, {1023,1024}, {0,5}, {5,0} };
    static const int dims[][2] = { {64,64}, {128,128}, {256,256}, {32,32}, {8,8}, {96,96}, {80,80}, {192,128}, {64,32}, {160,160} };
    fa_dtype dts[2] = { FA_BF16, FA_F16 };
    int npairs = sizeof pairs / sizeof pairs[0], ndims = sizeof dims / sizeof dims[0];
    for (int di = 0; di < ndims; di++)
        for (int pi = 0; pi < npairs; pi++)
            for (int ci = 0; ci < 3; ci++) {
                if (quick && (pi % 3 != 0 || di > 3)) continue;
                if (pairs[pi][0] * pairs[pi][1] > 300000 && di > 1) continue;
                dcase c = { "dense", dts[(di + pi + ci) % 2], 2, pairs[pi][0], pairs[pi][1], 3, 3, dims[di][0], dims[di][1],
                            (fa_causal)ci, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
                if (pairs[pi][0] * pairs[pi][1] > 300000) c.B = 1;
                run_dense(&c);
            }
    for (int ti = 0; ti < 2; ti++)
        for (int di = 0; di < 3; di++) features_fwd(dts[ti], di == 0 ? 64 : di == 1 ? 128 : 256);
    for (int ti = 0; ti < 2; ti++) {
        run_varlen(dts[ti], 11, 64, FA_CAUSAL_NONE);
        run_varlen(dts[ti], 11, 128, FA_CAUSAL_BOTTOM_RIGHT);
        run_varlen(dts[ti], 1, 128, FA_CAUSAL_TOP_LEFT);
    }
    run_kvcache_sweep();
    run_decode_suite();
    for (int n = 1; n <= 7; n += quick ? 3 : 1) run_combine(FA_BF16, n);
    run_dropout_mask(FA_BF16);
    /* backward */
    static const int bpairs[][2] = { {1,1}, {1,239}, {239,1}, {113,203}, {128,217}, {256,512}, {512,256}, {300,100}, {0,5}, {5,0} };
    static const int bdims[][2] = { {64,64}, {128,128}, {256,256}, {32,32}, {8,8}, {96,96}, {192,128}, {64,32}, {160,160} };
    int nbp = sizeof bpairs / sizeof bpairs[0], nbd = sizeof bdims / sizeof bdims[0];
    for (int di = 0; di < nbd; di++)
        for (int pi = 0; pi < nbp; pi++)
            for (int ci = 0; ci < 3; ci++) {
                if (quick && (pi % 3 != 0 || di > 2)) continue;
                if (di > 2 && (pi % 2 || ci == 2)) continue;
                dcase c = { "dense", dts[(di + pi + ci) % 2], 2, bpairs[pi][0], bpairs[pi][1], 2, 2, bdims[di][0], bdims[di][1],
                            (fa_causal)ci, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
                run_backward(&c, 0);
            }
    for (int ti = 0; ti < 2; ti++)
        for (int di = 0; di < 3; di++) {
            if (quick && di == 2) continue;
            features_bwd(dts[ti], di == 0 ? 64 : di == 1 ? 128 : 256);
        }
    for (int ti = 0; ti < 2; ti++) {
        run_varlen_bwd(dts[ti], 9, 64, FA_CAUSAL_NONE, 0);
        run_varlen_bwd(dts[ti], 9, 128, FA_CAUSAL_BOTTOM_RIGHT, ti);
        if (!quick) run_varlen_bwd(dts[ti], 9, 256, ti ? FA_CAUSAL_NONE : FA_CAUSAL_BOTTOM_RIGHT, 1 - ti);
    }
    run_dq_atomic();
    sweep_f32();
    printf("%d passed, %d failed\n", passes, fails);
    fa_context_destroy(cu);
    fa_context_destroy(ref);
    return fails ? 1 : 0;
}
