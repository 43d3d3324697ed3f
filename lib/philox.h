/* philox.h - Philox4x32-10 counter-based RNG and the dropout keep-mask built on it.
 *
 * Shared by every backend (it is plain C usable from CUDA device code too), so that every
 * backend drops exactly the same probabilities. The mask definition, once and for all:
 *
 *   call key   (k0, k1) = words 0 and 1 of philox(ctr = {lo32(offset), hi32(offset),
 *                                                   0x64726f70 ("drop"), 0},
 *                                             key = {lo32(seed), hi32(seed)})
 *   element    w = word (j & 3) of philox(ctr = {j >> 2, i, h, b} (each mod 2^32),
 *                                         key = (k0, k1))
 *   keep       iff w >= floor(p * 2^32)           (p = dropout probability)
 *
 * b is the batch index (sequence index for varlen), h the query head, i and j the query
 * and key positions within the sequence. Kept probabilities are scaled by 1/(1-p).
 */
#ifndef FA_PHILOX_H
#define FA_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#  define FA_HD __host__ __device__ __forceinline__
#else
#  define FA_HD static inline
#endif

#define FA_PHILOX_M0 0xD2511F53u
#define FA_PHILOX_M1 0xCD9E8D57u
#define FA_PHILOX_W0 0x9E3779B9u
#define FA_PHILOX_W1 0xBB67AE85u

/* One Philox4x32 round: two 32x32->64 multiplies, xors with the key. */
FA_HD void fa_philox_round(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    uint64_t p0 = (uint64_t)FA_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)FA_PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
}

/* Philox4x32 with 10 rounds: ctr[4] -> out[4] under key (k0, k1). */
FA_HD void fa_philox4x32_10(const uint32_t ctr[4], uint32_t k0, uint32_t k1, uint32_t out[4])
{
    uint32_t c[4] = { ctr[0], ctr[1], ctr[2], ctr[3] };
    for (int r = 0; r < 10; r++) {
        fa_philox_round(c, k0, k1);
        k0 += FA_PHILOX_W0;
        k1 += FA_PHILOX_W1;
    }
    out[0] = c[0]; out[1] = c[1]; out[2] = c[2]; out[3] = c[3];
}

/* Per-call dropout key and threshold (see the definition at the top). */
typedef struct { uint32_t k0, k1, threshold; float keep_scale; } fa_dropout_key;

FA_HD fa_dropout_key fa_dropout_make_key(uint64_t seed, uint64_t offset, float p)
{
    fa_dropout_key d;
    uint32_t ctr[4] = { (uint32_t)offset, (uint32_t)(offset >> 32), 0x64726f70u, 0u };
    uint32_t out[4];
    fa_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), out);
    d.k0 = out[0];
    d.k1 = out[1];
    /* p in [0, 1): p * 2^32 < 2^32, so the truncation fits in 32 bits. */
    d.threshold = (uint32_t)((double)p * 4294967296.0);
    d.keep_scale = p > 0.0f ? (float)(1.0 / (1.0 - (double)p)) : 1.0f;
    return d;
}

/* The four keep words for keys j0..j0+3 (j0 a multiple of 4) of row (b, h, i). */
FA_HD void fa_dropout_words(const fa_dropout_key *d, int64_t b, int64_t h, int64_t i,
                            int64_t j0, uint32_t w[4])
{
    uint32_t ctr[4] = { (uint32_t)(j0 >> 2), (uint32_t)i, (uint32_t)h, (uint32_t)b };
    fa_philox4x32_10(ctr, d->k0, d->k1, w);
}

/* 1 if element (b, h, i, j) is kept, 0 if dropped. */
FA_HD int fa_dropout_keep(const fa_dropout_key *d, int64_t b, int64_t h, int64_t i, int64_t j)
{
    uint32_t w[4];
    fa_dropout_words(d, b, h, i, j & ~(int64_t)3, w);
    return w[j & 3] >= d->threshold;
}

#endif /* FA_PHILOX_H */
