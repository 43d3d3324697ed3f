/* bad_fixture.h - the fixture the bad-argument suites share (test_bad_input.c,
 * test_bad_context.c): one small problem of every public operation (dense, varlen, KV
 * cache contiguous and paged, combine, the two queries) whose memory all lives in one
 * mem_t, so that a failing call can be checked to have written nothing; fx_init points
 * an fx at it for one operation, fx_call makes that call, and names_arg checks that an
 * error message names an argument as the header spells it.
 */
#ifndef FA_TEST_BAD_FIXTURE_H
#define FA_TEST_BAD_FIXTURE_H

#include "testutil.h"

enum { F_FWD, F_BWD, F_FWD_VL, F_BWD_VL, F_KV, F_KV_PAGED, F_COMBINE, F_QUERY, F_QUERY_BWD };
extern const char *const FN_NAMES[];   /* the function each F_* calls */

#define B_ 2
#define SQ 5
#define SK 7
#define H_ 4
#define HK 2
#define D_ 16
#define SC 12   /* cache capacity */
#define SN 2    /* k_new rows */
#define PS 4    /* page size */

/* All memory of the fixture lives in these regions; a failing call may change none. */
typedef struct {
    uint16_t q[B_ * SQ * H_ * D_], k[B_ * SK * HK * D_], v[B_ * SK * HK * D_];
    uint16_t out[B_ * SQ * H_ * D_], dout[B_ * SQ * H_ * D_];
    uint16_t dq[B_ * SQ * H_ * D_], dk[B_ * SK * HK * D_], dv[B_ * SK * HK * D_];
    float lse[B_ * H_ * SQ], lse_in[B_ * H_ * SQ], dsinks[H_], sinks[H_], slopes[H_];
    float bias[B_ * SQ * H_ * SK];
    uint16_t kc[B_ * SC * HK * D_], vc[B_ * SC * HK * D_], kn[B_ * SN * HK * D_], vn[B_ * SN * HK * D_];
    float parts[2][B_ * SQ * H_ * D_], lparts[2][B_ * H_ * SQ];
    int32_t cuq[B_ + 1], cuk[B_ + 1], cs[B_], bt[B_ * 3];
} mem_t;

typedef struct {
    mem_t *m;
    fa_tensor out, q, k, v, dq, dk, dv, dout, obwd, bias, kc, vc, kn, vn, parts[2];
    fa_tensor *pout, *pq, *pk, *pv, *pdq, *pdk, *pdv, *pdout, *pobwd, *pkc, *pvc, *pkn, *pvn, *pparts;
    float *lse, *dsinks;
    const float *lse_in, *lps[2];
    const float *const *plps;
    const int32_t *cuq, *cuk, *cs, *bt;
    int64_t batch, maxq, maxk, maxpages;
    int n;
    fa_options opt;
    const fa_options *popt;
    const char **kname;
    const char *kname_store;
} fx;

/* The valid call of operation `which` (F_*) on m; every pointer member may then be broken. */
void fx_init(fx *f, mem_t *m, int which);
/* Fill m with the fixture's values (the same every time). */
void mem_fill(mem_t *m);
fa_status fx_call(fa_context *ctx, fx *f, int which);
/* whole-word search of any alternative in "a|b|c" */
int names_arg(const char *msg, const char *expect);

#endif
