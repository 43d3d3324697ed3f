/* paged_decode.c - decoding with a paged KV cache, then merging split attention:
 *   1. fa_forward_kvcache on a pool of pages shared by two sequences (block_table), with
 *      two new tokens per sequence appended (k_new/v_new) and attended causally, GQA
 *      (4 query heads over 2 KV heads). Pool slots no sequence owns hold NaN: reading
 *      one would show in the result. Checked: the new rows landed in the right page
 *      slots, and the output matches a plain C attention over each sequence;
 *   2. fa_combine: the keys of sequence 1 split in two, fa_forward on each part with its
 *      lse, the parts merged; checked against plain C attention over all the keys.
 * Build against an installed flashattn:
 *   cc paged_decode.c $(pkg-config --cflags --libs flashattn) -o paged_decode
 */
#include <flashattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, HQ = 4, HKV = 2, D = 32, PAGE = 4, MAXP = 4, NPAGES = 8, SNEW = 2 };
static const int32_t block_table[B][MAXP] = { { 5, 2, 7, -1 }, { 0, 6, 3, 1 } };
static const int32_t cache_seqlens[B] = { 5, 9 };

static float k_pool[NPAGES][PAGE][HKV][D], v_pool[NPAGES][PAGE][HKV][D];
static float q[B][SNEW][HQ][D], k_new[B][SNEW][HKV][D], v_new[B][SNEW][HKV][D];
static float out[B][SNEW][HQ][D];

/* Row j of sequence b in the pool: the page from block_table, the slot within it. */
static float *krow(int b, int j, int h) { return k_pool[block_table[b][j / PAGE]][j % PAGE][h]; }
static float *vrow(int b, int j, int h) { return v_pool[block_table[b][j / PAGE]][j % PAGE][h]; }

/* Plain attention of one query row over keys rows(0..n-1), double precision. */
static void attend(const float *qrow, int n, const float *const *keys, const float *const *vals,
                   double *o)
{
    double s[64], m = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) {
        s[j] = 0;
        for (int d = 0; d < D; d++) s[j] += (double)qrow[d] * keys[j][d];
        s[j] /= sqrt((double)D);
        if (s[j] > m) m = s[j];
    }
    for (int j = 0; j < n; j++) sum += (s[j] = exp(s[j] - m));
    for (int d = 0; d < D; d++) {
        o[d] = 0;
        for (int j = 0; j < n; j++) o[d] += s[j] / sum * vals[j][d];
    }
}

static int decode(fa_context *ctx)
{
    fa_tensor tq = fa_tensor_contiguous(q, FA_F32, B, SNEW, HQ, D);
    fa_tensor to = fa_tensor_contiguous(out, FA_F32, B, SNEW, HQ, D);
    fa_tensor tkc = fa_tensor_contiguous(k_pool, FA_F32, NPAGES, PAGE, HKV, D);
    fa_tensor tvc = fa_tensor_contiguous(v_pool, FA_F32, NPAGES, PAGE, HKV, D);
    fa_tensor tkn = fa_tensor_contiguous(k_new, FA_F32, B, SNEW, HKV, D);
    fa_tensor tvn = fa_tensor_contiguous(v_new, FA_F32, B, SNEW, HKV, D);
    fa_options opt = { .causal = FA_CAUSAL_BOTTOM_RIGHT };
    if (fa_forward_kvcache(ctx, &to, NULL, &tq, &tkc, &tvc, &tkn, &tvn, cache_seqlens,
                           &block_table[0][0], MAXP, &opt) != FA_OK) {
        fprintf(stderr, "paged_decode: %s\n", fa_last_error(ctx));
        return 0;
    }
    int appended = 1;
    double err = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < SNEW; t++) {
            int j = cache_seqlens[b] + t;
            for (int h = 0; h < HKV; h++)
                appended &= !memcmp(krow(b, j, h), k_new[b][t][h], sizeof(float) * D) &&
                            !memcmp(vrow(b, j, h), v_new[b][t][h], sizeof(float) * D);
            for (int h = 0; h < HQ; h++) {
                const float *keys[64], *vals[64];
                int n = j + 1;   /* causal, bottom-right: query t sees the cache and new rows <= t */
                for (int i = 0; i < n; i++) {
                    keys[i] = krow(b, i, h / (HQ / HKV));
                    vals[i] = vrow(b, i, h / (HQ / HKV));
                }
                double o[D];
                attend(q[b][t][h], n, keys, vals, o);
                for (int d = 0; d < D; d++) {
                    double e = fabs(out[b][t][h][d] - o[d]);
                    if (!(e <= err)) err = e;
                }
            }
        }
    printf("paged_decode: %d sequences in %d pages of %d, %d tokens appended each: rows in "
           "place: %s, max |error| vs plain C %.2e\n", B, NPAGES, PAGE, SNEW,
           appended ? "yes" : "NO", err);
    return appended && err < 1e-5;
}

/* Sequence 1's keys split at `cut`, each part attended with fa_forward, merged. */
static int combine(fa_context *ctx)
{
    enum { NK = 9 + SNEW, CUT = 6 };
    static float ka[CUT][HKV][D], va[CUT][HKV][D], kb[NK - CUT][HKV][D], vb[NK - CUT][HKV][D];
    static float part[2][SNEW][HQ][D], merged[SNEW][HQ][D], lse_part[2][HQ][SNEW], lse[HQ][SNEW];
    for (int j = 0; j < NK; j++)
        for (int h = 0; h < HKV; h++) {
            memcpy(j < CUT ? ka[j][h] : kb[j - CUT][h], krow(1, j, h), sizeof(float) * D);
            memcpy(j < CUT ? va[j][h] : vb[j - CUT][h], vrow(1, j, h), sizeof(float) * D);
        }
    fa_tensor tq = fa_tensor_contiguous(q[1], FA_F32, 1, SNEW, HQ, D);
    fa_tensor tka = fa_tensor_contiguous(ka, FA_F32, 1, CUT, HKV, D);
    fa_tensor tva = fa_tensor_contiguous(va, FA_F32, 1, CUT, HKV, D);
    fa_tensor tkb = fa_tensor_contiguous(kb, FA_F32, 1, NK - CUT, HKV, D);
    fa_tensor tvb = fa_tensor_contiguous(vb, FA_F32, 1, NK - CUT, HKV, D);
    fa_tensor parts[2] = { fa_tensor_contiguous(part[0], FA_F32, 1, SNEW, HQ, D),
                           fa_tensor_contiguous(part[1], FA_F32, 1, SNEW, HQ, D) };
    fa_tensor tm = fa_tensor_contiguous(merged, FA_F32, 1, SNEW, HQ, D);
    const float *lse_parts[2] = { &lse_part[0][0][0], &lse_part[1][0][0] };
    if (fa_forward(ctx, &parts[0], &lse_part[0][0][0], &tq, &tka, &tva, NULL) != FA_OK ||
        fa_forward(ctx, &parts[1], &lse_part[1][0][0], &tq, &tkb, &tvb, NULL) != FA_OK ||
        fa_combine(ctx, &tm, &lse[0][0], parts, lse_parts, 2) != FA_OK) {
        fprintf(stderr, "paged_decode: %s\n", fa_last_error(ctx));
        return 0;
    }
    double err = 0;
    for (int t = 0; t < SNEW; t++)
        for (int h = 0; h < HQ; h++) {
            const float *keys[NK], *vals[NK];
            for (int j = 0; j < NK; j++) {
                keys[j] = krow(1, j, h / (HQ / HKV));
                vals[j] = vrow(1, j, h / (HQ / HKV));
            }
            double o[D];
            attend(q[1][t][h], NK, keys, vals, o);
            for (int d = 0; d < D; d++) {
                double e = fabs(merged[t][h][d] - o[d]);
                if (!(e <= err)) err = e;
            }
        }
    printf("paged_decode: fa_combine of keys [0, %d) and [%d, %d): max |error| vs plain C "
           "over all %d keys %.2e\n", CUT, CUT, NK, NK, err);
    return err < 1e-5;
}

int main(void)
{
    /* Every pool slot NaN, then the rows each sequence already holds. */
    for (float *p = &k_pool[0][0][0][0]; p < &k_pool[0][0][0][0] + sizeof k_pool / 4; p++) *p = NAN;
    for (float *p = &v_pool[0][0][0][0]; p < &v_pool[0][0][0][0] + sizeof v_pool / 4; p++) *p = NAN;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < cache_seqlens[b]; j++)
            for (int h = 0; h < HKV; h++)
                for (int d = 0; d < D; d++) {
                    float *kr = krow(b, j, h), *vr = vrow(b, j, h);
                    kr[d] = sinf(0.3f * (b * 1000 + j * 64 + h * D + d));
                    vr[d] = cosf(0.7f * (b * 1000 + j * 64 + h * D + d));
                }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < SNEW; t++) {
            for (int h = 0; h < HQ; h++)
                for (int d = 0; d < D; d++) q[b][t][h][d] = cosf(0.13f * (b * 500 + t * 97 + h * D + d));
            for (int h = 0; h < HKV; h++)
                for (int d = 0; d < D; d++) {
                    k_new[b][t][h][d] = sinf(0.41f * (b * 300 + t * 71 + h * D + d));
                    v_new[b][t][h][d] = cosf(0.29f * (b * 300 + t * 71 + h * D + d));
                }
        }
    fa_context *ctx;
    if (fa_context_create(&ctx, FA_BACKEND_AUTO) != FA_OK) {
        fprintf(stderr, "paged_decode: no context: %s\n", fa_last_error(NULL));
        return 1;
    }
    if (fa_context_backend(ctx) == FA_BACKEND_CUDA) {   /* this example uses host memory */
        fa_context_destroy(ctx);
        if (fa_context_create(&ctx, FA_BACKEND_CPU) != FA_OK) {
            fprintf(stderr, "paged_decode: no CPU context: %s\n", fa_last_error(NULL));
            return 1;
        }
    }
    int ok = decode(ctx);
    ok = combine(ctx) && ok;
    fa_context_destroy(ctx);
    printf("%s\n", ok ? "paged_decode: ok" : "paged_decode: FAILED");
    return ok ? 0 : 1;
}
