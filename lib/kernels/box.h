/* An N-d block of a C-contiguous array, read or written in the block's own
 * row-major ("packed") order. */
#ifndef SHMESH_KERNELS_BOX_H
#define SHMESH_KERNELS_BOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmesh.h"

struct box {
    int ndim;
    int64_t dim[SHMESH_MAX_NDIM];   /* the array's shape */
    int64_t start[SHMESH_MAX_NDIM]; /* the block's corner */
    int64_t ext[SHMESH_MAX_NDIM];   /* the block's extent */
    size_t esz;
};

/* The whole array; callers then narrow start/ext of some dimensions. */
void box_whole(struct box *b, int ndim, const int64_t *shape, size_t esz);
/* Block [start, start+ext) along dimension `dim`, whole along the others,
 * simplified. */
void box_slab(struct box *b, const shmesh_array *a, int dim, int64_t start, int64_t ext);
/* Merges trailing dimensions the block spans completely, so copies run long. */
void box_simplify(struct box *b);
uint64_t box_elems(const struct box *b);
/* Whether the block is one run of the array; *off: where it starts (elements). */
bool box_contiguous(const struct box *b, uint64_t *off);
/* Elements [first, first+count) of the block, in packed order. */
void box_read(const struct box *b, const void *array, uint64_t first, uint64_t count, void *dst);
void box_write(const struct box *b, void *array, uint64_t first, uint64_t count, const void *src);
/* Calls run() once per stretch of packed elements [first, first+count) that
 * is contiguous in the array: its array offset, its packed offset (from
 * `first`) and its length, in elements. */
void box_runs(const struct box *b, uint64_t first, uint64_t count,
              void (*run)(void *arg, uint64_t array_off, uint64_t packed_off, uint64_t len),
              void *arg);
/* Two blocks of as many elements (of from's size), each of its own array,
 * walked together in packed order: calls run() once per stretch that is
 * contiguous in both arrays, with its offset in each (elements) and its
 * length. */
void box_pair_runs(const struct box *from, const struct box *to,
                   void (*run)(void *arg, uint64_t from_off, uint64_t to_off, uint64_t len),
                   void *arg);
/* Block `from` of array src into block `to` of array dst (as many elements),
 * without a buffer between. */
void box_copy(const struct box *from, const void *src, const struct box *to, void *dst);

#endif
