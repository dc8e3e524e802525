/* shmesh-bench --plot: bus bandwidth and latency against size as a plain
 * SVG 1.1 file, one line per series (an op, or an MPI implementation's op
 * read from bench/compare-mpi.sh's CSV).  No dependencies: the text is
 * written by hand, numbers with "%.2f" in the C locale. */
#ifndef SHMESH_PLOT_H
#define SHMESH_PLOT_H

#include <stddef.h>

enum plot_style { PLOT_SOLID, PLOT_DASHED, PLOT_DOTTED };

struct plot_point {
    double bytes, us, busbw;
};

struct plot_series {
    char label[64]; /* the legend's text and the path's data-series */
    char group[32]; /* series of one group (an op and its MPI twins) share a colour */
    enum plot_style style;
    struct plot_point *pts;
    size_t n, cap;
};

struct plot {
    struct plot_series *series;
    size_t n, cap;
};

/* One measurement of the series `label` (created on first use, in order).
 * Several points of one size (rounds of compare-mpi.sh) are drawn as their
 * median.  0, or -ENOMEM. */
int plot_add(struct plot *p, const char *label, const char *group, enum plot_style style,
             double bytes, double us, double busbw);

/* Adds the MPI rows of a CSV written by bench/compare-mpi.sh whose op
 * matches one of the `nops` shmesh op names in `ops` (allreduce = psum, ...):
 * dashed for Open MPI, dotted for MPICH, labelled "Open MPI allreduce".
 * 0, or -1 with the reason (naming the file and line) in err. */
int plot_read_mpi_csv(struct plot *p, const char *path, const char *const *ops, size_t nops,
                      char *err, size_t errlen);

/* Writes the two panels (busbw GB/s and time µs against size, log scales)
 * with `title` above them.  Points of size 0 or value 0 cannot sit on a log
 * axis and are left out.  Sorts p in place (solid lines first, points by
 * size, one median per size).  0, or -errno (the file could not be written). */
int plot_write_svg(struct plot *p, const char *path, const char *title);

void plot_free(struct plot *p);

#endif
