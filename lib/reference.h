/* reference.h - the reference backend: the specification of flashattn in plain C.
 *
 * The forward (reference.c) is the blocked online softmax of FlashAttention: for each
 * (sequence, query head) and each block of Br query rows, stream over blocks of Bc keys,
 * keeping a running max m, a running sum l and an unnormalized output O per row.
 * The backward (reference_backward.c) recomputes the scores tile by tile from lse (the
 * score matrix is never stored) and accumulates dQ, dK, dV in fp32 scratch.
 *
 * Every other backend must agree with these two functions within the tolerance rule of
 * docs/testing.md (tests/oracle/). They are single-threaded, so the order of every
 * floating-point sum is fixed by the loops below: the results are bitwise reproducible
 * run to run.
 *
 * Shapes (elements): q [.., Sq, H, d_qk], k [.., Sk, Hkv, d_qk], v [.., Sk, Hkv, d_v],
 * out/dout [.., Sq, H, d_v]; see problem.h for how sequences, rows and keys are found.
 */
#ifndef FA_REFERENCE_H
#define FA_REFERENCE_H

#include "backend.h"

/* Default tiles (query rows x key rows) when the context asks for none. Any positive size
   works; a tile larger than the longest sequence is clamped to it. */
#define FA_REF_BLOCK_Q  64
#define FA_REF_BLOCK_KV 64

/* The two operations with explicit tile sizes (<= 0 means the default), for the
   benchmark ladder. They fail only with FA_ERR_NO_MEMORY, before writing anything; they do
   not record an error message (they have no context). */
fa_status fa_reference_forward_tiled(const fa_problem *p, int block_q, int block_kv);
fa_status fa_reference_backward_tiled(const fa_problem *p, int block_q, int block_kv);

#endif /* FA_REFERENCE_H */
