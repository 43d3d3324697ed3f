/* gpu.c - the GPU parts of the run: the device as the driver reports it (with the tiles the
 * CUDA backend picks for the run's problem), and the GPU sweep.
 *
 * The GPU sweep (--backend cuda --mode sweep) times the CUDA backend on the grid of the
 * GPU targets: bf16 and fp16; head dimension 64, 128 and 256; sequence length 512 to 16k;
 * causal and not; forward and backward. Every call holds 16k tokens (B = 16384 / S) of
 * hidden size 2048 (H = 2048 / d), so each tensor is 64 MiB, more than an H100/H200's L2.
 * Each cell is one rung_measure: the problem is uploaded, the first call is checked
 * against the double-precision oracle, then the calls are timed with CUDA events (the
 * median is reported). Half a second of calls runs before the first cell's timing, so
 * that the first cells are timed at the clocks of a busy GPU, not during its ramp from
 * idle. FLOPs: 4 B H S^2 d, halved for causal; the backward counts 2.5x the forward.
 */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "cudrv.h"

static const int64_t gpu_S[] = { 512, 1024, 2048, 4096, 8192, 16384 };
static const int64_t gpu_d[] = { 64, 128, 256 };
static const fa_dtype gpu_dt[] = { FA_BF16, FA_F16 };

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The cells the options leave: --dtype, --headdim, --seqlen and --causal, when given, pick
 * their value; --quick keeps S 512, 2k, 8k and bf16 (unless --dtype says otherwise). */
static int cell_wanted(const bench_run *R, fa_dtype dt, int64_t d, int si, int causal)
{
    if (R->set_dtype ? dt != R->sh.dtype : (R->quick && dt != FA_BF16)) return 0;
    if (R->set_d && d != R->sh.d) return 0;
    if (R->set_s ? gpu_S[si] != R->sh.Sq : (R->quick && si % 2)) return 0;
    if (R->sh.causal && !causal) return 0;
    return 1;
}

/* The dtypes of the sweep: bf16 and fp16, or the one --dtype names (f32 included). */
static int sweep_dtypes(const bench_run *R, fa_dtype *out)
{
    if (R->set_dtype) {
        out[0] = R->sh.dtype;
        return 1;
    }
    memcpy(out, gpu_dt, sizeof gpu_dt);
    return NELEM(gpu_dt);
}

int sweep_count_gpu(const bench_run *R)
{
    fa_dtype dts[2];
    int n = 0, ndt = sweep_dtypes(R, dts);
    for (int t = 0; t < ndt; t++)
        for (int a = 0; a < NELEM(gpu_d); a++)
            for (int si = 0; si < NELEM(gpu_S); si++)
                for (int c = 0; c < 2; c++) n += cell_wanted(R, dts[t], gpu_d[a], si, c);
    return n * (R->ladder_bwd ? 2 : 1);
}

/* The same buffers viewed as another cell of the same d: every cell holds 16k tokens of
 * hidden size 2048, so q, k, v, out and the gradients keep their element counts, and lse
 * (B H S = 16384 H) too. Saves generating 1 GiB of inputs per cell. */
static void reshape(bench_problem *p, const bench_shape *sh)
{
    p->sh = *sh;
    fa_tensor *t[] = { &p->tq, &p->tk, &p->tv, &p->tout, &p->tdout, &p->tdq, &p->tdk, &p->tdv };
    void *d[] = { p->q, p->k, p->v, p->out, p->dout, p->dq, p->dk, p->dv };
    for (int i = 0; i < 8; i++)
        *t[i] = fa_tensor_contiguous(d[i], sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
}

static void measure_cell(bench_run *R, bench_problem *p, int ok)
{
    rung_spec cu = { IMPL_FA, FA_BACKEND_CUDA, NULL, "cuda" };
    char shape[128];
    bp_shape_str(&p->sh, shape, sizeof shape);
    for (int bw = 0; bw < (R->ladder_bwd ? 2 : 1); bw++) {
        progress(R, "gpu sweep: %s %s", bw ? "bwd" : "fwd", shape);
        bench_result *r = results_add(&R->res);
        snprintf(r->section, sizeof r->section, "gpu");
        if (!ok) {
            snprintf(r->impl, sizeof r->impl, "cuda");
            snprintf(r->dir, sizeof r->dir, "%s", bw ? "bwd" : "fwd");
            r->sh = p->sh;
            r->status = RES_NA;
            snprintf(r->note, sizeof r->note, "cannot allocate the problem in host memory");
            continue;
        }
        rung_measure(R, &cu, p, bw, R->threads, R->bq, R->bkv, r);
        if (r->status != RES_OK) fprintf(stderr, "        %s\n", r->note);
        else fprintf(stderr, "        %.1f TFLOP/s\n", r->gflops / 1e3);
    }
}

void sweep_gpu(bench_run *R)
{
    fa_dtype dts[2];
    int ndt = sweep_dtypes(R, dts);
    R->warmup_s = 0.5;
    for (int t = 0; t < ndt; t++)
        for (int a = 0; a < NELEM(gpu_d); a++) {
            int64_t d = gpu_d[a], H = 2048 / d;
            bench_problem p;
            int have = 0, ok = 0;
            for (int si = 0; si < NELEM(gpu_S); si++)
                for (int c = 0; c < 2; c++) {
                    if (!cell_wanted(R, dts[t], d, si, c)) continue;
                    bench_shape sh = { dts[t], 16384 / gpu_S[si], H, H, gpu_S[si], gpu_S[si],
                                       d, c, 0, 0 };
                    if (!have) {
                        have = 1;
                        ok = bp_alloc(&p, &sh, 7) == 0 && bp_alloc_backward(&p, 8) == 0;
                    }
                    if (ok) reshape(&p, &sh);
                    else p.sh = sh;
                    measure_cell(R, &p, ok);
                }
            if (have) bp_free(&p);
        }
}

/* "NxM" as a word of a kernel name ("cuda/sm80 fwd bf16 d64 fast 128x64 4 warps"). */
static int name_tiles(const char *name, int *br, int *bc)
{
    for (const char *w = name; w && *w; w = strchr(w, ' ') ? strchr(w, ' ') + 1 : "") {
        int n = 0;
        if (sscanf(w, "%dx%d%n", br, bc, &n) == 2 && (w[n] == ' ' || !w[n]) && *br > 0) return 1;
    }
    *br = *bc = 0;
    return 0;
}

/* The GPU's hierarchy from the driver's attributes, and the tiles the CUDA backend picks
 * for this run's problem (fa_query on device buffers of its shape). */
void gpu_describe(const bench_run *R, FILE *f, fa_context *ctx)
{
    char why[240], name[128], a[32], b[32], c[32];
    const char *desc = fa_context_describe(ctx), *s = strstr(desc, "(device ");
    int dev = 0;
    if (s) sscanf(s, "(device %d)", &dev);
    if (cudrv_open(dev, why, sizeof why)) {
        fprintf(f, "-- cuda: device attributes n/a: %s --\n", why);
        return;
    }
    cudrv_name(name, sizeof name);
    int sms = cudrv_attr(CUDRV_ATTR_SM_COUNT), clk = cudrv_attr(CUDRV_ATTR_CLOCK_RATE);
    int smem_sm = cudrv_attr(CUDRV_ATTR_MAX_SHARED_PER_SM);
    int smem_blk = cudrv_attr(CUDRV_ATTR_MAX_SHARED_PER_BLOCK);
    int smem_opt = cudrv_attr(CUDRV_ATTR_MAX_SHARED_PER_BLOCK_OPTIN);
    int l2 = cudrv_attr(CUDRV_ATTR_L2_SIZE), mclk = cudrv_attr(CUDRV_ATTR_MEMORY_CLOCK_RATE);
    int bus = cudrv_attr(CUDRV_ATTR_MEMORY_BUS_WIDTH);
    fprintf(f, "-- cuda: the device as the driver reports it (cuDeviceGetAttribute) --\n");
    fprintf(f, "device %d: %s, compute capability %d.%d, %d SMs", dev, name,
            cudrv_attr(CUDRV_ATTR_CC_MAJOR), cudrv_attr(CUDRV_ATTR_CC_MINOR), sms);
    if (clk > 0) fprintf(f, " at up to %.0f MHz", clk / 1e3);
    fprintf(f, "\n");
    fmt_bytes(smem_sm, a, sizeof a);
    fmt_bytes(smem_blk, b, sizeof b);
    fmt_bytes(smem_opt, c, sizeof c);
    fprintf(f, "shared memory: %s per SM, %s per block (%s opt-in)\n", a, b, c);
    fmt_bytes(l2, a, sizeof a);
    fmt_bytes((double)cudrv_total_mem(), b, sizeof b);
    fprintf(f, "L2: %s; device memory (HBM): %s", a, b);
    if (mclk > 0 && bus > 0)
        fprintf(f, ", %d-bit bus at %.0f MHz: %.2f TB/s peak (computed: 2 x clock x bus width)",
                bus, mclk / 1e3, 2.0 * mclk * 1e3 * bus / 8 / 1e12);
    fprintf(f, "\n");

    bench_problem p;
    bench_dev d;
    memset(&p, 0, sizeof p);
    p.sh = R->sh;
    p.sh.paged = 0;
    if (p.sh.dtype == FA_F32) p.sh.dtype = FA_BF16;   /* as the ladder's cuda rung */
    char shape[128];
    bp_shape_str(&p.sh, shape, sizeof shape);
    if (dev_alloc(&d, &p, 1, 0, why, sizeof why)) {
        fprintf(f, "tiles: n/a (%s)\n", why);
        cudrv_close();
        return;
    }
    fa_options o = { 0 };
    o.causal = p.sh.causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    for (int bw = 0; bw < 2; bw++) {
        const char *kn = NULL;
        fa_status st = bw ? fa_query_backward(ctx, &kn, &d.tdq, &d.tdk, &d.tdv, NULL, &d.tdout,
                                              &d.tq, &d.tk, &d.tv, &d.tout, d.lse_ptr, &o)
                          : fa_query(ctx, &kn, &d.tout, d.lse_ptr, &d.tq, &d.tk, &d.tv, &o);
        int br, bc;
        if (st != FA_OK) {
            fprintf(f, "tiles, %s, %s: n/a: %s\n", bw ? "backward" : "forward", shape,
                    fa_last_error(ctx));
        } else if (name_tiles(kn, &br, &bc)) {
            double es = (double)fa_dtype_size(p.sh.dtype), d_ = (double)p.sh.d;
            fmt_bytes((br + 2.0 * bc) * d_ * es, a, sizeof a);
            fmt_bytes(smem_opt, b, sizeof b);
            fprintf(f, "tiles, %s, %s: Br x Bc = %d x %d (fa_query: %s); one Q tile and one K "
                    "and V tile = %s of the %s of shared memory a block may use (modeled)\n",
                    bw ? "backward" : "forward", shape, br, bc, kn, a, b);
        } else {
            fprintf(f, "tiles, %s, %s: fa_query: %s (no tile size in the name)\n",
                    bw ? "backward" : "forward", shape, kn ? kn : "?");
        }
    }
    dev_free(&d);
    cudrv_close();
}

