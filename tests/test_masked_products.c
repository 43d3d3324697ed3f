/* test_masked_products.c - the CPU loop nests' products over a partly masked tile
 * (masked.h: fa_cpu_rowA_seen, fa_cpu_rowA_keys_seen, fa_cpu_colA_rows_seen), called
 * directly, against the whole-tile gemm calls of each kernel set: the same value at every
 * pair a row sees, for causal, window, ragged and non-monotone visible ranges; their AMX
 * counterparts on the C emulation of the tile kernels; and the bf16 dot-product wrappers
 * where the CPU has AVX-512 BF16. A set that cannot run here is named on stderr. The
 * softmax and AMX packing kernels are test_kernels.c's.
 */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_sets.h"
#include "masked.h"

/* Visible ranges of nq rows over a tile at key j0 of nk keys, by pattern: 0 causal
   diagonal (lo 0, hi = j0 + r + 1 + off), 1 window of 40 keys, 2 random (non-monotone,
   some rows empty), 3 every key, 4 none. */
static void seen_ranges(int pat, int nq, int nk, int64_t j0, int64_t *lo, int64_t *hi)
{
    int off = (int)(unif() * 40) - 20;
    for (int r = 0; r < nq; r++) {
        switch (pat) {
        case 0: lo[r] = 0; hi[r] = j0 + r + 1 + off; break;
        case 1: lo[r] = j0 + r + off - 40; hi[r] = j0 + r + off; break;
        case 2: {
            int64_t a = j0 - 5 + (int64_t)(unif() * (nk + 10)), b = j0 - 5 + (int64_t)(unif() * (nk + 10));
            lo[r] = a < b ? a : b; hi[r] = a < b ? b : a;
            if (unif() < 0.1) hi[r] = lo[r];
            break;
        }
        case 3: lo[r] = j0 - 3; hi[r] = j0 + nk + 3; break;
        default: lo[r] = j0 + nk; hi[r] = j0 + nk + 5; break;
        }
    }
}

static float rnd(void) { return (float)(unif() * 2.0 - 1.0); }

START_TEST(test_seen_products)
{
    for (int si = 0; si < nsets; si++) {
        if (!sets[si].ok) continue;
        const fa_cpu_kernels *K = sets[si].k;
        for (int it = 0; it < 40; it++) {
            int pat = it % 5;
            int nk = 1 + (int)(unif() * 300), nq = 1 + (int)(unif() * 300);
            int kd = 1 + (int)(unif() * 150), n = 1 + (int)(unif() * 150);
            int64_t j0 = (int64_t)(unif() * 1000);
            int64_t ld = nq + 16, lda = kd + 3, ldn = n + 5;
            int64_t *lo = malloc(sizeof(int64_t) * nq), *hi = malloc(sizeof(int64_t) * nq);
            seen_ranges(pat, nq, nk, j0, lo, hi);
#define SEEN(j, r) (j0 + (j) >= lo[r] && j0 + (j) < hi[r])
            /* S^T-shaped product: keys x rows from K rows [nk][kd] and Q^T [kd][nq] */
            float *A = malloc(sizeof(float) * nk * lda), *B = malloc(sizeof(float) * kd * ld);
            float *c0 = malloc(sizeof(float) * nk * ld), *c1 = malloc(sizeof(float) * nk * ld);
            for (long x = 0; x < (long)nk * lda; x++) A[x] = rnd();
            for (long x = 0; x < (long)kd * ld; x++) B[x] = rnd();
            for (long x = 0; x < (long)nk * ld; x++) c0[x] = c1[x] = NAN;
            K->gemm_rowA(nk, nq, kd, A, lda, B, ld, c0, ld, 0);
            fa_cpu_rowA_seen(K, 0, nk, nq, kd, A, lda, B, ld, c1, ld, j0, lo, hi);
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < nq; r++) {
                    float x0 = c0[j * ld + r], x1 = c1[j * ld + r];
                    if (SEEN(j, r))
                        ck_assert_msg(memcmp(&x0, &x1, sizeof x0) == 0,
                                      "%s rowA_seen pat %d (%d x %d, kd %d) [%d][%d]: %.9g, whole tile %.9g",
                                      sets[si].name, pat, nk, nq, kd, j, r, x1, x0);
                    else
                        ck_assert_msg(!isnan(x1), "%s rowA_seen pat %d [%d][%d] left unwritten",
                                      sets[si].name, pat, j, r);
                }
            /* a P^T / dS^T tile: 0 at the pairs no row sees */
            float *T = malloc(sizeof(float) * nk * ld), *R = malloc(sizeof(float) * nq * ldn);
            float *V = malloc(sizeof(float) * nk * ldn), *alpha = malloc(sizeof(float) * (nq + 16));
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < nq; r++) T[j * ld + r] = SEEN(j, r) ? rnd() : 0.0f;
            for (long x = 0; x < (long)nq * ldn; x++) R[x] = rnd();
            for (long x = 0; x < (long)nk * ldn; x++) V[x] = rnd();
            for (int r = 0; r < nq + 16; r++) alpha[r] = r % 3 == 0 ? 1.0f : (float)unif();
            /* dV += P^T dO: keys x n over the rows */
            float *d0 = malloc(sizeof(float) * nk * ldn), *d1 = malloc(sizeof(float) * nk * ldn);
            for (long x = 0; x < (long)nk * ldn; x++) d0[x] = d1[x] = rnd();
            K->gemm_rowA(nk, n, nq, T, ld, R, ldn, d0, ldn, 1);
            fa_cpu_rowA_keys_seen(K, nk, n, nq, T, ld, R, ldn, d1, ldn, j0, lo, hi);
            for (long x = 0; x < (long)nk * ldn; x++)
                ck_assert_msg(d0[x] == d1[x], "%s rowA_keys_seen pat %d (%d x %d, rows %d) [%ld]: %.9g, whole tile %.9g",
                              sets[si].name, pat, nk, n, nq, x, d1[x], d0[x]);
            /* O (= alpha O) += P V, dQ += dS K: rows x n over the keys */
            for (int sc = 0; sc < 2; sc++) {
                if (sc && !K->gemm_colA_scaled) continue;
                float *o0 = malloc(sizeof(float) * nq * ldn), *o1 = malloc(sizeof(float) * nq * ldn);
                for (long x = 0; x < (long)nq * ldn; x++) o0[x] = o1[x] = rnd();
                if (sc)
                    K->gemm_colA_scaled(nq, n, nk, T, ld, V, ldn, o0, ldn, alpha);
                else
                    K->gemm_colA(nq, n, nk, T, ld, V, ldn, o0, ldn, 1);
                fa_cpu_colA_rows_seen(K, 0, nq, n, nk, T, ld, V, ldn, o1, ldn, j0, lo, hi,
                                      sc ? alpha : NULL);
                for (long x = 0; x < (long)nq * ldn; x++)
                    ck_assert_msg(o0[x] == o1[x], "%s colA_rows_seen%s pat %d (%d x %d, keys %d) [%ld]: %.9g, whole tile %.9g",
                                  sets[si].name, sc ? " (scaled)" : "", pat, nq, n, nk, x, o1[x], o0[x]);
                free(o0); free(o1);
            }
#undef SEEN
            free(lo); free(hi); free(A); free(B); free(c0); free(c1); free(T); free(R); free(V);
            free(alpha); free(d0); free(d1);
        }
    }
}
END_TEST

/* The AMX wrappers against whole-tile calls, on the C emulation of the tile kernels (the
   same contract; linked on every machine): the same value at every pair a row sees. */
static uint16_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static int rup(int n, int m) { return (n + m - 1) / m * m; }

/* fa_cpu_amx_acc_seen(E, keys, m, ...) against the whole-tile gemm: C [m16][n16] (random)
   += A [m][lda] (bf16 rows, 0 at unseen pairs, k < nk2) x B (random pairs over k). */
static void check_amx_acc(const fa_cpu_amx_kernels *E, int keys, int m, int n, int nk2,
                          const uint16_t *A, int lda, int64_t j0, const int64_t *lo,
                          const int64_t *hi, int pat)
{
    int n16 = rup(n, 16), m16 = rup(m, 16), k32 = rup(nk2, 32);
    uint32_t *B = calloc((size_t)k32 / 2 * n16, 4);
    for (int k = 0; k < nk2; k++)
        for (int x = 0; x < n; x++)
            B[(k / 2) * n16 + x] |= (uint32_t)bf16_of(rnd()) << (16 * (k & 1));
    float *c0 = malloc(sizeof(float) * m16 * n16), *c1 = malloc(sizeof(float) * m16 * n16);
    for (int x = 0; x < m16 * n16; x++) c0[x] = c1[x] = rnd();
    E->gemm(m, n, k32 / 32, A, lda, B, n16, c0, n16, 1);
    fa_cpu_amx_acc_seen(E, keys, m, n, nk2, A, lda, B, n16, c1, n16, j0, lo, hi);
    for (int i = 0; i < m; i++)
        for (int x = 0; x < n; x++)
            ck_assert_msg(c0[i * n16 + x] == c1[i * n16 + x],
                          "amx_acc_seen (%s) pat %d [%d][%d]: %.9g, whole tile %.9g",
                          keys ? "keys" : "rows", pat, i, x, c1[i * n16 + x], c0[i * n16 + x]);
    free(B); free(c0); free(c1);
}

START_TEST(test_amx_seen_products)
{
    const fa_cpu_amx_kernels *E = &fa_cpu_kernels_amx_emu;
    for (int it = 0; it < 30; it++) {
        int pat = it % 5;
        int nk = 1 + (int)(unif() * 200), nq = 1 + (int)(unif() * 200);
        int k32 = 1 + (int)(unif() * 3), n = 1 + (int)(unif() * 90);
        int64_t j0 = (int64_t)(unif() * 1000);
        int nk16 = rup(nk, 16), nk32 = rup(nk, 32), nq16 = rup(nq, 16), nq32 = rup(nq, 32);
        int n16 = rup(n, 16);
        int64_t *lo = malloc(sizeof(int64_t) * nq), *hi = malloc(sizeof(int64_t) * nq);
        seen_ranges(pat, nq, nk, j0, lo, hi);
#define SEEN(j, r) (j0 + (j) >= lo[r] && j0 + (j) < hi[r])
        /* S^T = A B: A [nk16][32 k32] bf16 rows, B [16 k32][nq16] pairs */
        int64_t lda = 32 * k32;
        uint16_t *A = calloc((size_t)nk16 * lda, 2);
        uint32_t *B = calloc((size_t)16 * k32 * nq16, 4);
        float *c0 = malloc(sizeof(float) * nk16 * nq16), *c1 = malloc(sizeof(float) * nk16 * nq16);
        for (int j = 0; j < nk; j++)
            for (int x = 0; x < lda; x++) A[j * lda + x] = bf16_of(rnd());
        for (int x = 0; x < 16 * k32; x++)
            for (int r = 0; r < nq; r++)
                B[x * nq16 + r] = bf16_of(rnd()) | (uint32_t)bf16_of(rnd()) << 16;
        for (int x = 0; x < nk16 * nq16; x++) c0[x] = c1[x] = NAN;
        E->gemm(nk, nq, k32, A, lda, B, nq16, c0, nq16, 0);
        fa_cpu_amx_rowA_seen(E, nk, nq, k32, A, lda, B, nq16, c1, nq16, j0, lo, hi);
        for (int j = 0; j < nk; j++)
            for (int r = 0; r < nq; r++)
                if (SEEN(j, r))
                    ck_assert_msg(memcmp(c0 + j * nq16 + r, c1 + j * nq16 + r, 4) == 0,
                                  "amx_rowA_seen pat %d (%d x %d) [%d][%d]: %.9g, whole tile %.9g",
                                  pat, nk, nq, j, r, c1[j * nq16 + r], c0[j * nq16 + r]);
                else
                    ck_assert_msg(!isnan(c1[j * nq16 + r]), "amx_rowA_seen [%d][%d] unwritten", j, r);
        /* a P^T tile, 0 at unseen pairs: as pairs over keys [nk32/2][nq16] and as rows
           [nk16][nq32] (keys x rows) and rows^T [nq16][nk32] (rows x keys) */
        uint32_t *Pp = calloc((size_t)nk32 / 2 * nq16, 4);
        uint16_t *Pr = calloc((size_t)nk16 * nq32, 2), *Pt = calloc((size_t)nq16 * nk32, 2);
        for (int j = 0; j < nk; j++)
            for (int r = 0; r < nq; r++) {
                uint16_t v = SEEN(j, r) ? bf16_of(rnd()) : 0;
                Pp[(j / 2) * nq16 + r] |= (uint32_t)v << (16 * (j & 1));
                Pr[j * nq32 + r] = v;
                Pt[r * nk32 + j] = v;
            }
        /* O^T [n16][nq16] += V^T [n16][nk32] P */
        uint16_t *Vt = calloc((size_t)n16 * nk32, 2);
        for (int x = 0; x < n; x++)
            for (int j = 0; j < nk; j++) Vt[x * nk32 + j] = bf16_of(rnd());
        float *o0 = malloc(sizeof(float) * n16 * nq16), *o1 = malloc(sizeof(float) * n16 * nq16);
        for (int x = 0; x < n16 * nq16; x++) o0[x] = o1[x] = rnd();
        E->gemm(n, nq, nk32 / 32, Vt, nk32, Pp, nq16, o0, nq16, 1);
        fa_cpu_amx_ot_seen(E, n, nq, nk, Vt, nk32, Pp, nq16, o1, nq16, j0, lo, hi);
        for (int x = 0; x < n; x++)
            for (int r = 0; r < nq; r++)
                ck_assert_msg(o0[x * nq16 + r] == o1[x * nq16 + r],
                              "amx_ot_seen pat %d [%d][%d]: %.9g, whole tile %.9g", pat, x, r,
                              o1[x * nq16 + r], o0[x * nq16 + r]);
        /* dV [nk16][n16] += P^T rows x dO pairs over rows; dQ [nq16][n16] += dS rows x
           K pairs over keys */
        check_amx_acc(E, 1, nk, n, nq, Pr, nq32, j0, lo, hi, pat);
        check_amx_acc(E, 0, nq, n, nk, Pt, nk32, j0, lo, hi, pat);
#undef SEEN
        free(lo); free(hi); free(A); free(B); free(c0); free(c1); free(Pp); free(Pr); free(Pt);
        free(Vt); free(o0); free(o1);
    }
}
END_TEST

/* The bf16 dot-product wrappers against whole-tile calls (sets with those kernels, where
   the CPU has AVX-512 BF16). */
START_TEST(test_bf16_seen_products)
{
    int ran = 0;
    for (int si = 0; si < nsets; si++) {
        const fa_cpu_kernels *K = sets[si].k;
        if (!sets[si].ok || !K->gemm_bf16_rowA) continue;
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx512bf16")) continue;
        ran = 1;
        for (int it = 0; it < 30; it++) {
            int pat = it % 5;
            int nk = 1 + (int)(unif() * 300), nq = 1 + (int)(unif() * 300);
            int kp = 1 + (int)(unif() * 70), n = 1 + (int)(unif() * 150);
            int64_t j0 = (int64_t)(unif() * 1000);
            int64_t ld = nq + 16, lda = 2 * kp + 2, ldn = n + 5;
            int nkp = (nk + 1) / 2;
            int64_t *lo = malloc(sizeof(int64_t) * nq), *hi = malloc(sizeof(int64_t) * nq);
            seen_ranges(pat, nq, nk, j0, lo, hi);
#define SEEN(j, r) (j0 + (j) >= lo[r] && j0 + (j) < hi[r])
            /* S^T: A bf16 rows [nk][lda], B pairs [kp][ld] */
            uint16_t *A = calloc((size_t)nk * lda, 2), *B = calloc((size_t)kp * ld * 2, 2);
            float *c0 = malloc(sizeof(float) * nk * ld), *c1 = malloc(sizeof(float) * nk * ld);
            for (long x = 0; x < (long)nk * lda; x++) A[x] = bf16_of(rnd());
            for (long x = 0; x < (long)kp * ld * 2; x++) B[x] = bf16_of(rnd());
            for (long x = 0; x < (long)nk * ld; x++) c0[x] = c1[x] = NAN;
            K->gemm_bf16_rowA(nk, nq, kp, A, lda, B, ld, c0, ld, 0);
            fa_cpu_rowA_seen(K, 1, nk, nq, kp, A, lda, B, ld, c1, ld, j0, lo, hi);
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < nq; r++)
                    if (SEEN(j, r))
                        ck_assert_msg(memcmp(c0 + j * ld + r, c1 + j * ld + r, 4) == 0,
                                      "%s rowA_seen (bf16) pat %d [%d][%d]: %.9g, whole tile %.9g",
                                      sets[si].name, pat, j, r, c1[j * ld + r], c0[j * ld + r]);
                    else
                        ck_assert_msg(!isnan(c1[j * ld + r]), "rowA_seen (bf16) [%d][%d] unwritten", j, r);
            /* O += P V: P^T pairs over keys [nkp][ld] (0 unseen and past nk), V pairs [nkp][ldn] */
            uint16_t *P = calloc((size_t)nkp * ld * 2, 2), *V = calloc((size_t)nkp * ldn * 2, 2);
            for (int j = 0; j < nk; j++) {
                for (int r = 0; r < nq; r++)
                    P[2 * ((j / 2) * ld + r) + (j & 1)] = SEEN(j, r) ? bf16_of(rnd()) : 0;
                for (int x = 0; x < n; x++) V[2 * ((j / 2) * ldn + x) + (j & 1)] = bf16_of(rnd());
            }
            float *o0 = malloc(sizeof(float) * nq * ldn), *o1 = malloc(sizeof(float) * nq * ldn);
            for (long x = 0; x < (long)nq * ldn; x++) o0[x] = o1[x] = rnd();
            K->gemm_bf16_colA(nq, n, nkp, P, ld, V, ldn, o0, ldn, 1);
            fa_cpu_colA_rows_seen(K, 1, nq, n, nk, P, ld, V, ldn, o1, ldn, j0, lo, hi, NULL);
            for (int r = 0; r < nq; r++)
                for (int x = 0; x < n; x++)
                    ck_assert_msg(o0[r * ldn + x] == o1[r * ldn + x],
                                  "%s colA_rows_seen (bf16) pat %d [%d][%d]: %.9g, whole tile %.9g",
                                  sets[si].name, pat, r, x, o1[r * ldn + x], o0[r * ldn + x]);
#undef SEEN
            free(lo); free(hi); free(A); free(B); free(c0); free(c1); free(P); free(V);
            free(o0); free(o1);
        }
    }
    if (!ran)
        fprintf(stderr, "NOTE: test_masked_products: the bf16 dot-product wrappers not run: no kernel set with them runs here\n");
}
END_TEST

int main(void)
{
    find_sets("test_masked_products");
    Suite *su = suite_create("masked_products");
    TCase *tp = tcase_create("products");
    tcase_set_timeout(tp, 60);
    tcase_add_test(tp, test_seen_products);
    tcase_add_test(tp, test_amx_seen_products);
    tcase_add_test(tp, test_bf16_seen_products);
    suite_add_tcase(su, tp);
    return tu_main(su);
}
