/* fuzz_args.c - libFuzzer target over the argument validation of every public call.
 *
 * The input bytes decode into one call: which operation (fa_forward, fa_backward, the
 * varlen pair, fa_forward_kvcache contiguous or paged, fa_combine, fa_query,
 * fa_query_backward, the fa_context_set_* knobs), shapes (mostly small, sometimes 0,
 * negative or huge: 2^31, 2^32, 2^62, INT64_MAX, INT64_MIN, random 64-bit), strides
 * (contiguous, padded, or one arbitrary stride: 0, negative, huge), dtypes (including values
 * that are not an fa_dtype), options, NULL pointers, index arrays (cu_seqlens,
 * cache_seqlens, block_table: non-monotonic, negative, out of range) and aliasing (an
 * output view placed inside an input's or another output's memory).
 *
 * Memory: a tensor whose byte extent fits a small budget gets a heap buffer of exactly that
 * extent (ASan sees any access outside it) filled with a pattern; lse, slopes, sinks,
 * dsinks and index arrays get exactly the elements the call may touch. A tensor too large
 * for the budget gets the data pointer 4096 (any access faults).
 *
 * Which calls run: a call whose tensors all fit runs for real. A call with a tensor that
 * does not fit runs for real only when it is certainly invalid (the spec predicate below
 * says so: the library must reject it before touching data); otherwise fa_forward and
 * fa_backward shapes go through fa_query / fa_query_backward (which never read data) and
 * the rest is skipped.
 *
 * Checked after each call:
 *   - the status is an fa_status value, and never UNSUPPORTED or INTERNAL from the host
 *     backends' operations;
 *   - when the spec predicate (must_fail, written from docs/api.md, not from
 *     lib/validate.c) says the call is invalid, the status is FA_ERR_INVALID_ARG;
 *   - a failed call left a one-line message that starts with "<function>:" and wrote
 *     nothing: every buffer (outputs, inputs, caches, lse, dsinks) is byte-for-byte what it
 *     was;
 *   - a successful call without aliasing changed no input (the caches of an appending
 *     kvcache call excepted);
 *   - the context still serves a small valid call afterwards.
 *
 * The decoding and memory are fuzz_args_input.c's, the spec predicate and the checks
 * fuzz_args_spec.c's (fuzz_args.h); tests/fuzz/run.sh builds the three into the target.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_args.h"

/* ---- the target ------------------------------------------------------------------------ */

enum { OP_FWD, OP_BWD, OP_FWD_VL, OP_BWD_VL, OP_KV, OP_COMBINE, OP_QUERY, OP_QUERY_BWD,
       OP_KNOBS, OP_N };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = { data, size };
    static fa_context *ctxs[2];
    if (!ctxs[0]) {
        if (fa_context_create(&ctxs[0], FA_BACKEND_REFERENCE) != FA_OK ||
            fa_context_create(&ctxs[1], FA_BACKEND_CPU) != FA_OK) abort();
    }
    fa_context *ctx = ctxs[rd(&r, 1) & 1];
    /* every input sets the knobs it depends on, so that inputs stay reproducible alone */
    fa_context_set_threads(ctx, fa_context_backend(ctx) == FA_BACKEND_CPU ? 1 : 0);
    fa_context_set_tiles(ctx, 0, 0);
    int op = (int)(rd(&r, 1) % OP_N);

    if (op == OP_KNOBS) {
        int which = (int)(rd(&r, 1) % 4);
        int a = (int)(int32_t)rd(&r, 4), b = (int)(int32_t)rd(&r, 4);
        if (rd(&r, 1) & 1) { a %= 70; b %= 70; }   /* mostly small values */
        fa_status st;
        const char *fn;
        switch (which) {
        case 0: fn = "fa_context_set_threads"; st = fa_context_set_threads(ctx, a % 3); break;
        case 1: fn = "fa_context_set_tiles"; st = fa_context_set_tiles(ctx, a, b); break;
        case 2: fn = "fa_context_set_device"; st = fa_context_set_device(ctx, a); break;
        default: fn = "fa_context_set_stream";
            st = fa_context_set_stream(ctx, (a & 1) ? (void *)(uintptr_t)(uint32_t)a : NULL); break;
        }
        int bad = (which == 0 && a % 3 < 0) || (which == 1 && (a < 0 || b < 0)) ||
                  (which == 2 && a < 0);
        check_status(ctx, st, fn, bad, 0);
        /* host backends: a device or a non-default stream is UNSUPPORTED, never OK */
        if ((which == 2 && a >= 0 && st != FA_ERR_UNSUPPORTED) ||
            (which == 3 && (a & 1) && st != FA_ERR_UNSUPPORTED) ||
            (which == 3 && !(a & 1) && st != FA_OK))
            fail(fn, "unexpected status for a device or stream on a host backend", ctx);
        /* the reference backend runs on one thread: n > 1 is UNSUPPORTED */
        if (which == 0 && a % 3 >= 0 &&
            st != ((fa_context_backend(ctx) == FA_BACKEND_REFERENCE && a % 3 > 1)
                   ? FA_ERR_UNSUPPORTED : FA_OK))
            fail(fn, "unexpected status for set_threads", ctx);
        if (which == 1 && !bad) {
            if (st != FA_OK) fail(fn, "valid tiles rejected", ctx);
            if (a < 4096 && b < 4096) valid_call_still_works(ctx);   /* with those tiles */
        }
        fa_context_set_tiles(ctx, 0, 0);
        valid_call_still_works(ctx);
        return 0;
    }

    fa_dtype dt = (fa_dtype)(rd(&r, 1) % 3);
    int64_t B = rd_size(&r, 3), Sq = rd_size(&r, 9), Sk = rd_size(&r, 9), H = rd_size(&r, 4);
    int64_t Hk = rd_size(&r, 4), D = rd_size(&r, 9), Dv = rd(&r, 1) & 1 ? D : rd_size(&r, 9);
    int paged = op == OP_KV && (rd(&r, 1) & 1);
    int64_t maxpages = paged ? rd_size(&r, 4) : 0;
    int64_t Sc = paged ? rd_size(&r, 5) : rd_size(&r, 12);   /* page size / cache capacity */
    int64_t npages = paged ? rd_size(&r, 8) : B;
    ftensor q, k, v, o, dq, dk, dv, dout, bias;
    make_tensor(&r, &q, B, Sq, H, D, dt);
    if (op == OP_KV) {
        make_tensor(&r, &k, npages, Sc, Hk, D, dt);
        make_tensor(&r, &v, npages, Sc, Hk, Dv, dt);
    } else {
        make_tensor(&r, &k, B, Sk, Hk, D, dt);
        make_tensor(&r, &v, B, Sk, Hk, Dv, dt);
    }
    make_tensor(&r, &o, B, Sq, H, Dv, rd(&r, 1) & 1 ? FA_F32 : dt);
    make_tensor(&r, &dq, B, Sq, H, D, dt);
    make_tensor(&r, &dk, B, Sk, Hk, D, dt);      /* kvcache: k_new */
    make_tensor(&r, &dv, B, Sk, Hk, Dv, dt);     /* kvcache: v_new */
    make_tensor(&r, &dout, B, Sq, H, Dv, dt);
    make_tensor(&r, &bias, rd(&r, 1) & 1 ? 1 : B, Sq, rd(&r, 1) & 1 ? 1 : H, Sk,
                (fa_dtype)(rd(&r, 1) % 3));
    ftensor *all[] = { &q, &k, &v, &o, &dq, &dk, &dv, &dout, &bias };
    enum { NT = 9 };

    /* Aliasing: an output view placed inside another tensor's memory (inputs or outputs). */
    uint8_t al = (uint8_t)rd(&r, 1);
    int aliased = 0;
    if (al >= 200) {
        ftensor *outs[4] = { &o, &dq, &dk, &dv };
        ftensor *dst = outs[al % 4], *src = all[(al / 4) % NT];
        if (dst != src && dst->buf && src->buf && dst->bytes <= src->bytes) {
            size_t es = fa_dtype_size(dst->t.dtype);
            size_t off = (src->bytes - dst->bytes) / 2 / es * es;
            dst->t.data = (char *)src->buf + off;
            aliased = 1;
        }
    }

    /* Options. */
    int64_t Hq = q.t.shape[2];
    int64_t nh = Hq >= 0 && Hq <= 4096 ? Hq : -1;   /* per-head arrays only when sensible */
    farr slopes, sinks, dsinks;
    farr_make(&slopes, nh > 0 ? nh : 0, 0.05f);
    farr_make(&sinks, nh > 0 ? nh : 0, -0.5f);
    farr_make(&dsinks, nh > 0 ? nh : 0, -3.0f);
    fa_options opt;
    memset(&opt, 0, sizeof opt);
    uint8_t of = (uint8_t)rd(&r, 1);
    if (of & 1) opt.scale = (float)(int8_t)rd(&r, 1) / 16.0f;
    if (of & 2) opt.causal = (fa_causal)(rd(&r, 1) % 4);
    if (of & 4) { opt.window = (int)(rd(&r, 1) % 3); opt.window_left = rd_size(&r, 5); opt.window_right = rd_size(&r, 5); }
    if (of & 8) opt.softcap = (float)(int8_t)rd(&r, 1);
    if ((of & 16) && nh >= 0) opt.alibi_slopes = slopes.p;
    if ((of & 32) && nh >= 0) opt.sinks = sinks.p;
    if (of & 64) opt.dropout_p = (float)(int8_t)rd(&r, 1) / 100.0f;
    if (of & 128) opt.bias = &bias.t;
    uint8_t special = (uint8_t)rd(&r, 1);
    if (special == 0xff) opt.scale = NAN;
    if (special == 0xfe) opt.softcap = INFINITY;
    if (special == 0xfd) opt.dropout_p = NAN;
    opt.seed = rd(&r, 2);
    const fa_options *popt = special == 0xfc ? NULL : &opt;
    float *pdsinks = (rd(&r, 1) & 1) && nh >= 0 ? dsinks.p : NULL;

    /* lse: exactly the elements the call may touch ([B, H, Sq] or [H, total_q]). */
    __int128 lse_need = 0;
    int shapes_ok = 1;
    for (int i = 0; i < NT; i++)
        for (int d = 0; d < 4; d++) if (all[i]->t.shape[d] < 0) shapes_ok = 0;
    const fa_tensor *lt = op == OP_COMBINE ? &o.t : &q.t;   /* whose rows lse has */
    int lse_fits = lt->shape[0] >= 0 && lt->shape[1] >= 0 && lt->shape[2] >= 0;
    if (lse_fits) {
        lse_need = (__int128)lt->shape[0] * lt->shape[1];
        if (lse_need > 65536 && lt->shape[2] > 0) lse_need = 65537;
        else lse_need *= lt->shape[2];
    }
    lse_fits = lse_fits && lse_need <= 65536;
    farr lse;
    farr_make(&lse, lse_fits ? (int64_t)lse_need : 0, -7.0f);
    uint8_t lsel = (uint8_t)rd(&r, 1);
    float *plse = lse_fits && lsel < 230 ? lse.p : NULL;

    /* Index arrays. */
    int64_t nb = rd_size(&r, 4);                         /* varlen batch */
    int64_t nbs = nb >= 0 && nb <= 64 ? nb : 0;          /* array sizes: huge batches get none */
    int32_t *cuq = make_index(&r, nbs + 1, 4, 1), *cuk = make_index(&r, nbs + 1, 4, 1);
    /* the kv-cache arrays have one entry (row of pages) per sequence of q as passed: q's
       shape[0], which a "wrong shape" mutation may have made different from B */
    const int64_t Bq = q.t.shape[0];
    int64_t Bs = Bq >= 0 && Bq <= 64 ? Bq : 0;
    int64_t mps = maxpages >= 1 && maxpages <= 16 ? maxpages : 1;
    int32_t *cache = make_index(&r, Bs, Sc >= 0 && Sc < 64 ? Sc : 9, 0);
    int32_t *table = make_index(&r, Bs * mps, npages >= 0 && npages < 64 ? npages : 8, 0);
    int64_t maxq = rd_size(&r, 9), maxk = rd_size(&r, 9);
    uint8_t nulls = (uint8_t)rd(&r, 1);   /* one pointer argument set to NULL */
    int nullarg = nulls >= 224 ? nulls % 8 : -1;

    int qry = op == OP_QUERY || op == OP_QUERY_BWD;
    int fwd_like = op == OP_FWD || op == OP_QUERY || op == OP_FWD_VL;
    int bwd_like = op == OP_BWD || op == OP_QUERY_BWD || op == OP_BWD_VL;

    /* The tensors each operation uses, and whether each is written. */
    const fa_tensor *pq = &q.t, *pk = &k.t, *pv = &v.t, *pdout = &dout.t;
    fa_tensor *po = &o.t, *pdq = &dq.t, *pdk = &dk.t, *pdv = &dv.t;
    if (nullarg == 0) pq = NULL;
    if (nullarg == 1) pk = NULL;
    if (nullarg == 2) pv = NULL;
    if (nullarg == 3) po = NULL;
    if (nullarg == 4) pdq = NULL;
    if (nullarg == 5) pdout = NULL;
    int append = op == OP_KV && !(rd(&r, 1) & 3) ? 0 : 1;
    int kn_only = op == OP_KV && (rd(&r, 1) & 15) == 0;   /* k_new without v_new */
    const fa_tensor *pkn = op == OP_KV && append ? &dk.t : NULL;
    const fa_tensor *pvn = op == OP_KV && append && !kn_only ? &dv.t : NULL;

    int used[NT] = { 0 };
    used[3] = 1;   /* out */
    if (op != OP_COMBINE) used[0] = used[1] = used[2] = 1;
    if (bwd_like) used[4] = used[5] = used[6] = used[7] = 1;
    if (op == OP_KV && append) used[5] = used[6] = 1;
    if (opt.bias && popt) used[8] = 1;

    int must_fail = 0, skip = 0;
    int fits = 1;
    for (int i = 0; i < NT; i++) if (used[i] && !all[i]->fits) fits = 0;
    int writes_kv = op == OP_KV && pkn && pvn;
    if (op != OP_COMBINE) {
        must_fail |= !pq || !pk || !pv || !po;
        must_fail |= opts_bad(popt, op == OP_FWD || op == OP_BWD || qry, qry);
        if (pq) must_fail |= tensor_bad(pq, 0, qry);
        if (pk) must_fail |= tensor_bad(pk, writes_kv, qry);
        if (pv) must_fail |= tensor_bad(pv, writes_kv, qry);
        if (po) must_fail |= tensor_bad(po, 1, qry);
        if (!must_fail && shapes_ok)
            must_fail |= qkv_bad(pq, pk, pv, po, op != OP_FWD_VL && op != OP_BWD_VL && op != OP_KV);
    }
    if (bwd_like) {
        must_fail |= !pdq || !pdk || !pdv || !pdout || !plse;
        if (pdq) must_fail |= tensor_bad(pdq, 1, qry);
        if (pdk) must_fail |= tensor_bad(pdk, 1, qry);
        if (pdv) must_fail |= tensor_bad(pdv, 1, qry);
        if (pdout) must_fail |= tensor_bad(pdout, 0, qry);
        if (pdsinks && !(popt && popt->sinks)) must_fail = 1;
    }
    if (op == OP_FWD_VL || op == OP_BWD_VL) {
        must_fail |= nb < 0 || maxq < 0 || maxk < 0 || (nullarg == 6) || (nullarg == 7);
        if (pq && pq->shape[0] != 1) must_fail = 1;
        if (nb > 64 && nb <= INT32_MAX) skip = 1;   /* no arrays that long: never run it */
    }
    if (op == OP_KV) {
        if ((pkn != NULL) != (pvn != NULL)) must_fail = 1;
        if (pkn) must_fail |= tensor_bad(pkn, 0, 0) || tensor_bad(pvn, 0, 0);
        if (Bq > 0 && nullarg == 6) must_fail = 1;
        if (paged && maxpages < 1) must_fail = 1;
        if (Bq > 64 || (paged && maxpages > 16)) skip = 1;   /* arrays not that long */
    }
    if (op == OP_COMBINE) {
        must_fail |= !po || tensor_bad(po, 1, 0);
    }

    /* run it? */
    int run_real = (fits || must_fail) && !skip;
    /* A valid dense call whose work is huge (inputs may be stride-0 views of a few bytes,
       e.g. k/v [1, 2^62, 1, 1] against real query rows) would run for as long as it asks
       to; it goes through fa_query instead. The bound is on the work the call requests,
       rows x keys x heads, not on any dimension alone: empty problems with huge dims,
       huge head dims, huge batches with Sq = 0 and varlen bounds of 2^62 all run. */
    if (!must_fail && (op == OP_FWD || op == OP_BWD) && shapes_ok) {
        __int128 work = (__int128)q.t.shape[0] * q.t.shape[1];
        if (work > ((__int128)1 << 40)) work = (__int128)1 << 40;
        work *= q.t.shape[2] < (1 << 20) ? q.t.shape[2] : (1 << 20);
        if (work > ((__int128)1 << 40)) work = (__int128)1 << 40;
        work *= k.t.shape[1] < ((int64_t)1 << 40) ? k.t.shape[1] : ((int64_t)1 << 40);
        if (work > ((__int128)1 << 32)) run_real = 0;
    }
    if (skip) run_real = 0;
    for (int i = 0; i < NT; i++) snapshot(all[i]);

    fa_status st = FA_OK;
    const char *fn = NULL, *kname = NULL;
    int op_call = 1;
    switch (op) {
    case OP_FWD: case OP_QUERY:
        if (skip) break;
        if (run_real && op == OP_FWD) {
            fn = "fa_forward";
            st = fa_forward(ctx, po, plse, pq, pk, pv, popt);
        } else {
            fn = "fa_query";
            st = fa_query(ctx, nullarg == 6 ? NULL : &kname, po, plse, pq, pk, pv, popt);
            if (nullarg == 6) must_fail = 1;
            if (st == FA_OK && !kname) fail(fn, "FA_OK without a kernel name", ctx);
        }
        break;
    case OP_BWD: case OP_QUERY_BWD:
        if (skip) break;
        if (run_real && op == OP_BWD) {
            fn = "fa_backward";
            st = fa_backward(ctx, pdq, pdk, pdv, pdsinks, pdout, pq, pk, pv, po, plse, popt);
        } else {
            fn = "fa_query_backward";
            st = fa_query_backward(ctx, nullarg == 6 ? NULL : &kname, pdq, pdk, pdv, pdsinks,
                                   pdout, pq, pk, pv, po, plse, popt);
            if (nullarg == 6) must_fail = 1;
            if (st == FA_OK && !kname) fail(fn, "FA_OK without a kernel name", ctx);
        }
        break;
    case OP_FWD_VL:
        if (!run_real) break;
        fn = "fa_forward_varlen";
        st = fa_forward_varlen(ctx, po, plse, pq, pk, pv, nullarg == 6 ? NULL : cuq,
                               nullarg == 7 ? NULL : cuk, nb, maxq, maxk, popt);
        break;
    case OP_BWD_VL:
        if (!run_real) break;
        fn = "fa_backward_varlen";
        st = fa_backward_varlen(ctx, pdq, pdk, pdv, pdsinks, pdout, pq, pk, pv, po, plse,
                                nullarg == 6 ? NULL : cuq, nullarg == 7 ? NULL : cuk, nb, maxq,
                                maxk, popt);
        break;
    case OP_KV:
        if (!run_real) break;
        fn = "fa_forward_kvcache";
        st = fa_forward_kvcache(ctx, po, plse, pq, (fa_tensor *)pk, (fa_tensor *)pv, pkn, pvn,
                                nullarg == 6 ? NULL : cache, paged ? table : NULL, maxpages,
                                popt);
        break;
    default: {   /* OP_COMBINE: parts shaped like out (sometimes perturbed) */
        if (!run_real) break;
        int n = (int)(rd(&r, 1) % 4) - (special == 0xfb ? 3 : 0);
        fa_tensor parts[3];
        const float *lps[3];
        farr lpa[3];
        const ftensor *src[3] = { &dout, &dq, &o };
        int parts_fit = lse_fits;
        for (int i = 0; i < 3; i++) {
            parts[i] = src[i]->t;
            farr_make(&lpa[i], lse_fits ? (int64_t)lse_need : 0, (float)i - 1.0f);
            lps[i] = (nullarg == 4 && i == 1) ? NULL : lpa[i].p;
            if (i >= n) continue;
            if (tensor_bad(&parts[i], 0, 0)) must_fail = 1;
            for (int d = 0; d < 4; d++)
                if (parts[i].shape[d] != o.t.shape[d]) must_fail = 1;
            if (!src[i]->fits) parts_fit = 0;
            if (i == 1 && nullarg == 4 && lse_need > 0) must_fail = 1;
        }
        if (n < 1 || nullarg == 6 || nullarg == 7) must_fail = 1;
        if (parts_fit || must_fail) {
            /* parts[2] is out itself: combine reads a part that is also its output */
            fn = "fa_combine";
            st = fa_combine(ctx, po, plse, nullarg == 6 ? NULL : parts,
                            nullarg == 7 ? NULL : lps, n);
        }
        for (int i = 0; i < 3; i++) {
            if (st != FA_OK && farr_changed(&lpa[i])) fail("fa_combine", "a failed call wrote into lse_parts", ctx);
            farr_free(&lpa[i]);
        }
        break;
    }
    }

    if (fn) {
        check_status(ctx, st, fn, must_fail, op_call);
        if (st != FA_OK) {
            for (int i = 0; i < NT; i++)
                if (changed(all[i])) {
                    char m[64];
                    snprintf(m, sizeof m, "a failed call wrote into tensor #%d", i);
                    fail(fn, m, ctx);
                }
            if (farr_changed(&lse)) fail(fn, "a failed call wrote into lse", ctx);
            if (farr_changed(&dsinks)) fail(fn, "a failed call wrote into dsinks", ctx);
            valid_call_still_works(ctx);
        } else if (!aliased && op != OP_COMBINE) {
            /* inputs are const: a successful call changes none (kvcache appends excepted) */
            const ftensor *ins[] = { &q, &k, &v, &dout, &bias, &dk, &dv };
            int nin = bwd_like ? 4 : 3;
            if (op == OP_KV) nin = writes_kv ? 1 : 3;
            for (int i = 0; i < nin; i++)
                if (changed(ins[i])) fail(fn, "a successful call wrote into an input", ctx);
            if (opt.bias && popt && changed(&bias)) fail(fn, "a successful call wrote into the bias", ctx);
            if (op == OP_KV && writes_kv && (changed(&dk) || changed(&dv)))
                fail(fn, "the kvcache call wrote into k_new/v_new", ctx);
            if (bwd_like && changed(&o)) fail(fn, "the backward wrote into out", ctx);
        }
    }
    (void)fwd_like;
    free(cuq); free(cuk); free(cache); free(table);
    farr_free(&slopes); farr_free(&sinks); farr_free(&dsinks); farr_free(&lse);
    for (int i = 0; i < NT; i++) free_tensor(all[i]);
    return 0;
}
