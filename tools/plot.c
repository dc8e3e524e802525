/* The SVG writer of shmesh-bench --plot (plot.h).  Both panels use log
 * scales: sizes span 8 B to gigabytes and bandwidths and times several
 * decades, which a linear axis would crush into one corner. */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int plot_add(struct plot *p, const char *label, const char *group, enum plot_style style,
             double bytes, double us, double busbw)
{
    struct plot_series *s = NULL;
    for (size_t i = 0; i < p->n && !s; i++)
        if (!strcmp(p->series[i].label, label))
            s = &p->series[i];
    if (!s) {
        if (p->n == p->cap) {
            size_t cap = p->cap ? 2 * p->cap : 8;
            void *m = realloc(p->series, cap * sizeof *p->series);
            if (!m)
                return -ENOMEM;
            p->series = m;
            p->cap = cap;
        }
        s = &p->series[p->n++];
        *s = (struct plot_series){.style = style};
        snprintf(s->label, sizeof s->label, "%s", label);
        snprintf(s->group, sizeof s->group, "%s", group);
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 32;
        void *m = realloc(s->pts, cap * sizeof *s->pts);
        if (!m)
            return -ENOMEM;
        s->pts = m;
        s->cap = cap;
    }
    s->pts[s->n++] = (struct plot_point){.bytes = bytes, .us = us, .busbw = busbw};
    return 0;
}

void plot_free(struct plot *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->series[i].pts);
    free(p->series);
    *p = (struct plot){0};
}

/* --- compare-mpi.sh's CSV ------------------------------------------------ */

static const char mpi_header[] =
    "round,pair,side,op,ranks,impl,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong";

/* compare-mpi.sh's pairs: the MPI name, then shmesh's. */
static const char *const mpi_pairs[][2] = {{"allreduce", "psum"},
                                           {"allgather", "all_gather"},
                                           {"reduce_scatter", "psum_scatter"},
                                           {"alltoall", "all_to_all"},
                                           {"bcast", "pbroadcast"}};

static bool number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && !*end && !errno && *v >= 0;
}

int plot_read_mpi_csv(struct plot *p, const char *path, const char *const *ops, size_t nops,
                      char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t len = 0;
    int lineno = 0, rc = 0;
    while (getline(&line, &len, f) != -1) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (lineno == 1) {
            if (strcmp(line, mpi_header)) {
                snprintf(err, errlen,
                         "%s: not a bench/compare-mpi.sh CSV: expected the header '%s', found "
                         "'%.80s'",
                         path, mpi_header, line);
                rc = -1;
                break;
            }
            continue;
        }
        char *field[13];
        int nf = 0;
        for (char *c = line, *start = line;; c++)
            if (*c == ',' || !*c) {
                bool last = !*c;
                if (nf < 13)
                    field[nf] = start;
                nf++;
                *c = '\0';
                start = c + 1;
                if (last)
                    break;
            }
        if (nf != 13) {
            snprintf(err, errlen, "%s:%d: expected 13 comma-separated fields, found %d", path,
                     lineno, nf);
            rc = -1;
            break;
        }
        const char *pair = field[1], *side = field[2];
        if (!strcmp(side, "shmesh") || !strcmp(side, "memcpy"))
            continue; /* shmesh's own lines come from this run */
        const char *op = NULL;
        for (size_t i = 0; i < sizeof mpi_pairs / sizeof *mpi_pairs; i++)
            if (!strcmp(pair, mpi_pairs[i][0]))
                op = mpi_pairs[i][1];
        bool wanted = false;
        for (size_t i = 0; op && i < nops; i++)
            wanted |= !strcmp(op, ops[i]);
        if (!wanted)
            continue;
        double bytes, us, busbw;
        if (!number(field[6], &bytes) || !number(field[9], &us) || !number(field[11], &busbw)) {
            snprintf(err, errlen,
                     "%s:%d: expected numbers in columns bytes, time_us and busbw_GBs, found "
                     "'%s', '%s', '%s'",
                     path, lineno, field[6], field[9], field[11]);
            rc = -1;
            break;
        }
        char label[64];
        snprintf(label, sizeof label, "%s %s",
                 !strcmp(side, "openmpi") ? "Open MPI" : !strcmp(side, "mpich") ? "MPICH" : side,
                 pair);
        if (plot_add(p, label, op, !strcmp(side, "openmpi") ? PLOT_DASHED : PLOT_DOTTED, bytes,
                     us, busbw)) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -1;
            break;
        }
    }
    if (!rc && lineno == 0) {
        snprintf(err, errlen, "%s: empty, expected a bench/compare-mpi.sh CSV", path);
        rc = -1;
    }
    free(line);
    fclose(f);
    return rc;
}

/* --- the SVG ------------------------------------------------------------- */

enum {
    LEFT = 80,   /* room for the y tick labels and title */
    TOP = 50,    /* the title */
    PW = 380,    /* a panel's plotting area */
    PH = 300,
    GAP = 90,    /* between the panels: the second's y labels */
    BOTTOM = 60, /* x tick labels and title */
    LEGEND_W = 210,
    ROW = 20, /* a legend line */
};

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static void text(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
}

static int by_bytes(const void *a, const void *b)
{
    double x = ((const struct plot_point *)a)->bytes, y = ((const struct plot_point *)b)->bytes;
    return x < y ? -1 : x > y;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Sorts s by size and replaces the points of one size by their medians. */
static int merge_sizes(struct plot_series *s)
{
    qsort(s->pts, s->n, sizeof *s->pts, by_bytes);
    double *us = malloc((s->n + 1) * sizeof *us), *bw = malloc((s->n + 1) * sizeof *bw);
    if (!us || !bw) {
        free(us);
        free(bw);
        return -ENOMEM;
    }
    size_t m = 0;
    for (size_t i = 0, j; i < s->n; i = j) {
        for (j = i; j < s->n && s->pts[j].bytes == s->pts[i].bytes; j++) {
            us[j - i] = s->pts[j].us;
            bw[j - i] = s->pts[j].busbw;
        }
        s->pts[m++] = (struct plot_point){.bytes = s->pts[i].bytes, .us = median(us, j - i),
                                          .busbw = median(bw, j - i)};
    }
    s->n = m;
    free(us);
    free(bw);
    return 0;
}

/* A panel: which value, its title, and its log10 range in whole decades. */
struct panel {
    const char *name, *title;
    bool latency;
    double x0; /* the area's left edge */
    int lo, hi;
};

static double value(const struct panel *pn, const struct plot_point *pt)
{
    return pn->latency ? pt->us : pt->busbw;
}

static void size_label(char *buf, size_t len, int log2)
{
    static const char suffix[] = {'\0', 'K', 'M', 'G', 'T'};
    int k = log2 / 10 < 4 ? log2 / 10 : 4;
    snprintf(buf, len, "%.0f%.1s", ldexp(1, log2 - 10 * k), &suffix[k]);
}

static void write_panel(FILE *f, const struct plot *p, const struct panel *pn, int xlo, int xhi,
                        size_t ngroups, char (*groups)[32])
{
    double y0 = TOP, x0 = pn->x0;
    fprintf(f, "<g class=\"panel\" data-panel=\"%s\">\n", pn->name);
    /* Grid and ticks: every power of two on x (labelled every `step`), every
     * decade on y. */
    int step = (xhi - xlo + 7) / 8;
    for (int k = xlo; k <= xhi; k++) {
        double x = x0 + (double)(k - xlo) / (xhi - xlo) * PW;
        fprintf(f, "<line class=\"grid\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", x,
                y0, x, y0 + PH);
        if (k % step == 0) {
            char lab[16];
            size_label(lab, sizeof lab, k);
            fprintf(f,
                    "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n",
                    x, y0 + PH + 18, lab);
        }
    }
    for (int k = pn->lo; k <= pn->hi; k++) {
        double y = y0 + PH - (double)(k - pn->lo) / (pn->hi - pn->lo) * PH;
        fprintf(f, "<line class=\"grid\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", x0,
                y, x0 + PW, y);
        fprintf(f, "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%g</text>\n",
                x0 - 6, y + 4, pow(10, k));
    }
    fprintf(f, "<rect class=\"frame\" x=\"%.2f\" y=\"%.2f\" width=\"%d\" height=\"%d\"/>\n", x0,
            y0, PW, PH);
    fprintf(f, "<text class=\"axis\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">size (bytes per "
               "rank)</text>\n",
            x0 + PW / 2.0, y0 + PH + 42);
    fprintf(f,
            "<text class=\"axis\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 %.2f %.2f)\">",
            x0 - 52, y0 + PH / 2.0, x0 - 52, y0 + PH / 2.0);
    text(f, pn->title);
    fputs("</text>\n", f);

    for (size_t i = 0; i < p->n; i++) {
        const struct plot_series *s = &p->series[i];
        size_t g = 0;
        while (g < ngroups && strcmp(groups[g], s->group))
            g++;
        bool any = false;
        for (size_t j = 0; j < s->n; j++) {
            double v = value(pn, &s->pts[j]);
            if (!(s->pts[j].bytes > 0 && v > 0))
                continue; /* no place on a log axis */
            double x = x0 + (log2(s->pts[j].bytes) - xlo) / (xhi - xlo) * PW;
            double y = y0 + PH - (log10(v) - pn->lo) / (pn->hi - pn->lo) * PH;
            if (!any) {
                fprintf(f, "<path class=\"series\" data-series=\"");
                text(f, s->label);
                fprintf(f, "\" stroke=\"%s\"%s d=\"M%.2f,%.2f", palette[g % 10],
                        s->style == PLOT_DASHED   ? " stroke-dasharray=\"7,4\""
                        : s->style == PLOT_DOTTED ? " stroke-dasharray=\"2,3\""
                                                  : "",
                        x, y);
                any = true;
            } else {
                fprintf(f, " L%.2f,%.2f", x, y);
            }
        }
        if (any)
            fputs("\"/>\n", f);
    }
    fputs("</g>\n", f);
}

int plot_write_svg(struct plot *p, const char *path, const char *title)
{
    /* Ranges over every drawable point, widened to whole powers. */
    double bmin = INFINITY, bmax = 0, vmin[2] = {INFINITY, INFINITY}, vmax[2] = {0, 0};
    char(*groups)[32] = calloc(p->n + 1, sizeof *groups);
    size_t ngroups = 0;
    if (!groups)
        return -ENOMEM;
    /* This run's lines first, then MPI's (read before the run), each in the
     * order given: a stable insertion sort by style. */
    for (size_t i = 1; i < p->n; i++)
        for (size_t j = i; j > 0 && p->series[j - 1].style > p->series[j].style; j--) {
            struct plot_series t = p->series[j];
            p->series[j] = p->series[j - 1];
            p->series[j - 1] = t;
        }
    for (size_t i = 0; i < p->n; i++) {
        struct plot_series *s = &p->series[i];
        if (merge_sizes(s)) {
            free(groups);
            return -ENOMEM;
        }
        size_t g = 0;
        while (g < ngroups && strcmp(groups[g], s->group))
            g++;
        if (g == ngroups)
            memcpy(groups[ngroups++], s->group, sizeof *groups);
        for (size_t j = 0; j < s->n; j++) {
            const struct plot_point *pt = &s->pts[j];
            if (!(pt->bytes > 0))
                continue;
            const double v[2] = {pt->busbw, pt->us};
            for (int k = 0; k < 2; k++)
                if (v[k] > 0) {
                    bmin = fmin(bmin, pt->bytes);
                    bmax = fmax(bmax, pt->bytes);
                    vmin[k] = fmin(vmin[k], v[k]);
                    vmax[k] = fmax(vmax[k], v[k]);
                }
        }
    }
    int xlo = bmax > 0 ? (int)floor(log2(bmin)) : 0, xhi = bmax > 0 ? (int)ceil(log2(bmax)) : 1;
    xhi = xhi > xlo ? xhi : xlo + 1;
    struct panel panels[2] = {
        {.name = "busbw", .title = "bus bandwidth (GB/s)", .x0 = LEFT},
        {.name = "latency", .title = "time (µs)", .latency = true, .x0 = LEFT + PW + GAP},
    };
    for (int k = 0; k < 2; k++) {
        panels[k].lo = vmax[k] > 0 ? (int)floor(log10(vmin[k])) : 0;
        panels[k].hi = vmax[k] > 0 ? (int)ceil(log10(vmax[k])) : 1;
        panels[k].hi = panels[k].hi > panels[k].lo ? panels[k].hi : panels[k].lo + 1;
    }

    int width = LEFT + 2 * PW + GAP + 30 + LEGEND_W;
    int height = TOP + PH + BOTTOM;
    if (TOP + ROW * (int)p->n + 20 > height)
        height = TOP + ROW * (int)p->n + 20;

    FILE *f = fopen(path, "w");
    if (!f) {
        int rc = -errno;
        free(groups);
        return rc;
    }
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\">\n"
            "<style>\n"
            "text { font-family: sans-serif; font-size: 12px; fill: #222; }\n"
            "text.title { font-size: 15px; }\n"
            ".grid { stroke: #e4e4e4; stroke-width: 1; }\n"
            ".frame { fill: none; stroke: #444; stroke-width: 1; }\n"
            ".series, .key { fill: none; stroke-width: 2; stroke-linejoin: round; }\n"
            "</style>\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text class=\"title\" x=\"%d\" y=\"24\">",
            width, height, width, height, LEFT);
    text(f, title);
    fputs("</text>\n", f);
    for (int k = 0; k < 2; k++)
        write_panel(f, p, &panels[k], xlo, xhi, ngroups, groups);

    /* The legend: a stroke of each series' colour and dashes, its label. */
    double lx = LEFT + 2 * PW + GAP + 30;
    fputs("<g class=\"legend\">\n", f);
    for (size_t i = 0; i < p->n; i++) {
        const struct plot_series *s = &p->series[i];
        size_t g = 0;
        while (g < ngroups && strcmp(groups[g], s->group))
            g++;
        double y = TOP + 10 + ROW * (double)i;
        fprintf(f, "<line class=\"key\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                   "stroke=\"%s\"%s/>\n",
                lx, y, lx + 28, y, palette[g % 10],
                s->style == PLOT_DASHED   ? " stroke-dasharray=\"7,4\""
                : s->style == PLOT_DOTTED ? " stroke-dasharray=\"2,3\""
                                          : "");
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\">", lx + 36, y + 4);
        text(f, s->label);
        fputs("</text>\n", f);
    }
    fputs("</g>\n</svg>\n", f);
    free(groups);
    int rc = ferror(f) ? -EIO : 0;
    if (fclose(f) && !rc)
        rc = -errno;
    return rc;
}
