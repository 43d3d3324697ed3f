/* data.c - the benchmark's buffers and storage dtypes.
 *
 * Inputs are drawn from a fixed-seed generator (uniform in [-1, 1); never zeros or
 * constants), stored in the storage dtype, and mirrored in fp32 exactly as stored, so the
 * naive rungs and the oracle (check.c) see the same numbers as the library.
 *
 * Layouts (elements, contiguous): q/out [B, Sq, H, d], k/v [B, Sk, Hkv, d], lse [B, H, Sq];
 * paged cache [num_pages, page_size, Hkv, d] with block_table [B, pages_per_seq].
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

/* -------------------------------------------------------------- storage dtypes --- */

static uint16_t f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                        /* RNE */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static uint16_t f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);         /* NaN            */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);        /* overflow: inf  */
    if (a < 0x38800000u) {                                          /* subnormal      */
        float f;
        memcpy(&f, &a, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(f * 16777216.0f)); /* f / 2^-24      */
    }
    uint32_t mant = a & 0x7fffffu, exp = (a >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;       /* RNE            */
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    float x;
    if (e == 0) {
        x = ldexpf((float)m, -24);
        return sign ? -x : x;
    }
    uint32_t u = sign | (e == 31 ? (0xffu << 23) | (m << 13) : ((e + 112) << 23) | (m << 13));
    memcpy(&x, &u, 4);
    return x;
}

float bp_load(const void *data, fa_dtype t, size_t i)
{
    switch (t) {
    case FA_F16:  return f16_to_f32(((const uint16_t *)data)[i]);
    case FA_BF16: return bf16_to_f32(((const uint16_t *)data)[i]);
    default:      return ((const float *)data)[i];
    }
}

void bp_store(void *data, fa_dtype t, size_t i, float x)
{
    switch (t) {
    case FA_F16:  ((uint16_t *)data)[i] = f32_to_f16(x); break;
    case FA_BF16: ((uint16_t *)data)[i] = f32_to_bf16(x); break;
    default:      ((float *)data)[i] = x; break;
    }
}

const char *bp_dtype_name(fa_dtype t)
{
    return t == FA_F16 ? "f16" : t == FA_BF16 ? "bf16" : "f32";
}

int bp_parse_dtype(const char *s, fa_dtype *t)
{
    if (!strcmp(s, "f32") || !strcmp(s, "fp32")) *t = FA_F32;
    else if (!strcmp(s, "f16") || !strcmp(s, "fp16")) *t = FA_F16;
    else if (!strcmp(s, "bf16")) *t = FA_BF16;
    else return -1;
    return 0;
}

/* ------------------------------------------------------------------ figures ----- */

/* Useful FLOPs, the convention of the FlashAttention papers and of the project's targets:
 * 4*B*H*Sq*Sk*d (two products of 2 FLOPs per multiply-add), halved for causal when
 * Sq = Sk; for a causal Sq != Sk the visible (i, j) pairs are counted. The backward counts
 * 2.5 x the forward (five products: S again, dV, dP, dQ, dK). */
double bp_flops(const bench_shape *sh, int backward)
{
    double pairs = (double)sh->Sq * (double)sh->Sk;
    if (sh->causal) {
        if (sh->Sq == sh->Sk) pairs /= 2;
        else {
            pairs = 0;
            for (int64_t i = 0; i < sh->Sq; i++) {
                int64_t n = i + (sh->Sk - sh->Sq) + 1;
                pairs += (double)(n < 0 ? 0 : n > sh->Sk ? sh->Sk : n);
            }
        }
    }
    double f = 4.0 * (double)sh->B * (double)sh->H * pairs * (double)sh->d;
    return backward ? 2.5 * f : f;
}

double bp_scale(const bench_shape *sh)
{
    return 1.0 / sqrt((double)sh->d);
}

size_t bp_io_bytes(const bench_shape *sh)
{
    size_t es = fa_dtype_size(sh->dtype);
    return es * (size_t)sh->B * (size_t)sh->d *
           (2 * (size_t)sh->Sq * (size_t)sh->H + 2 * (size_t)sh->Sk * (size_t)sh->Hkv);
}

void bp_shape_str(const bench_shape *sh, char *buf, size_t len)
{
    if (sh->Hkv != sh->H)
        snprintf(buf, len, "%s B=%lld H=%lld:%lld Sq=%lld Sk=%lld d=%lld%s%s",
                 bp_dtype_name(sh->dtype), (long long)sh->B, (long long)sh->H,
                 (long long)sh->Hkv, (long long)sh->Sq, (long long)sh->Sk, (long long)sh->d,
                 sh->causal ? " causal" : "", sh->paged ? " paged" : "");
    else if (sh->Sq != sh->Sk)
        snprintf(buf, len, "%s B=%lld H=%lld Sq=%lld Sk=%lld d=%lld%s%s",
                 bp_dtype_name(sh->dtype), (long long)sh->B, (long long)sh->H,
                 (long long)sh->Sq, (long long)sh->Sk, (long long)sh->d,
                 sh->causal ? " causal" : "", sh->paged ? " paged" : "");
    else
        snprintf(buf, len, "%s B=%lld H=%lld S=%lld d=%lld%s", bp_dtype_name(sh->dtype),
                 (long long)sh->B, (long long)sh->H, (long long)sh->Sq, (long long)sh->d,
                 sh->causal ? " causal" : "");
}

/* ------------------------------------------------------------------ buffers ----- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_uniform(uint64_t *s)          /* [-1, 1) */
{
    return (float)((double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static int fill(void **data, float **copy, fa_dtype t, size_t n, uint64_t *seed)
{
    *data = malloc(n * fa_dtype_size(t) + 64);
    *copy = copy ? malloc(n * sizeof(float) + 64) : NULL;
    if (!*data || (copy && !*copy)) return -1;
    for (size_t i = 0; i < n; i++) {
        bp_store(*data, t, i, rng_uniform(seed));
        if (copy) (*copy)[i] = bp_load(*data, t, i);
    }
    return 0;
}

int bp_alloc(bench_problem *p, const bench_shape *sh, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->sh = *sh;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t nq = (size_t)(sh->B * sh->Sq * sh->H * sh->d);
    size_t nk = (size_t)(sh->B * sh->Sk * sh->Hkv * sh->d);
    if (fill(&p->q, &p->qf, sh->dtype, nq, &s) || fill(&p->k, &p->kf, sh->dtype, nk, &s) ||
        fill(&p->v, &p->vf, sh->dtype, nk, &s))
        return -1;
    p->out = malloc(nq * fa_dtype_size(sh->dtype) + 64);
    p->lse = malloc((size_t)(sh->B * sh->H * sh->Sq) * sizeof(float) + 64);
    if (!p->out || !p->lse) return -1;
    memset(p->out, 0, nq * fa_dtype_size(sh->dtype));   /* touched: not counted as RSS */
    memset(p->lse, 0, (size_t)(sh->B * sh->H * sh->Sq) * sizeof(float));
    p->tq = fa_tensor_contiguous(p->q, sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
    p->tk = fa_tensor_contiguous(p->k, sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
    p->tv = fa_tensor_contiguous(p->v, sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
    p->tout = fa_tensor_contiguous(p->out, sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
    if (sh->paged) {
        /* pages shuffled so the table really indirects: page of (b, n) = perm[b*P + n] */
        int64_t ps = sh->page_size > 0 ? sh->page_size : 16;
        int64_t P = (sh->Sk + ps - 1) / ps, np = sh->B * P;
        size_t es = fa_dtype_size(sh->dtype), row = (size_t)(sh->Hkv * sh->d);
        p->pages_per_seq = P;
        p->block_table = malloc((size_t)np * sizeof(int32_t));
        p->cache_seqlens = malloc((size_t)sh->B * sizeof(int32_t));
        p->kpages = calloc((size_t)(np * ps) * row, es);
        p->vpages = calloc((size_t)(np * ps) * row, es);
        if (!p->block_table || !p->cache_seqlens || !p->kpages || !p->vpages) return -1;
        for (int64_t i = 0; i < np; i++) p->block_table[i] = (int32_t)i;
        for (int64_t i = np - 1; i > 0; i--) {
            int64_t j = (int64_t)(rng_next(&s) % (uint64_t)(i + 1));
            int32_t t = p->block_table[i];
            p->block_table[i] = p->block_table[j];
            p->block_table[j] = t;
        }
        for (int64_t b = 0; b < sh->B; b++) {
            p->cache_seqlens[b] = (int32_t)sh->Sk;
            for (int64_t t = 0; t < sh->Sk; t++) {
                int64_t pg = p->block_table[b * P + t / ps];
                size_t dst = (size_t)(pg * ps + t % ps) * row, src = (size_t)(b * sh->Sk + t) * row;
                memcpy((char *)p->kpages + dst * es, (char *)p->k + src * es, row * es);
                memcpy((char *)p->vpages + dst * es, (char *)p->v + src * es, row * es);
            }
        }
        p->tkp = fa_tensor_contiguous(p->kpages, sh->dtype, np, ps, sh->Hkv, sh->d);
        p->tvp = fa_tensor_contiguous(p->vpages, sh->dtype, np, ps, sh->Hkv, sh->d);
    }
    return 0;
}

int bp_alloc_converted(bench_problem *dst, const bench_problem *src, fa_dtype t)
{
    const bench_shape *sh = &src->sh;
    memset(dst, 0, sizeof *dst);
    dst->sh = *sh;
    dst->sh.dtype = t;
    if (sh->paged) return -1;
    size_t nq = (size_t)(sh->B * sh->Sq * sh->H * sh->d);
    size_t nk = (size_t)(sh->B * sh->Sk * sh->Hkv * sh->d), es = fa_dtype_size(t);
    size_t nl = (size_t)(sh->B * sh->H * sh->Sq);
    struct { void **data; float **copy; const float *from; size_t n; } b[] = {
        { &dst->q, &dst->qf, src->qf, nq }, { &dst->k, &dst->kf, src->kf, nk },
        { &dst->v, &dst->vf, src->vf, nk }, { &dst->dout, &dst->doutf, src->doutf, nq } };
    for (int i = 0; i < 4; i++) {
        if (!b[i].from) continue;
        *b[i].data = malloc(b[i].n * es + 64);
        *b[i].copy = malloc(b[i].n * sizeof(float) + 64);
        if (!*b[i].data || !*b[i].copy) return -1;
        for (size_t x = 0; x < b[i].n; x++) {
            bp_store(*b[i].data, t, x, b[i].from[x]);
            (*b[i].copy)[x] = bp_load(*b[i].data, t, x);
        }
    }
    dst->out = calloc(nq * es + 64, 1);
    dst->lse = calloc(nl * sizeof(float) + 64, 1);
    if (!dst->out || !dst->lse) return -1;
    dst->tq = fa_tensor_contiguous(dst->q, t, sh->B, sh->Sq, sh->H, sh->d);
    dst->tk = fa_tensor_contiguous(dst->k, t, sh->B, sh->Sk, sh->Hkv, sh->d);
    dst->tv = fa_tensor_contiguous(dst->v, t, sh->B, sh->Sk, sh->Hkv, sh->d);
    dst->tout = fa_tensor_contiguous(dst->out, t, sh->B, sh->Sq, sh->H, sh->d);
    if (src->dout) {
        dst->dq = calloc(nq * es + 64, 1);
        dst->dk = calloc(nk * es + 64, 1);
        dst->dv = calloc(nk * es + 64, 1);
        if (!dst->dq || !dst->dk || !dst->dv) return -1;
        dst->tdout = fa_tensor_contiguous(dst->dout, t, sh->B, sh->Sq, sh->H, sh->d);
        dst->tdq = fa_tensor_contiguous(dst->dq, t, sh->B, sh->Sq, sh->H, sh->d);
        dst->tdk = fa_tensor_contiguous(dst->dk, t, sh->B, sh->Sk, sh->Hkv, sh->d);
        dst->tdv = fa_tensor_contiguous(dst->dv, t, sh->B, sh->Sk, sh->Hkv, sh->d);
    }
    return 0;
}

int bp_alloc_backward(bench_problem *p, uint64_t seed)
{
    const bench_shape *sh = &p->sh;
    uint64_t s = seed * 0xd1b54a32d192ed03ull + 7;
    size_t nq = (size_t)(sh->B * sh->Sq * sh->H * sh->d);
    size_t nk = (size_t)(sh->B * sh->Sk * sh->Hkv * sh->d), es = fa_dtype_size(sh->dtype);
    if (fill(&p->dout, &p->doutf, sh->dtype, nq, &s)) return -1;
    p->dq = malloc(nq * es + 64);
    p->dk = malloc(nk * es + 64);
    p->dv = malloc(nk * es + 64);
    if (!p->dq || !p->dk || !p->dv) return -1;
    memset(p->dq, 0, nq * es);
    memset(p->dk, 0, nk * es);
    memset(p->dv, 0, nk * es);
    p->tdout = fa_tensor_contiguous(p->dout, sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
    p->tdq = fa_tensor_contiguous(p->dq, sh->dtype, sh->B, sh->Sq, sh->H, sh->d);
    p->tdk = fa_tensor_contiguous(p->dk, sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
    p->tdv = fa_tensor_contiguous(p->dv, sh->dtype, sh->B, sh->Sk, sh->Hkv, sh->d);
    return 0;
}

void bp_free(bench_problem *p)
{
    void *all[] = { p->q, p->k, p->v, p->out, p->qf, p->kf, p->vf, p->lse, p->dout, p->dq,
                    p->dk, p->dv, p->doutf, p->kpages, p->vpages, p->block_table,
                    p->cache_seqlens };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(p, 0, sizeof *p);
}

void bp_poison_out(bench_problem *p)
{
    size_t n = (size_t)(p->sh.B * p->sh.Sq * p->sh.H * p->sh.d);
    for (size_t i = 0; i < n; i++) bp_store(p->out, p->sh.dtype, i, NAN);
}
