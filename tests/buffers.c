/* buffers.c - test buffers (see testutil.h): guard bands, NaN poison, snapshots, and
 * the checks that a call wrote what it must and nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dtype.h"

/* ---- buffers ---------------------------------------------------------------------------- */
static const uint32_t POISON32 = 0x7fdead01u;
static const uint16_t POISON16 = 0x7e5bu;   /* fp16 quiet NaN with a payload */
static const uint16_t POISONBF = 0x7fd5u;   /* bf16 quiet NaN with a payload */

static void put_poison(tu_buf *b, size_t e)
{
    if (b->esz == 4) memcpy(b->base + e * 4, &POISON32, 4);
    else memcpy(b->base + e * 2, b->t.dtype == FA_F16 ? &POISON16 : &POISONBF, 2);
}

int tu_is_poison(const tu_buf *b, int64_t e)
{
    if (b->esz == 4) return memcmp(b->base + e * 4, &POISON32, 4) == 0;
    return memcmp(b->base + e * 2, b->t.dtype == FA_F16 ? &POISON16 : &POISONBF, 2) == 0;
}

const char *tu_dtype_name(fa_dtype t)
{
    switch (t) {
    case FA_F32: return "f32";
    case FA_F16: return "f16";
    case FA_BF16: return "bf16";
    }
    return "?";
}

tu_buf *tu_buf_strided(fa_dtype dt, const int64_t shape[4], const int64_t stride[4])
{
    tu_buf *b = calloc(1, sizeof *b);
    int64_t span = 0, empty = 0;
    for (int i = 0; i < 4; i++) {
        if (shape[i] == 0) empty = 1;
        if (shape[i] > 0) span += (shape[i] - 1) * stride[i];
    }
    span = empty ? 0 : span + 1;
    b->esz = dt == FA_F32 ? 4 : 2;
    b->off = TU_GUARD;
    b->nel = (size_t)(span + 2 * TU_GUARD);
    b->base = malloc(b->nel * b->esz);
    b->snap = malloc(b->nel * b->esz);
    b->must = calloc(b->nel, 1);
    ck_assert_msg(b->base && b->snap && b->must, "out of memory (%zu elements)", b->nel);
    b->t.data = b->base + (size_t)b->off * b->esz;
    b->t.dtype = dt;
    for (int i = 0; i < 4; i++) { b->t.shape[i] = shape[i]; b->t.stride[i] = stride[i]; }
    for (size_t e = 0; e < b->nel; e++) put_poison(b, e);
    return b;
}

tu_buf *tu_buf_new(fa_dtype dt, int64_t B, int64_t S, int64_t H, int64_t D, tu_layout L)
{
    int64_t shape[4] = { B, S, H, D }, st[4];
    switch (L) {
    case TL_TRANSPOSED:          /* memory [B][H][S][D] */
        st[3] = 1; st[1] = D; st[2] = S * D; st[0] = H * S * D;
        break;
    case TL_PADDED:              /* padded head rows, padded seq rows, padded batches */
        st[3] = 1; st[2] = D + 3; st[1] = H * (D + 3) + 5; st[0] = S * st[1] + 7;
        break;
    default:
        st[3] = 1; st[2] = D; st[1] = H * D; st[0] = S * H * D;
        break;
    }
    return tu_buf_strided(dt, shape, st);
}

tu_buf *tu_buf_flat(fa_dtype dt, int64_t n)
{
    int64_t shape[4] = { 1, 1, 1, n }, st[4] = { n, n, n, 1 };
    return tu_buf_strided(dt, shape, st);
}

void tu_buf_free(tu_buf *b)
{
    if (!b) return;
    free(b->base); free(b->snap); free(b->must); free(b);
}

int64_t tu_idx(const tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return b->off + i0 * b->t.stride[0] + i1 * b->t.stride[1] + i2 * b->t.stride[2]
           + i3 * b->t.stride[3];
}

double tu_get(const tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return fa_load(b->base, b->t.dtype, tu_idx(b, i0, i1, i2, i3));
}

void tu_set(tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x)
{
    fa_store(b->base, b->t.dtype, tu_idx(b, i0, i1, i2, i3), (float)x);
}

#define FOR_VIEW(b, i0, i1, i2, i3) \
    for (int64_t i0 = 0; i0 < (b)->t.shape[0]; i0++) \
    for (int64_t i1 = 0; i1 < (b)->t.shape[1]; i1++) \
    for (int64_t i2 = 0; i2 < (b)->t.shape[2]; i2++) \
    for (int64_t i3 = 0; i3 < (b)->t.shape[3]; i3++)

void tu_fill(tu_buf *b, tu_rng *r, double amp)
{
    for (size_t e = 0; e < b->nel; e++) put_poison(b, e);
    FOR_VIEW(b, i0, i1, i2, i3) {
        double x;
        do { x = tu_unif(r) * amp; } while (fa_round_to(b->t.dtype, (float)x) == 0.0f);
        tu_set(b, i0, i1, i2, i3, x);
    }
}

void tu_poison(tu_buf *b)
{
    for (size_t e = 0; e < b->nel; e++) put_poison(b, e);
    memset(b->must, 0, b->nel);
    FOR_VIEW(b, i0, i1, i2, i3) b->must[tu_idx(b, i0, i1, i2, i3)] = 1;
}

void tu_must_rows(tu_buf *b, int64_t s0, int64_t s1)
{
    memset(b->must, 0, b->nel);
    FOR_VIEW(b, i0, i1, i2, i3)
        if (i1 >= s0 && i1 < s1) b->must[tu_idx(b, i0, i1, i2, i3)] = 1;
}

void tu_snapshot(tu_buf *b) { memcpy(b->snap, b->base, b->nel * b->esz); }

static void elem_where(const tu_buf *b, int64_t e, char *w, size_t len)
{
    int64_t rel = e - b->off;
    if (rel < 0) { snprintf(w, len, "guard element %lld before the view", (long long)-rel); return; }
    snprintf(w, len, "element %lld of the view span (allocation index %lld)", (long long)rel,
             (long long)e);
}

int tu_check_written(const tu_buf *b, const char *name, char *msg, size_t len)
{
    for (size_t e = 0; e < b->nel; e++) {
        char w[128];
        if (b->must[e]) {
            if (tu_is_poison(b, (int64_t)e)) {
                elem_where(b, (int64_t)e, w, sizeof w);
                snprintf(msg, len, "%s: %s was not written (still the NaN poison)", name, w);
                return 0;
            }
        } else if (memcmp(b->base + e * b->esz, b->snap + e * b->esz, b->esz) != 0) {
            elem_where(b, (int64_t)e, w, sizeof w);
            snprintf(msg, len, "%s: %s outside what the call may write was modified", name, w);
            return 0;
        }
    }
    return 1;
}

int tu_check_unchanged(const tu_buf *b, const char *name, char *msg, size_t len)
{
    for (size_t e = 0; e < b->nel; e++)
        if (memcmp(b->base + e * b->esz, b->snap + e * b->esz, b->esz) != 0) {
            char w[128];
            elem_where(b, (int64_t)e, w, sizeof w);
            snprintf(msg, len, "%s: %s was modified", name, w);
            return 0;
        }
    return 1;
}

double *tu_gather(const tu_buf *b, int64_t tb, int64_t s0, int64_t n)
{
    int64_t H = b->t.shape[2], D = b->t.shape[3];
    size_t cnt = (size_t)(n * H * D);
    double *x = malloc(sizeof(double) * (cnt ? cnt : 1));
    for (int64_t s = 0; s < n; s++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D; d++)
                x[(s * H + h) * D + d] = tu_get(b, tb, s0 + s, h, d);
    return x;
}
