/* rule.c - the tolerance rule (see oracle.h): one comparison of a result with the oracle,
 * given the naive models' error and the floor's ingredients. */
#include <math.h>

#include "oracle.h"

double or_eps(fa_dtype t)
{
    switch (t) {
    case FA_F16: return 0x1p-10;
    case FA_BF16: return 0x1p-7;
    default: return 0x1p-23;
    }
}

fa_dtype or_coarser(fa_dtype a, fa_dtype b)
{
    return or_eps(a) >= or_eps(b) ? a : b;
}

double or_max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

int or_tol_plain(const double *ours, const double *orc, const double *naive, int64_t n,
                 fa_dtype in_dt, fa_dtype odt, double factor, or_cmp *r)
{
    return or_tol(ours, orc, naive, n, in_dt, odt, factor, 0.0, 1.0, 0.0, r);
}

int or_tol(const double *ours, const double *orc, const double *naive, int64_t n,
           fa_dtype in_dt, fa_dtype odt, double factor, double ref_mag, double floor_ulps,
           double term_floor, or_cmp *r)
{
    r->err = r->nerr = r->mag = 0.0;
    r->worst = -1;
    r->ours_w = r->orc_w = 0.0;
    int ok = 1;
    for (int64_t x = 0; x < n; x++) {
        if (!isfinite(orc[x])) {
            int same = isnan(orc[x]) ? isnan(ours[x]) : ours[x] == orc[x];
            if (!same && ok) {
                ok = 0; r->worst = x; r->ours_w = ours[x]; r->orc_w = orc[x];
                r->err = INFINITY;
            }
            continue;
        }
        double a = fabs(orc[x]);
        if (a > r->mag) r->mag = a;
        double ne = fabs(naive[x] - orc[x]);
        if (isfinite(ne) && ne > r->nerr) r->nerr = ne;
        double e = fabs(ours[x] - orc[x]);
        if (isnan(e)) e = INFINITY;
        if (ok && e > r->err) { r->err = e; r->worst = x; r->ours_w = ours[x]; r->orc_w = orc[x]; }
    }
    double fm = r->mag > ref_mag ? r->mag : ref_mag;
    r->bound = factor * r->nerr + floor_ulps * fm * or_eps(odt);
    if (in_dt == FA_F32) {
        double rel = 1e-5 * fm;
        if (rel < r->bound) r->bound = rel;
    }
    /* The term floor (the roundoff of the terms a result is made of, or what the flush
       below 2^-126 can drop) is added after the fp32 relative rule: where the terms cancel
       (every oracle dq exactly 0, one key per row) the rule, at the result's magnitude,
       would demand an exact 0 that no fp32 order of the terms gives. */
    r->bound += term_floor;
    /* plus the spacing of odt at zero (its smallest subnormal), under any rule: a result
       stored in odt cannot come closer than half of it to an oracle value below it (an
       fp32 dsinks of 1e-46 is stored as 0) */
    r->bound += odt == FA_F16 ? 0x1p-24 : odt == FA_BF16 ? 0x1p-133 : 0x1p-149;
    if (!(r->err <= r->bound)) ok = 0;
    return ok;
}
