/* What the random-case programs (diff_prog.c, batch_prog.c) share to draw
 * their cases: a seeded generator that gives every rank the same numbers,
 * the dtypes, and random axis_index_groups.  Header-only, included once by
 * a program's .c file after shmesh.h. */
#ifndef SHMESH_TESTS_CASES_H
#define SHMESH_TESTS_CASES_H

#include <stdbool.h>
#include <stdint.h>

#include "shmesh.h"

/* Random numbers (splitmix64): the same on every rank for one seed. */
typedef struct {
    uint64_t s;
} rng;

static inline uint64_t next_u64(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline int rnd(rng *r, int n) { return n <= 1 ? 0 : (int)(next_u64(r) % (uint64_t)n); }
static inline bool chance(rng *r, int pct) { return rnd(r, 100) < pct; }

static inline void shuffle(rng *r, int *v, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = rnd(r, i + 1), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static const shmesh_dtype all_dtypes[] = {
    SHMESH_BOOL,     SHMESH_INT8,    SHMESH_INT16,   SHMESH_INT32,  SHMESH_INT64,
    SHMESH_UINT8,    SHMESH_UINT16,  SHMESH_UINT32,  SHMESH_UINT64, SHMESH_FLOAT16,
    SHMESH_BFLOAT16, SHMESH_FLOAT32, SHMESH_FLOAT64};
#define NDTYPES ((int)(sizeof all_dtypes / sizeof *all_dtypes))

static inline bool is_float(shmesh_dtype dt)
{
    return dt == SHMESH_FLOAT16 || dt == SHMESH_BFLOAT16 || dt == SHMESH_FLOAT32 ||
           dt == SHMESH_FLOAT64;
}

/* Random subgroups of 0..nfull-1 into *g (equal sizes when asked), its
 * members in idx and sizes in sizes (nfull entries each); returns the size
 * of a member's subgroup where sizes are equal, else nfull. */
static inline int random_groups(rng *r, int nfull, bool equal, int *idx, int *sizes,
                                shmesh_groups *g)
{
    for (int i = 0; i < nfull; i++)
        idx[i] = i;
    shuffle(r, idx, nfull);
    int ng = 0;
    if (equal) {
        /* A divisor of nfull, each as likely. */
        int nd = 0, size = 1;
        for (int d = 1; d <= nfull; d++)
            nd += nfull % d == 0;
        for (int d = 1, k = rnd(r, nd); d <= nfull; d++)
            if (nfull % d == 0 && k-- == 0) {
                size = d;
                break;
            }
        ng = nfull / size;
        for (int i = 0; i < ng; i++)
            sizes[i] = size;
    } else {
        int left = nfull;
        while (left > 0) {
            int s = 1 + rnd(r, left);
            sizes[ng++] = s;
            left -= s;
        }
    }
    bool same = true;
    for (int i = 1; i < ng; i++)
        same = same && sizes[i] == sizes[0];
    g->ngroups = ng;
    g->indices = idx;
    if (same && chance(r, 60)) {
        g->group_size = sizes[0];
        g->group_sizes = NULL;
    } else {
        g->group_size = 0;
        g->group_sizes = sizes;
    }
    return equal ? sizes[0] : nfull;
}

#endif
