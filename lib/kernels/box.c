/* Copies between an N-d block of an array and a packed buffer, a run of
 * the innermost dimension at a time. */
#include <string.h>

#include "core/dtype.h"
#include "kernels/box.h"

void box_whole(struct box *b, int ndim, const int64_t *shape, size_t esz)
{
    memset(b, 0, sizeof *b);
    b->esz = esz;
    b->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        b->dim[d] = b->ext[d] = shape[d];
    if (ndim == 0) { /* a scalar is one element */
        b->ndim = 1;
        b->dim[0] = b->ext[0] = 1;
    }
}

void box_slab(struct box *b, const shmesh_array *a, int dim, int64_t start, int64_t ext)
{
    box_whole(b, a->ndim, a->shape, dtype_size(a->dtype));
    b->start[dim] = start;
    b->ext[dim] = ext;
    box_simplify(b);
}

void box_simplify(struct box *b)
{
    /* Dimension d-1 and d merge when the block covers all of d. */
    while (b->ndim > 1 && b->ext[b->ndim - 1] == b->dim[b->ndim - 1]) {
        int d = b->ndim - 1;
        b->start[d - 1] *= b->dim[d];
        b->ext[d - 1] *= b->dim[d];
        b->dim[d - 1] *= b->dim[d];
        b->ndim--;
    }
}

uint64_t box_elems(const struct box *b)
{
    uint64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= (uint64_t)b->ext[d];
    return n;
}

bool box_contiguous(const struct box *b, uint64_t *off)
{
    for (int d = 0; d + 1 < b->ndim; d++)
        if (b->ext[d] != 1)
            return false;
    uint64_t o = 0;
    for (int d = 0; d < b->ndim; d++)
        o = o * (uint64_t)b->dim[d] + (uint64_t)b->start[d];
    *off = o;
    return true;
}

/* Walks packed elements [first, first+count): calls back once per run that
 * is contiguous in the array, with the run's array offset (in elements). */
void box_runs(const struct box *b, uint64_t first, uint64_t count,
              void (*run)(void *arg, uint64_t array_off, uint64_t packed_off, uint64_t len),
              void *arg)
{
    if (!count)
        return;
    int64_t idx[SHMESH_MAX_NDIM];
    uint64_t rem = first;
    for (int d = b->ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(rem % (uint64_t)b->ext[d]);
        rem /= (uint64_t)b->ext[d];
    }
    int last = b->ndim - 1;
    uint64_t done = 0;
    while (done < count) {
        uint64_t off = 0;
        for (int d = 0; d < b->ndim; d++)
            off = off * (uint64_t)b->dim[d] + (uint64_t)(b->start[d] + idx[d]);
        uint64_t len = (uint64_t)(b->ext[last] - idx[last]);
        if (len > count - done)
            len = count - done;
        run(arg, off, done, len);
        done += len;
        idx[last] += (int64_t)len;
        for (int d = last; d > 0 && idx[d] == b->ext[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

struct copy_arg {
    unsigned char *array;
    unsigned char *packed;
    size_t esz;
    bool to_array;
};

static void copy_run(void *p, uint64_t array_off, uint64_t packed_off, uint64_t len)
{
    struct copy_arg *a = p;
    unsigned char *arr = a->array + array_off * a->esz, *pk = a->packed + packed_off * a->esz;
    if (a->to_array)
        memcpy(arr, pk, len * a->esz);
    else
        memcpy(pk, arr, len * a->esz);
}

void box_read(const struct box *b, const void *array, uint64_t first, uint64_t count, void *dst)
{
    struct copy_arg a = {(unsigned char *)array, dst, b->esz, false};
    box_runs(b, first, count, copy_run, &a);
}

void box_write(const struct box *b, void *array, uint64_t first, uint64_t count, const void *src)
{
    struct copy_arg a = {array, (unsigned char *)src, b->esz, true};
    box_runs(b, first, count, copy_run, &a);
}

struct pair_arg {
    const struct box *to;
    void (*run)(void *arg, uint64_t from_off, uint64_t to_off, uint64_t len);
    void *arg;
    uint64_t from_off; /* the current run of `from`, in its array */
};

static void pair_inner(void *p, uint64_t to_off, uint64_t packed_off, uint64_t len)
{
    struct pair_arg *a = p;
    a->run(a->arg, a->from_off + packed_off, to_off, len);
}

static void pair_outer(void *p, uint64_t from_off, uint64_t packed_off, uint64_t len)
{
    struct pair_arg *a = p;
    a->from_off = from_off;
    box_runs(a->to, packed_off, len, pair_inner, a);
}

void box_pair_runs(const struct box *from, const struct box *to,
                   void (*run)(void *arg, uint64_t from_off, uint64_t to_off, uint64_t len),
                   void *arg)
{
    struct pair_arg a = {to, run, arg, 0};
    box_runs(from, 0, box_elems(from), pair_outer, &a);
}

struct box_copy_arg {
    const unsigned char *src;
    unsigned char *dst;
    size_t esz;
};

static void copy_pair(void *p, uint64_t from_off, uint64_t to_off, uint64_t len)
{
    struct box_copy_arg *a = p;
    memcpy(a->dst + to_off * a->esz, a->src + from_off * a->esz, len * a->esz);
}

void box_copy(const struct box *from, const void *src, const struct box *to, void *dst)
{
    struct box_copy_arg a = {src, dst, from->esz};
    box_pair_runs(from, to, copy_pair, &a);
}
