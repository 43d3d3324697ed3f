/* test_bad_input.c - every argument of every public operation broken at least once.
 *
 * For each broken call, on every backend under test: the status is FA_ERR_INVALID_ARG;
 * fa_last_error(ctx) is one line that starts with the function name and names the argument
 * as the header spells it (whole word: "k", "opt->dropout_p", "cu_seqlens_q", ...); no
 * byte of any buffer (outputs, inputs, caches) changed; and the same context then serves
 * the valid version of the call with FA_OK. The fixture (one small problem of each
 * operation) is bad_fixture.c's; the context functions and the environment are broken in
 * test_bad_context.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_fixture.h"

/* Break one argument. Returns the function, sets *expect to the argument name(s) the
   message must contain ("a|b": either). -1 past the end. */
static int mutate(int idx, fx *f, mem_t *m, const char **expect, const char **what)
{
#define CASE(n, fn, exp, desc, code) case n: { fx_init(f, m, fn); code; *expect = exp; *what = desc; return fn; }
    switch (idx) {
    /* ---- fa_forward ---- */
    CASE(0, F_FWD, "out", "out NULL", f->pout = NULL)
    CASE(1, F_FWD, "q", "q NULL", f->pq = NULL)
    CASE(2, F_FWD, "k", "k NULL", f->pk = NULL)
    CASE(3, F_FWD, "v", "v NULL", f->pv = NULL)
    CASE(4, F_FWD, "q", "q.data NULL", f->q.data = NULL)
    CASE(5, F_FWD, "out", "out.data NULL", f->out.data = NULL)
    CASE(6, F_FWD, "q", "q.dtype invalid", f->q.dtype = (fa_dtype)7)
    CASE(7, F_FWD, "k", "k dtype != q dtype", f->k.dtype = FA_BF16)
    CASE(8, F_FWD, "v", "v dtype != q dtype", f->v.dtype = FA_F32)
    CASE(9, F_FWD, "out", "out dtype neither q's nor F32", f->out.dtype = FA_BF16)
    CASE(10, F_FWD, "q", "q.stride[3] = 2", f->q.stride[3] = 2)
    CASE(11, F_FWD, "k", "k.stride[3] = 0", f->k.stride[3] = 0)
    CASE(12, F_FWD, "out", "out.stride[3] = 2", f->out.stride[3] = 2)
    CASE(13, F_FWD, "q", "q.shape[1] negative", f->q.shape[1] = -1)
    CASE(14, F_FWD, "k", "k.shape[3] negative", f->k.shape[3] = -16)
    CASE(15, F_FWD, "k|q", "heads do not divide (4 vs 3)", f->k.shape[2] = 3; f->v.shape[2] = 3)
    CASE(16, F_FWD, "k|q", "heads_kv = 0 with heads_q > 0", f->k.shape[2] = 0; f->v.shape[2] = 0)
    CASE(17, F_FWD, "k|q", "head dim mismatch q/k", f->k.shape[3] = 8; f->k.stride[2] = 8)
    CASE(18, F_FWD, "out|v", "head dim mismatch v/out", f->out.shape[3] = 8; f->out.stride[2] = 8)
    CASE(19, F_FWD, "k|q", "batch mismatch", f->k.shape[0] = 1; f->v.shape[0] = 1)
    CASE(20, F_FWD, "v|k", "k/v length mismatch", f->v.shape[1] = 6)
    CASE(21, F_FWD, "out|q", "out Sq mismatch", f->out.shape[1] = 4)
    CASE(22, F_FWD, "out|q", "out heads mismatch", f->out.shape[2] = 2)
    CASE(23, F_FWD, "out", "out stride 0 (aliasing)", f->out.stride[1] = 0)
    CASE(24, F_FWD, "opt->scale", "scale NaN", f->opt.scale = NAN)
    CASE(25, F_FWD, "opt->scale", "scale +inf", f->opt.scale = INFINITY)
    CASE(26, F_FWD, "opt->scale", "scale -inf", f->opt.scale = -INFINITY)
    CASE(27, F_FWD, "opt->window", "window = 2", f->opt.window = 2)
    CASE(28, F_FWD, "opt->window", "window = -1", f->opt.window = -1)
    CASE(29, F_FWD, "opt->window_left", "window_left = -2", f->opt.window = 1; f->opt.window_left = -2; f->opt.window_right = 3)
    CASE(30, F_FWD, "opt->window_right", "window_right = -5", f->opt.window = 1; f->opt.window_left = 3; f->opt.window_right = -5)
    CASE(31, F_FWD, "opt->dropout_p", "dropout_p = 1", f->opt.dropout_p = 1.0f)
    CASE(32, F_FWD, "opt->dropout_p", "dropout_p = 1.5", f->opt.dropout_p = 1.5f)
    CASE(33, F_FWD, "opt->dropout_p", "dropout_p = -0.1", f->opt.dropout_p = -0.1f)
    CASE(34, F_FWD, "opt->dropout_p", "dropout_p NaN", f->opt.dropout_p = NAN)
    CASE(35, F_FWD, "opt->softcap", "softcap = -1", f->opt.softcap = -1.0f)
    CASE(36, F_FWD, "opt->causal", "causal = 7", f->opt.causal = (fa_causal)7)
    CASE(37, F_FWD, "opt->bias", "bias Sk mismatch", f->bias.shape[3] = SK - 1; f->opt.bias = &f->bias)
    CASE(38, F_FWD, "opt->bias", "bias stride[3] = 2", f->bias.stride[3] = 2; f->opt.bias = &f->bias)
    CASE(39, F_FWD, "opt->bias", "bias batch 3 != 2", f->bias.shape[0] = 3; f->bias.stride[0] = 0; f->opt.bias = &f->bias)
    CASE(40, F_FWD, "opt->bias", "bias heads 2 (not 1 or H)", f->bias.shape[2] = 2; f->opt.bias = &f->bias)
    CASE(41, F_FWD, "opt->bias", "bias Sq mismatch", f->bias.shape[1] = SQ + 1; f->bias.stride[1] = 0; f->opt.bias = &f->bias)
    CASE(42, F_FWD, "opt->bias", "bias dtype invalid", f->bias.dtype = (fa_dtype)9; f->opt.bias = &f->bias)
    CASE(43, F_FWD, "opt->bias", "bias data NULL", f->bias.data = NULL; f->opt.bias = &f->bias)
    /* ---- fa_backward ---- */
    CASE(50, F_BWD, "lse", "lse NULL in backward", f->lse_in = NULL)
    CASE(51, F_BWD, "dsinks", "dsinks without sinks", f->dsinks = f->m->dsinks)
    CASE(52, F_BWD, "dq", "dq NULL", f->pdq = NULL)
    CASE(53, F_BWD, "dk", "dk NULL", f->pdk = NULL)
    CASE(54, F_BWD, "dv", "dv NULL", f->pdv = NULL)
    CASE(55, F_BWD, "dout", "dout NULL", f->pdout = NULL)
    CASE(56, F_BWD, "out", "out NULL", f->pobwd = NULL)
    CASE(57, F_BWD, "q", "q NULL", f->pq = NULL)
    CASE(58, F_BWD, "k", "k NULL", f->pk = NULL)
    CASE(59, F_BWD, "v", "v NULL", f->pv = NULL)
    CASE(60, F_BWD, "dq", "dq dtype neither q's nor F32", f->dq.dtype = FA_BF16)
    CASE(61, F_BWD, "dk", "dk shape mismatch", f->dk.shape[1] = SK - 1)
    CASE(62, F_BWD, "dv", "dv heads mismatch", f->dv.shape[2] = 1)
    CASE(63, F_BWD, "dout|out", "dout shape mismatch", f->dout.shape[1] = SQ - 1)
    CASE(64, F_BWD, "dout", "dout dtype", f->dout.dtype = FA_BF16)
    CASE(65, F_BWD, "dq", "dq.stride[3] = 3", f->dq.stride[3] = 3)
    CASE(66, F_BWD, "opt->dropout_p", "dropout_p = 2", f->opt.dropout_p = 2.0f)
    CASE(67, F_BWD, "opt->scale", "scale NaN", f->opt.scale = NAN)
    CASE(68, F_BWD, "dq", "dq.data NULL", f->dq.data = NULL)
    CASE(69, F_BWD, "k|q", "heads do not divide", f->k.shape[2] = 3; f->v.shape[2] = 3; f->dk.shape[2] = 3; f->dv.shape[2] = 3)
    CASE(70, F_BWD, "dk", "dk stride 0 (aliasing)", f->dk.stride[1] = 0)
    /* ---- varlen ---- */
    CASE(80, F_FWD_VL, "cu_seqlens_q", "cu_seqlens_q NULL", f->cuq = NULL)
    CASE(81, F_FWD_VL, "cu_seqlens_k", "cu_seqlens_k NULL", f->cuk = NULL)
    CASE(82, F_FWD_VL, "cu_seqlens_q", "cu_seqlens_q not starting at 0", f->m->cuq[0] = 1)
    CASE(83, F_FWD_VL, "cu_seqlens_k", "cu_seqlens_k not monotonic", f->m->cuk[1] = 15; f->m->cuk[2] = 14)
    CASE(84, F_FWD_VL, "cu_seqlens_q", "cu_seqlens_q exceeds the tensor", f->m->cuq[2] = 11)
    CASE(85, F_FWD_VL, "cu_seqlens_k", "cu_seqlens_k exceeds the tensor", f->m->cuk[2] = 15)
    CASE(86, F_FWD_VL, "max_seqlen_q", "max_seqlen_q smaller than a sequence", f->maxq = 5)
    CASE(87, F_FWD_VL, "max_seqlen_k", "max_seqlen_k smaller than a sequence", f->maxk = 7)
    CASE(88, F_FWD_VL, "batch", "batch negative", f->batch = -1)
    CASE(89, F_FWD_VL, "q", "q.shape[0] != 1", f->q.shape[0] = 2; f->q.shape[1] = 5)
    CASE(90, F_FWD_VL, "opt->bias", "bias with varlen", f->bias.shape[0] = 1; f->bias.shape[1] = 10; f->bias.shape[3] = 14; f->bias.stride[2] = 14; f->bias.stride[1] = 0; f->bias.stride[0] = 0; f->opt.bias = &f->bias)
    CASE(91, F_FWD_VL, "max_seqlen_q", "max_seqlen_q negative", f->maxq = -1)
    CASE(92, F_FWD_VL, "cu_seqlens_q", "cu_seqlens_q negative entry", f->m->cuq[1] = -2)
    CASE(93, F_BWD_VL, "cu_seqlens_k", "backward: cu_seqlens_k not monotonic", f->m->cuk[1] = 9; f->m->cuk[2] = 8)
    CASE(94, F_BWD_VL, "lse", "backward varlen: lse NULL", f->lse_in = NULL)
    CASE(95, F_BWD_VL, "max_seqlen_k", "backward varlen: max_seqlen_k too small", f->maxk = 3)
    CASE(96, F_BWD_VL, "dsinks", "backward varlen: dsinks without sinks", f->dsinks = f->m->dsinks)
    CASE(97, F_BWD_VL, "opt->bias", "backward varlen: bias", f->bias.shape[0] = 1; f->bias.shape[1] = 10; f->bias.shape[3] = 14; f->bias.stride[2] = 14; f->bias.stride[1] = 0; f->bias.stride[0] = 0; f->opt.bias = &f->bias)
    /* ---- kvcache ---- */
    CASE(100, F_KV, "cache_seqlens", "cache_seqlens NULL", f->cs = NULL)
    CASE(101, F_KV, "k_new|v_new", "k_new without v_new", f->pvn = NULL)
    CASE(102, F_KV, "k_new|v_new", "v_new without k_new", f->pkn = NULL)
    CASE(103, F_KV, "cache_seqlens", "cache overflow (11 + 2 > 12)", f->m->cs[1] = 11)
    CASE(104, F_KV, "cache_seqlens", "cache_seqlens negative", f->m->cs[0] = -1)
    CASE(105, F_KV, "k_cache", "k_cache NULL", f->pkc = NULL)
    CASE(106, F_KV, "v_cache", "v_cache NULL", f->pvc = NULL)
    CASE(107, F_KV, "k_cache", "k_cache dtype", f->kc.dtype = FA_BF16)
    CASE(108, F_KV, "k_new", "k_new dtype", f->kn.dtype = FA_F32)
    CASE(109, F_KV, "k_new|v_new", "k_new/v_new length mismatch", f->vn.shape[1] = 1)
    CASE(110, F_KV, "k_cache|q", "k_cache batch mismatch (contiguous)", f->kc.shape[0] = 1; f->vc.shape[0] = 1)
    CASE(111, F_KV, "opt->bias", "bias with kvcache", f->opt.bias = &f->bias)
    CASE(112, F_KV, "k_cache|q", "k_cache head dim mismatch", f->kc.shape[3] = 8; f->kc.stride[2] = 8)
    CASE(113, F_KV, "v_cache|k_cache", "v_cache length mismatch", f->vc.shape[1] = 11)
    CASE(114, F_KV_PAGED, "block_table", "block_table entry out of range", f->m->bt[1] = 6)
    CASE(115, F_KV_PAGED, "block_table", "block_table entry negative (page in use)", f->m->bt[3] = -1)
    CASE(116, F_KV_PAGED, "cache_seqlens", "paged cache overflow (11 + 2 > 3*4)", f->m->cs[0] = 11)
    CASE(117, F_KV_PAGED, "max_pages_per_seq", "max_pages_per_seq negative", f->maxpages = -1)
    CASE(118, F_KV, "opt->dropout_p", "kvcache dropout_p = 1", f->opt.dropout_p = 1.0f)
    CASE(119, F_KV, "out", "kvcache out NULL", f->pout = NULL)
    CASE(120, F_KV, "k_new", "k_new heads mismatch", f->kn.shape[2] = 1; f->vn.shape[2] = 1)
    CASE(121, F_KV, "k_new", "k_new longer than the cache (13 > 12)", f->kn.shape[1] = 13; f->vn.shape[1] = 13; f->m->cs[0] = 0; f->m->cs[1] = 0)
    CASE(122, F_KV_PAGED, "k_new", "k_new longer than the paged cache (13 > 3*4)", f->kn.shape[1] = 13; f->vn.shape[1] = 13; f->m->cs[0] = 0; f->m->cs[1] = 0)
    /* ---- combine ---- */
    CASE(130, F_COMBINE, "n", "n = 0", f->n = 0)
    CASE(131, F_COMBINE, "n", "n = -3", f->n = -3)
    CASE(132, F_COMBINE, "out_parts", "out_parts NULL", f->pparts = NULL)
    CASE(133, F_COMBINE, "lse_parts", "lse_parts NULL", f->plps = NULL)
    CASE(134, F_COMBINE, "lse_parts", "lse_parts[1] NULL", f->lps[1] = NULL)
    CASE(135, F_COMBINE, "out_parts", "out_parts[1] shape mismatch", f->parts[1].shape[1] = SQ - 1)
    CASE(136, F_COMBINE, "out|out_parts", "out shape mismatch", f->out.shape[3] = 8; f->out.stride[2] = 8)
    CASE(137, F_COMBINE, "out_parts", "out_parts[0] stride[3] = 2", f->parts[0].stride[3] = 2)
    CASE(138, F_COMBINE, "out", "out NULL", f->pout = NULL)
    CASE(139, F_COMBINE, "out_parts", "out_parts[0] dtype invalid", f->parts[0].dtype = (fa_dtype)5)
    /* ---- query ---- */
    CASE(140, F_QUERY, "kernel_name", "kernel_name NULL", f->kname = NULL)
    CASE(141, F_QUERY, "k|q", "query: heads do not divide", f->k.shape[2] = 3; f->v.shape[2] = 3)
    CASE(142, F_QUERY, "opt->dropout_p", "query: dropout_p = 1", f->opt.dropout_p = 1.0f)
    CASE(143, F_QUERY_BWD, "lse", "query_backward: lse NULL", f->lse_in = NULL)
    CASE(144, F_QUERY_BWD, "kernel_name", "query_backward: kernel_name NULL", f->kname = NULL)
    /* ---- sizes whose element count or extent overflows int64 ---- */
    CASE(150, F_FWD, "q", "q element count overflows int64 (2^32 x 2^32 x ..)", f->q.shape[0] = (int64_t)1 << 32; f->q.shape[1] = (int64_t)1 << 32)
    CASE(151, F_FWD, "k", "k byte extent overflows int64", f->k.stride[0] = INT64_MAX / 2)
    CASE(152, F_FWD, "v", "v element span (shape x stride) overflows int64", f->v.stride[1] = INT64_MAX / 3)
    CASE(153, F_FWD, "q", "q span exactly INT64_MAX (span + 1 overflows)", f->q.shape[0] = 2; f->q.shape[1] = 1; f->q.shape[2] = 1; f->q.shape[3] = 1; f->q.stride[0] = INT64_MAX; f->q.stride[1] = 1; f->q.stride[2] = 1)
    CASE(154, F_FWD, "out", "out element count overflows int64", f->out.shape[1] = INT64_MAX)
    CASE(155, F_FWD, "out", "out byte extent overflows int64", f->out.stride[2] = INT64_MAX / 4)
    CASE(156, F_FWD, "opt->bias", "bias element count overflows int64", f->bias.shape[0] = INT64_MAX; f->opt.bias = &f->bias)
    CASE(157, F_BWD, "dq", "dq element count overflows int64", f->dq.shape[0] = (int64_t)1 << 40; f->dq.shape[1] = (int64_t)1 << 40)
    CASE(158, F_BWD, "dout", "dout extent overflows int64", f->dout.stride[0] = INT64_MAX / 2 + 1)
    CASE(159, F_KV, "k_new", "k_new element count overflows int64", f->kn.shape[1] = INT64_MAX)
    CASE(160, F_COMBINE, "out_parts", "out_parts[1] element count overflows int64", f->parts[1].shape[2] = INT64_MAX / 2)
    CASE(161, F_QUERY, "q", "query: q element count overflows int64", f->q.shape[2] = INT64_MAX)
    CASE(162, F_KV, "k_cache", "k_cache extent overflows int64", f->kc.stride[1] = INT64_MAX / 8)
    /* ---- negative strides ---- */
    CASE(165, F_FWD, "q", "q.stride[1] negative", f->q.stride[1] = -64)
    CASE(166, F_FWD, "out", "out.stride[2] negative", f->out.stride[2] = -16)
    CASE(167, F_BWD, "dk", "dk.stride[0] negative", f->dk.stride[0] = -1)
    CASE(168, F_FWD, "opt->bias", "bias.stride[1] negative", f->bias.stride[1] = -7; f->opt.bias = &f->bias)
    CASE(169, F_KV, "k_cache", "k_cache.stride[0] negative", f->kc.stride[0] = -1)
    CASE(170, F_COMBINE, "out_parts", "out_parts[1].stride[2] negative", f->parts[1].stride[2] = -16)
    CASE(171, F_FWD_VL, "v", "varlen v.stride[2] negative", f->v.stride[2] = -16)
    /* ---- output stride 0 on an extent > 1 (its elements would alias) ---- */
    CASE(175, F_BWD, "dq", "dq.stride[2] = 0", f->dq.stride[2] = 0)
    CASE(176, F_BWD, "dv", "dv.stride[0] = 0", f->dv.stride[0] = 0)
    CASE(177, F_KV, "out", "kvcache out.stride[1] = 0", f->out.stride[1] = 0)
    CASE(178, F_KV, "k_cache", "k_cache.stride[1] = 0 with k_new (the cache is written)", f->kc.stride[1] = 0)
    CASE(179, F_COMBINE, "out", "combine out.stride[2] = 0", f->out.stride[2] = 0)
    CASE(180, F_FWD_VL, "out", "varlen out.stride[1] = 0", f->out.stride[1] = 0)
    CASE(181, F_QUERY, "out", "query out.stride[0] = 0", f->out.stride[0] = 0)
    /* ---- fa_query / fa_query_backward: every argument ---- */
    CASE(185, F_QUERY, "out", "query out NULL", f->pout = NULL)
    CASE(186, F_QUERY, "q", "query q NULL", f->pq = NULL)
    CASE(187, F_QUERY, "k", "query k NULL", f->pk = NULL)
    CASE(188, F_QUERY, "v", "query v NULL", f->pv = NULL)
    CASE(189, F_QUERY, "q", "query q.dtype invalid", f->q.dtype = (fa_dtype)4)
    CASE(190, F_QUERY, "opt->bias", "query bias Sk mismatch", f->bias.shape[3] = SK + 1; f->opt.bias = &f->bias)
    CASE(191, F_QUERY, "opt->scale", "query scale NaN", f->opt.scale = NAN)
    CASE(192, F_QUERY_BWD, "dq", "query_backward dq NULL", f->pdq = NULL)
    CASE(193, F_QUERY_BWD, "dk", "query_backward dk NULL", f->pdk = NULL)
    CASE(194, F_QUERY_BWD, "dv", "query_backward dv NULL", f->pdv = NULL)
    CASE(195, F_QUERY_BWD, "dout", "query_backward dout NULL", f->pdout = NULL)
    CASE(196, F_QUERY_BWD, "out", "query_backward out NULL", f->pobwd = NULL)
    CASE(197, F_QUERY_BWD, "q", "query_backward q NULL", f->pq = NULL)
    CASE(198, F_QUERY_BWD, "k", "query_backward k NULL", f->pk = NULL)
    CASE(199, F_QUERY_BWD, "v", "query_backward v NULL", f->pv = NULL)
    CASE(200, F_QUERY_BWD, "dsinks", "query_backward dsinks without sinks", f->dsinks = f->m->dsinks)
    CASE(201, F_QUERY_BWD, "dk", "query_backward dk shape mismatch", f->dk.shape[1] = SK + 1)
    CASE(202, F_QUERY_BWD, "dv", "query_backward dv dtype", f->dv.dtype = FA_BF16)
    CASE(203, F_QUERY_BWD, "opt->dropout_p", "query_backward dropout_p = -1", f->opt.dropout_p = -1.0f)
    /* ---- fa_combine: every argument ---- */
    CASE(205, F_COMBINE, "out_parts", "out_parts[0].data NULL", f->parts[0].data = NULL)
    CASE(206, F_COMBINE, "lse_parts", "lse_parts[0] NULL", f->lps[0] = NULL)
    CASE(207, F_COMBINE, "out", "combine out.data NULL", f->out.data = NULL)
    CASE(208, F_COMBINE, "out", "combine out.dtype invalid", f->out.dtype = (fa_dtype)3)
    CASE(209, F_COMBINE, "n", "n = INT_MIN", f->n = -2147483647 - 1)
    CASE(210, F_COMBINE, "out_parts", "out_parts[1] negative shape", f->parts[1].shape[0] = -2)
    /* ---- varlen and kvcache: arguments not broken above ---- */
    CASE(215, F_FWD_VL, "k|q", "varlen k.shape[0] = 2", f->k.shape[0] = 2; f->k.shape[1] = SK)
    CASE(216, F_FWD_VL, "max_seqlen_k", "max_seqlen_k negative", f->maxk = -3)
    CASE(217, F_FWD_VL, "batch", "batch > INT32_MAX", f->batch = (int64_t)INT32_MAX + 1)
    CASE(218, F_BWD_VL, "dq", "backward varlen dq NULL", f->pdq = NULL)
    CASE(219, F_BWD_VL, "cu_seqlens_q", "backward varlen cu_seqlens_q NULL", f->cuq = NULL)
    CASE(220, F_FWD_VL, "cu_seqlens_k", "cu_seqlens_k negative entry", f->m->cuk[1] = -5)
    CASE(221, F_KV_PAGED, "max_pages_per_seq", "max_pages_per_seq = 0", f->maxpages = 0)
    CASE(222, F_KV_PAGED, "k_cache|page_size", "page_size 0", f->kc.shape[1] = 0; f->vc.shape[1] = 0)
    CASE(223, F_KV_PAGED, "max_pages_per_seq", "max_pages_per_seq x page_size overflows", f->maxpages = INT64_MAX / 2)
    CASE(224, F_KV, "v_new", "v_new dtype", f->vn.dtype = FA_BF16)
    CASE(225, F_KV, "q", "kvcache q NULL", f->pq = NULL)
    CASE(226, F_KV, "v_cache", "v_cache dtype", f->vc.dtype = FA_F32)
    CASE(227, F_KV, "k_new", "k_new negative stride", f->kn.stride[1] = -32)
    CASE(228, F_KV, "v_new", "v_new.data NULL", f->vn.data = NULL)
    CASE(229, F_KV_PAGED, "block_table", "block_table entry INT32_MAX", f->m->bt[4] = INT32_MAX)
    default: return -1;
    }
#undef CASE
}
#define N_MUT 230

START_TEST(test_bad_argument)
{
    fx f;
    const char *expect, *what;
    mem_t *m = malloc(sizeof *m);
    mem_fill(m);
    int which = mutate(_i, &f, m, &expect, &what);
    if (which < 0) { free(m); return; }   /* unused index */
    const char *fn = FN_NAMES[which];
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        mem_fill(m);
        which = mutate(_i, &f, m, &expect, &what);
        mem_t *snap = malloc(sizeof *snap);
        memcpy(snap, m, sizeof *m);
        fa_status st = fx_call(ctx, &f, which);
        const char *msg = fa_last_error(ctx);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s: %s (%s): status %d (%s), want INVALID_ARG; "
                      "message '%s'", be, fn, what, (int)st, fa_status_string(st), msg);
        ck_assert_msg(msg && strncmp(msg, fn, strlen(fn)) == 0 && msg[strlen(fn)] == ':',
                      "%s: %s (%s): message '%s' does not start with '%s:'", be, fn, what, msg, fn);
        ck_assert_msg(!strchr(msg, '\n'), "%s: %s (%s): message is not one line: '%s'", be, fn, what, msg);
        ck_assert_msg(names_arg(msg, expect), "%s: %s (%s): message '%s' does not name '%s'", be,
                      fn, what, msg, expect);
        ck_assert_msg(memcmp(snap, m, sizeof *m) == 0,
                      "%s: %s (%s): the failing call wrote to memory", be, fn, what);
        /* the context still serves the valid call */
        mem_fill(m);
        fx g;
        fx_init(&g, m, which);
        if (which == F_BWD || which == F_BWD_VL) g.opt.sinks = NULL;
        st = fx_call(ctx, &g, which);
        ck_assert_msg(st == FA_OK, "%s: after the bad call (%s), the valid %s failed: %d %s", be,
                      what, fn, (int)st, fa_last_error(ctx));
        free(snap);
        fa_context_destroy(ctx);
    }
    free(m);
}
END_TEST

/* ctx NULL for every operation: INVALID_ARG, nothing written. */
START_TEST(test_null_ctx)
{
    mem_t *m = malloc(sizeof *m), *snap = malloc(sizeof *m);
    mem_fill(m);
    for (int which = F_FWD; which <= F_QUERY_BWD; which++) {
        fx f;
        fx_init(&f, m, which);
        memcpy(snap, m, sizeof *m);
        fa_status st = fx_call(NULL, &f, which);
        ck_assert_msg(st == FA_ERR_INVALID_ARG, "%s(ctx=NULL) = %d", FN_NAMES[which], (int)st);
        ck_assert_msg(memcmp(snap, m, sizeof *m) == 0, "%s(ctx=NULL) wrote memory", FN_NAMES[which]);
    }
    free(m); free(snap);
}
END_TEST

/* The valid fixture calls all succeed (so that every bad case differs from a good one by
   exactly the broken argument). */
START_TEST(test_valid_fixtures)
{
    mem_t *m = malloc(sizeof *m);
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        fa_context *ctx = tu_ctx(bes[bi]);
        for (int which = F_FWD; which <= F_QUERY_BWD; which++) {
            mem_fill(m);
            fx f;
            fx_init(&f, m, which);
            fa_status st = fx_call(ctx, &f, which);
            ck_assert_msg(st == FA_OK, "%s: valid %s fixture: %d %s", tu_backend_name(bes[bi]),
                          FN_NAMES[which], (int)st, fa_last_error(ctx));
            /* with sinks + dsinks, and with bias, too */
            if (which == F_BWD || which == F_BWD_VL || which == F_QUERY_BWD) {
                f.opt.sinks = m->sinks; f.dsinks = m->dsinks;
                st = fx_call(ctx, &f, which);
                ck_assert_msg(st == FA_OK, "%s: %s with sinks/dsinks: %s", tu_backend_name(bes[bi]),
                              FN_NAMES[which], fa_last_error(ctx));
            }
            if (which == F_FWD || which == F_BWD) {
                f.opt.bias = &f.bias;
                st = fx_call(ctx, &f, which);
                ck_assert_msg(st == FA_OK, "%s: %s with bias: %s", tu_backend_name(bes[bi]),
                              FN_NAMES[which], fa_last_error(ctx));
            }
            if (which == F_QUERY || which == F_QUERY_BWD)
                ck_assert_msg(f.kname_store && *f.kname_store, "%s: %s gave no kernel name",
                              tu_backend_name(bes[bi]), FN_NAMES[which]);
        }
        fa_context_destroy(ctx);
    }
    free(m);
}
END_TEST

/* KV cache lengths near INT64_MAX, reachable with stride-0 views of a few bytes (a
   tensor's element count may be INT64_MAX when the other dimensions are 1):
   - k_new/v_new of INT64_MAX - 1 rows (stride 0) appended at cache_seqlens = 3: the cache
     overflows, INVALID_ARG naming cache_seqlens, nothing written;
   - a paged cache whose one page has INT64_MAX rows (stride 0, not appended to), 3 of
     them in use: a valid call, every key the same row, so out = v and
     lse = log(3) + scale * q.k. */
START_TEST(test_kvcache_extreme_lengths)
{
    fa_backend bes[8];
    int nb = tu_backends(bes);
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        float qv[1] = { 0.75f }, kc[12], vc[12], kn[1] = { 0.5f }, vn[1] = { -2.0f };
        float out[1] = { NAN }, lse[1] = { NAN };
        for (int i = 0; i < 12; i++) { kc[i] = 0.125f * (float)(i + 1); vc[i] = -0.25f * (float)(i + 1); }
        float kc0[12], vc0[12];
        memcpy(kc0, kc, sizeof kc); memcpy(vc0, vc, sizeof vc);
        fa_tensor q = fa_tensor_contiguous(qv, FA_F32, 1, 1, 1, 1);
        fa_tensor o = fa_tensor_contiguous(out, FA_F32, 1, 1, 1, 1);
        fa_tensor tkc = fa_tensor_contiguous(kc, FA_F32, 1, 12, 1, 1);
        fa_tensor tvc = fa_tensor_contiguous(vc, FA_F32, 1, 12, 1, 1);
        int32_t cs[1] = { 3 }, bt[1] = { 0 };
        for (int variant = 0; variant < 2; variant++) {
            int64_t rows = variant == 0 ? INT64_MAX - 1 : INT64_MAX;
            fa_tensor tkn = fa_tensor_contiguous(kn, FA_F32, 1, 1, 1, 1);
            fa_tensor tvn = fa_tensor_contiguous(vn, FA_F32, 1, 1, 1, 1);
            tkn.shape[1] = tvn.shape[1] = rows;
            tkn.stride[0] = tkn.stride[1] = tvn.stride[0] = tvn.stride[1] = 0;
            fa_status st = fa_forward_kvcache(ctx, &o, lse, &q, &tkc, &tvc, &tkn, &tvn, cs, NULL,
                                              0, NULL);
            const char *msg = fa_last_error(ctx);
            ck_assert_msg(st == FA_ERR_INVALID_ARG,
                          "%s: kvcache with S_new = %lld at cache_seqlens 3 (capacity 12): "
                          "status %d (%s), want INVALID_ARG; '%s'", be, (long long)rows, (int)st,
                          fa_status_string(st), msg);
            ck_assert_msg(names_arg(msg, "cache_seqlens|k_new"), "%s: message '%s'", be, msg);
            ck_assert_msg(memcmp(kc, kc0, sizeof kc) == 0 && memcmp(vc, vc0, sizeof vc) == 0 &&
                          isnan(out[0]) && isnan(lse[0]), "%s: the failing call wrote", be);
        }
        /* paged, one page of INT64_MAX rows, all the same memory */
        fa_tensor pk = tkc, pv = tvc;
        pk.shape[1] = pv.shape[1] = INT64_MAX;
        pk.stride[0] = pk.stride[1] = pv.stride[0] = pv.stride[1] = 0;
        fa_status st = fa_forward_kvcache(ctx, &o, lse, &q, &pk, &pv, NULL, NULL, cs, bt, 1, NULL);
        ck_assert_msg(st == FA_OK, "%s: paged cache with page_size INT64_MAX (stride 0), 3 keys: "
                      "%d (%s): %s", be, (int)st, fa_status_string(st), fa_last_error(ctx));
        double want_lse = log(3.0) + 0.75 * 0.125;   /* scale 1/sqrt(1) */
        ck_assert_msg(fabs(out[0] - vc[0]) < 1e-6 && fabs(lse[0] - want_lse) < 1e-6,
                      "%s: out %.9g (want %.9g), lse %.9g (want %.9g)", be, out[0], vc[0],
                      lse[0], want_lse);
        fa_context_destroy(ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bad_input");
    TCase *tc = tcase_create("test_bad_argument");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_bad_argument, 0, N_MUT);
    suite_add_tcase(s, tc);
    TU_ADD(s, test_null_ctx, 30);
    TU_ADD(s, test_valid_fixtures, 60);
    TU_ADD(s, test_kvcache_extreme_lengths, 30);
    return tu_main(s);
}
