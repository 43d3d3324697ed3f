/* ring_internal.h - what the ring forward and backward share: the global geometry of the
 * shards, the fa_forward/fa_backward calls one (query shard, key block) pair takes, the
 * agreed status, the K/V block messages and strided copies. Only the public API of
 * libflashattn is used (plus lib/dtype.h's inline conversions).
 */
#ifndef FA_RING_INTERNAL_H
#define FA_RING_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "flashattn_ring.h"

/* Message tags of this library on the caller's communicator. */
enum { RING_TAG_KV = 0x6661, RING_TAG_DKV = 0x6662 };

/* Every rank's layout and the shapes all ranks share. */
typedef struct {
    int R, rank;
    int64_t *qlen, *kvlen;        /* [R][2]: each rank's chunk lengths                    */
    int64_t Sq, Sk;               /* global lengths                                       */
    int64_t off;                  /* query i sits at key position i + off (fa_causal)     */
    int64_t wl, wr;               /* key j visible to query i iff i + off - wl <= j and
                                     j <= i + off + wr; -1 unbounded (causal: wr = 0)     */
    int alibi;                    /* ALiBi slopes given                                   */
    fa_ring_kind kind;
    int64_t B, H, Hkv, dqk, dv;
    fa_dtype dt;
    size_t esz;
    int64_t max_nk;               /* longest k/v shard                                    */
} ring_geom;

/* How a call carries ALiBi: not at all, as fa_forward's own (the call's alignment is the
 * global one), or split (every key of the call on one side of each row's position: the
 * bias -slope |i + kink - j| is -slope |j - jref| per key, passed as a bias tensor, plus
 * -slope |i + kink - jref| per row, added to the call's lse). */
enum { RING_ALIBI_NONE = 0, RING_ALIBI_EXACT, RING_ALIBI_SPLIT };

/* One library call: query rows [q0, q0+nq) of this rank's shard against keys [k0, k0+nk)
 * of the block, with its own causal (NONE or BOTTOM_RIGHT) and window, which give the
 * global mask on these rows and keys in the call's local alignment. */
typedef struct {
    int64_t q0, nq, k0, nk;
    fa_causal causal;
    int window;
    int64_t left, right;
    int alibi;
    int64_t kink, jref;           /* RING_ALIBI_SPLIT: in the call's rows and keys         */
} ring_call;

#define RING_MAX_CALLS 16

/* The calls that cover query shard of rank qr against key block of rank kr (rows that see
 * no key of the block get no call). Returns the count. */
int ring_calls(const ring_geom *g, int qr, int kr, ring_call calls[RING_MAX_CALLS]);
/* Does any rank that the block of `owner` reaches after step t (ranks owner+t+1 ..
 * owner+R-1) have a call on it? When not, the block is not sent on. */
int ring_needed_after(const ring_geom *g, int owner, int t);

/* The options of one call: base with the call's causal and window, and its ALiBi (the
 * slopes, or a bias view of bias_buf [H][nk] filled here, with bias_view its tensor). */
fa_options ring_call_options(const ring_geom *g, const ring_call *c, const fa_options *base,
                             float *bias_buf, fa_tensor *bias_view);
/* lse [B, H, c->nq] of a split-ALiBi call: sign = +1 turns the call's lse into the global
 * one (forward), -1 the other way (the lse the backward passes to fa_backward). */
void ring_call_shift_lse(const ring_geom *g, const ring_call *c, const float *slopes,
                         float *lse, int sign);

/* The arguments every rank passes, exchanged to check that they agree. */
typedef struct {
    int64_t B, H, Hkv, dqk, dv, dt, kind, layout_null;
    int64_t qlen[2], kvlen[2];
    int64_t causal, sinks, deterministic, dsinks_null;
    int64_t window, wl, wr, alibi;
    int64_t staged;               /* a CUDA context (its calls take one more agreement)    */
    uint32_t scale_bits, softcap_bits;
} ring_args;

/* Status handling. ring_fail records this rank's first failure (message included);
 * ring_agree makes every rank agree on the worst status (INVALID_ARG first, then the
 * lowest code) and copies the failing rank's message to everyone. */
typedef struct {
    fa_status st;
    char msg[256];
} ring_status;
void      ring_fail(ring_status *s, fa_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void      ring_fail_ctx(ring_status *s, fa_status st, fa_context *ctx, const char *what);
fa_status ring_agree(MPI_Comm comm, ring_status *s);
/* Sets the thread's last error / stats (what fa_ring_last_error/_stats return). */
void      ring_set_error(const char *msg);
void      ring_set_stats(const fa_ring_stats *st);
double    ring_now(void);

/* Exchanges every rank's arguments: a disagreement returns INVALID_ARG (the same verdict
 * on every rank, no ring_agree needed); otherwise fills g and returns FA_OK, with a local
 * failure (no memory, a message over 128 GiB) left in s for the next ring_agree. */
fa_status ring_setup(MPI_Comm comm, const char *fn, ring_status *s, ring_geom *g,
                     const ring_args *mine);
void      ring_geom_free(ring_geom *g);
/* Local checks of ctx, q, k, v and the layout (NULL: contiguous over the whole shard);
 * fills a with what every rank must agree on. fn names the public function. */
void      ring_check_common(fa_context *ctx, ring_status *s, const char *fn,
                            const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                            const fa_ring_layout *layout, const fa_options *opt,
                            ring_args *a);
/* Options the ring does not serve: FA_ERR_UNSUPPORTED. Called after the library
   validated the options, so that a wrong value is still INVALID_ARG. */
void      ring_check_unsupported(ring_status *s, const char *fn, const fa_options *opt);

/* Blocks in flight: a K/V block is k [B, nk, Hkv, dqk] then v [B, nk, Hkv, dv], packed
 * contiguous in the input dtype. Message sizes are counted in 64-byte units. */
size_t    ring_kv_bytes(const ring_geom *g, int64_t nk);
size_t    ring_round64(size_t bytes);
void      ring_pack_kv(const ring_geom *g, void *buf, const fa_tensor *k, const fa_tensor *v);
fa_tensor ring_block_k(const ring_geom *g, void *buf, int64_t nk);
fa_tensor ring_block_v(const ring_geom *g, void *buf, int64_t nk);
int       ring_isend(MPI_Comm comm, const void *buf, size_t bytes, int to, int tag,
                     MPI_Request *rq);
int       ring_irecv(MPI_Comm comm, void *buf, size_t bytes, int from, int tag,
                     MPI_Request *rq);

/* Views and copies. */
fa_tensor ring_rows(const fa_tensor *t, int64_t r0, int64_t n);   /* rows of dim 1      */
/* lse [B, H, S] rows [r0, r0+n) <-> contiguous [B, H, n]. */
void      ring_lse_gather(float *dst, const float *lse, int64_t B, int64_t H, int64_t S,
                          int64_t r0, int64_t n);
void      ring_lse_scatter(float *lse, const float *src, int64_t B, int64_t H, int64_t S,
                           int64_t r0, int64_t n);
/* dst (any dtype, strided) = src (F32 view) element by element. */
void      ring_store(fa_tensor *dst, const fa_tensor *src);
/* dst (F32 view) += src (F32 view). */
void      ring_add(fa_tensor *dst, const fa_tensor *src);
void     *ring_alloc(ring_status *s, size_t bytes, const char *what);

#endif /* FA_RING_INTERNAL_H */
