/* params.h - the flat structs the host fills from an fa_problem and passes by value to the
 * kernels. Strides are in elements; every tensor is [batch, seq, heads, dim] with dim
 * contiguous (problem.h). Index arrays are device pointers; the kernels clamp their
 * contents (device/problem.cuh).
 */
#ifndef FA_CUDA_PARAMS_H
#define FA_CUDA_PARAMS_H

#include <stdint.h>

enum { FA_CU_F32 = 0, FA_CU_F16 = 1, FA_CU_BF16 = 2 };   /* = fa_dtype */
enum { FA_CU_DENSE = 0, FA_CU_VARLEN = 1, FA_CU_KVCACHE = 2 }; /* = fa_layout */

typedef struct {
    const void *q, *k, *v;
    void *out;                       /* out dtype: out_dtype (storage dtype or F32)      */
    float *lse;                      /* NULL = not wanted                                */
    int64_t q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh;
    int out_dtype;
    int layout, batch, hq, hkv, group, dqk, dv;
    int sq, sk;                      /* dense: q.shape[1], k.shape[1]; kvcache: sq        */
    int total_q, total_k;            /* varlen: q.shape[1], k.shape[1]                    */
    const int32_t *cu_q, *cu_k, *cache_seqlens, *block_table;
    int s_new, cache_cap, max_pages, page_size, num_pages;
    int top_left;
    int window_left, window_right;   /* -1 = unbounded (clamped by the host to int)      */
    float scale, softcap;
    const float *alibi, *sinks;
    const void *bias; int bias_dtype; int64_t bias_sb, bias_ss, bias_sh;
    float dropout_p; uint32_t drop_k0, drop_k1, drop_threshold; float keep_scale;
    int m_blocks, n_splits;
    int dec_hp;                      /* decode: KV heads per block, 1 or 2 (a pair of heads of
                                        d <= 64 side by side in the class-128 kernel)         */
    int f32_vec;                     /* fp32 q/k/v rows 16-byte aligned, d_qk and d_v multiples
                                        of 4: the tf32x3 forward copies 16 bytes at a time   */
    float *o_part, *lse_part;        /* split-KV: [n_splits][B*H*Sq][dv], [n_splits][B*H*Sq] */
} fa_cu_fwd;

/* The backward: the forward's parameters (q, k, v, out = the forward's output O, lse = the
   forward's lse, now an input) plus dO, the gradients and the fp32 workspaces. Rows of lse,
   dsum and dq_acc are indexed like lse: (b*hq + h)*sq + i dense, h*total_q + q0 + i varlen. */
typedef struct {
    fa_cu_fwd f;
    const void *dout; int64_t do_sb, do_ss, do_sh;
    int dtype;                       /* storage dtype of q, k, v, dout (F16 or BF16)       */
    void *dq, *dk, *dv; int dq_dtype, dk_dtype, dv_dtype;
    int64_t dq_sb, dq_ss, dq_sh, dk_sb, dk_ss, dk_sh, dv_sb, dv_ss, dv_sh;
    float *dsinks;                   /* [hq] or NULL                                       */
    float *dsum;                     /* D_i = rowsum(dO_i * O_i), fp32, lse layout          */
    float *dq_acc;                   /* fp32 [rows][dqk], atomically accumulated            */
    int max_sq;                      /* longest query sequence (grid of the aux kernels)   */
    int n_blocks;                    /* KV tiles of 64 keys per sequence (max_sk)           */
    int kv_tile;                     /* -1: every KV tile in one launch; >= 0: this tile only
                                        (deterministic mode: one launch per tile, so each dQ
                                        element gets one atomic add per launch)            */
} fa_cu_bwd;

/* The backward kernels run their lean form (sm80: the LEAN instantiation; sm90: the only
   one) when none of softcap, ALiBi, bias or dropout is on. */
static inline bool fa_bwd_lean(const fa_cu_bwd &p)
{
    return !(p.f.softcap > 0.f) && !p.f.alibi && !p.f.bias && !(p.f.dropout_p > 0.f);
}

/* fa_combine and the split-KV merge: up to FA_CU_MAX_PARTS views, or n strided fp32
   parts at o_base + i*o_pstride (lse at lse_base + i*lse_pstride). */
#define FA_CU_MAX_PARTS 32
typedef struct {
    const void *data[FA_CU_MAX_PARTS];
    const float *lse[FA_CU_MAX_PARTS];
    int64_t sb[FA_CU_MAX_PARTS], ss[FA_CU_MAX_PARTS], sh[FA_CU_MAX_PARTS];
    int dtype[FA_CU_MAX_PARTS];
    int n;
    const float *o_base, *lse_base; int64_t o_pstride, lse_pstride;  /* strided mode */
    int64_t p_sb, p_ss, p_sh;                                       /* strided mode */
    void *out; int out_dtype; int64_t o_sb, o_ss, o_sh;
    float *lse_out;                 /* [B, H, S] or NULL */
    const float *sinks;             /* [H] or NULL: one more lse part with a zero output */
    int B, S, H, D;
} fa_cu_combine;

#endif /* FA_CUDA_PARAMS_H */
