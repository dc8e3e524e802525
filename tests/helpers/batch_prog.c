/* shmesh-test-batch: the rank program of the batched-axes differential test
 * (tests/test_batch_diff.c).  The same random cases run twice: on a mesh
 * whose last axis is batched inside the ranks (shmesh_mesh_batch), and on
 * the same mesh with one process per position; every position must get the
 * same bits.
 *
 * Usage: shmesh-test-batch diff SEED NCASES DIR MODE B [FIRST]
 *   MODE batched  a job of R ranks: the mesh of the case's unbatched axes
 *                 over the R ranks, then batched axis of size B
 *   MODE flat     a job of R*B ranks: the same axis names and sizes, all of
 *                 them over processes (the batched axis an ordinary last one)
 *   Runs cases FIRST .. FIRST+NCASES-1 (FIRST 0 by default).  A case depends
 *   on SEED, its index, R and B only, so both modes run the same ones, and
 *   `NCASES 1 ... FIRST` replays one.
 *
 * Mesh position q = p*B + k (p over the unbatched axes, k along the batched
 * one: the batched axis is the last, row-major) has the same input in both
 * modes, a function of (SEED, case, q, element).  In batched mode a rank
 * holds its B positions in one array, at a random in.bdim, and asks for the
 * output at a random out.bdim (a not-mapped result is broadcast there, so
 * every position's slice is comparable).  Both modes write, for every
 * position q, into DIR:
 *   case-C-rc-Q.txt   the call's result: SHMESH_OK or the error's name
 *   case-C-pos-Q.bin  position q's output, row-major (when the call succeeded)
 *   case-C-desc.txt   the case in words (rank 0; the same text in both modes)
 * so the two modes' directories must hold the same files, byte for byte.
 * Only mapped inputs: a not-mapped one sums as B*x over the batched axis,
 * which differs from a flat mesh on purpose (shmesh.h).
 *
 * A call either mode refuses is printed ("rank R: case ... -> ERR: why").
 * Checks of its own (a write past the output, an input changed, in batched
 * mode shmesh_matchaxis against the slices taken here) print "rank R:
 * FAILED: ..." and make the exit status 4; 0 otherwise, whatever the calls
 * returned (the files say that); 3 a setup call failed; 2 bad usage. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/half.h"
#include "reference.h"
#include "shmesh.h"

#include "cases.h"

#include "checks.h"

#define MAXP 16 /* positions of a case's mesh */
#define MAXAX 4 /* unbatched axes (at most 3) and the batched one */
#define SENTINEL 0xA5
#define SLACK 64 /* bytes past every output that must stay SENTINEL */

/* ------------------------------------------------------------------------
 * A case
 * ---------------------------------------------------------------------- */

/* The collectives of shmesh.h's batched section, and axis_index. */
enum bop {
    B_PSUM,
    B_PMAX,
    B_PMIN,
    B_PMEAN,
    B_PARGMAX,
    B_PARGMIN,
    B_ALL_GATHER,
    B_PSUM_SCATTER,
    B_ALL_TO_ALL,
    B_PSWAPAXES,
    B_PPERMUTE,
    B_PSHUFFLE,
    B_PBROADCAST,
    B_AXIS_INDEX,
    B_COUNT
};

static const ref_op ref_of[B_COUNT] = {
    REF_PSUM,         REF_PMAX,       REF_PMIN,      REF_PMEAN,    REF_PARGMAX,
    REF_PARGMIN,      REF_ALL_GATHER, REF_PSUM_SCATTER, REF_ALL_TO_ALL, REF_PSWAPAXES,
    REF_PPERMUTE,     REF_PSHUFFLE,   REF_PBROADCAST, REF_OP_COUNT};

static const char *op_name(enum bop op)
{
    return op == B_AXIS_INDEX ? "axis_index" : ref_op_name(ref_of[op]);
}

enum valmode { VAL_BITS, VAL_SPREAD, VAL_TIES, VAL_NAN };

struct bcase {
    uint64_t seed;
    long index;
    uint64_t data_seed;
    int R, B, P; /* ranks of the batched job, batch size, positions (R*B) */
    /* The mesh: axes 0..nu-1 unbatched (over the R ranks), axis nu batched. */
    int nu, mndim;
    const char *names[MAXAX];
    int sizes[MAXAX];
    /* Device orders: the batched job's unbatched mesh, the flat job's mesh. */
    bool has_border, has_forder;
    int border[MAXP], forder[MAXP];
    ref_mesh flat; /* the flat mesh (identity order): positions are devices */
    /* The call. */
    enum bop op;
    ref_call call;
    char axes[96];
    int nfull, n; /* group size over the axes; (sub)group size */
    shmesh_groups groups;
    bool has_groups;
    int gidx[MAXP], gsizes[MAXP];
    int pairs[MAXP + 2][2];
    int perm[MAXP];
    /* Each position's arrays. */
    shmesh_dtype dt;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
    enum valmode mode;
    shmesh_dtype out_dt;
    int out_ndim;
    int64_t out_shape[SHMESH_MAX_NDIM];
    /* Where the batched job carries the batch (as passed: may be negative). */
    int in_bdim, out_bdim;
    char spoiled[64]; /* what was spoiled on purpose, "" if nothing */
};

static const char *const pool[] = {"x", "y", "z", "data", "model", "b", "batch", "pipe"};


static bool takes_groups(enum bop op)
{
    return op == B_PSUM || op == B_PMAX || op == B_PMIN || op == B_PMEAN ||
           op == B_ALL_GATHER || op == B_PSUM_SCATTER || op == B_ALL_TO_ALL ||
           op == B_PSWAPAXES;
}

static bool equal_groups(enum bop op)
{
    return op == B_ALL_GATHER || op == B_PSUM_SCATTER || op == B_ALL_TO_ALL ||
           op == B_PSWAPAXES;
}

/* Unbatched axes whose sizes multiply to R (sizes of 1 allowed), then the
 * batched axis; names drawn from the pool. */
static void gen_mesh(rng *r, struct bcase *c)
{
    c->nu = 1 + rnd(r, 3);
    int rest = c->R;
    for (int k = 0; k < c->nu - 1; k++) {
        int div[MAXP], nd = 0;
        for (int d = 1; d <= rest; d++)
            if (rest % d == 0)
                div[nd++] = d;
        c->sizes[k] = div[rnd(r, nd)];
        rest /= c->sizes[k];
    }
    c->sizes[c->nu - 1] = rest;
    shuffle(r, c->sizes, c->nu);
    c->mndim = c->nu + 1;
    c->sizes[c->nu] = c->B;
    int pick[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    shuffle(r, pick, 8);
    for (int k = 0; k < c->mndim; k++)
        c->names[k] = pool[pick[k]];
    /* Both jobs' device orders, drawn in both modes so that the rest of the
     * case does not depend on the mode. */
    for (int d = 0; d < MAXP; d++)
        c->border[d] = c->forder[d] = d;
    c->has_border = chance(r, 30);
    shuffle(r, c->border, c->R);
    c->has_forder = chance(r, 30);
    shuffle(r, c->forder, c->P);
    c->flat = (ref_mesh){c->mndim, c->names, c->sizes, NULL};
}

/* Random subgroups of 0..nfull-1: equal sizes when asked. */
static void gen_groups(rng *r, struct bcase *c, bool equal)
{
    c->n = random_groups(r, c->nfull, equal, c->gidx, c->gsizes, &c->groups);
    c->has_groups = true;
    c->call.groups = &c->groups;
}

/* ndim in minnd..maxnd, small dimensions (now and then 0), at most 48
 * elements. */
static void gen_shape(rng *r, struct bcase *c, int minnd, int maxnd)
{
    c->ndim = minnd + rnd(r, maxnd - minnd + 1);
    for (int k = 0; k < c->ndim; k++)
        c->shape[k] = chance(r, 4) ? 0 : 1 + rnd(r, 4);
    while (ref_numel(c->ndim, c->shape) > 48)
        for (int k = 0; k < c->ndim; k++)
            if (c->shape[k] > 1)
                c->shape[k]--;
}

static int signed_axis(rng *r, int a, int range) { return chance(r, 30) ? a - range : a; }

/* Spoils one argument so that both jobs must refuse the call. */
static void spoil(rng *r, struct bcase *c)
{
    switch (rnd(r, 3)) {
    case 0:
        strncat(c->axes, ",nope", sizeof c->axes - strlen(c->axes) - 1);
        snprintf(c->spoiled, sizeof c->spoiled, "unknown axis");
        return;
    case 1: {
        char first[sizeof c->axes];
        snprintf(first, sizeof first, "%s", c->axes);
        first[strcspn(first, ",")] = '\0';
        size_t l = strlen(c->axes);
        snprintf(c->axes + l, sizeof c->axes - l, ",%s", first);
        snprintf(c->spoiled, sizeof c->spoiled, "repeated axis");
        return;
    }
    default:
        break;
    }
    /* The op's own rule. */
    switch (c->op) {
    case B_PSUM_SCATTER:
    case B_ALL_TO_ALL:
    case B_PSWAPAXES: {
        int a = c->call.axis < 0 ? c->call.axis + c->ndim : c->call.axis;
        bool tiled = c->op != B_PSWAPAXES && c->call.tiled;
        if (tiled && c->n == 1)
            break;
        c->shape[a] = tiled ? c->shape[a] + 1 : c->n + 1;
        snprintf(c->spoiled, sizeof c->spoiled, "split size");
        return;
    }
    case B_ALL_GATHER:
        c->call.axis = c->call.tiled ? c->ndim : c->ndim + 1;
        snprintf(c->spoiled, sizeof c->spoiled, "axis out of range");
        return;
    case B_PARGMAX:
    case B_PARGMIN:
        snprintf(c->axes, sizeof c->axes, "%s,%s", c->names[0], c->names[c->nu]);
        snprintf(c->spoiled, sizeof c->spoiled, "two axes");
        return;
    case B_PSHUFFLE:
        c->perm[0] = c->nfull >= 2 ? c->perm[1] : 1;
        snprintf(c->spoiled, sizeof c->spoiled, "not a permutation");
        return;
    case B_PBROADCAST:
        c->call.source = c->nfull + rnd(r, 2);
        snprintf(c->spoiled, sizeof c->spoiled, "source out of range");
        return;
    default:
        break;
    }
    strncat(c->axes, ",nope", sizeof c->axes - strlen(c->axes) - 1);
    snprintf(c->spoiled, sizeof c->spoiled, "unknown axis");
}

static int gen_case(struct bcase *c, uint64_t seed, long index, int R, int B)
{
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->index = index;
    c->R = R;
    c->B = B;
    c->P = R * B;
    rng r = {seed * 0xD1B54A32D192ED03ull + (uint64_t)index * 0x8CB92BA72F3D8DD7ull};
    next_u64(&r);
    c->data_seed = next_u64(&r);
    gen_mesh(&r, c);
    c->op = (enum bop)rnd(&r, B_COUNT);
    c->call.op = ref_of[c->op];

    /* A non-empty ordered subset of the axes; the batched one alone now and
     * then. */
    int ax[MAXAX] = {0, 1, 2, 3}, na;
    shuffle(&r, ax, c->mndim);
    if (c->op == B_PARGMAX || c->op == B_PARGMIN)
        na = 1;
    else
        na = 1 + rnd(&r, c->mndim);
    if (na == 1 && chance(&r, 30))
        ax[0] = c->nu;
    c->axes[0] = '\0';
    c->nfull = 1;
    for (int j = 0; j < na; j++) {
        size_t l = strlen(c->axes);
        snprintf(c->axes + l, sizeof c->axes - l, "%s%s", j ? "," : "", c->names[ax[j]]);
        c->nfull *= c->sizes[ax[j]];
    }
    c->call.axes = c->axes;
    c->n = c->nfull;
    if (takes_groups(c->op) && chance(&r, 30))
        gen_groups(&r, c, equal_groups(c->op));

    /* dtype and values: sums see values that round differently in another
     * order; extremes see ties, and NaN and infinities in floats. */
    c->dt = all_dtypes[rnd(&r, NDTYPES)];
    if (c->op == B_PSUM_SCATTER && c->dt == SHMESH_BOOL)
        c->dt = SHMESH_INT32; /* refused by both, and said so in shmesh.h */
    if (c->op == B_AXIS_INDEX)
        c->dt = SHMESH_INT32;
    int roll = rnd(&r, 100);
    switch (c->op) {
    case B_PSUM:
    case B_PMEAN:
    case B_PSUM_SCATTER:
        c->mode = roll < 70 ? VAL_SPREAD : VAL_TIES;
        break;
    case B_PMAX:
    case B_PMIN:
    case B_PARGMAX:
    case B_PARGMIN:
        c->mode = roll < 50 ? VAL_SPREAD : roll < 85 || !is_float(c->dt) ? VAL_TIES : VAL_NAN;
        break;
    default:
        c->mode = VAL_BITS;
        break;
    }
    if (c->op == B_PMEAN)
        c->call.mean_dtype = chance(&r, 50) ? SHMESH_FLOAT64 : SHMESH_FLOAT32;

    /* Shape and parameters. */
    switch (c->op) {
    case B_ALL_GATHER:
        gen_shape(&r, c, 0, 3);
        c->call.tiled = c->ndim > 0 && chance(&r, 50);
        if (c->call.tiled)
            c->call.axis = signed_axis(&r, rnd(&r, c->ndim), c->ndim);
        else
            c->call.axis = signed_axis(&r, rnd(&r, c->ndim + 1), c->ndim + 1);
        break;
    case B_PSUM_SCATTER: {
        gen_shape(&r, c, 1, 3);
        c->call.tiled = chance(&r, 50);
        int a = rnd(&r, c->ndim);
        c->shape[a] = c->call.tiled ? (int64_t)c->n * (1 + rnd(&r, 2)) : c->n;
        c->call.axis = signed_axis(&r, a, c->ndim);
        break;
    }
    case B_ALL_TO_ALL: {
        gen_shape(&r, c, 1, 3);
        c->call.tiled = chance(&r, 50);
        int s = rnd(&r, c->ndim), cc = rnd(&r, c->ndim);
        c->shape[s] = c->call.tiled ? (int64_t)c->n * (1 + rnd(&r, 2)) : c->n;
        c->call.axis = signed_axis(&r, s, c->ndim);
        c->call.concat_axis = signed_axis(&r, cc, c->ndim);
        break;
    }
    case B_PSWAPAXES: {
        gen_shape(&r, c, 1, 3);
        int a = rnd(&r, c->ndim);
        c->shape[a] = c->n;
        c->call.axis = signed_axis(&r, a, c->ndim);
        break;
    }
    case B_PPERMUTE: {
        /* Full permutations (every member a destination) and partial ones
         * (the others get zeros), now and then with indices beyond n. */
        gen_shape(&r, c, 0, 3);
        int src[MAXP], dst[MAXP];
        for (int i = 0; i < c->nfull; i++)
            src[i] = dst[i] = i;
        shuffle(&r, src, c->nfull);
        shuffle(&r, dst, c->nfull);
        c->call.npairs = chance(&r, 50) ? c->nfull : rnd(&r, c->nfull + 1);
        bool wrap = chance(&r, 15);
        for (int i = 0; i < c->call.npairs; i++) {
            c->pairs[i][0] = src[i] + (wrap ? c->nfull * (rnd(&r, 3) - 1) : 0);
            c->pairs[i][1] = dst[i] + (wrap ? c->nfull * (rnd(&r, 3) - 1) : 0);
        }
        c->call.pairs = (const int(*)[2])c->pairs;
        break;
    }
    case B_PSHUFFLE:
        gen_shape(&r, c, 0, 3);
        for (int i = 0; i < c->nfull; i++)
            c->perm[i] = i;
        shuffle(&r, c->perm, c->nfull);
        c->call.perm = c->perm;
        break;
    case B_PBROADCAST:
        gen_shape(&r, c, 0, 3);
        c->call.source = rnd(&r, c->nfull);
        break;
    case B_AXIS_INDEX:
        c->ndim = 0;
        break;
    default:
        gen_shape(&r, c, 0, 3);
        break;
    }

    /* Each position's output; a call both refuse is spoiled on purpose. */
    char why[256];
    if (c->op == B_AXIS_INDEX) {
        c->out_dt = SHMESH_INT32;
        c->out_ndim = 0;
    } else {
        shmesh_array probe = {.dtype = c->dt, .ndim = c->ndim};
        memcpy(probe.shape, c->shape, sizeof c->shape);
        if (ref_out_shape(&c->flat, &c->call, &probe, &c->out_dt, &c->out_ndim, c->out_shape, why,
                          sizeof why)) {
            fprintf(stderr, "rank %d: case %" PRIu64 "/%ld: generated a refused call: %s\n", rank,
                    seed, index, why);
            return -1;
        }
    }
    if (chance(&r, 6))
        spoil(&r, c);

    /* Where the batched job carries the batch: anywhere in the input (a
     * negative index now and then), and in the output anywhere, or 0. */
    c->in_bdim = rnd(&r, c->ndim + 1);
    if (chance(&r, 25))
        c->in_bdim -= c->ndim + 1;
    c->out_bdim = chance(&r, 30) ? 0 : rnd(&r, c->out_ndim + 1);
    if (chance(&r, 25))
        c->out_bdim -= c->out_ndim + 1;
    return 0;
}

/* ------------------------------------------------------------------------
 * Values
 * ---------------------------------------------------------------------- */

/* One element of the given mode, as raw bits. */
static uint64_t gen_value(rng *r, shmesh_dtype dt, enum valmode mode)
{
    uint64_t u = next_u64(r);
    if (dt == SHMESH_BOOL)
        return u & 1;
    if (mode == VAL_BITS)
        return u;
    if (mode == VAL_NAN && rnd(r, 100) < 20) { /* one NaN, so that any NaN result is it */
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
        /* -2..2, and -0.0 beside +0.0 in floats */
        int k = rnd(r, 5) - 2;
        bool negzero = k == 0 && (u & 2);
        switch (dt) {
        case SHMESH_FLOAT16: return negzero ? 0x8000 : float_to_half((float)k);
        case SHMESH_BFLOAT16: return negzero ? 0x8000 : float_to_bf16((float)k);
        case SHMESH_FLOAT32: {
            float f = negzero ? -0.0f : (float)k;
            uint32_t b;
            memcpy(&b, &f, 4);
            return b;
        }
        case SHMESH_FLOAT64: {
            double f = negzero ? -0.0 : k;
            uint64_t b;
            memcpy(&b, &f, 8);
            return b;
        }
        default:
            if (dt >= SHMESH_UINT8)
                return (uint64_t)(k + 2);
            return (uint64_t)(int64_t)k;
        }
    }
    /* VAL_SPREAD: integers anywhere (sums wrap), floats with a random
     * mantissa between 2^-6 and 2^5 and a random sign (sums depend on their
     * order), and now and then a subnormal. */
    uint64_t sign = (u >> 63) & 1;
    int e = rnd(r, 12) - 6;
    if (is_float(dt) && rnd(r, 100) < 8) {
        int field = rnd(r, 2);
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

/* Position q's input, row-major: element i is a function of (seed, case,
 * q, i) alone. */
static void fill_position(const struct bcase *c, int q, void *buf)
{
    rng r = {c->data_seed ^ ((uint64_t)(q + 1) * 0xA24BAED4963EE407ull)};
    next_u64(&r);
    size_t es = shmesh_dtype_size(c->dt);
    int64_t n = ref_numel(c->ndim, c->shape);
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = gen_value(&r, c->dt, c->mode);
        memcpy((char *)buf + (size_t)i * es, &v, es); /* little-endian */
    }
}

/* ------------------------------------------------------------------------
 * Batch dimensions
 * ---------------------------------------------------------------------- */

/* A shape with a dimension of size B inserted at `at` (0..nd). */
static void insert_dim(int nd, const int64_t *shape, int at, int B, int64_t *out)
{
    for (int k = 0, j = 0; k <= nd; k++)
        out[k] = k == at ? B : shape[j++];
}

/* Bytes before and after the batch dimension `at` of an array of shape
 * (nd dims, B inserted at at): outer blocks of inner bytes each. */
static void split_at(int nd, const int64_t *shape, int at, size_t es, int64_t *outer,
                     size_t *inner)
{
    *outer = 1;
    *inner = es;
    for (int k = 0; k < nd; k++) {
        if (k < at)
            *outer *= shape[k];
        else
            *inner *= (size_t)shape[k];
    }
}

/* Copies slice k (row-major, without the batch dimension) into or out of
 * an array that holds B slices at dimension `at`. */
static void put_slice(void *batched, const void *slice, int nd, const int64_t *shape, int at,
                      size_t es, int B, int k)
{
    int64_t outer;
    size_t inner;
    split_at(nd, shape, at, es, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)batched + ((size_t)o * (size_t)B + (size_t)k) * inner,
               (const char *)slice + (size_t)o * inner, inner);
}

static void take_slice(void *slice, const void *batched, int nd, const int64_t *shape, int at,
                       size_t es, int B, int k)
{
    int64_t outer;
    size_t inner;
    split_at(nd, shape, at, es, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)slice + (size_t)o * inner,
               (const char *)batched + ((size_t)o * (size_t)B + (size_t)k) * inner, inner);
}

/* ------------------------------------------------------------------------
 * Describing a case
 * ---------------------------------------------------------------------- */

static void describe(const struct bcase *c, char *buf, size_t len)
{
    size_t o = 0;
#define PUT(...)                                                                               \
    do {                                                                                       \
        if (o < len)                                                                           \
            o += (size_t)snprintf(buf + o, len - o, __VA_ARGS__);                              \
    } while (0)
    PUT("case %" PRIu64 "/%ld R=%d B=%d mesh ", c->seed, c->index, c->R, c->B);
    for (int k = 0; k < c->mndim; k++)
        PUT("%s%s=%d%s", k ? "," : "", c->names[k], c->sizes[k], k == c->nu ? " (batched)" : "");
    if (c->has_border) {
        PUT(" batched-job order=");
        for (int d = 0; d < c->R; d++)
            PUT("%s%d", d ? "," : "", c->border[d]);
    }
    if (c->has_forder) {
        PUT(" flat-job order=");
        for (int d = 0; d < c->P; d++)
            PUT("%s%d", d ? "," : "", c->forder[d]);
    }
    PUT(" op %s axes \"%s\"", op_name(c->op), c->axes);
    if (c->has_groups) {
        PUT(" groups [");
        int off = 0;
        for (int g = 0; g < c->groups.ngroups; g++) {
            int s = c->groups.group_sizes ? c->groups.group_sizes[g] : c->groups.group_size;
            PUT("%s[", g ? "," : "");
            for (int q = 0; q < s && off + q < MAXP; q++)
                PUT("%s%d", q ? "," : "", c->gidx[off + q]);
            PUT("]");
            off += s;
        }
        PUT("]%s", c->groups.group_sizes ? "" : " (group_size)");
    }
    PUT(" %s(", shmesh_dtype_name(c->dt));
    for (int k = 0; k < c->ndim; k++)
        PUT("%s%" PRId64, k ? "," : "", c->shape[k]);
    PUT(")");
    switch (c->op) {
    case B_ALL_GATHER: PUT(" axis %d%s", c->call.axis, c->call.tiled ? " tiled" : ""); break;
    case B_PSUM_SCATTER: PUT(" dim %d%s", c->call.axis, c->call.tiled ? " tiled" : ""); break;
    case B_ALL_TO_ALL:
        PUT(" split %d concat %d%s", c->call.axis, c->call.concat_axis,
            c->call.tiled ? " tiled" : "");
        break;
    case B_PSWAPAXES: PUT(" axis %d", c->call.axis); break;
    case B_PPERMUTE:
        PUT(" pairs [");
        for (int i = 0; i < c->call.npairs; i++)
            PUT("%s(%d,%d)", i ? "," : "", c->pairs[i][0], c->pairs[i][1]);
        PUT("]");
        break;
    case B_PSHUFFLE:
        PUT(" perm [");
        for (int i = 0; i < c->nfull; i++)
            PUT("%s%d", i ? "," : "", c->perm[i]);
        PUT("]");
        break;
    case B_PBROADCAST: PUT(" source %d", c->call.source); break;
    default: break;
    }
    PUT(" -> %s(", shmesh_dtype_name(c->out_dt));
    for (int k = 0; k < c->out_ndim; k++)
        PUT("%s%" PRId64, k ? "," : "", c->out_shape[k]);
    PUT(") in.bdim %d out.bdim %d", c->in_bdim, c->out_bdim);
    static const char *const modes[] = {"bits", "spread", "ties", "nan"};
    PUT(" values %s", modes[c->mode]);
    if (c->spoiled[0])
        PUT(" spoiled: %s", c->spoiled);
#undef PUT
}

/* ------------------------------------------------------------------------
 * Running a case
 * ---------------------------------------------------------------------- */

static const char *dir;

static void write_file(long index, const char *what, int q, const void *data, size_t bytes)
{
    char path[4096];
    if (q >= 0)
        snprintf(path, sizeof path, "%s/case-%ld-%s-%d.%s", dir, index, what, q,
                 strcmp(what, "pos") ? "txt" : "bin");
    else
        snprintf(path, sizeof path, "%s/case-%ld-%s.txt", dir, index, what);
    FILE *f = fopen(path, "wb");
    if (!f || (bytes && fwrite(data, 1, bytes, f) != bytes) || fclose(f)) {
        printf("rank %d: FAIL: writing %s: %s\n", rank, path, strerror(errno));
        exit(3);
    }
}

static void write_rc(long index, int q, int rc)
{
    char line[64];
    snprintf(line, sizeof line, "%s\n", shmesh_error_name(rc));
    write_file(index, "rc", q, line, strlen(line));
}

static int call_op(shmesh_mesh *m, const struct bcase *c, const shmesh_array *in,
                   shmesh_array *out)
{
    const ref_call *k = &c->call;
    const shmesh_groups *g = c->has_groups ? &c->groups : NULL;
    switch (c->op) {
    case B_PSUM: return shmesh_psum(m, c->axes, g, in, out);
    case B_PMAX: return shmesh_pmax(m, c->axes, g, in, out);
    case B_PMIN: return shmesh_pmin(m, c->axes, g, in, out);
    case B_PMEAN: return shmesh_pmean(m, c->axes, g, in, out);
    case B_PARGMAX: return shmesh_pargmax(m, c->axes, g, in, out);
    case B_PARGMIN: return shmesh_pargmin(m, c->axes, g, in, out);
    case B_ALL_GATHER: return shmesh_all_gather(m, c->axes, g, k->axis, k->tiled, in, out);
    case B_PSUM_SCATTER: return shmesh_psum_scatter(m, c->axes, g, k->axis, k->tiled, in, out);
    case B_ALL_TO_ALL:
        return shmesh_all_to_all(m, c->axes, g, k->axis, k->concat_axis, k->tiled, in, out);
    case B_PSWAPAXES: return shmesh_pswapaxes(m, c->axes, g, k->axis, in, out);
    case B_PPERMUTE: return shmesh_ppermute(m, c->axes, k->pairs, k->npairs, in, out);
    case B_PSHUFFLE: return shmesh_pshuffle(m, c->axes, k->perm, in, out);
    case B_PBROADCAST: return shmesh_pbroadcast(m, c->axes, k->source, in, out);
    case B_AXIS_INDEX: return shmesh_axis_index_array(m, c->axes, out);
    default: return SHMESH_ERR_INVALID;
    }
}

/* Whether the SLACK bytes past an output are still SENTINEL. */
static bool slack_intact(const void *buf, size_t bytes)
{
    const unsigned char *p = (const unsigned char *)buf + bytes;
    for (size_t i = 0; i < SLACK; i++)
        if (p[i] != SENTINEL)
            return false;
    return true;
}

/* The flat job: this rank is one position. */
static int run_flat(const struct bcase *c, const char *desc)
{
    shmesh_mesh *mesh;
    MUST(shmesh_mesh_create(ctx, c->mndim, c->names, c->sizes, c->has_forder ? c->forder : NULL,
                            &mesh));
    int q = 0;
    while (c->has_forder && c->forder[q] != rank)
        q++;
    if (!c->has_forder)
        q = rank;
    size_t es = shmesh_dtype_size(c->dt), oes = shmesh_dtype_size(c->out_dt);
    size_t in_bytes = (size_t)ref_numel(c->ndim, c->shape) * es;
    size_t out_bytes = (size_t)ref_numel(c->out_ndim, c->out_shape) * oes;
    unsigned char *in = malloc(in_bytes + 1), *copy = malloc(in_bytes + 1);
    unsigned char *out = malloc(out_bytes + SLACK);
    fill_position(c, q, in);
    memcpy(copy, in, in_bytes);
    memset(out, SENTINEL, out_bytes + SLACK);
    shmesh_array ia = {.data = in, .dtype = c->dt, .ndim = c->ndim};
    shmesh_array oa = {.data = out, .dtype = c->out_dt, .ndim = c->out_ndim};
    memcpy(ia.shape, c->shape, sizeof c->shape);
    memcpy(oa.shape, c->out_shape, sizeof c->out_shape);

    int rc;
    if (c->op == B_AXIS_INDEX) {
        /* The established local function is the reference here. */
        int idx = -1;
        rc = shmesh_axis_index(mesh, c->axes, &idx);
        int32_t v = idx;
        if (!rc)
            memcpy(out, &v, 4);
    } else {
        rc = call_op(mesh, c, &ia, &oa);
    }
    int status = 0;
    if (rc)
        printf("rank %d: %s -> position %d: %s: %s\n", rank, desc, q, shmesh_error_name(rc),
               why());
    else
        write_file(c->index, "pos", q, out, out_bytes);
    write_rc(c->index, q, rc);
    if (!slack_intact(out, out_bytes)) {
        check(false, "%s -> position %d: written past its %zu output bytes", desc, q, out_bytes);
        status = 4;
    }
    if (memcmp(in, copy, in_bytes)) {
        check(false, "%s -> position %d: the input changed", desc, q);
        status = 4;
    }
    free(in);
    free(copy);
    free(out);
    shmesh_mesh_destroy(mesh);
    return status;
}

/* The batched job: this rank holds positions p*B .. p*B+B-1 in one array. */
static int run_batched(const struct bcase *c, const char *desc)
{
    const int B = c->B;
    shmesh_mesh *base, *mesh = NULL;
    MUST(shmesh_mesh_create(ctx, c->nu, c->names, c->sizes, c->has_border ? c->border : NULL,
                            &base));
    int p = 0;
    while (c->has_border && c->border[p] != rank)
        p++;
    if (!c->has_border)
        p = rank;
    int rc = shmesh_mesh_batch(base, c->names[c->nu], B, &mesh);
    shmesh_mesh_destroy(base); /* the batched mesh does not need it */
    const char *what = rc ? "shmesh_mesh_batch" : op_name(c->op);

    size_t es = shmesh_dtype_size(c->dt), oes = shmesh_dtype_size(c->out_dt);
    int64_t bshape[SHMESH_MAX_NDIM], oshape[SHMESH_MAX_NDIM];
    int ib = c->in_bdim < 0 ? c->in_bdim + c->ndim + 1 : c->in_bdim;
    int ob = c->out_bdim < 0 ? c->out_bdim + c->out_ndim + 1 : c->out_bdim;
    insert_dim(c->ndim, c->shape, ib, B, bshape);
    insert_dim(c->out_ndim, c->out_shape, ob, B, oshape);
    size_t slice_in = (size_t)ref_numel(c->ndim, c->shape) * es;
    size_t slice_out = (size_t)ref_numel(c->out_ndim, c->out_shape) * oes;
    size_t in_bytes = slice_in * (size_t)B, out_bytes = slice_out * (size_t)B;
    unsigned char *in = malloc(in_bytes + 1), *copy = malloc(in_bytes + 1);
    unsigned char *out = malloc(out_bytes + SLACK), *slice = malloc(slice_in + slice_out + 1);
    for (int k = 0; k < B; k++) {
        fill_position(c, p * B + k, slice);
        put_slice(in, slice, c->ndim, c->shape, ib, es, B, k);
    }
    memcpy(copy, in, in_bytes);
    memset(out, SENTINEL, out_bytes + SLACK);
    shmesh_array ia = {.data = in, .dtype = c->dt, .ndim = c->ndim + 1, .bdim = c->in_bdim};
    shmesh_array oa = {.data = out, .dtype = c->out_dt, .ndim = c->out_ndim + 1,
                       .bdim = c->out_bdim};
    memcpy(ia.shape, bshape, sizeof bshape);
    memcpy(oa.shape, oshape, sizeof oshape);
    if (!rc)
        rc = call_op(mesh, c, &ia, &oa);
    int status = 0;
    if (rc)
        printf("rank %d: %s -> positions %d..%d: %s: %s: %s\n", rank, desc, p * B, p * B + B - 1,
               what, shmesh_error_name(rc), why());
    /* An int out.bdim is where the output goes (counted from either end). */
    if (!rc && oa.bdim != c->out_bdim && oa.bdim != ob) {
        check(false, "%s -> out.bdim %d became %d", desc, c->out_bdim, oa.bdim);
        status = 4;
    }
    for (int k = 0; k < B; k++) {
        if (!rc) {
            take_slice(slice, out, c->out_ndim, c->out_shape, ob, oes, B, k);
            write_file(c->index, "pos", p * B + k, slice, slice_out);
        }
        write_rc(c->index, p * B + k, rc);
    }
    if (!slack_intact(out, out_bytes)) {
        check(false, "%s -> written past the %zu output bytes", desc, out_bytes);
        status = 4;
    }
    if (memcmp(in, copy, in_bytes)) {
        check(false, "%s -> the input changed", desc);
        status = 4;
    }

    /* shmesh_matchaxis moves the batch to dimension 0: its slices must be
     * the ones taken here. */
    if (!rc && !status) {
        unsigned char *moved = malloc(out_bytes + SLACK);
        memset(moved, SENTINEL, out_bytes + SLACK);
        shmesh_array ma = {.data = moved, .dtype = c->out_dt, .ndim = c->out_ndim + 1};
        insert_dim(c->out_ndim, c->out_shape, 0, B, ma.shape);
        int mrc = shmesh_matchaxis(B, &oa, &ma);
        bool same = !mrc && slack_intact(moved, out_bytes);
        for (int k = 0; same && k < B; k++) {
            take_slice(slice, out, c->out_ndim, c->out_shape, ob, oes, B, k);
            same = !memcmp(moved + (size_t)k * slice_out, slice, slice_out);
        }
        if (!same) {
            check(false, "%s -> shmesh_matchaxis from bdim %d to 0: %s%s%s", desc, c->out_bdim,
                  mrc ? shmesh_error_name(mrc) : "other slices", mrc ? ": " : "",
                  mrc ? shmesh_last_error(NULL) : "");
            status = 4;
        }
        free(moved);
    }
    free(in);
    free(copy);
    free(out);
    free(slice);
    shmesh_mesh_destroy(mesh);
    return status;
}

static void usage(void)
{
    fprintf(stderr, "usage: shmesh-test-batch diff SEED NCASES DIR batched|flat B [FIRST]\n"
                    "  batched: R ranks, the mesh's last axis (size B) batched in them\n"
                    "  flat:    R*B ranks, one per position of the same mesh\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if ((argc != 7 && argc != 8) || strcmp(argv[1], "diff"))
        usage();
    uint64_t seed = strtoull(argv[2], NULL, 10);
    long count = strtol(argv[3], NULL, 10);
    dir = argv[4];
    bool batched = !strcmp(argv[5], "batched");
    int B = atoi(argv[6]);
    long first = argc == 8 ? strtol(argv[7], NULL, 10) : 0;
    if ((!batched && strcmp(argv[5], "flat")) || B < 1 || B > 4 || count < 0 || first < 0)
        usage();

    /* Whole lines, so that the ranks' lines do not interleave. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh_init: %s\n", shmesh_last_error(NULL));
        return 3;
    }
    rank = shmesh_rank(ctx);
    int world = shmesh_world_size(ctx);
    int R = batched ? world : world / B;
    if (shmesh_local_device_count(ctx) != 1 || (!batched && world % B) || R * B > MAXP) {
        fprintf(stderr, "rank %d: expected one device per rank and %s (at most %d positions), "
                        "found %d ranks\n",
                rank, batched ? "R ranks" : "R*B ranks", MAXP, world);
        return 2;
    }
    int worst = 0;
    long refused = 0;
    for (long i = first; i < first + count; i++) {
        struct bcase c;
        if (gen_case(&c, seed, i, R, B))
            return 2;
        char desc[1024];
        describe(&c, desc, sizeof desc);
        if (rank == 0) {
            char line[1100];
            snprintf(line, sizeof line, "%s\n", desc);
            write_file(i, "desc", -1, line, strlen(line));
        }
        int st = batched ? run_batched(&c, desc) : run_flat(&c, desc);
        if (st > worst)
            worst = st;
        refused += c.spoiled[0] != '\0';
    }
    int frc = shmesh_finalize(ctx);
    printf("rank %d: %s, %ld cases (%ld spoiled on purpose)%s%s\n", rank,
           batched ? "batched" : "flat", count, refused, frc ? ", finalize: " : "",
           frc ? shmesh_last_error(NULL) : "");
    fflush(stdout);
    return worst ? worst : frc ? 3 : 0;
}
