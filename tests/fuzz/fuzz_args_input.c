/* fuzz_args_input.c - how fuzz_args turns its input bytes into a call's arguments
 * (fuzz_args.h): sizes that are mostly small but sometimes 0, negative or enormous;
 * tensors with contiguous, padded or arbitrary strides and wrong dtypes, backed by a heap
 * buffer of exactly their extent when it fits the budget (ASan sees any access outside)
 * and by an address that faults otherwise; fp32 arrays and int32 index arrays of exactly
 * the elements a call may touch; and the snapshots that tell what a call wrote.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_args.h"

uint64_t rd(reader *r, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | (r->n ? *r->p : 0);
        if (r->n) { r->p++; r->n--; }
    }
    return v;
}

/* A size: usually small, sometimes 0, negative or enormous. */
int64_t rd_size(reader *r, int64_t small)
{
    uint8_t sel = (uint8_t)rd(r, 1);
    if (sel < 200) return (int64_t)(sel % (small + 1));
    if (sel < 216) return -(int64_t)(sel % 3) - 1;
    switch (sel % 8) {
    case 0: return (int64_t)1 << 31;
    case 1: return ((int64_t)1 << 31) + 1;
    case 2: return (int64_t)1 << 32;
    case 3: return (int64_t)1 << 62;
    case 4: return INT64_MAX;
    case 5: return INT64_MIN;
    case 6: return INT64_MAX / 2 + 1;
    default: return (int64_t)rd(r, 8);
    }
}

/* Byte extent of a view ((size_t)-1: does not fit the budget or is not a valid view). */
static size_t extent_bytes(const fa_tensor *t)
{
    if (!dtype_ok(t->dtype)) return (size_t)-1;
    __int128 span = 0;
    for (int d = 0; d < 4; d++) {
        if (t->shape[d] < 0 || t->stride[d] < 0) return (size_t)-1;
        if (t->shape[d] == 0) return 0;
        span += (__int128)(t->shape[d] - 1) * t->stride[d];
        if (span > BUDGET_BYTES) return (size_t)-1;
    }
    __int128 bytes = (span + 1) * (__int128)fa_dtype_size(t->dtype);
    return bytes > BUDGET_BYTES ? (size_t)-1 : (size_t)bytes;
}

/* Decode a tensor of the given logical shape; the fuzzer may perturb anything. */
void make_tensor(reader *r, ftensor *f, int64_t b, int64_t s, int64_t h, int64_t d,
                        fa_dtype dt)
{
    memset(f, 0, sizeof *f);
    fa_tensor *t = &f->t;
    uint8_t mode = (uint8_t)rd(r, 1);
    t->dtype = (mode & 0xf0) == 0xf0 ? (fa_dtype)(mode & 3 ? 7 : FA_F16) : dt;
    int64_t shp[4] = { b, s, h, d };
    if ((mode & 0x0f) == 0x0f) shp[rd(r, 1) & 3] = rd_size(r, 9);   /* wrong shape */
    memcpy(t->shape, shp, sizeof shp);
    int64_t pad = (mode >> 4) & 3;
    /* contiguous or padded strides, computed without overflow (huge shapes saturate) */
#define SAT(x) ((x) > INT64_MAX ? (__int128)INT64_MAX : (x))
    __int128 s2 = SAT((__int128)(shp[3] > 0 ? shp[3] : 1) + pad);
    __int128 s1 = SAT(s2 * (shp[2] > 0 ? shp[2] : 1) + pad);
    __int128 s0 = SAT(s1 * (shp[1] > 0 ? shp[1] : 1));
#undef SAT
    t->stride[3] = 1;
    t->stride[2] = (int64_t)s2;
    t->stride[1] = (int64_t)s1;
    t->stride[0] = (int64_t)s0;
    if ((mode & 0x0c) == 0x0c) t->stride[rd(r, 1) & 3] = rd_size(r, 40);  /* odd stride */
    size_t bytes = extent_bytes(t);
    if (bytes == (size_t)-1) { t->data = FAR_AWAY; return; }
    f->fits = 1;
    if ((mode & 0x30) == 0x30 && rd(r, 1) < 16) { t->data = NULL; return; }
    f->bytes = bytes;
    f->buf = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; i++) ((uint8_t *)f->buf)[i] = (uint8_t)(0x3c + i * 7);
    t->data = bytes ? f->buf : (rd(r, 1) & 1 ? NULL : f->buf);
}

void snapshot(ftensor *f)
{
    if (!f->buf) return;
    free(f->copy);
    f->copy = malloc(f->bytes ? f->bytes : 1);
    memcpy(f->copy, f->buf, f->bytes);
}

int changed(const ftensor *f)
{
    return f->buf && f->copy && memcmp(f->buf, f->copy, f->bytes) != 0;
}

void free_tensor(ftensor *f) { free(f->buf); free(f->copy); }

void farr_make(farr *a, int64_t n, float base)
{
    a->n = n;
    a->p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    a->copy = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) a->p[i] = base + 0.01f * (float)(i % 97);
    memcpy(a->copy, a->p, sizeof(float) * (size_t)(n > 0 ? n : 1));
}

int farr_changed(const farr *a)
{
    return a->p && memcmp(a->p, a->copy, sizeof(float) * (size_t)(a->n > 0 ? a->n : 0)) != 0;
}

void farr_free(farr *a) { free(a->p); free(a->copy); }

/* An int32 index array of exactly n >= 0 elements (monotone prefix sums or free values). */
int32_t *make_index(reader *r, int64_t n, int64_t hi, int monotone)
{
    int32_t *a = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    int64_t acc = 0;
    for (int64_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)rd(r, 1);
        if (monotone) {
            a[i] = (int32_t)acc;
            acc += v % (hi + 1);
            if (v > 250) a[i] = -(int32_t)v;                 /* negative entry */
            if (v == 250) a[i] = INT32_MAX;                  /* far beyond any tensor */
        } else {
            a[i] = (int32_t)(v % (hi + 2)) - (v > 250 ? 3 : 0);
            if (v == 250) a[i] = INT32_MAX;
        }
    }
    if (monotone && n > 0 && (rd(r, 1) & 1)) a[0] = 0;
    return a;
}
