/* flashattn_ring.h - context-parallel ("ring") attention over MPI.
 *
 * One sequence too long for one process is split along the sequence across the ranks of
 * an MPI communicator. Each rank holds a shard of q, k and v; the K/V shards travel
 * around the ring (rank r sends to r+1 and receives from r-1, non-blocking, double
 * buffered, overlapped with the local compute) and each rank merges the partial results
 * of its queries against every block with the log-sum-exp rule (fa_combine). The backward
 * recomputes each block with fa_backward from the saved global lse, keeps dq local and
 * sends each block's dk/dv accumulator along the ring behind its K/V, so that the
 * gradients of a shard come back to its owner. Messages move while the MPI library runs:
 * the ring tests them (MPI_Testall) between the library calls of a block, so how much of
 * the communication hides behind the compute depends on the MPI transport and on how many
 * calls a block takes (flashattn-ring-bench measures it).
 *
 * Library: libflashattn_ring (pkg-config flashattn-ring), built when configure finds MPI.
 * It uses only the public API of libflashattn.
 *
 * Conventions (besides those of flashattn.h):
 *   - Collective: every rank of comm calls the same function with the same options
 *     (the same fields, on every rank) and its own shard; the calls are matched in order.
 *   - Memory: the context's (docs/api.md, memory spaces). With a CUDA context every rank
 *     uses one (the call checks it), the pointers are device memory, and the ring stages
 *     through host memory: the rank's inputs are copied to the host once, the K/V blocks
 *     travel in host buffers (the MPI need not be CUDA-aware), each block's fa_forward /
 *     fa_backward runs on the CUDA context with its inputs copied to device scratch and
 *     its results copied back, the merges and sums run on an internal CPU context, and
 *     the results are copied to the device at the end (one more status agreement). The
 *     CUDA runtime is loaded at run time ($FA_RING_CUDART, else libcudart.so, .so.13,
 *     .so.12; without it FA_ERR_UNSUPPORTED). Each block call waits for the device
 *     (cudaDeviceSynchronize), so staging serves correctness and memory, not speed.
 *   - The status is agreed by every rank: one MPI_Allreduce before the compute phase
 *     (argument checks and allocations) and one after it. If any rank fails, every rank
 *     returns an error (FA_ERR_INVALID_ARG first, then the lowest other code) and nothing
 *     is written to any rank's outputs. fa_ring_last_error() says which rank failed and
 *     why. A rank that never makes the call, or dies, is outside this: MPI has no timeout,
 *     so the others wait in the collective (Open MPI's default error handler aborts the
 *     job when a process fails).
 *   - comm is a valid intracommunicator (its errors follow its MPI error handler). It
 *     carries point-to-point messages with this library's tags and collectives; have no
 *     other traffic on it in flight during the call (MPI_Comm_dup one for attention if
 *     needed). MPI must be initialized; any thread level works as long as one thread per
 *     communicator calls. One message carries at most 128 GiB (a K/V block, or a dK/dV
 *     block in fp32); a larger block is FA_ERR_UNSUPPORTED.
 */
#ifndef FLASHATTN_RING_H
#define FLASHATTN_RING_H

#include <mpi.h>
#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the sequence is split. R = size of comm, r = this rank.
 *   FA_RING_CONTIGUOUS: the sequence is cut into R chunks in rank order; rank r holds
 *     chunk r. len[0] = its length, len[1] must be 0.
 *   FA_RING_ZIGZAG: the sequence is cut into 2R chunks; rank r holds chunk r followed by
 *     chunk 2R-1-r (its shard's rows are chunk r's rows, then chunk 2R-1-r's). len[0] and
 *     len[1] are their lengths. With causal masks this gives every rank about the same
 *     work (an early chunk and a late one).
 * Lengths are each rank's own and may differ from rank to rank (any may be 0: an empty
 * shard). The global position of a row is the sum of the lengths of the chunks before
 * its chunk, plus its index in its chunk. q and k/v are described separately: the global
 * query length Sq is the sum of every rank's q_len, Sk that of every kv_len (q_len and
 * kv_len are the same for self-attention). */
typedef enum { FA_RING_CONTIGUOUS = 0, FA_RING_ZIGZAG = 1 } fa_ring_kind;

typedef struct {
    fa_ring_kind kind;
    int64_t q_len[2];    /* q_len[0] + q_len[1] == q.shape[1] on this rank              */
    int64_t kv_len[2];   /* kv_len[0] + kv_len[1] == k.shape[1] == v.shape[1]           */
} fa_ring_layout;

/* Forward of attention over the whole (global) sequence; each rank gets its own rows.
 *   out [B, nq, H, d_v] (dtype of q, or F32)     q [B, nq, H,   d_qk]
 *   lse [B, H, nq] fp32 contiguous, or NULL      k [B, nk, Hkv, d_qk]
 *                                                v [B, nk, Hkv, d_v]
 * nq, nk: this rank's shard lengths (layout); B, H, Hkv, d_qk, d_v and the dtype are the
 * same on every rank. layout NULL means FA_RING_CONTIGUOUS with q_len[0] = nq and
 * kv_len[0] = nk (then every rank must pass NULL).
 * Options, with positions taken in the global sequence:
 *   scale, softcap: as in fa_forward.
 *   causal: FA_CAUSAL_TOP_LEFT (off = 0) or FA_CAUSAL_BOTTOM_RIGHT / NONE (off = Sk - Sq,
 *     the global lengths): query at global position i sits at key position i + off.
 *   window (left, right): query i sees keys i + off - left .. i + off + right, as in
 *     fa_forward over the whole sequence (causal: right = 0). Each (query chunk, key
 *     chunk) pair runs as one fa_forward call whose window bounds are the global ones
 *     shifted into the call's own alignment; blocks no row of a shard sees are skipped,
 *     and a K/V block is sent on only while a rank ahead of it sees some of its keys.
 *   alibi_slopes [H]: -slope |i + off - j| with global positions. Where a call's
 *     own alignment cannot be the global one, every key of the call lies on one side of
 *     each row: the bias is then a per-key term (a bias tensor of H x block keys) plus a
 *     per-row term added to the call's lse.
 *   sinks [H]: counted once per row, merged after the blocks.
 *   bias, dropout_p > 0: FA_ERR_UNSUPPORTED. fa_forward keys dropout by (b, h, i, j)
 *     within the call and no public option offsets i and j to global positions (the
 *     Philox offset only changes the call's key); a bias would have to be sharded by both
 *     queries and keys.
 *   deterministic: passed to every fa_backward; the ring's own sums run in a fixed order
 *     whatever the option (the result is bitwise reproducible run to run when the
 *     backend's is).
 * Each fully masked row (BOTTOM_RIGHT with Sq > Sk, or a window) gets out = 0 and
 * lse = -inf (or its sink), as fa_forward. Host scratch: 3 x B x nq x H x d_v fp32, four
 * B x H x nq fp32, two K/V buffers the size of the longest k/v shard and, with ALiBi,
 * H x (longest k/v shard) fp32. */
FA_API fa_status fa_ring_forward(fa_context *ctx, MPI_Comm comm, fa_tensor *out, float *lse,
                                 const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                 const fa_ring_layout *layout, const fa_options *opt);

/* Gradients of fa_ring_forward, each rank for its own shard: dq like q, dk like k, dv
 * like v (each the dtype of q or F32), overwritten. dsinks [H] fp32 or NULL,
 * overwritten with the gradient over the whole sequence (the same on every rank;
 * INVALID_ARG when sinks is NULL). dout like out; out and lse as fa_ring_forward returned
 * them on this rank (lse required). Same layout and options as the forward.
 * dk/dv accumulate in fp32 as they travel; the sum for a shard owned by rank o is formed
 * in the order o, o+1, ..., o+R-1 (mod R) of the ranks that hold its block; dq sums its
 * blocks in step order; dsinks sums the ranks' parts in rank order. Host scratch: two
 * B x nq x H x d_qk fp32, five fp32 blocks of B x nk_max x Hkv x (d_qk + d_v) (three in
 * flight, this step's, one call's) and two K/V buffers. */
FA_API fa_status fa_ring_backward(fa_context *ctx, MPI_Comm comm, fa_tensor *dq,
                                  fa_tensor *dk, fa_tensor *dv, float *dsinks,
                                  const fa_tensor *dout, const fa_tensor *q,
                                  const fa_tensor *k, const fa_tensor *v,
                                  const fa_tensor *out, const float *lse,
                                  const fa_ring_layout *layout, const fa_options *opt);

/* The last failure of a ring call on this thread ("rank 2: k.shape[1]=5 but kv_len
 * sums to 4"); "" when the last call succeeded. Never NULL. */
FA_API const char *fa_ring_last_error(void);

/* Timings of this rank's last successful ring call on this thread, in seconds:
 * compute = in fa_forward/fa_backward/fa_combine and the local sums; wait = blocked on
 * messages during the ring steps (the communication the compute did not hide, plus any
 * wait for a slower neighbour); total = the whole call, including the two status
 * agreements (which wait for the slowest rank) and the final copies. bytes_sent counts
 * this rank's point-to-point payload, steps the ring's steps (R). */
typedef struct { double compute_s, wait_s, total_s; int64_t bytes_sent; int steps; } fa_ring_stats;
FA_API void fa_ring_last_stats(fa_ring_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_RING_H */
