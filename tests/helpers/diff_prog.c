/* shmesh-test-diff: the rank program of the differential test.  Started
 * under shmesh-run, every rank draws the same random cases from a seed (a
 * mesh of 1-3 axes, a collective with random axes, subgroups, dtype, shape
 * and parameters, sometimes deliberately refused arguments), fills every
 * device's inputs deterministically, calls the collective through
 * libshmesh, and compares its own output bit for bit with what the
 * single-process reference model (tests/reference.c) gives for it.
 *
 * Usage: shmesh-test-diff [-f FIRST] [-o OP] [-q] SEED COUNT
 *   runs cases FIRST .. FIRST+COUNT-1 of SEED (FIRST defaults to 0), only
 *   collective OP when given.  A case is named SEED/INDEX and depends only on
 *   those and the device count, so `-f INDEX SEED 1` replays one.
 *   Under shmesh-run --devices-per-rank K, every rank runs the call for its
 *   K devices (one array each) and checks each of them.
 *
 * Output, one line per rank and case:
 *   rank R: case SEED/INDEX W=.. mesh .. op .. -> ok
 *   rank R: case SEED/INDEX ... -> MISMATCH element [i,j] got .. expected ..
 * -q prints only the failures and a last "rank R: N cases ok" line.
 * Exit status: 0 all agreed, 4 an output differed (the other cases still
 * ran), 3 the library failed a call the model accepts (the run stops), 5 the
 * library accepted a call the model refuses (the run stops), 2 bad usage. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/half.h"
#include "reference.h"
#include "shmesh.h"

#include "cases.h"

#define MAXW 64
#define MAXK (MAXW * 3 + 1)
#define SENTINEL 0xA5

/* world: the job's devices (every rank's local devices), which the cases
 * lay out; per_rank: this rank's share. */
static int rank, world, per_rank;
static bool quiet;
static shmesh_ctx *heap_ctx; /* -H: buffers come from the shared heap */
static void *heap_bufs[8];    /* the ones that did */

/* Buffers from the shared heap with -H (so the library may go zero-copy),
 * from malloc otherwise or when the heap has no room. */
static void *buf_alloc(size_t bytes)
{
    void *p = heap_ctx ? shmesh_alloc(heap_ctx, bytes) : NULL;
    for (int i = 0; p && i < 8; i++)
        if (!heap_bufs[i]) {
            heap_bufs[i] = p;
            return p;
        }
    if (p)
        shmesh_free(heap_ctx, p);
    return malloc(bytes);
}

static void buf_free(void *p)
{
    for (int i = 0; p && i < 8; i++)
        if (heap_bufs[i] == p) {
            heap_bufs[i] = NULL;
            shmesh_free(heap_ctx, p);
            return;
        }
    free(p);
}

/* ------------------------------------------------------------------------
 * A case
 * ---------------------------------------------------------------------- */

enum valmode { VAL_BITS, VAL_SPREAD, VAL_TIES, VAL_NAN };

struct tcase {
    uint64_t seed;
    long index;
    uint64_t data_seed;
    /* mesh */
    int mndim;
    const char *names[3];
    int sizes[3];
    int order[MAXW];
    bool has_order;
    ref_mesh mesh;
    /* call */
    ref_call call;
    char axes[96];
    int nfull; /* group size over the axes, before subgroups */
    int n;     /* (sub)group size */
    shmesh_groups groups;
    bool has_groups;
    int gidx[MAXW], gsizes[MAXW];
    int pairs[2 * MAXW + 2][2];
    int perm[MAXW];
    /* arrays */
    shmesh_dtype dt;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
    enum valmode mode;
    bool big; /* arrays of thousands of elements: several slot chunks */
    shmesh_dtype out_dt;
    int out_ndim;
    int64_t out_shape[SHMESH_MAX_NDIM];
    int64_t out_room; /* elements of 8 bytes the output buffer holds */
    /* ragged_all_to_all */
    int64_t rows_out;
    int out_extra_ndim; /* output ndim when corrupted, else 0 */
    int64_t out_extra_shape[SHMESH_MAX_NDIM];
    int K;
    shmesh_dtype off_dt[4]; /* input_offsets, send_sizes, output_offsets, recv_sizes */
    int64_t (*roff)[4][MAXK]; /* per device: input_offsets, send, output_offsets, recv */
    /* what was spoiled on purpose ("" if nothing) */
    char spoiled[96];
};

static const char *const pool[] = {"x", "y", "z", "data", "model", "i", "j", "pipe"};


static bool is_reduction(ref_op op)
{
    return op == REF_PSUM || op == REF_PMAX || op == REF_PMIN || op == REF_PMEAN ||
           op == REF_PARGMAX || op == REF_PARGMIN || op == REF_PSUM_SCATTER;
}

static bool takes_groups(ref_op op)
{
    return op != REF_PPERMUTE && op != REF_PSHUFFLE && op != REF_PBROADCAST;
}

static bool equal_groups(ref_op op)
{
    return op == REF_ALL_GATHER || op == REF_PSUM_SCATTER || op == REF_ALL_TO_ALL ||
           op == REF_PSWAPAXES || op == REF_RAGGED_ALL_TO_ALL;
}

static void gen_mesh(rng *r, struct tcase *c)
{
    c->mndim = 1 + rnd(r, 3);
    int rest = world;
    for (int k = 0; k < c->mndim - 1; k++) {
        int div[MAXW], nd = 0;
        for (int d = 1; d <= rest; d++)
            if (rest % d == 0)
                div[nd++] = d;
        c->sizes[k] = div[rnd(r, nd)];
        rest /= c->sizes[k];
    }
    c->sizes[c->mndim - 1] = rest;
    shuffle(r, c->sizes, c->mndim);
    int pick[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    shuffle(r, pick, 8);
    for (int k = 0; k < c->mndim; k++)
        c->names[k] = pool[pick[k]];
    for (int d = 0; d < world; d++)
        c->order[d] = d;
    c->has_order = chance(r, 30);
    if (c->has_order)
        shuffle(r, c->order, world);
    c->mesh = (ref_mesh){c->mndim, c->names, c->sizes, c->has_order ? c->order : NULL};
}

/* Writes the named mesh axes `ax` (count na) as an axes string, with
 * spaces now and then (they are ignored). */
static void axes_string(rng *r, struct tcase *c, const int *ax, int na)
{
    bool spaces = chance(r, 15);
    size_t o = 0;
    c->axes[0] = '\0';
    for (int j = 0; j < na; j++) {
        const char *sep = j ? (spaces ? " , " : ",") : (spaces ? " " : "");
        o += (size_t)snprintf(c->axes + o, sizeof c->axes - o, "%s%s%s", sep, c->names[ax[j]],
                              spaces && j == na - 1 ? " " : "");
    }
    if (na == 0 && spaces)
        snprintf(c->axes, sizeof c->axes, " "); /* names no axis either */
    c->nfull = 1;
    for (int j = 0; j < na; j++)
        c->nfull *= c->sizes[ax[j]];
}

/* Random subgroups of 0..nfull-1: equal sizes when asked. */
static void gen_groups(rng *r, struct tcase *c, bool equal)
{
    c->n = random_groups(r, c->nfull, equal, c->gidx, c->gsizes, &c->groups);
    c->has_groups = true;
    c->call.groups = &c->groups;
}

static void gen_shape(rng *r, struct tcase *c, int minnd, int maxnd)
{
    c->ndim = minnd + rnd(r, maxnd - minnd + 1);
    if (c->big && c->ndim == 0)
        c->ndim = 1 + rnd(r, maxnd);
    int64_t cap = c->big ? 3000 : 96;
    for (int k = 0; k < c->ndim; k++)
        c->shape[k] = c->big ? 1 + rnd(r, 60) : chance(r, 8) ? 0 : 1 + rnd(r, 4);
    while (ref_numel(c->ndim, c->shape) > cap)
        for (int k = 0; k < c->ndim; k++)
            if (c->shape[k] > 1)
                c->shape[k]--;
}

static int signed_axis(rng *r, int a, int range)
{
    return chance(r, 40) ? a - range : a;
}

/* Ragged: every receiver takes its K incoming slices into disjoint rows. */
static int gen_ragged(rng *r, struct tcase *c)
{
    int n = c->n;
    int spd = 1 + rnd(r, 3);
    c->K = n * spd;
    int64_t rows_in = c->big ? rnd(r, 200) : rnd(r, 7);
    c->rows_out = c->big ? rnd(r, 400) : rnd(r, 10);
    int64_t most = c->big ? 60 : 3; /* rows in one slice */
    int trail = rnd(r, 3);
    c->ndim = 1 + trail;
    c->shape[0] = rows_in;
    for (int k = 1; k < c->ndim; k++)
        c->shape[k] = c->big ? 1 + rnd(r, 6) : chance(r, 8) ? 0 : 1 + rnd(r, 3);
    static const shmesh_dtype odd[] = {SHMESH_INT8,   SHMESH_INT16,  SHMESH_UINT8,
                                       SHMESH_UINT16, SHMESH_UINT32, SHMESH_UINT64};
    bool mixed = chance(r, 20); /* the four may differ in integer type */
    for (int w = 0; w < 4; w++) {
        if (w == 0 || mixed) {
            int pdt = rnd(r, 10);
            c->off_dt[w] = pdt < 7 ? SHMESH_INT32 : pdt < 9 ? SHMESH_INT64 : odd[rnd(r, 6)];
        } else {
            c->off_dt[w] = c->off_dt[0];
        }
        if (c->big && (c->off_dt[w] == SHMESH_INT8 || c->off_dt[w] == SHMESH_UINT8))
            c->off_dt[w] = SHMESH_INT16; /* rows go past 255 */
    }
    c->roff = calloc((size_t)world, sizeof *c->roff);
    int members[MAXW];
    for (int d = 0; d < world; d++) {
        int gn, me;
        char why[256];
        if (ref_group(&c->mesh, c->axes, c->call.groups, d, members, &gn, &me, why, sizeof why))
            return -1;
        /* The K slices device d receives: sizes, then places in its rows. */
        int64_t size[MAXK], place[MAXK];
        int64_t used = 0;
        for (int i = 0; i < c->K; i++) {
            int64_t cap = c->rows_out - used < rows_in ? c->rows_out - used : rows_in;
            if (cap > most)
                cap = most;
            size[i] = chance(r, 20) ? 0 : rnd(r, (int)cap + 1);
            used += size[i];
        }
        int ord[MAXK];
        for (int i = 0; i < c->K; i++)
            ord[i] = i;
        shuffle(r, ord, c->K);
        int64_t free_rows = c->rows_out - used, cur = 0;
        for (int t = 0; t < c->K; t++) {
            int64_t gap = rnd(r, (int)free_rows + 1);
            free_rows -= gap;
            cur += gap;
            place[ord[t]] = cur;
            cur += size[ord[t]];
        }
        for (int i = 0; i < c->K; i++) {
            int sp = i / spd, k = i % spd;
            int s = members[sp];
            int si = me * spd + k; /* the sender's entry */
            c->roff[s][1][si] = size[i];
            c->roff[s][2][si] = place[i];
            c->roff[s][0][si] = rnd(r, (int)(rows_in - size[i]) + 1);
            c->roff[d][3][i] = size[i];
        }
    }
    return 0;
}

static const char *op_label(const struct tcase *c) { return ref_op_name(c->call.op); }

/* Spoils one entry of one device's ragged arrays: only that device's group
 * can see it, and the header has the whole group refuse the call. */
static void spoil_ragged_entry(rng *r, struct tcase *c)
{
    int members[MAXW], n, sp;
    int D = rnd(r, world);
    char why[256];
    if (ref_group(&c->mesh, c->axes, c->call.groups, D, members, &n, &sp, why, sizeof why))
        return;
    int spd = c->K / n, i = rnd(r, c->K);
    int R = members[i / spd], ri = sp * spd + i % spd;
    int64_t sz = c->roff[D][1][i];
    int kind = rnd(r, 4);
    if (sz == 0 && kind < 2)
        kind = 2;
    switch (kind) {
    case 0:
        c->roff[D][0][i] = c->shape[0] - sz + 1;
        snprintf(c->spoiled, sizeof c->spoiled, "rank %d entry %d past its operand", D, i);
        break;
    case 1:
        c->roff[D][2][i] = c->rows_out - sz + 1;
        snprintf(c->spoiled, sizeof c->spoiled, "rank %d entry %d past the output", D, i);
        break;
    case 2:
        c->roff[R][3][ri] += 1;
        snprintf(c->spoiled, sizeof c->spoiled, "rank %d recv_sizes[%d] disagrees", R, ri);
        break;
    default:
        c->roff[D][1][i] += 1;
        snprintf(c->spoiled, sizeof c->spoiled, "rank %d send_sizes[%d] disagrees", D, i);
        break;
    }
}

/* Spoils one argument so that the call should be refused. */
static void spoil(rng *r, struct tcase *c)
{
    ref_op op = c->call.op;
    for (int tries = 0; tries < 8; tries++) {
        switch (rnd(r, 5)) {
        case 0: /* output shape */
            if (op == REF_RAGGED_ALL_TO_ALL) {
                c->out_extra_ndim = c->ndim + 1 <= SHMESH_MAX_NDIM ? c->ndim + 1 : 0;
                if (!c->out_extra_ndim)
                    break;
                c->out_extra_shape[0] = c->rows_out;
                for (int k = 1; k < c->ndim; k++)
                    c->out_extra_shape[k] = c->shape[k];
                c->out_extra_shape[c->ndim] = 1;
                snprintf(c->spoiled, sizeof c->spoiled, "output rank");
                return;
            }
            if (c->out_ndim > 0 && chance(r, 60)) {
                c->out_shape[rnd(r, c->out_ndim)]++;
            } else if (c->out_ndim < SHMESH_MAX_NDIM) {
                c->out_shape[c->out_ndim++] = 1;
            } else {
                break;
            }
            snprintf(c->spoiled, sizeof c->spoiled, "output shape");
            return;
        case 1: /* output dtype */
            if (op == REF_RAGGED_ALL_TO_ALL)
                break;
            {
                shmesh_dtype d;
                do
                    d = all_dtypes[rnd(r, NDTYPES)];
                while (d == c->out_dt);
                c->out_dt = d;
            }
            snprintf(c->spoiled, sizeof c->spoiled, "output dtype");
            return;
        case 2: /* axes */
            if (chance(r, 50)) {
                strncat(c->axes, ",nope", sizeof c->axes - strlen(c->axes) - 1);
                snprintf(c->spoiled, sizeof c->spoiled, "unknown axis");
            } else {
                char first[40];
                snprintf(first, sizeof first, "%s", c->axes);
                first[strcspn(first, ",")] = '\0';
                size_t l = strlen(c->axes);
                snprintf(c->axes + l, sizeof c->axes - l, ",%s", first);
                snprintf(c->spoiled, sizeof c->spoiled, "repeated axis");
            }
            return;
        case 3: /* groups */
            if (!takes_groups(op) || op == REF_PARGMAX || op == REF_PARGMIN)
                break;
            if (!c->has_groups)
                gen_groups(r, c, equal_groups(op));
            if (c->nfull >= 2 && chance(r, 50)) {
                c->gidx[0] = c->gidx[1];
                snprintf(c->spoiled, sizeof c->spoiled, "repeated group index");
                return;
            }
            if (equal_groups(op) && c->nfull >= 3) {
                c->gsizes[0] = 1;
                c->gsizes[1] = c->nfull - 1;
                c->groups.ngroups = 2;
                c->groups.group_sizes = c->gsizes;
                snprintf(c->spoiled, sizeof c->spoiled, "unequal groups");
                return;
            }
            c->groups.group_sizes = NULL;
            c->groups.group_size = c->nfull + 1;
            c->groups.ngroups = 1;
            snprintf(c->spoiled, sizeof c->spoiled, "group too large");
            return;
        default: /* the op's own rule */
            switch (op) {
            case REF_PSUM_SCATTER:
            case REF_ALL_TO_ALL:
            case REF_PSWAPAXES: {
                int a = c->call.axis < 0 ? c->call.axis + c->ndim : c->call.axis;
                bool tiled = op != REF_PSWAPAXES && c->call.tiled;
                if (tiled && c->n == 1)
                    break;
                c->shape[a] = tiled ? c->shape[a] + 1 : c->n + 1;
                snprintf(c->spoiled, sizeof c->spoiled, "split size");
                return;
            }
            case REF_ALL_GATHER:
                c->call.axis = c->call.tiled ? c->ndim : c->ndim + 1;
                if (chance(r, 50))
                    c->call.axis = -c->call.axis - 1;
                snprintf(c->spoiled, sizeof c->spoiled, "axis out of range");
                return;
            case REF_PARGMAX:
            case REF_PARGMIN:
                if (c->mndim >= 2) {
                    snprintf(c->axes, sizeof c->axes, "%s,%s", c->names[0], c->names[1]);
                    snprintf(c->spoiled, sizeof c->spoiled, "two axes");
                } else {
                    gen_groups(r, c, false);
                    snprintf(c->spoiled, sizeof c->spoiled, "groups given");
                }
                return;
            case REF_PSHUFFLE:
                if (c->nfull >= 2)
                    c->perm[0] = c->perm[1];
                else
                    c->perm[0] = 1;
                snprintf(c->spoiled, sizeof c->spoiled, "not a permutation");
                return;
            case REF_PPERMUTE:
                c->pairs[c->call.npairs][0] = 0;
                c->pairs[c->call.npairs][1] = 0;
                c->pairs[c->call.npairs + 1][0] = 1;
                c->pairs[c->call.npairs + 1][1] = c->nfull;
                c->call.npairs += 2;
                snprintf(c->spoiled, sizeof c->spoiled, "repeated pair index");
                return;
            case REF_PBROADCAST:
                c->call.source = c->nfull + rnd(r, 2);
                snprintf(c->spoiled, sizeof c->spoiled, "source out of range");
                return;
            case REF_RAGGED_ALL_TO_ALL:
                if (chance(r, 30)) {
                    c->off_dt[rnd(r, 4)] = SHMESH_FLOAT32;
                    snprintf(c->spoiled, sizeof c->spoiled, "float offsets");
                } else {
                    spoil_ragged_entry(r, c);
                }
                return;
            default:
                break;
            }
            break;
        }
    }
}

static int gen_case(struct tcase *c, uint64_t seed, long index, int opfilter)
{
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->index = index;
    rng r = {seed * 0xD1B54A32D192ED03ull + (uint64_t)index * 0x8CB92BA72F3D8DD7ull +
             (uint64_t)world};
    next_u64(&r);
    c->data_seed = next_u64(&r);
    gen_mesh(&r, c);
    c->big = chance(&r, 8);
    ref_op op = opfilter >= 0 ? (ref_op)opfilter : (ref_op)rnd(&r, REF_OP_COUNT);
    c->call.op = op;

    /* axes */
    int ax[3] = {0, 1, 2}, na;
    shuffle(&r, ax, c->mndim);
    if (op == REF_PARGMAX || op == REF_PARGMIN)
        na = 1;
    else {
        int roll = rnd(&r, 100);
        na = roll < 35 ? c->mndim : roll < 70 ? 1 : roll < 95 ? 1 + rnd(&r, c->mndim) : 0;
    }
    axes_string(&r, c, ax, na);
    c->call.axes = c->axes;
    c->n = c->nfull;
    if (takes_groups(op) && op != REF_PARGMAX && op != REF_PARGMIN && chance(&r, 40))
        gen_groups(&r, c, equal_groups(op));

    /* dtype (bool psum_scatter is refused: see below) */
    c->dt = all_dtypes[rnd(&r, NDTYPES)];
    c->mode = VAL_BITS;
    if (is_reduction(op)) {
        int roll = rnd(&r, 100);
        c->mode = roll < 60 ? VAL_SPREAD : VAL_TIES;
        if ((op == REF_PMAX || op == REF_PMIN || op == REF_PARGMAX || op == REF_PARGMIN) &&
            is_float(c->dt) && roll >= 85)
            c->mode = VAL_NAN;
    }
    if (op == REF_PMEAN)
        c->call.mean_dtype = chance(&r, 50) ? SHMESH_FLOAT64 : SHMESH_FLOAT32;

    /* shape and parameters */
    switch (op) {
    case REF_ALL_GATHER:
        gen_shape(&r, c, 0, 4);
        c->call.tiled = c->ndim > 0 && chance(&r, 50);
        if (c->call.tiled)
            c->call.axis = signed_axis(&r, rnd(&r, c->ndim), c->ndim);
        else
            c->call.axis = signed_axis(&r, rnd(&r, c->ndim + 1), c->ndim + 1);
        break;
    case REF_PSUM_SCATTER: {
        gen_shape(&r, c, 1, 4);
        c->call.tiled = chance(&r, 50);
        int a = rnd(&r, c->ndim);
        c->shape[a] = c->call.tiled ? (int64_t)c->n * (chance(&r, 10) ? 0 : 1 + rnd(&r, 2)) : c->n;
        c->call.axis = signed_axis(&r, a, c->ndim);
        break;
    }
    case REF_ALL_TO_ALL: {
        gen_shape(&r, c, 1, 4);
        c->call.tiled = chance(&r, 50);
        int s = rnd(&r, c->ndim), cc = rnd(&r, c->ndim);
        c->shape[s] = c->call.tiled ? (int64_t)c->n * (chance(&r, 10) ? 0 : 1 + rnd(&r, 2)) : c->n;
        c->call.axis = signed_axis(&r, s, c->ndim);
        c->call.concat_axis = signed_axis(&r, cc, c->ndim);
        break;
    }
    case REF_PSWAPAXES: {
        gen_shape(&r, c, 1, 4);
        int a = rnd(&r, c->ndim);
        c->shape[a] = c->n;
        c->call.axis = signed_axis(&r, a, c->ndim);
        break;
    }
    case REF_RAGGED_ALL_TO_ALL:
        if (gen_ragged(&r, c))
            return -1;
        break;
    case REF_PPERMUTE: {
        gen_shape(&r, c, 0, 4);
        int src[MAXW], dst[MAXW];
        for (int i = 0; i < c->nfull; i++)
            src[i] = dst[i] = i;
        shuffle(&r, src, c->nfull);
        shuffle(&r, dst, c->nfull);
        c->call.npairs = rnd(&r, c->nfull + 1);
        if (chance(&r, 50))
            c->call.npairs = c->nfull;
        bool wrap = chance(&r, 20);
        for (int i = 0; i < c->call.npairs; i++) {
            c->pairs[i][0] = src[i] + (wrap ? c->nfull * (rnd(&r, 3) - 1) : 0);
            c->pairs[i][1] = dst[i] + (wrap ? c->nfull * (rnd(&r, 3) - 1) : 0);
        }
        c->call.pairs = (const int(*)[2])c->pairs;
        break;
    }
    case REF_PSHUFFLE:
        gen_shape(&r, c, 0, 4);
        for (int i = 0; i < c->nfull; i++)
            c->perm[i] = i;
        shuffle(&r, c->perm, c->nfull);
        c->call.perm = c->perm;
        break;
    case REF_PBROADCAST:
        gen_shape(&r, c, 0, 4);
        c->call.source = rnd(&r, c->nfull);
        break;
    default:
        gen_shape(&r, c, 0, 4);
        break;
    }

    /* The output the call gives (ragged: the output array itself). */
    bool bool_scatter = op == REF_PSUM_SCATTER && c->dt == SHMESH_BOOL;
    shmesh_array probe = {.data = NULL, .dtype = bool_scatter ? SHMESH_INT8 : c->dt, .ndim = c->ndim, .shape = {0}};
    memcpy(probe.shape, c->shape, sizeof c->shape);
    if (op == REF_RAGGED_ALL_TO_ALL)
        probe.shape[0] = c->rows_out;
    char why[256];
    if (ref_out_shape(&c->mesh, &c->call, &probe, &c->out_dt, &c->out_ndim, c->out_shape, why,
                      sizeof why)) {
        fprintf(stderr, "rank %d: case %" PRIu64 "/%ld: generated a refused call: %s\n", rank,
                seed, index, why);
        return -1;
    }
    int64_t valid_out = ref_numel(c->out_ndim, c->out_shape);
    if (bool_scatter) {
        c->out_dt = SHMESH_INT32; /* what a psum would give */
        snprintf(c->spoiled, sizeof c->spoiled, "bool psum_scatter");
    } else if (chance(&r, 10)) {
        spoil(&r, c);
    }
    /* Room for whatever a library that wrongly accepted a spoiled call
     * might write. */
    int64_t spoiled_out = ref_numel(c->out_ndim, c->out_shape);
    int64_t in_all = ref_numel(c->ndim, c->shape) * (c->nfull > 0 ? c->nfull : 1);
    int64_t room = valid_out > spoiled_out ? valid_out : spoiled_out;
    c->out_room = (room > in_all ? room : in_all) + 16;
    return 0;
}

/* ------------------------------------------------------------------------
 * Values
 * ---------------------------------------------------------------------- */

static size_t dsize(shmesh_dtype dt)
{
    static const size_t s[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8};
    return s[dt];
}

/* One element of the given mode, as raw bits. */
static uint64_t gen_value(rng *r, shmesh_dtype dt, enum valmode mode)
{
    uint64_t u = next_u64(r);
    if (dt == SHMESH_BOOL)
        return u & 1;
    if (mode == VAL_BITS)
        return u;
    if (mode == VAL_NAN && rnd(r, 100) < 20) {
        switch (dt) {
        case SHMESH_FLOAT16: return 0x7e00;
        case SHMESH_BFLOAT16: return 0x7fc0;
        case SHMESH_FLOAT32: return 0x7fc00000;
        default: return 0x7ff8000000000000ull;
        }
    }
    if (mode == VAL_NAN && rnd(r, 100) < 10) { /* +-infinity */
        uint64_t neg = u & 1;
        switch (dt) {
        case SHMESH_FLOAT16: return (neg << 15) | 0x7c00;
        case SHMESH_BFLOAT16: return (neg << 15) | 0x7f80;
        case SHMESH_FLOAT32: return (neg << 31) | 0x7f800000;
        default: return (neg << 63) | 0x7ff0000000000000ull;
        }
    }
    if (mode == VAL_TIES || mode == VAL_NAN) {
        int k = rnd(r, 5) - 2;
        switch (dt) {
        case SHMESH_FLOAT16: return float_to_half((float)k);
        case SHMESH_BFLOAT16: return float_to_bf16((float)k);
        case SHMESH_FLOAT32: { float f = (float)k; uint32_t b; memcpy(&b, &f, 4); return b; }
        case SHMESH_FLOAT64: { double f = k; uint64_t b; memcpy(&b, &f, 8); return b; }
        default:
            if (dt >= SHMESH_UINT8)
                return (uint64_t)(k + 2);
            return (uint64_t)(int64_t)k;
        }
    }
    /* VAL_SPREAD: integers anywhere (sums wrap), floats with a random
     * mantissa between 2^-6 and 2^6 (sums depend on their order). */
    uint64_t sign = (u >> 63) & 1;
    int e = rnd(r, 12) - 6;
    if (is_float(dt) && rnd(r, 100) < 8) {
        /* tiny: subnormal (exponent field 0, mantissa not all zero) or
         * just above, so sums cross the subnormal boundary */
        int field = rnd(r, 3);
        uint64_t m = u | 1;
        switch (dt) {
        case SHMESH_FLOAT16: return (sign << 15) | ((uint64_t)field << 10) | (m & 0x3ff);
        case SHMESH_BFLOAT16: return (sign << 15) | ((uint64_t)field << 7) | (m & 0x7f);
        case SHMESH_FLOAT32: return (sign << 31) | ((uint64_t)field << 23) | (m & 0x7fffff);
        default: return (sign << 63) | ((uint64_t)field << 52) | (m & 0xfffffffffffffull);
        }
    }
    switch (dt) {
    case SHMESH_FLOAT16: return (sign << 15) | ((uint64_t)(15 + e) << 10) | (u & 0x3ff);
    case SHMESH_BFLOAT16: return (sign << 15) | ((uint64_t)(127 + e) << 7) | (u & 0x7f);
    case SHMESH_FLOAT32: return (sign << 31) | ((uint64_t)(127 + e) << 23) | (u & 0x7fffff);
    case SHMESH_FLOAT64:
        return (sign << 63) | ((uint64_t)(1023 + e) << 52) | (u & 0xfffffffffffffull);
    default: return u;
    }
}

static void store(void *base, size_t es, int64_t i, uint64_t v)
{
    memcpy((char *)base + (size_t)i * es, &v, es); /* little-endian */
}

static uint64_t load(const void *base, size_t es, int64_t i)
{
    uint64_t v = 0;
    memcpy(&v, (const char *)base + (size_t)i * es, es);
    return v;
}

/* Device d's input (or operand) and, for ragged, its output's values. */
static void fill_inputs(const struct tcase *c, int d, void *in, void *out0, int64_t nout)
{
    rng r = {c->data_seed ^ ((uint64_t)(d + 1) * 0xA24BAED4963EE407ull)};
    next_u64(&r);
    size_t es = dsize(c->dt);
    int64_t n = ref_numel(c->ndim, c->shape);
    for (int64_t i = 0; i < n; i++)
        store(in, es, i, gen_value(&r, c->dt, c->mode));
    for (int64_t i = 0; out0 && i < nout; i++)
        store(out0, es, i, gen_value(&r, c->dt, VAL_BITS));
}

static double as_double(shmesh_dtype dt, uint64_t b)
{
    switch (dt) {
    case SHMESH_FLOAT16: return half_to_float((uint16_t)b);
    case SHMESH_BFLOAT16: return bf16_to_float((uint16_t)b);
    case SHMESH_FLOAT32: { uint32_t u = (uint32_t)b; float f; memcpy(&f, &u, 4); return f; }
    case SHMESH_FLOAT64: { double f; memcpy(&f, &b, 8); return f; }
    case SHMESH_INT8: return (int8_t)b;
    case SHMESH_INT16: return (int16_t)b;
    case SHMESH_INT32: return (int32_t)b;
    case SHMESH_INT64: return (double)(int64_t)b;
    default: return (double)b;
    }
}

/* ------------------------------------------------------------------------
 * Describing a case
 * ---------------------------------------------------------------------- */

static size_t put_shape(char *buf, size_t len, int nd, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, len, "(");
    for (int k = 0; k < nd && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, k ? "," : "", shape[k]);
    if (o < len)
        o += (size_t)snprintf(buf + o, len - o, ")");
    return o < len ? o : len;
}

static void describe(const struct tcase *c, char *buf, size_t len)
{
    size_t o = 0;
#define PUT(...)                                                                               \
    do {                                                                                       \
        if (o < len)                                                                           \
            o += (size_t)snprintf(buf + o, len - o, __VA_ARGS__);                              \
    } while (0)
    PUT("case %" PRIu64 "/%ld W=%d%s mesh ", c->seed, c->index, world,
        per_rank > 1 ? " (devices)" : "");
    for (int k = 0; k < c->mndim; k++)
        PUT("%s%s=%d", k ? "," : "", c->names[k], c->sizes[k]);
    if (c->has_order) {
        PUT(" order=");
        for (int d = 0; d < world; d++)
            PUT("%s%d", d ? "," : "", c->order[d]);
    }
    PUT(" op %s axes \"%s\"", op_label(c), c->axes);
    if (c->has_groups && takes_groups(c->call.op)) {
        PUT(" groups [");
        int off = 0;
        for (int g = 0; g < c->groups.ngroups; g++) {
            int s = c->groups.group_sizes ? c->groups.group_sizes[g] : c->groups.group_size;
            PUT("%s[", g ? "," : "");
            for (int q = 0; q < s && off + q < MAXW; q++)
                PUT("%s%d", q ? "," : "", c->gidx[off + q]);
            PUT("]");
            off += s;
        }
        PUT("]");
    }
    PUT(" %s", shmesh_dtype_name(c->dt));
    if (o < len)
        o += put_shape(buf + o, len - o, c->ndim, c->shape);
    switch (c->call.op) {
    case REF_ALL_GATHER:
        PUT(" axis %d%s", c->call.axis, c->call.tiled ? " tiled" : "");
        break;
    case REF_PSUM_SCATTER:
        PUT(" dim %d%s", c->call.axis, c->call.tiled ? " tiled" : "");
        break;
    case REF_ALL_TO_ALL:
        PUT(" split %d concat %d%s", c->call.axis, c->call.concat_axis,
            c->call.tiled ? " tiled" : "");
        break;
    case REF_PSWAPAXES:
        PUT(" axis %d", c->call.axis);
        break;
    case REF_PPERMUTE:
        PUT(" pairs [");
        for (int i = 0; i < c->call.npairs; i++)
            PUT("%s(%d,%d)", i ? "," : "", c->pairs[i][0], c->pairs[i][1]);
        PUT("]");
        break;
    case REF_PSHUFFLE:
        PUT(" perm [");
        for (int i = 0; i < c->nfull; i++)
            PUT("%s%d", i ? "," : "", c->perm[i]);
        PUT("]");
        break;
    case REF_PBROADCAST:
        PUT(" source %d", c->call.source);
        break;
    case REF_RAGGED_ALL_TO_ALL:
        PUT(" rows_out %" PRId64 " K %d", c->rows_out, c->K);
        for (int w = 0; w < 4; w++)
            PUT("%s%s", w ? "/" : " ", shmesh_dtype_name(c->off_dt[w]));
        break;
    case REF_PMEAN:
        PUT(" -> %s", shmesh_dtype_name(c->out_dt));
        break;
    default:
        break;
    }
    static const char *const modes[] = {"bits", "spread", "ties", "nan"};
    PUT(" values %s%s", modes[c->mode], c->big ? " big" : "");
    if (c->spoiled[0])
        PUT(" spoiled: %s", c->spoiled);
#undef PUT
}

/* ------------------------------------------------------------------------
 * Running a case
 * ---------------------------------------------------------------------- */

struct dev_arrays {
    shmesh_array in, out;
    shmesh_array off[4];
    void *in_buf, *out_buf, *off_buf[4];
};

static void offsets_array(const struct tcase *c, int d, int which, struct dev_arrays *a)
{
    shmesh_dtype odt = c->off_dt[which];
    size_t es = dsize(odt);
    a->off_buf[which] = calloc((size_t)c->K + 1, es);
    for (int i = 0; i < c->K; i++) {
        int64_t v = c->roff[d][which][i];
        if (odt == SHMESH_FLOAT32) {
            float f = (float)v;
            memcpy((char *)a->off_buf[which] + (size_t)i * es, &f, 4);
        } else {
            store(a->off_buf[which], es, i, (uint64_t)v);
        }
    }
    a->off[which] = (shmesh_array){.data = a->off_buf[which], .dtype = odt, .ndim = 1, .shape = {c->K}};
}

/* Device d's arrays as the model and the library take them.  The output
 * buffer has room to spare, filled with SENTINEL (ragged: the output's
 * values), so writes past the output show. */
static void make_arrays(const struct tcase *c, int d, struct dev_arrays *a)
{
    memset(a, 0, sizeof *a);
    size_t es = dsize(c->dt);
    int64_t nin = ref_numel(c->ndim, c->shape);
    a->in_buf = buf_alloc((size_t)(nin + 1) * es);
    a->in = (shmesh_array){.data = a->in_buf, .dtype = c->dt, .ndim = c->ndim, .shape = {0}};
    memcpy(a->in.shape, c->shape, sizeof c->shape);
    a->out_buf = buf_alloc((size_t)c->out_room * 8);
    memset(a->out_buf, SENTINEL, (size_t)c->out_room * 8);
    if (c->call.op == REF_RAGGED_ALL_TO_ALL) {
        a->out = (shmesh_array){.data = a->out_buf, .dtype = c->dt, .ndim = c->ndim, .shape = {0}};
        memcpy(a->out.shape, c->shape, sizeof c->shape);
        a->out.shape[0] = c->rows_out;
        if (c->out_extra_ndim) {
            a->out.ndim = c->out_extra_ndim;
            memcpy(a->out.shape, c->out_extra_shape, sizeof c->out_extra_shape);
        }
        fill_inputs(c, d, a->in_buf, a->out_buf, ref_numel(a->out.ndim, a->out.shape));
        for (int w = 0; w < 4; w++)
            offsets_array(c, d, w, a);
    } else {
        a->out = (shmesh_array){.data = a->out_buf, .dtype = c->out_dt, .ndim = c->out_ndim, .shape = {0}};
        memcpy(a->out.shape, c->out_shape, sizeof c->out_shape);
        fill_inputs(c, d, a->in_buf, NULL, 0);
    }
}

static void free_arrays(struct dev_arrays *a)
{
    buf_free(a->in_buf);
    buf_free(a->out_buf);
    for (int w = 0; w < 4; w++)
        free(a->off_buf[w]);
}

/* The call with one array per local device (in, out, and ragged's offsets). */
static int call_library(shmesh_mesh *m, const struct tcase *c, shmesh_array *in,
                        shmesh_array *out, shmesh_array off[4][MAXW])
{
    const ref_call *k = &c->call;
    const shmesh_groups *g = c->has_groups ? &c->groups : NULL;
    struct {
        shmesh_array *in, *out, *off[4];
    } arrays = {in, out, {off[0], off[1], off[2], off[3]}}, *a = &arrays;
    switch (k->op) {
    case REF_PSUM: return shmesh_psum(m, c->axes, g, a->in, a->out);
    case REF_PMAX: return shmesh_pmax(m, c->axes, g, a->in, a->out);
    case REF_PMIN: return shmesh_pmin(m, c->axes, g, a->in, a->out);
    case REF_PMEAN: return shmesh_pmean(m, c->axes, g, a->in, a->out);
    case REF_PARGMAX: return shmesh_pargmax(m, c->axes, g, a->in, a->out);
    case REF_PARGMIN: return shmesh_pargmin(m, c->axes, g, a->in, a->out);
    case REF_ALL_GATHER:
        return shmesh_all_gather(m, c->axes, g, k->axis, k->tiled, a->in, a->out);
    case REF_PSUM_SCATTER:
        return shmesh_psum_scatter(m, c->axes, g, k->axis, k->tiled, a->in, a->out);
    case REF_ALL_TO_ALL:
        return shmesh_all_to_all(m, c->axes, g, k->axis, k->concat_axis, k->tiled, a->in,
                                 a->out);
    case REF_PSWAPAXES: return shmesh_pswapaxes(m, c->axes, g, k->axis, a->in, a->out);
    case REF_RAGGED_ALL_TO_ALL:
        return shmesh_ragged_all_to_all(m, c->axes, g, a->in, a->out, a->off[0], a->off[1],
                                        a->off[2], a->off[3]);
    case REF_PPERMUTE:
        return shmesh_ppermute(m, c->axes, k->pairs, k->npairs, a->in, a->out);
    case REF_PSHUFFLE: return shmesh_pshuffle(m, c->axes, k->perm, a->in, a->out);
    case REF_PBROADCAST: return shmesh_pbroadcast(m, c->axes, k->source, a->in, a->out);
    default: return SHMESH_ERR_INVALID;
    }
}

/* The library's op code of the model's op (shmesh_op_get, by name). */
static int lib_code(ref_op op)
{
    for (int i = 0; i < shmesh_op_count(); i++)
        if (!strcmp(shmesh_op_get(i)->name, ref_op_name(op)))
            return shmesh_op_get(i)->code;
    return 0;
}

/* The call as shmesh_op_call and shmesh_op_result take it. */
static shmesh_op_args op_args_of(shmesh_mesh *m, const struct tcase *c, shmesh_array *in,
                                 shmesh_array *out, shmesh_array off[4][MAXW])
{
    const ref_call *k = &c->call;
    shmesh_op_args a = {.op = lib_code(k->op), .mesh = m, .axes = c->axes,
                        .groups = c->has_groups ? &c->groups : NULL, .axis = k->axis,
                        .axis2 = k->concat_axis, .tiled = k->tiled, .source = k->source,
                        .in = in, .out = out,
                        .offsets = {off[0], off[1], off[2], off[3]}};
    if (k->op == REF_PPERMUTE) {
        a.perm = k->pairs ? k->pairs[0] : NULL;
        a.nperm = k->npairs;
    } else if (k->op == REF_PSHUFFLE) { /* one entry per member of the axes' groups */
        a.perm = k->perm;
        if (shmesh_axis_size(m, c->axes, &a.nperm))
            a.nperm = 0;
    }
    return a;
}

/* shmesh_op_result for a call the model accepts: the dtype and shape of
 * the model's output (integer pmean: the float the package picks, where
 * the case may have asked for the other).  0, or 4 with the difference
 * printed. */
static int check_result(shmesh_ctx *ctx, shmesh_mesh *m, const struct tcase *c,
                        shmesh_array *in, shmesh_array *out, shmesh_array off[4][MAXW],
                        const char *desc)
{
    shmesh_op_args a = op_args_of(m, c, in, out, off);
    shmesh_array r = {.data = NULL};
    int rc = shmesh_op_result(&a, &r);
    shmesh_dtype want = out->dtype;
    if (c->call.op == REF_PMEAN && !is_float(in->dtype))
        want = dsize(in->dtype) == 8 ? SHMESH_FLOAT64 : SHMESH_FLOAT32;
    bool same = !rc && r.dtype == want && r.ndim == out->ndim;
    for (int d = 0; same && d < r.ndim; d++)
        same = r.shape[d] == out->shape[d];
    if (same)
        return 0;
    char got[160] = "", exp[160] = "";
    put_shape(got, sizeof got, r.ndim, r.shape);
    put_shape(exp, sizeof exp, out->ndim, out->shape);
    printf("rank %d: %s -> MISMATCH shmesh_op_result gave %s %s %s (%s), expected %s %s\n",
           rank, desc, shmesh_error_name(rc), shmesh_dtype_name(r.dtype), got,
           rc ? shmesh_last_error(ctx) : "", shmesh_dtype_name(want), exp);
    return 4;
}

static void print_index(char *buf, size_t len, const shmesh_array *a, int64_t e)
{
    int64_t idx[SHMESH_MAX_NDIM];
    int64_t rest = e;
    for (int k = a->ndim - 1; k >= 0; k--) {
        idx[k] = rest % a->shape[k];
        rest /= a->shape[k];
    }
    put_shape(buf, len, a->ndim, idx);
}

/* Compares what the library wrote with the model's output; prints up to
 * three differing elements.  Returns the number of differences. */
static long compare(const struct tcase *c, const char *desc, const struct dev_arrays *lib,
                    const struct dev_arrays *ref, bool expect_refused)
{
    const shmesh_array *o = &ref->out;
    size_t es = dsize(o->dtype);
    int64_t n = ref_numel(o->ndim, o->shape);
    size_t bytes = (size_t)n * es;
    long bad = 0;
    bool nan_ok = c->mode == VAL_NAN && is_float(o->dtype);
    if (!expect_refused) {
        for (int64_t e = 0; e < n; e++) {
            uint64_t got = load(lib->out_buf, es, e), want = load(ref->out_buf, es, e);
            if (got == want)
                continue;
            if (nan_ok && isnan(as_double(o->dtype, got)) && isnan(as_double(o->dtype, want)))
                continue;
            if (bad++ < 3) {
                char at[96];
                print_index(at, sizeof at, o, e);
                printf("rank %d: %s -> MISMATCH element %s (flat %" PRId64 ") of %s: got 0x%0*" PRIx64
                       " (%.17g) expected 0x%0*" PRIx64 " (%.17g)\n",
                       rank, desc, at, e, shmesh_dtype_name(o->dtype), (int)es * 2, got,
                       as_double(o->dtype, got), (int)es * 2, want, as_double(o->dtype, want));
            }
        }
    } else {
        /* A refused call writes nothing. */
        bytes = 0;
        if (c->call.op == REF_RAGGED_ALL_TO_ALL)
            bytes = (size_t)n * es;
        if (bytes && memcmp(lib->out_buf, ref->out_buf, bytes)) {
            bad++;
            printf("rank %d: %s -> MISMATCH a refused call changed the output\n", rank, desc);
        }
    }
    const unsigned char *p = lib->out_buf;
    for (size_t i = bytes; i < (size_t)c->out_room * 8; i++)
        if (p[i] != SENTINEL) {
            bad++;
            printf("rank %d: %s -> MISMATCH byte %zu past the output's %zu bytes was written\n",
                   rank, desc, i - bytes, bytes);
            break;
        }
    if (bad > 3)
        printf("rank %d: %s -> MISMATCH %ld elements differ in all\n", rank, desc, bad);
    return bad;
}

/* 0 agreed, 4 output differs, 3/5 the run must stop. */
static int run_case(shmesh_ctx *ctx, const struct tcase *c)
{
    char desc[1400];
    describe(c, desc, sizeof desc);
    int status = 0;

    shmesh_mesh *mesh = NULL;
    int rc = shmesh_mesh_create(ctx, c->mndim, c->names, c->sizes, c->has_order ? c->order : NULL,
                                &mesh);
    if (rc) {
        printf("rank %d: %s -> shmesh_mesh_create failed: %s: %s\n", rank, desc,
               shmesh_error_name(rc), shmesh_last_error(ctx));
        return 3;
    }

    /* The model, for every device. */
    char why[512];
    struct dev_arrays *ref = calloc((size_t)world, sizeof *ref);
    ref_dev *devs = calloc((size_t)world, sizeof *devs);
    for (int d = 0; d < world; d++) {
        make_arrays(c, d, &ref[d]);
        devs[d] = (ref_dev){&ref[d].in, &ref[d].out, &ref[d].off[0], &ref[d].off[1],
                            &ref[d].off[2], &ref[d].off[3], 0};
    }
    ref_collective(&c->mesh, &c->call, devs, why, sizeof why);

    /* The library, for this rank's devices in mesh order. */
    int ids[MAXW];
    int nl = shmesh_mesh_local_devices(mesh, ids, MAXW);
    struct dev_arrays lib[MAXW];
    shmesh_array ins[MAXW], outs[MAXW], offs[4][MAXW];
    int ref_rc = 0;
    for (int l = 0; l < nl; l++) {
        make_arrays(c, ids[l], &lib[l]);
        ins[l] = lib[l].in;
        outs[l] = lib[l].out;
        for (int w = 0; w < 4; w++)
            offs[w][l] = lib[l].off[w];
        if (devs[ids[l]].rc)
            ref_rc = devs[ids[l]].rc; /* ragged can refuse for some groups only */
    }
    /* A call refused for one of this rank's devices writes nothing for any:
     * keep the untouched buffers for the "nothing written" check. */
    for (int l = 0; l < nl && ref_rc; l++)
        memcpy(ref[ids[l]].out_buf, lib[l].out_buf, (size_t)c->out_room * 8);

    /* axis_index and axis_size, local: every local device's index. */
    for (int l = 0; l < nl && !status; l++) {
        int want_idx = -1, want_size = -1, idx = -1, size = -1;
        int mrc = ref_axis_index(&c->mesh, c->axes, ids[l], &want_idx, &want_size, why,
                                 sizeof why);
        int rc1 = l ? shmesh_axis_index_of(mesh, c->axes, ids[l], &idx)
                    : shmesh_axis_index(mesh, c->axes, &idx);
        int rc2 = shmesh_axis_size(mesh, c->axes, &size);
        if (mrc == 0 && (rc1 || rc2 || idx != want_idx || size != want_size)) {
            printf("rank %d: %s -> MISMATCH device %d: axis_index/axis_size gave %s %d / %s %d, "
                   "expected %d / %d\n", rank, desc, ids[l], shmesh_error_name(rc1), idx,
                   shmesh_error_name(rc2), size, want_idx, want_size);
            status = 4;
        } else if (mrc && (rc1 != SHMESH_ERR_INVALID || rc2 != SHMESH_ERR_INVALID)) {
            printf("rank %d: %s -> MISMATCH axis_index/axis_size gave %s / %s for refused axes "
                   "(%s)\n", rank, desc, shmesh_error_name(rc1), shmesh_error_name(rc2), why);
            status = 4;
        }
    }

    /* What the call gives, asked first (nothing shared), where the model
     * accepts it; every other case then goes through shmesh_op_call. */
    if (!ref_rc && !status)
        status = check_result(ctx, mesh, c, ins, outs, offs, desc);
    static unsigned cases_run;
    if (cases_run++ % 2) {
        shmesh_op_args a = op_args_of(mesh, c, ins, outs, offs);
        rc = shmesh_op_call(&a, NULL);
    } else {
        rc = call_library(mesh, c, ins, outs, offs);
    }

    if (ref_rc == 0 && rc != 0) {
        printf("rank %d: %s -> FAIL the library returned %s: %s\n", rank, desc,
               shmesh_error_name(rc), shmesh_last_error(ctx));
        status = 3;
    } else if (ref_rc != 0 && rc != SHMESH_ERR_INVALID) {
        printf("rank %d: %s -> FAIL the model refuses the call (%s) but the library returned %s%s%s\n",
               rank, desc, why, shmesh_error_name(rc), rc ? ": " : "",
               rc ? shmesh_last_error(ctx) : "");
        status = 5;
    } else {
        long bad = 0;
        for (int l = 0; l < nl; l++)
            bad += compare(c, desc, &lib[l], &ref[ids[l]], ref_rc != 0);
        if (bad)
            status = status ? status : 4;
        else if (!quiet && !status) {
            if (ref_rc)
                printf("rank %d: %s -> ok (refused: %s)\n", rank, desc, shmesh_last_error(ctx));
            else
                printf("rank %d: %s -> ok\n", rank, desc);
        }
    }
    fflush(stdout);
    for (int l = 0; l < nl; l++)
        free_arrays(&lib[l]);
    for (int d = 0; d < world; d++)
        free_arrays(&ref[d]);
    free(ref);
    free(devs);
    shmesh_mesh_destroy(mesh);
    return status;
}

static void usage(void)
{
    fprintf(stderr, "usage: shmesh-test-diff [-f FIRST] [-o OP] [-q] [-H] SEED COUNT\n"
                    "  -H  inputs and outputs in the shared heap (zero-copy when the library\n"
                    "      takes it: see SHMESH_ZC_MIN)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long first = 0;
    int opfilter = -1;
    int opt;
    bool use_heap = false;
    while ((opt = getopt(argc, argv, "f:o:qH")) != -1) {
        switch (opt) {
        case 'H':
            use_heap = true;
            break;
        case 'f':
            first = strtol(optarg, NULL, 10);
            break;
        case 'o':
            opfilter = ref_op_by_name(optarg);
            if (opfilter < 0) {
                fprintf(stderr, "unknown op %s\n", optarg);
                return 2;
            }
            break;
        case 'q':
            quiet = true;
            break;
        default:
            usage();
        }
    }
    if (argc - optind != 2)
        usage();
    uint64_t seed = strtoull(argv[optind], NULL, 10);
    long count = strtol(argv[optind + 1], NULL, 10);

    shmesh_ctx *ctx;
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh_init: %s\n", shmesh_last_error(NULL));
        return 3;
    }
    rank = shmesh_rank(ctx);
    world = shmesh_device_count(ctx);
    per_rank = shmesh_local_device_count(ctx);
    if (use_heap)
        heap_ctx = ctx;
    if (world > MAXW) {
        fprintf(stderr, "rank %d: at most %d devices\n", rank, MAXW);
        return 2;
    }
    int worst = 0;
    long ok = 0;
    for (long i = first; i < first + count; i++) {
        struct tcase c;
        if (gen_case(&c, seed, i, opfilter)) {
            fprintf(stderr, "rank %d: case %" PRIu64 "/%ld could not be generated\n", rank, seed,
                    i);
            free(c.roff);
            worst = 2;
            break;
        }
        int st = run_case(ctx, &c);
        free(c.roff);
        if (st == 0)
            ok++;
        if (st == 3 || st == 5 || (st && !worst))
            worst = st;
        if (st == 3 || st == 5)
            break;
    }
    if (worst == 3 || worst == 5) {
        /* Peers may be inside a call this rank will never make. */
        fflush(stdout);
        shmesh_abort(ctx, worst, "shmesh-test-diff: stopping after a failed case");
    }
    int frc = shmesh_finalize(ctx);
    if (quiet || frc)
        printf("rank %d: %ld cases ok%s%s\n", rank, ok, frc ? ", finalize: " : "",
               frc ? shmesh_last_error(NULL) : "");
    return worst ? worst : frc ? 3 : 0;
}
