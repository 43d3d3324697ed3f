/* plot.c - the plots: an SVG written here (always), and a PNG through gnuplot when it is on
 * PATH. Three panels, each from measured points only (skipped and failed points are left
 * out, never interpolated):
 *   1. the ladder: GFLOP/s per rung, forward then backward (log scale), against the
 *      measured FMA peak,
 *   2. the block-size sweep: GFLOP/s vs block_kv, with the block_kv at which the K+V tile
 *      fills L1d and L2 marked (the cache cliff),
 *   3. the sequence-length sweep: flash and naive GFLOP/s vs S, with the S at which the
 *      naive S x S matrix leaves L2 and L3 marked.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"

#define W 900
#define PH 320

typedef struct { double x[64], y[64]; int n; const char *name, *color; } series;
typedef struct { double x; const char *label; } vmark;

static void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *s)
{
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='%s' font-size='%d'>", x, y, anchor, size);
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
    fputs("</text>\n", f);
}

/* A log-x (base 2) line chart with linear y in the panel starting at height y0. */
static void chart(FILE *f, double y0, const char *title, const char *xlabel, const series *s,
                  int ns, const vmark *vm, int nv, double hline, const char *hlabel)
{
    double L = 80, R = W - 30, T = y0 + 40, B = y0 + PH - 50;
    double xmin = INFINITY, xmax = -INFINITY, ymax = hline > 0 ? hline : 0;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < s[i].n; j++) {
            if (s[i].x[j] < xmin) xmin = s[i].x[j];
            if (s[i].x[j] > xmax) xmax = s[i].x[j];
            if (s[i].y[j] > ymax) ymax = s[i].y[j];
        }
    svg_text(f, W / 2.0, y0 + 22, "middle", 15, title);
    if (!(xmin < INFINITY)) {
        svg_text(f, W / 2.0, y0 + PH / 2.0, "middle", 13, "(no measured points)");
        return;
    }
    if (xmax <= xmin) xmax = xmin * 2;
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    double lx0 = log2(xmin), lx1 = log2(xmax);
#define XP(x) (L + (log2(x) - lx0) / (lx1 - lx0) * (R - L))
#define YP(y) (B - (y) / ymax * (B - T))
    fprintf(f, "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='#444'/>\n",
            L, T, R - L, B - T);
    for (int k = 0; k <= 4; k++) {
        char buf[32];
        double v = ymax * k / 4;
        snprintf(buf, sizeof buf, "%.3g", v);
        fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='#ddd'/>\n", L, YP(v), R, YP(v));
        svg_text(f, L - 6, YP(v) + 4, "end", 11, buf);
    }
    for (double x = pow(2, ceil(lx0)); x <= xmax * 1.0001; x *= 2) {
        char buf[32];
        snprintf(buf, sizeof buf, "%.0f", x);
        svg_text(f, XP(x), B + 16, "middle", 11, buf);
    }
    svg_text(f, (L + R) / 2, B + 34, "middle", 12, xlabel);
    fprintf(f, "<text x='20' y='%.0f' font-size='12' transform='rotate(-90 20 %.0f)' "
               "text-anchor='middle'>GFLOP/s</text>\n", (T + B) / 2, (T + B) / 2);
    if (hline > 0) {
        fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='#c00' "
                   "stroke-dasharray='6,4'/>\n", L, YP(hline), R, YP(hline));
        svg_text(f, R - 4, YP(hline) - 5, "end", 11, hlabel);
    }
    for (int i = 0; i < nv; i++) {
        if (vm[i].x < xmin || vm[i].x > xmax) continue;
        fprintf(f, "<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f' stroke='#888' "
                   "stroke-dasharray='3,3'/>\n", XP(vm[i].x), T, XP(vm[i].x), B);
        svg_text(f, XP(vm[i].x) + 4, T + 14 + 14 * i, "start", 11, vm[i].label);
    }
    for (int i = 0; i < ns; i++) {
        if (!s[i].n) continue;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", s[i].color);
        for (int j = 0; j < s[i].n; j++) fprintf(f, "%.1f,%.1f ", XP(s[i].x[j]), YP(s[i].y[j]));
        fputs("'/>\n", f);
        for (int j = 0; j < s[i].n; j++)
            fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", XP(s[i].x[j]),
                    YP(s[i].y[j]), s[i].color);
        fprintf(f, "<rect x='%.0f' y='%.0f' width='12' height='3' fill='%s'/>\n", L + 10,
                T + 10 + 16 * i, s[i].color);
        svg_text(f, L + 28, T + 15 + 16 * i, "start", 12, s[i].name);
    }
#undef XP
#undef YP
}

static void ladder_bars(FILE *f, const bench_run *R, double y0)
{
    double L = 80, Rr = W - 30, T = y0 + 40, B = y0 + PH - 60;
    const bench_result *ok[16];
    int n = 0;
    for (int i = 0; i < R->res.n && n < 16; i++)
        if (!strcmp(R->res.v[i].section, "ladder") && R->res.v[i].status == RES_OK)
            ok[n++] = &R->res.v[i];
    char title[200], shape[128];
    bp_shape_str(&R->sh, shape, sizeof shape);
    snprintf(title, sizeof title, "Ladder: %s, %d threads (log scale; red: measured FMA peak)",
             shape, R->threads);
    svg_text(f, W / 2.0, y0 + 22, "middle", 15, title);
    double peak = peak_for(&R->peak, R->threads, R->sh.dtype), ymax = peak;
    double ymin = INFINITY;
    for (int i = 0; i < n; i++) {
        if (ok[i]->gflops > ymax) ymax = ok[i]->gflops;
        if (ok[i]->gflops < ymin) ymin = ok[i]->gflops;
    }
    if (!n) {
        svg_text(f, W / 2.0, y0 + PH / 2.0, "middle", 13, "(no rung was measured)");
        return;
    }
    double l0 = floor(log10(ymin > 0 ? ymin : 0.01)), l1 = ceil(log10(ymax * 1.2));
    if (l1 <= l0) l1 = l0 + 1;
#define YL(v) (B - (log10(v) - l0) / (l1 - l0) * (B - T))
    fprintf(f, "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='#444'/>\n",
            L, T, Rr - L, B - T);
    for (double e = l0; e <= l1; e++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%g", pow(10, e));
        fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='#ddd'/>\n", L,
                YL(pow(10, e)), Rr, YL(pow(10, e)));
        svg_text(f, L - 6, YL(pow(10, e)) + 4, "end", 11, buf);
    }
    double bw = (Rr - L) / n;
    for (int i = 0; i < n; i++) {
        char buf[64];
        double x = L + i * bw + bw * 0.15, y = YL(ok[i]->gflops);
        fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='#3a6ea5'/>\n", x, y,
                bw * 0.7, B - y);
        if (ok[i]->device) snprintf(buf, sizeof buf, "%.3g (GPU)", ok[i]->gflops);
        else snprintf(buf, sizeof buf, "%.3g (%.1f%%)", ok[i]->gflops, ok[i]->pct_peak);
        svg_text(f, x + bw * 0.35, y - 4, "middle", 11, buf);
        svg_text(f, x + bw * 0.35, B + 16, "middle", 12, ok[i]->impl);
        if (!strcmp(ok[i]->dir, "bwd")) svg_text(f, x + bw * 0.35, B + 30, "middle", 11, "backward");
    }
    if (peak > 0) {
        char buf[64];
        fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='#c00' "
                   "stroke-dasharray='6,4'/>\n", L, YL(peak), Rr, YL(peak));
        snprintf(buf, sizeof buf, "FMA peak %.1f GFLOP/s", peak);
        svg_text(f, Rr - 4, YL(peak) - 5, "end", 11, buf);
    }
    fprintf(f, "<text x='20' y='%.0f' font-size='12' transform='rotate(-90 20 %.0f)' "
               "text-anchor='middle'>GFLOP/s</text>\n", (T + B) / 2, (T + B) / 2);
#undef YL
}

static void collect(const bench_run *R, const char *section, int by_bkv, series *s)
{
    for (int i = 0; i < R->res.n && s->n < 64; i++) {
        const bench_result *r = &R->res.v[i];
        if (strcmp(r->section, section) || r->status != RES_OK) continue;
        s->x[s->n] = by_bkv ? r->bkv : (double)r->sh.Sq;
        s->y[s->n++] = r->gflops;
    }
}

int plot_svg(const bench_run *R, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' "
               "width='%d' height='%d' font-family='sans-serif'>\n<rect width='100%%' "
               "height='100%%' fill='white'/>\n", W, 3 * PH);
    ladder_bars(f, R, 0);

    series t = { .name = "GFLOP/s", .color = "#3a6ea5" };
    collect(R, "tiles", 1, &t);
    double es = (double)fa_dtype_size(R->sh.dtype), d = (double)R->sh.d;
    vmark vm[2] = { { R->caches.l1d / (2 * d * es), "K+V tile = L1d" },
                    { R->caches.l2 / (2 * d * es), "K+V tile = L2" } };
    char title[160], impl[40] = "";
    for (int i = 0; i < R->res.n; i++)
        if (!strcmp(R->res.v[i].section, "tiles")) {
            snprintf(impl, sizeof impl, "%s", R->res.v[i].impl);
            break;
        }
    snprintf(title, sizeof title, "Block-size sweep (%s): the cache cliff", impl);
    double pk = peak_for(&R->peak, R->threads, R->sh.dtype);
    chart(f, PH, title, "block_kv (key rows per tile)", &t, 1, vm, 2, 0, "");

    series s[2] = { { .name = "flash", .color = "#3a6ea5" }, { .name = "naive", .color = "#d2691e" } };
    collect(R, "seqlen", 0, &s[0]);
    collect(R, "naive-seq", 0, &s[1]);
    vmark sm[2] = { { sqrt(R->caches.l2 / 4.0), "naive S x S leaves L2" },
                    { sqrt(R->caches.l3 / 4.0), "naive S x S leaves L3" } };
    char hl[64];
    snprintf(hl, sizeof hl, "FMA peak %.1f GFLOP/s", pk);
    chart(f, 2 * PH, "Sequence-length sweep: flash vs naive", "sequence length S", s, 2, sm, 2,
          pk, hl);
    fputs("</svg>\n", f);
    return fclose(f) ? -1 : 0;
}

static int on_path(const char *prog)
{
    const char *p = getenv("PATH");
    char buf[4096];
    while (p && *p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, prog);
        if (n && access(buf, X_OK) == 0) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* 0: PNG written to png; 1: no gnuplot; -1: gnuplot failed (png names the log). Only the
 * panels that have measured points are drawn. */
int plot_gnuplot(const bench_run *R, const char *dir, char *png, size_t len)
{
    if (!on_path("gnuplot")) return 1;
    char path[1100];
    const char *sec[3] = { "ladder", "tiles", "seqlen" };
    int npts[3] = { 0, 0, 0 };
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/%s.dat", dir, sec[k]);
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        for (int i = 0; i < R->res.n; i++) {
            const bench_result *r = &R->res.v[i];
            if (r->status != RES_OK || strcmp(r->section, sec[k])) continue;
            npts[k]++;
            if (k == 0) {
                char name[40];
                snprintf(name, sizeof name, "%s%s", r->impl, strcmp(r->dir, "bwd") ? "" : " bwd");
                for (char *c = name; *c; c++) if (*c == ' ') *c = '-';
                fprintf(f, "%s %g\n", name, r->gflops);
            } else if (k == 1) {
                fprintf(f, "%d %g\n", r->bkv, r->gflops);
            } else {
                double nv = NAN;
                for (int j = 0; j < R->res.n; j++)
                    if (!strcmp(R->res.v[j].section, "naive-seq") && R->res.v[j].status == RES_OK &&
                        R->res.v[j].sh.Sq == r->sh.Sq) nv = R->res.v[j].gflops;
                if (isnan(nv)) fprintf(f, "%lld %g NaN\n", (long long)r->sh.Sq, r->gflops);
                else fprintf(f, "%lld %g %g\n", (long long)r->sh.Sq, r->gflops, nv);
            }
        }
        fclose(f);
    }
    int panels = (npts[0] > 0) + (npts[1] > 0) + (npts[2] > 0);
    if (!panels) return 1 + 0 * snprintf(png, len, "(no measured points)");
    double es = (double)fa_dtype_size(R->sh.dtype), d = (double)R->sh.d;
    double l1 = R->caches.l1d / (2 * d * es), l2 = R->caches.l2 / (2 * d * es);
    snprintf(path, sizeof path, "%s/bench.gp", dir);
    FILE *g = fopen(path, "w");
    if (!g) return -1;
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,%d }"
               " else { set terminal png size 900,%d }\n"
               "set termoption noenhanced\nset output '%s/bench.png'\nset multiplot layout %d,1\nset grid\n",
            320 * panels, 320 * panels, dir, panels);
    if (npts[0])
        fprintf(g, "set title 'Ladder (log scale), dashed: measured FMA peak'\nset logscale y\n"
                   "set style fill solid 0.8\nset boxwidth 0.6\nset ylabel 'GFLOP/s'\n"
                   "plot '%s/ladder.dat' using 0:2:xtic(1) with boxes notitle, %g with lines "
                   "dt 2 title 'FMA peak'\nunset logscale y\nset xtics auto\n",
                dir, peak_for(&R->peak, R->threads, R->sh.dtype));
    if (npts[1])
        fprintf(g, "set logscale x 2\nset xlabel 'block_kv'\nset ylabel 'GFLOP/s'\n"
                   "set title 'Block-size sweep: the cache cliff (dotted: K+V tile = L1d, L2)'\n"
                   "set arrow 1 from %g, graph 0 to %g, graph 1 nohead dt 3\n"
                   "set arrow 2 from %g, graph 0 to %g, graph 1 nohead dt 3\n"
                   "plot '%s/tiles.dat' using 1:2 with linespoints title 'GFLOP/s'\n"
                   "unset arrow 1\nunset arrow 2\nunset logscale x\n", l1, l1, l2, l2, dir);
    if (npts[2])
        fprintf(g, "set logscale x 2\nset xlabel 'S'\nset ylabel 'GFLOP/s'\n"
                   "set title 'Sequence length: flash vs naive'\n"
                   "plot '%s/seqlen.dat' using 1:2 with linespoints title 'flash', '' using 1:3 "
                   "with linespoints title 'naive'\n", dir);
    fprintf(g, "unset multiplot\n");
    fclose(g);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "gnuplot '%s/bench.gp' > '%s/gnuplot.log' 2>&1", dir, dir);
    int rc = system(cmd);
    snprintf(png, len, rc == 0 ? "%s/bench.png" : "%s/gnuplot.log", dir);
    return rc == 0 ? 0 : -1;
}
