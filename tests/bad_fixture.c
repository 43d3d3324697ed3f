/* bad_fixture.c - the bad-argument suites' fixture (bad_fixture.h): the valid call of
 * each public operation over one mem_t, its fill, the call itself, and the whole-word
 * search of an argument name in an error message.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bad_fixture.h"
#include "dtype.h"

const char *const FN_NAMES[] = { "fa_forward", "fa_backward", "fa_forward_varlen",
    "fa_backward_varlen", "fa_forward_kvcache", "fa_forward_kvcache", "fa_combine", "fa_query",
    "fa_query_backward" };

static fa_tensor T(void *data, fa_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d)
{
    return fa_tensor_contiguous(data, dt, b, s, h, d);
}

void fx_init(fx *f, mem_t *m, int which)
{
    memset(f, 0, sizeof *f);
    f->m = m;
    int vl = which == F_FWD_VL || which == F_BWD_VL;
    if (vl) {   /* packed: q [1, 10, H, d] with cu_q {0, 4, 10}; k [1, 14, Hkv, d] cu_k {0, 6, 14} */
        f->q = T(m->q, FA_F16, 1, B_ * SQ, H_, D_); f->k = T(m->k, FA_F16, 1, B_ * SK, HK, D_);
        f->v = T(m->v, FA_F16, 1, B_ * SK, HK, D_); f->out = T(m->out, FA_F16, 1, B_ * SQ, H_, D_);
        f->dout = T(m->dout, FA_F16, 1, B_ * SQ, H_, D_); f->dq = T(m->dq, FA_F16, 1, B_ * SQ, H_, D_);
        f->dk = T(m->dk, FA_F16, 1, B_ * SK, HK, D_); f->dv = T(m->dv, FA_F16, 1, B_ * SK, HK, D_);
        m->cuq[0] = 0; m->cuq[1] = 4; m->cuq[2] = 10;
        m->cuk[0] = 0; m->cuk[1] = 6; m->cuk[2] = 14;
        f->maxq = 6; f->maxk = 8;
    } else {
        f->q = T(m->q, FA_F16, B_, SQ, H_, D_); f->k = T(m->k, FA_F16, B_, SK, HK, D_);
        f->v = T(m->v, FA_F16, B_, SK, HK, D_); f->out = T(m->out, FA_F16, B_, SQ, H_, D_);
        f->dout = T(m->dout, FA_F16, B_, SQ, H_, D_); f->dq = T(m->dq, FA_F16, B_, SQ, H_, D_);
        f->dk = T(m->dk, FA_F16, B_, SK, HK, D_); f->dv = T(m->dv, FA_F16, B_, SK, HK, D_);
    }
    f->obwd = f->out;
    f->obwd.data = m->dout;   /* backward's `out` input: any finite values */
    f->bias = T(m->bias, FA_F32, B_, SQ, H_, SK);
    if (which == F_KV_PAGED) {
        f->kc = T(m->kc, FA_F16, B_ * 3, PS, HK, D_); f->vc = T(m->vc, FA_F16, B_ * 3, PS, HK, D_);
        for (int x = 0; x < B_ * 3; x++) m->bt[x] = (x * 5) % (B_ * 3);
        f->bt = m->bt; f->maxpages = 3;
    } else {
        f->kc = T(m->kc, FA_F16, B_, SC, HK, D_); f->vc = T(m->vc, FA_F16, B_, SC, HK, D_);
    }
    f->kn = T(m->kn, FA_F16, B_, SN, HK, D_); f->vn = T(m->vn, FA_F16, B_, SN, HK, D_);
    m->cs[0] = 3; m->cs[1] = 10;
    for (int p = 0; p < 2; p++) {
        f->parts[p] = T(m->parts[p], FA_F32, B_, SQ, H_, D_);
        f->lps[p] = m->lparts[p];
    }
    f->pout = &f->out; f->pq = &f->q; f->pk = &f->k; f->pv = &f->v; f->pdq = &f->dq;
    f->pdk = &f->dk; f->pdv = &f->dv; f->pdout = &f->dout; f->pobwd = &f->obwd;
    f->pkc = &f->kc; f->pvc = &f->vc; f->pkn = &f->kn; f->pvn = &f->vn; f->pparts = f->parts;
    f->plps = f->lps;
    f->lse = m->lse; f->lse_in = m->lse_in; f->dsinks = NULL;
    f->cuq = m->cuq; f->cuk = m->cuk; f->cs = m->cs;
    f->batch = B_; f->n = 2;
    f->popt = &f->opt;
    f->kname = &f->kname_store;
}

void mem_fill(mem_t *m)
{
    tu_rng r = { 31337 };
    uint16_t *h16[] = { m->q, m->k, m->v, m->out, m->dout, m->dq, m->dk, m->dv, m->kc, m->vc, m->kn, m->vn };
    size_t n16[] = { sizeof m->q, sizeof m->k, sizeof m->v, sizeof m->out, sizeof m->dout,
                     sizeof m->dq, sizeof m->dk, sizeof m->dv, sizeof m->kc, sizeof m->vc,
                     sizeof m->kn, sizeof m->vn };
    for (int a = 0; a < 12; a++)
        for (size_t i = 0; i < n16[a] / 2; i++) h16[a][i] = fa_f32_to_f16((float)tu_unif(&r));
    for (size_t i = 0; i < sizeof m->lse / 4; i++) { m->lse[i] = NAN; m->lse_in[i] = 2.0f + (float)tu_unif(&r); }
    for (int h = 0; h < H_; h++) { m->dsinks[h] = NAN; m->sinks[h] = (float)tu_unif(&r); m->slopes[h] = 0.1f; }
    for (size_t i = 0; i < sizeof m->bias / 4; i++) m->bias[i] = (float)tu_unif(&r);
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i < sizeof m->parts[p] / 4; i++) m->parts[p][i] = (float)tu_unif(&r);
        for (size_t i = 0; i < sizeof m->lparts[p] / 4; i++) m->lparts[p][i] = (float)tu_unif(&r);
    }
}

fa_status fx_call(fa_context *ctx, fx *f, int which)
{
    switch (which) {
    case F_FWD: return fa_forward(ctx, f->pout, f->lse, f->pq, f->pk, f->pv, f->popt);
    case F_BWD: return fa_backward(ctx, f->pdq, f->pdk, f->pdv, f->dsinks, f->pdout, f->pq, f->pk,
                                   f->pv, f->pobwd, f->lse_in, f->popt);
    case F_FWD_VL: return fa_forward_varlen(ctx, f->pout, f->lse, f->pq, f->pk, f->pv, f->cuq,
                                            f->cuk, f->batch, f->maxq, f->maxk, f->popt);
    case F_BWD_VL: return fa_backward_varlen(ctx, f->pdq, f->pdk, f->pdv, f->dsinks, f->pdout,
                                             f->pq, f->pk, f->pv, f->pobwd, f->lse_in, f->cuq,
                                             f->cuk, f->batch, f->maxq, f->maxk, f->popt);
    case F_KV: case F_KV_PAGED:
        return fa_forward_kvcache(ctx, f->pout, f->lse, f->pq, f->pkc, f->pvc, f->pkn, f->pvn,
                                  f->cs, f->bt, f->maxpages, f->popt);
    case F_COMBINE: return fa_combine(ctx, f->pout, f->lse, f->pparts, f->plps, f->n);
    case F_QUERY: return fa_query(ctx, f->kname, f->pout, f->lse, f->pq, f->pk, f->pv, f->popt);
    case F_QUERY_BWD: return fa_query_backward(ctx, f->kname, f->pdq, f->pdk, f->pdv, f->dsinks,
                                               f->pdout, f->pq, f->pk, f->pv, f->pobwd,
                                               f->lse_in, f->popt);
    }
    return FA_ERR_INTERNAL;
}

/* whole-word search of any alternative in "a|b|c" */
int names_arg(const char *msg, const char *expect)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", expect);
    for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|")) {
        size_t n = strlen(tok);
        for (const char *p = strstr(msg, tok); p; p = strstr(p + 1, tok)) {
            int before = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '>');
            char a = p[n];
            int after = !(isalnum((unsigned char)a) || a == '_');
            if (before && after) return 1;
        }
    }
    return 0;
}
