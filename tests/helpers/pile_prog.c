/* shmesh-test-pile: ragged_all_to_all of piles, checked on every rank
 * (tests/meson.build runs it under shmesh-run -n 2, 3 and 4, and -n 2
 * --devices-per-rank 2).
 *
 * Every device sends every member of its group a seeded number of rows (0
 * to 3); a row says who sent it to whom, its index, and the seed, so each
 * receiver checks what arrived against what it computes the senders sent.
 * Outputs have room for a little more than arrives, and a few rows past the
 * room, all filled with a sentinel that must survive.  Over:
 *   - a line mesh "x" of every device;
 *   - a grid ("a", "b") named "a" (groups down the columns) and "b,a" (one
 *     group, in column-major order);
 *   - the line with axis_index_groups;
 *   - too little room on one device: refused on every member of its group
 *     (job-wide with several devices per rank), nothing written, and with
 *     groups the other groups' calls still go through;
 *   - refusals found locally (count != group size, an axis-1 pile, another
 *     dtype), on every rank;
 *   - with several devices per rank, a local mesh of a rank's devices;
 * and a normal call after each refusal.  Prints "rank R: ok: ..." or
 * "rank R: FAILED: ..." per check; exit status 1 when one failed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

#include "checks.h"

enum { WIDTH = 2, SPARE = 3, MAX_LOCAL = 8, MAX_DEVICES = 64 };
#define SENTINEL (-7)
#define UNSET (-9)

static int K, D;              /* devices here, devices of the job */
static int ids[MAX_LOCAL];    /* this rank's device ids, in mesh order */

/* The members of device `id`'s group, in group order: returns how many. */
typedef int (*members_fn)(int id, int *out);

struct scenario {
    const char *name;
    shmesh_mesh *mesh;
    const char *axes;
    const shmesh_groups *groups;
    members_fn members;
};

static int grid_b(void) { return D % 2 ? 1 : 2; }

static int line_members(int id, int *out)
{
    (void)id;
    for (int q = 0; q < D; q++)
        out[q] = q;
    return D;
}

/* Grid (A, B), axes "a": the column of id, top to bottom. */
static int column_members(int id, int *out)
{
    int b = grid_b(), a = D / b;
    for (int i = 0; i < a; i++)
        out[i] = i * b + id % b;
    return a;
}

/* Grid (A, B), axes "b,a": everyone, index j * A + i. */
static int column_major_members(int id, int *out)
{
    (void)id;
    int b = grid_b(), a = D / b, n = 0;
    for (int j = 0; j < b; j++)
        for (int i = 0; i < a; i++)
            out[n++] = i * b + j;
    return n;
}

/* axis_index_groups on the line: [[0, 2], [3, 1]] with 4 devices (device 3
 * first in its subgroup), else one group in reverse order. */
static int subgroup_indices[MAX_DEVICES];
static shmesh_groups subgroups;

static void make_subgroups(void)
{
    if (D == 4) {
        int four[] = {0, 2, 3, 1};
        memcpy(subgroup_indices, four, sizeof four);
        subgroups = (shmesh_groups){.ngroups = 2, .group_size = 2, .indices = subgroup_indices};
        return;
    }
    for (int i = 0; i < D; i++)
        subgroup_indices[i] = D - 1 - i;
    subgroups = (shmesh_groups){.ngroups = 1, .group_size = D, .indices = subgroup_indices};
}

static int subgroup_members(int id, int *out)
{
    int size = subgroups.group_size;
    for (int g = 0; g < subgroups.ngroups; g++)
        for (int i = 0; i < size; i++)
            if (subgroup_indices[g * size + i] == id) {
                memcpy(out, subgroup_indices + g * size, sizeof *out * (size_t)size);
                return size;
            }
    return 0;
}

/* A local mesh of this rank's devices: they alone, in mesh order. */
static int local_members(int id, int *out)
{
    (void)id;
    memcpy(out, ids, sizeof *out * (size_t)K);
    return K;
}

/* Rows `from` sends `to` in round `seed`: 0..3, often 0. */
static int64_t rows_sent(int seed, int from, int to)
{
    uint64_t h = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)from * 0xBF58476D1CE4E5B9ull ^
                 (uint64_t)to * 0x94D049BB133111EBull;
    h ^= h >> 31;
    h *= 0xD6E8FEB86CA6B16Dull;
    h ^= h >> 29;
    return (int64_t)(h % 4);
}

static int32_t row_tag(int from, int to, int64_t i) { return from * 10000 + to * 100 + (int)i; }

/* Rows device `id` receives in round `seed`, and the room its output gets:
 * exactly that, or up to 4 more. */
static int64_t rows_received(const struct scenario *s, int seed, int id)
{
    int mem[MAX_DEVICES], n = s->members(id, mem);
    int64_t total = 0;
    for (int q = 0; q < n; q++)
        total += rows_sent(seed, mem[q], id);
    return total;
}

static int64_t room_of(int seed, int id) { return (seed + id) % 3 == 0 ? 0 : (seed + id) % 5; }

/* One device's piles and their buffers. */
struct side {
    int n, me, mem[MAX_DEVICES];
    int64_t send_len[MAX_DEVICES + 1], recv_len[MAX_DEVICES + 1];
    int32_t *in, *out;
    int64_t room, total;
    shmesh_pile op, res;
};

static void side_make(struct side *d, const struct scenario *s, int seed, int id, int64_t room)
{
    d->n = s->members(id, d->mem);
    for (int q = 0; q < d->n; q++)
        if (d->mem[q] == id)
            d->me = q;
    int64_t rows = 0;
    for (int j = 0; j < d->n; j++)
        rows += d->send_len[j] = rows_sent(seed, id, d->mem[j]);
    d->in = malloc(sizeof(int32_t) * WIDTH * (size_t)(rows + 1));
    int64_t r = 0;
    for (int j = 0; j < d->n; j++)
        for (int64_t i = 0; i < d->send_len[j]; i++, r++) {
            d->in[r * WIDTH] = row_tag(id, d->mem[j], i);
            d->in[r * WIDTH + 1] = seed;
        }
    d->total = rows_received(s, seed, id);
    d->room = room;
    d->out = malloc(sizeof(int32_t) * WIDTH * (size_t)(room + SPARE));
    for (int64_t k = 0; k < (room + SPARE) * WIDTH; k++)
        d->out[k] = SENTINEL;
    for (int q = 0; q <= d->n; q++)
        d->recv_len[q] = UNSET;
    shmesh_array a = {.data = d->in, .dtype = SHMESH_INT32, .ndim = 2, .shape = {rows, WIDTH}};
    MUST(shmesh_pile_make(&d->op, &a, 0, d->n, d->send_len));
    /* The output pile is made by hand: its lengths are not known yet. */
    d->res = (shmesh_pile){
        .data = {.data = d->out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {room, WIDTH}},
        .axis = 0,
        .count = d->n,
        .lengths = d->recv_len};
}

static void side_free(struct side *d)
{
    free(d->in);
    free(d->out);
}

/* What arrived: the lengths, the total, the rows in group order, and the
 * sentinel past them. */
static bool side_arrived(const struct side *d, int seed, int id, char *why, size_t len)
{
    if (d->res.data.shape[0] != d->total) {
        snprintf(why, len, "shape[0] %lld, expected %lld", (long long)d->res.data.shape[0],
                 (long long)d->total);
        return false;
    }
    int64_t r = 0;
    for (int q = 0; q < d->n; q++) {
        int64_t want = rows_sent(seed, d->mem[q], id);
        if (d->recv_len[q] != want) {
            snprintf(why, len, "lengths[%d] %lld, expected %lld", q, (long long)d->recv_len[q],
                     (long long)want);
            return false;
        }
        for (int64_t i = 0; i < want; i++, r++)
            if (d->out[r * WIDTH] != row_tag(d->mem[q], id, i) || d->out[r * WIDTH + 1] != seed) {
                snprintf(why, len, "row %lld is (%d, %d), expected (%d, %d)", (long long)r,
                         d->out[r * WIDTH], d->out[r * WIDTH + 1], row_tag(d->mem[q], id, i),
                         seed);
                return false;
            }
    }
    for (int64_t k = r * WIDTH; k < (d->room + SPARE) * WIDTH; k++)
        if (d->out[k] != SENTINEL) {
            snprintf(why, len, "entry %lld past the %lld rows received was written",
                     (long long)k, (long long)r);
            return false;
        }
    return true;
}

/* Nothing written: the sentinel everywhere, lengths unset, the room kept. */
static bool side_untouched(const struct side *d)
{
    for (int64_t k = 0; k < (d->room + SPARE) * WIDTH; k++)
        if (d->out[k] != SENTINEL)
            return false;
    for (int q = 0; q < d->n; q++)
        if (d->recv_len[q] != UNSET)
            return false;
    return d->res.data.shape[0] == d->room;
}

/* One call of every local device; `short_id`, when >= 0, gets room for one
 * row less than it receives. */
static int run_call(const struct scenario *s, int seed, int short_id, struct side *sides)
{
    shmesh_pile ops[MAX_LOCAL], outs[MAX_LOCAL];
    for (int l = 0; l < K; l++) {
        int64_t total = rows_received(s, seed, ids[l]);
        int64_t room = ids[l] == short_id ? total - 1 : total + room_of(seed, ids[l]);
        side_make(&sides[l], s, seed, ids[l], room);
        ops[l] = sides[l].op;
        outs[l] = sides[l].res;
    }
    int rc = shmesh_ragged_all_to_all_pile(s->mesh, s->axes, s->groups, ops, outs);
    for (int l = 0; l < K; l++)
        sides[l].res = outs[l];
    return rc;
}

static void normal_round(const struct scenario *s, int seed)
{
    struct side sides[MAX_LOCAL];
    int rc = run_call(s, seed, -1, sides);
    check(rc == 0, "%s, seed %d: ragged_all_to_all_pile returned %s %s", s->name, seed,
          shmesh_error_name(rc), rc ? why() : "");
    for (int l = 0; l < K; l++) {
        char msg[200] = "";
        bool ok = !rc && side_arrived(&sides[l], seed, ids[l], msg, sizeof msg);
        check(ok, "%s, seed %d, device %d (index %d of %d): %lld rows from %d members%s%s",
              s->name, seed, ids[l], sides[l].me, sides[l].n, (long long)sides[l].total,
              sides[l].n, ok ? "" : ": ", msg);
        side_free(&sides[l]);
    }
}

/* A seed where device `victim` receives something, so it can lack room. */
static int seed_with_rows(const struct scenario *s, int victim)
{
    int seed = 100;
    while (rows_received(s, seed, victim) == 0)
        seed++;
    return seed;
}

static bool in_group(const struct scenario *s, int a, int b)
{
    int mem[MAX_DEVICES], n = s->members(a, mem);
    for (int q = 0; q < n; q++)
        if (mem[q] == b)
            return true;
    return false;
}

/* The last device lacks room: its group is refused (with several devices
 * per rank, everyone is); other groups go through. */
static void short_room(const struct scenario *s)
{
    int victim = D - 1, seed = seed_with_rows(s, victim);
    struct side sides[MAX_LOCAL];
    int rc = run_call(s, seed, victim, sides);
    bool refused = K > 1;
    for (int l = 0; l < K; l++)
        refused |= in_group(s, ids[l], victim);
    if (refused) {
        const char *msg = why();
        check(rc == SHMESH_ERR_INVALID && strstr(msg, "room") &&
                  strstr(msg, "shmesh_ragged_all_to_all_pile"),
              "%s: device %d short of room: refused with %s: %s", s->name, victim,
              shmesh_error_name(rc), msg);
        for (int l = 0; l < K; l++)
            check(side_untouched(&sides[l]), "%s: device %d's output untouched", s->name,
                  ids[l]);
    } else {
        check(rc == 0, "%s: device %d of another group short of room: this group's call went "
                       "through (%s %s)",
              s->name, victim, shmesh_error_name(rc), rc ? why() : "");
        for (int l = 0; l < K; l++) {
            char msg[200] = "";
            check(!rc && side_arrived(&sides[l], seed, ids[l], msg, sizeof msg),
                  "%s: device %d received its rows %s", s->name, ids[l], msg);
        }
    }
    for (int l = 0; l < K; l++)
        side_free(&sides[l]);
}

/* Refused by every rank before anything is shared: `spoil` breaks each
 * local device's piles alike. */
static void local_refusal(const struct scenario *s, const char *what, const char *words,
                          void (*spoil)(struct side *d, shmesh_pile *op, shmesh_pile *out))
{
    struct side sides[MAX_LOCAL];
    shmesh_pile ops[MAX_LOCAL], outs[MAX_LOCAL];
    int seed = 7;
    for (int l = 0; l < K; l++) {
        side_make(&sides[l], s, seed, ids[l], rows_received(s, seed, ids[l]) + 1);
        ops[l] = sides[l].op;
        outs[l] = sides[l].res;
        spoil(&sides[l], &ops[l], &outs[l]);
    }
    int rc = shmesh_ragged_all_to_all_pile(s->mesh, s->axes, s->groups, ops, outs);
    const char *msg = why();
    check(rc == SHMESH_ERR_INVALID && strstr(msg, words), "%s: %s refused: %s: %s", s->name,
          what, shmesh_error_name(rc), msg);
    for (int l = 0; l < K; l++) {
        sides[l].res = outs[l];
        sides[l].res.count = sides[l].n;
        sides[l].res.data.dtype = SHMESH_INT32;
        check(side_untouched(&sides[l]), "%s: %s: output untouched", s->name, what);
        side_free(&sides[l]);
    }
}

/* One component more than the group has members (an empty one). */
static void one_too_many(struct side *d, shmesh_pile *op, shmesh_pile *out)
{
    d->send_len[d->n] = 0;
    op->count = d->n + 1;
    out->count = d->n + 1;
}

static void along_axis_1(struct side *d, shmesh_pile *op, shmesh_pile *out)
{
    (void)d, (void)out;
    op->axis = 1;
}

static void another_dtype(struct side *d, shmesh_pile *op, shmesh_pile *out)
{
    (void)d, (void)op;
    out->data.dtype = SHMESH_FLOAT32;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (shmesh_init(&ctx)) {
        printf("shmesh_init: %s\n", shmesh_last_error(NULL));
        return 2;
    }
    rank = shmesh_rank(ctx);
    K = shmesh_local_device_count(ctx);
    D = shmesh_device_count(ctx);
    if (K > MAX_LOCAL || D > MAX_DEVICES) {
        printf("rank %d: at most %d local devices and %d in all\n", rank, MAX_LOCAL,
               MAX_DEVICES);
        return 2;
    }
    const char *x[] = {"x"}, *ab[] = {"a", "b"};
    shmesh_mesh *line, *grid;
    MUST(shmesh_mesh_create(ctx, 1, x, (int[]){D}, NULL, &line));
    MUST(shmesh_mesh_create(ctx, 2, ab, (int[]){D / grid_b(), grid_b()}, NULL, &grid));
    MUST(shmesh_mesh_local_devices(line, ids, MAX_LOCAL));
    make_subgroups();

    const struct scenario line_x = {"line x", line, "x", NULL, line_members};
    const struct scenario grid_a = {"grid a", grid, "a", NULL, column_members};
    const struct scenario grid_ba = {"grid b,a", grid, "b,a", NULL, column_major_members};
    const struct scenario groups = {"line x with groups", line, "x", &subgroups,
                                    subgroup_members};
    const struct scenario *all[] = {&line_x, &grid_a, &grid_ba, &groups};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        for (int seed = 1; seed <= 3; seed++)
            normal_round(all[i], seed);

    short_room(&line_x);
    normal_round(&line_x, 4);
    short_room(&grid_a);
    normal_round(&grid_a, 5);
    short_room(&groups);
    normal_round(&groups, 6);

    local_refusal(&line_x, "count != group size", "components; expected one per member",
                  one_too_many);
    normal_round(&line_x, 7);
    local_refusal(&groups, "count != subgroup size", "components; expected one per member",
                  one_too_many);
    local_refusal(&grid_a, "an axis-1 operand", "expected a pile along axis 0", along_axis_1);
    local_refusal(&grid_a, "another output dtype", "must share dtype", another_dtype);
    normal_round(&grid_ba, 8);
    check(shmesh_barrier(ctx) == 0, "the context is usable after the refusals");

    /* Several devices here: a local mesh of them, its calls this rank's alone. */
    shmesh_mesh *local = NULL;
    if (K > 1) {
        MUST(shmesh_mesh_local_mesh(line, &local));
        const struct scenario here = {"local mesh", local, "x", NULL, local_members};
        for (int seed = 9; seed <= 11; seed++)
            normal_round(&here, seed);
    }
    shmesh_mesh_destroy(local);

    shmesh_mesh_destroy(grid);
    shmesh_mesh_destroy(line);
    MUST(shmesh_finalize(ctx));
    printf("rank %d: %s (%d failed)\n", rank, failures ? "FAILED" : "all checks ok", failures);
    return failures ? 1 : 0;
}
