/* shmesh-test-errors: every argument error of the mesh collectives, made by
 * every rank, under shmesh-run with 4 ranks.  Each case prints
 *
 *   rank R: case NAME -> ERROR_NAME: message
 *
 * and, since refused calls are not made, the job goes on: after the cases a
 * psum must still give the right answer.  Modes:
 *   local          the locally detected errors, one after the other
 *   ragged-bad     one rank's ragged slice leaves its operand: all refuse
 *   ragged-sizes   send and recv sizes disagree: all refuse
 *   mismatch-op, mismatch-shape, mismatch-after-repeats, mismatch-planned, mismatch-groups,
 *   mismatch-mesh
 *                  ranks call different things: all get MISMATCH
 *   mismatch-long-axes
 *                  on a mesh (A=1, B=2, x=2) whose A and B have 31-character
 *                  names, ranks 0 and 2 psum over "A,B,x", 1 and 3 over "A,x"
 *   mismatch-mesh-order
 *                  ranks 0 and 1 create a mesh (A,B,x,y), 2 and 3 (A,B,y,x),
 *                  A and B of 31 characters
 *   mismatch-device-order
 *                  the same mesh, with ranks 2 and 3 giving another device order
 *   lone-bad       rank 1 alone makes a bad call and exits; the others
 *                  must not hang
 *   ragged-huge    slices that each fit but add up to more than 2^62 bytes:
 *                  all refuse
 *   empty          every op with empty arrays whose data is NULL: all OK
 * Exit status 0 when the mode's expectations held on this rank, 4 if not.
 * (After a mismatch the context is poisoned: such a rank exits at once.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"
#include "checks.h"

static shmesh_mesh *line, *grid; /* start_four's */

static int report(const char *name, int rc)
{
    printf("rank %d: case %s -> %s: %s\n", rank, name, shmesh_error_name(rc),
           rc ? shmesh_last_error(ctx) : "");
    fflush(stdout);
    return rc;
}

#define CASE(name, call) report(name, (call))

/* Axis names as long as they may be (SHMESH_MAX_AXIS_NAME). */
#define LONG_A "a_long_axis_name_of_31_chars_aa"
#define LONG_B "b_long_axis_name_of_31_chars_bb"
_Static_assert(sizeof LONG_A - 1 == SHMESH_MAX_AXIS_NAME, "LONG_A is as long as a name may be");

/* A pointer to an array description living until the end of the block. */
#define ARR(p, dt, nd, d0, d1) (&(shmesh_array){.data = (p), .dtype = (dt), .ndim = (nd), .shape = {(d0), (d1)}})

/* The job still works: psum over "i" of the rank. */
static int still_works(void)
{
    int32_t x = rank, y = -1;
    shmesh_array *in = ARR(&x, SHMESH_INT32, 0, 0, 0), *out = ARR(&y, SHMESH_INT32, 0, 0, 0);
    int rc = shmesh_psum(line, "i", NULL, in, out);
    printf("rank %d: afterwards psum -> %s, %d\n", rank, shmesh_error_name(rc), y);
    return rc == 0 && y == 6 ? 0 : 4;
}

static int mode_local(void)
{
    int32_t v4[4] = {rank, rank, rank, rank}, o4[4], o16[16], o2[2];
    int32_t s = rank, so;
    uint8_t b = 1;
    shmesh_array *in4 = ARR(v4, SHMESH_INT32, 1, 4, 0), *out4 = ARR(o4, SHMESH_INT32, 1, 4, 0);
    shmesh_array *sc = ARR(&s, SHMESH_INT32, 0, 0, 0), *sco = ARR(&so, SHMESH_INT32, 0, 0, 0);

    CASE("unknown-axis", shmesh_psum(grid, "x,z", NULL, sc, sco));
    CASE("repeated-axis", shmesh_psum(grid, "y, y", NULL, sc, sco));
    CASE("empty-axis-name", shmesh_psum(grid, "x,,y", NULL, sc, sco));
    CASE("null-axes", shmesh_psum(grid, NULL, NULL, sc, sco));
    CASE("axis-index-null", shmesh_axis_index(grid, "x", NULL));
    CASE("axis-size-null", shmesh_axis_size(grid, "x", NULL));

    int dup[] = {0, 1, 1, 3};
    shmesh_groups g_dup = {2, 2, dup, NULL};
    CASE("groups-duplicate", shmesh_psum(line, "i", &g_dup, sc, sco));
    int range[] = {0, 1, 2, 7};
    shmesh_groups g_range = {2, 2, range, NULL};
    CASE("groups-out-of-range", shmesh_psum(line, "i", &g_range, sc, sco));
    int three[] = {0, 1, 2};
    shmesh_groups g_short = {1, 3, three, NULL};
    CASE("groups-missing", shmesh_psum(line, "i", &g_short, sc, sco));
    int uneven[] = {0, 1, 2, 3}, sizes[] = {1, 3};
    shmesh_groups g_uneven = {2, 0, uneven, sizes};
    CASE("groups-unequal-gather",
         shmesh_all_gather(line, "i", &g_uneven, 0, true, in4, &(shmesh_array){.data = o16, .dtype = SHMESH_INT32, .ndim = 1, .shape = {4}}));
    /* Unequal subgroups are fine for reductions: {0}, {1, 2, 3}. */
    int rc = CASE("groups-unequal-psum", shmesh_psum(line, "i", &g_uneven, sc, sco));
    printf("rank %d: unequal psum gave %d\n", rank, rc ? -1 : so);

    CASE("out-shape", shmesh_psum(line, "i", NULL, in4, ARR(o2, SHMESH_INT32, 1, 2, 0)));
    CASE("out-dtype", shmesh_psum(line, "i", NULL, in4, ARR(o4, SHMESH_FLOAT32, 1, 4, 0)));
    CASE("bool-psum-needs-int32",
         shmesh_psum(line, "i", NULL, ARR(&b, SHMESH_BOOL, 0, 0, 0), ARR(&b, SHMESH_BOOL, 0, 0, 0)));
    CASE("pmean-int-out", shmesh_pmean(line, "i", NULL, sc, sco));
    CASE("pargmax-two-axes",
         shmesh_pargmax(grid, "x,y", NULL, sc, sco));
    int pairs01[] = {0, 1, 2, 3};
    shmesh_groups g_pairs = {2, 2, pairs01, NULL};
    CASE("pargmax-groups", shmesh_pargmax(line, "i", &g_pairs, sc, sco));
    CASE("bad-dtype", shmesh_psum(line, "i", NULL, ARR(&s, (shmesh_dtype)42, 0, 0, 0), sco));
    CASE("negative-dim", shmesh_psum(line, "i", NULL, ARR(v4, SHMESH_INT32, 1, -4, 0), out4));
    CASE("null-data", shmesh_psum(line, "i", NULL, ARR(NULL, SHMESH_INT32, 1, 4, 0), out4));
    CASE("overlap", shmesh_all_gather(line, "i", NULL, 0, true, ARR(o16, SHMESH_INT32, 1, 4, 0),
                                      ARR(o16, SHMESH_INT32, 1, 16, 0)));

    CASE("gather-axis-range",
         shmesh_all_gather(line, "i", NULL, 2, false, in4, ARR(o16, SHMESH_INT32, 2, 4, 4)));
    CASE("gather-out-shape",
         shmesh_all_gather(line, "i", NULL, 0, false, in4, ARR(o16, SHMESH_INT32, 1, 16, 0)));
    CASE("scatter-untiled-size",
         shmesh_psum_scatter(grid, "x", NULL, 0, false, in4, ARR(o2, SHMESH_INT32, 1, 2, 0)));
    int32_t v6[6] = {0};
    CASE("scatter-tiled-divisible",
         shmesh_psum_scatter(line, "i", NULL, 0, true, ARR(v6, SHMESH_INT32, 1, 6, 0), sco));
    CASE("scatter-bool",
         shmesh_psum_scatter(line, "i", NULL, 0, false, ARR(&b, SHMESH_BOOL, 1, 4, 0), sco));
    CASE("a2a-untiled-size",
         shmesh_all_to_all(line, "i", NULL, 0, 0, false, ARR(v6, SHMESH_INT32, 1, 6, 0),
                           ARR(o16, SHMESH_INT32, 1, 6, 0)));
    CASE("a2a-tiled-divisible",
         shmesh_all_to_all(line, "i", NULL, 0, 0, true, ARR(v6, SHMESH_INT32, 1, 6, 0),
                           ARR(o16, SHMESH_INT32, 1, 6, 0)));
    CASE("a2a-axis-range",
         shmesh_all_to_all(line, "i", NULL, 0, -3, false, in4, out4));
    CASE("pswapaxes-size", shmesh_pswapaxes(grid, "x", NULL, 0, in4, out4));

    const int pairs[][2] = {{0, 1}, {2, 1}};
    CASE("ppermute-dup-dest", shmesh_ppermute(line, "i", pairs, 2, sc, sco));
    const int wrap[][2] = {{0, 1}, {4, 2}}; /* 4 wraps to 0: a repeated source */
    CASE("ppermute-dup-source-mod", shmesh_ppermute(line, "i", wrap, 2, sc, sco));
    int notperm[] = {0, 1, 1, 2};
    CASE("pshuffle-not-perm", shmesh_pshuffle(line, "i", notperm, sc, sco));
    CASE("pbroadcast-source", shmesh_pbroadcast(line, "i", 4, sc, sco));
    /* In place is allowed (the very same buffer), a partial overlap is not. */
    CASE("pbroadcast-overlap", shmesh_pbroadcast(line, "i", 0, ARR(o16, SHMESH_INT32, 1, 4, 0),
                                                  ARR(o16 + 2, SHMESH_INT32, 1, 4, 0)));

    int64_t k4[4] = {0}, k3[3] = {0};
    float ff[4] = {0};
    shmesh_array *op = ARR(v4, SHMESH_INT32, 1, 4, 0), *ou = ARR(o4, SHMESH_INT32, 1, 4, 0);
    shmesh_array *i4 = ARR(k4, SHMESH_INT64, 1, 4, 0);
    CASE("ragged-float-offsets",
         shmesh_ragged_all_to_all(line, "i", NULL, op, ou, ARR(ff, SHMESH_FLOAT32, 1, 4, 0), i4,
                                  i4, i4));
    CASE("ragged-rank2-sizes",
         shmesh_ragged_all_to_all(line, "i", NULL, op, ou, i4,
                                  ARR(k4, SHMESH_INT64, 2, 2, 2), i4, i4));
    CASE("ragged-not-multiple",
         shmesh_ragged_all_to_all(line, "i", NULL, op, ou, ARR(k3, SHMESH_INT64, 1, 3, 0),
                                  ARR(k3, SHMESH_INT64, 1, 3, 0), ARR(k3, SHMESH_INT64, 1, 3, 0),
                                  ARR(k3, SHMESH_INT64, 1, 3, 0)));
    CASE("ragged-trailing-dims",
         shmesh_ragged_all_to_all(line, "i", NULL, ARR(v4, SHMESH_INT32, 2, 2, 2),
                                  ARR(o4, SHMESH_INT32, 2, 1, 4), i4, i4, i4, i4));

    /* Output shapes that overflow: refused with the shape, before any
     * data is touched (none is there: the arrays are far larger than b). */
    const int64_t two61 = INT64_C(1) << 61, two59 = INT64_C(1) << 59, two62 = INT64_C(1) << 62;
    CASE("gather-tiled-overflow",
         shmesh_all_gather(line, "i", NULL, 0, true, ARR(&b, SHMESH_INT8, 1, two61, 0),
                           ARR(o16, SHMESH_INT8, 1, 16, 0)));
    CASE("gather-untiled-overflow",
         shmesh_all_gather(line, "i", NULL, 0, false, ARR(&s, SHMESH_INT32, 1, two59, 0),
                           ARR(o16, SHMESH_INT32, 2, 4, 4)));
    CASE("a2a-tiled-overflow",
         shmesh_all_to_all(line, "i", NULL, 0, 1, true, ARR(NULL, SHMESH_INT8, 2, 0, two62),
                           ARR(NULL, SHMESH_INT8, 2, 0, 0)));
    /* int8 to float64: the output has 8 times the input's bytes. */
    CASE("pmean-out-too-large",
         shmesh_pmean(line, "i", NULL, ARR(&b, SHMESH_INT8, 1, two61, 0),
                      ARR(o16, SHMESH_FLOAT64, 1, two61, 0)));
    const int64_t two40 = INT64_C(1) << 40;
    CASE("ragged-row-overflow",
         shmesh_ragged_all_to_all(line, "i", NULL,
                                  &(shmesh_array){.data = NULL, .dtype = SHMESH_INT8, .ndim = 3, .shape = {0, two40, two40}},
                                  &(shmesh_array){.data = NULL, .dtype = SHMESH_INT8, .ndim = 3, .shape = {0, two40, two40}}, i4,
                                  i4, i4, i4));

    /* The one entry for every op (shmesh_op_call, shmesh_op_result). */
    shmesh_array res;
    CASE("op-code", shmesh_op_call(&(shmesh_op_args){.op = 0, .mesh = line, .axes = "i",
                                                     .in = sc, .out = sco}, NULL));
    CASE("op-world", shmesh_op_result(&(shmesh_op_args){.op = 1, .mesh = line, .axes = "i",
                                                       .in = sc}, &res));
    int code_ppermute = 0, code_pshuffle = 0;
    for (int i = 0; i < shmesh_op_count(); i++) {
        if (!strcmp(shmesh_op_get(i)->name, "ppermute"))
            code_ppermute = shmesh_op_get(i)->code;
        if (!strcmp(shmesh_op_get(i)->name, "pshuffle"))
            code_pshuffle = shmesh_op_get(i)->code;
    }
    CASE("op-groups", shmesh_op_call(&(shmesh_op_args){.op = code_ppermute, .mesh = line,
                                                       .axes = "i", .groups = &g_pairs,
                                                       .in = sc, .out = sco}, NULL));
    int shuffle3[] = {2, 0, 1};
    CASE("op-shuffle-length",
         shmesh_op_call(&(shmesh_op_args){.op = code_pshuffle, .mesh = line, .axes = "i",
                                          .perm = shuffle3, .nperm = 3, .in = sc, .out = sco},
                        NULL));
    CASE("op-result-null", shmesh_op_result(&(shmesh_op_args){.op = code_pshuffle, .mesh = line,
                                                              .axes = "i", .in = sc}, NULL));
    CASE("op-result-axis", shmesh_op_result(&(shmesh_op_args){.op = code_pshuffle, .mesh = line,
                                                              .axes = "q", .in = sc}, &res));
    shmesh_mesh *batched = NULL;
    if (report("op-batch", shmesh_mesh_batch(line, "b", 2, &batched)) == 0) {
        CASE("op-result-batched",
             shmesh_op_result(&(shmesh_op_args){.op = code_pshuffle, .mesh = batched,
                                                .axes = "i", .in = sc}, &res));
        shmesh_mesh_destroy(batched);
    }

    const char *names2[] = {"a", "b"}, *dupnames[] = {"a", "a"};
    int wrong[] = {3, 2}, ok[] = {2, 2}, order[] = {0, 1, 1, 3};
    shmesh_mesh *m;
    CASE("mesh-sizes", shmesh_mesh_create(ctx, 2, names2, wrong, NULL, &m));
    CASE("mesh-dup-names", shmesh_mesh_create(ctx, 2, dupnames, ok, NULL, &m));
    CASE("mesh-order", shmesh_mesh_create(ctx, 2, names2, ok, order, &m));
    CASE("mesh-name-comma", shmesh_mesh_create(ctx, 1, (const char *[]){"a,b"}, (int[]){4}, NULL, &m));
    return still_works();
}

/* Rank 1's third slice starts past its operand: everyone refuses, and
 * nothing is written anywhere. */
static int mode_ragged(bool sizes_disagree)
{
    int32_t operand[4] = {rank * 10, rank * 10 + 1, rank * 10 + 2, rank * 10 + 3};
    int32_t output[4] = {-7, -7, -7, -7};
    int64_t in_off[4] = {0, 1, 2, 3}, send[4] = {1, 1, 1, 1};
    int64_t out_off[4] = {rank, rank, rank, rank}, recv[4] = {1, 1, 1, 1};
    if (rank == 1 && !sizes_disagree)
        in_off[2] = 4; /* rows 4..4 of a 4-row operand */
    if (rank == 2 && sizes_disagree)
        recv[3] = 2; /* rank 3 sends one row */
    shmesh_array *op = ARR(operand, SHMESH_INT32, 1, 4, 0), *out = ARR(output, SHMESH_INT32, 1, 4, 0);
    shmesh_array *a = ARR(in_off, SHMESH_INT64, 1, 4, 0), *b = ARR(send, SHMESH_INT64, 1, 4, 0);
    shmesh_array *c = ARR(out_off, SHMESH_INT64, 1, 4, 0), *d = ARR(recv, SHMESH_INT64, 1, 4, 0);
    int rc = CASE(sizes_disagree ? "ragged-sizes" : "ragged-bad",
                  shmesh_ragged_all_to_all(line, "i", NULL, op, out, a, b, c, d));
    bool untouched = true;
    for (int k = 0; k < 4; k++)
        untouched &= output[k] == -7;
    printf("rank %d: output %s\n", rank, untouched ? "untouched" : "WRITTEN");
    if (rc != SHMESH_ERR_INVALID || !untouched)
        return 4;
    /* A correct call right after: every rank sends rank r row r. */
    in_off[2] = 2;
    recv[3] = 1;
    rc = CASE("ragged-good", shmesh_ragged_all_to_all(line, "i", NULL, op, out, a, b, c, d));
    printf("rank %d: received [%d %d %d %d]\n", rank, output[0], output[1], output[2], output[3]);
    for (int q = 0; q < 4; q++)
        if (output[q] != q * 10 + rank)
            return 4;
    return rc ? 4 : still_works();
}

/* Slices that each fit but add up to more than 2^62 bytes: ranks 0 and 1
 * send 2^62 one-byte rows to group indices 0 and 1.  Refused by every rank
 * after the parameters are exchanged, before any row moves (there are none:
 * the arrays are far larger than what their data points to). */
static int mode_ragged_huge(void)
{
    const int64_t big = INT64_C(1) << 62;
    static uint8_t operand[16];
    int64_t in_off[4] = {0}, send[4] = {0}, out_off[4] = {0}, recv[4] = {0};
    if (rank < 2)
        send[0] = send[1] = big;
    if (rank < 2)
        recv[0] = recv[1] = big;
    shmesh_array *op = ARR(operand, SHMESH_UINT8, 1, big, 0);
    /* out not overlapping op: at op + 2^62 as a number, never dereferenced */
    shmesh_array *out = ARR((void *)((uintptr_t)operand + (UINT64_C(1) << 62)), SHMESH_UINT8, 1,
                            big, 0);
    shmesh_array *a = ARR(in_off, SHMESH_INT64, 1, 4, 0), *b = ARR(send, SHMESH_INT64, 1, 4, 0);
    shmesh_array *c = ARR(out_off, SHMESH_INT64, 1, 4, 0), *d = ARR(recv, SHMESH_INT64, 1, 4, 0);
    int rc = CASE("ragged-huge", shmesh_ragged_all_to_all(line, "i", NULL, op, out, a, b, c, d));
    return rc == SHMESH_ERR_INVALID ? still_works() : 4;
}

/* Every op with empty arrays whose data is NULL, as array_check allows:
 * SHMESH_OK, and nothing read or written (a memcpy or memset of NULL, even of
 * 0 bytes, is undefined behaviour that UBSan reports). */
static int mode_empty(void)
{
    int failed = 0;
    shmesh_array *e = ARR(NULL, SHMESH_INT32, 1, 0, 0), *eo = ARR(NULL, SHMESH_INT32, 1, 0, 0);
    shmesh_array *eb = ARR(NULL, SHMESH_BOOL, 1, 0, 0), *ef = ARR(NULL, SHMESH_FLOAT32, 1, 0, 0);
    shmesh_array *e40 = ARR(NULL, SHMESH_INT32, 2, 4, 0), *e04 = ARR(NULL, SHMESH_INT32, 2, 0, 4);
    failed |= CASE("empty-psum", shmesh_psum(line, "i", NULL, e, eo));
    failed |= CASE("empty-psum-bool", shmesh_psum(line, "i", NULL, eb, eo));
    failed |= CASE("empty-pmax", shmesh_pmax(line, "i", NULL, e, eo));
    failed |= CASE("empty-pmin", shmesh_pmin(grid, "x", NULL, e, eo));
    failed |= CASE("empty-pmean", shmesh_pmean(line, "i", NULL, e, ef));
    failed |= CASE("empty-pargmax", shmesh_pargmax(line, "i", NULL, e, eo));
    failed |= CASE("empty-pargmin", shmesh_pargmin(grid, "y", NULL, e, eo));
    failed |= CASE("empty-all-gather", shmesh_all_gather(line, "i", NULL, 0, true, e, eo));
    failed |= CASE("empty-all-gather-untiled",
                   shmesh_all_gather(line, "i", NULL, 1, false, e, e04));
    failed |= CASE("empty-psum-scatter",
                   shmesh_psum_scatter(line, "i", NULL, 0, false, e40, eo));
    failed |= CASE("empty-all-to-all", shmesh_all_to_all(line, "i", NULL, 0, 1, false, e40, e04));
    failed |= CASE("empty-pswapaxes",
                   shmesh_pswapaxes(grid, "x", NULL, 0, ARR(NULL, SHMESH_INT32, 2, 2, 0),
                                    ARR(NULL, SHMESH_INT32, 2, 2, 0)));
    const int pairs[][2] = {{0, 1}, {1, 2}}; /* 0 and 3 get nothing: zeros */
    failed |= CASE("empty-ppermute", shmesh_ppermute(line, "i", pairs, 2, e, eo));
    int perm[] = {3, 2, 1, 0};
    failed |= CASE("empty-pshuffle", shmesh_pshuffle(line, "i", perm, e, eo));
    failed |= CASE("empty-pbroadcast", shmesh_pbroadcast(line, "i", 2, e, eo));
    int64_t zeros[4] = {0};
    shmesh_array *z = ARR(zeros, SHMESH_INT64, 1, 4, 0);
    failed |= CASE("empty-ragged", shmesh_ragged_all_to_all(line, "i", NULL, e, eo, z, z, z, z));
    return failed ? 4 : still_works();
}

static int mode_mismatch(const char *mode)
{
    int32_t v[4] = {0}, o[16];
    shmesh_array *in = ARR(v, SHMESH_INT32, 1, 4, 0);
    int rc;
    if (!strcmp(mode, "mismatch-op"))
        rc = rank == 2 ? CASE("mismatch", shmesh_all_gather(line, "i", NULL, 0, true, in,
                                                            ARR(o, SHMESH_INT32, 1, 16, 0)))
                       : CASE("mismatch", shmesh_psum(line, "i", NULL, in, ARR(o, SHMESH_INT32, 1, 4, 0)));
    else if (!strcmp(mode, "mismatch-shape")) {
        int64_t len = rank == 3 ? 3 : 4;
        rc = CASE("mismatch", shmesh_psum(line, "i", NULL, ARR(v, SHMESH_INT32, 1, len, 0),
                                          ARR(o, SHMESH_INT32, 1, len, 0)));
    } else if (!strcmp(mode, "mismatch-after-repeats")) {
        /* A rank rewrites the description in a slot buffer only when its
         * call's hash differs from the one it wrote there: int32[4] twice
         * (each buffer), int32[2] twice (each rewritten), then the
         * mismatch, int32[4] (rewritten over int32[2]) against rank 3's
         * int32[3]. */
        for (int i = 0; i < 4; i++) {
            int64_t len = i < 2 ? 4 : 2;
            if (shmesh_psum(line, "i", NULL, ARR(v, SHMESH_INT32, 1, len, 0),
                            ARR(o, SHMESH_INT32, 1, len, 0)))
                exit(2);
        }
        int64_t len = rank == 3 ? 3 : 4;
        rc = CASE("mismatch", shmesh_psum(line, "i", NULL, ARR(v, SHMESH_INT32, 1, len, 0),
                                          ARR(o, SHMESH_INT32, 1, len, 0)));
    } else if (!strcmp(mode, "mismatch-planned")) {
        /* Calls prepared from a plan (lib/front/plan.h) carry the plan's
         * hash: int32[4] repeated (planned from the second call on), then
         * int32[4] again, planned, against rank 3's int32[3]. */
        for (int i = 0; i < 6; i++)
            if (shmesh_psum(line, "i", NULL, ARR(v, SHMESH_INT32, 1, 4, 0),
                            ARR(o, SHMESH_INT32, 1, 4, 0)))
                exit(2);
        int64_t len = rank == 3 ? 3 : 4;
        rc = CASE("mismatch", shmesh_psum(line, "i", NULL, ARR(v, SHMESH_INT32, 1, len, 0),
                                          ARR(o, SHMESH_INT32, 1, len, 0)));
    } else if (!strcmp(mode, "mismatch-groups")) {
        int a[] = {0, 1, 2, 3}, b[] = {0, 2, 1, 3};
        shmesh_groups g = {2, 2, rank == 0 ? b : a, NULL};
        rc = CASE("mismatch", shmesh_psum(line, "i", &g, in, ARR(o, SHMESH_INT32, 1, 4, 0)));
    } else if (!strcmp(mode, "mismatch-long-axes")) {
        /* Names of SHMESH_MAX_AXIS_NAME characters: "A,B,x" and "A,x" differ
         * only past the first 63 characters of the axes' text. */
        const char *names[] = {LONG_A, LONG_B, "x"};
        shmesh_mesh *m;
        if (shmesh_mesh_create(ctx, 3, names, (int[]){1, 2, 2}, NULL, &m))
            exit(2);
        int32_t w[4] = {rank + 1, rank + 1, rank + 1, rank + 1};
        rc = CASE("mismatch", shmesh_psum(m, rank % 2 ? LONG_A ",x" : LONG_A "," LONG_B ",x", NULL,
                                          ARR(w, SHMESH_INT32, 1, 4, 0),
                                          ARR(o, SHMESH_INT32, 1, 4, 0)));
        if (!rc)
            printf("rank %d: psum gave %d\n", rank, o[0]);
        shmesh_mesh_destroy(m);
    } else if (!strcmp(mode, "mismatch-mesh-order")) {
        /* The same names and sizes, x and y swapped on ranks 2 and 3. */
        const char *xy[] = {LONG_A, LONG_B, "x", "y"}, *yx[] = {LONG_A, LONG_B, "y", "x"};
        shmesh_mesh *m = NULL;
        rc = CASE("mismatch", shmesh_mesh_create(ctx, 4, rank < 2 ? xy : yx, (int[]){1, 1, 2, 2},
                                                 NULL, &m));
        shmesh_mesh_destroy(m);
    } else if (!strcmp(mode, "mismatch-device-order")) {
        /* Described alike: the sentence says what differs. */
        shmesh_mesh *m = NULL;
        rc = CASE("mismatch", shmesh_mesh_create(ctx, 2, (const char *[]){"x", "y"},
                                                 (int[]){2, 2}, rank < 2 ? NULL : (int[]){1, 0, 2, 3},
                                                 &m));
        shmesh_mesh_destroy(m);
    } else { /* mismatch-mesh: the same op on different meshes */
        rc = CASE("mismatch", shmesh_psum(rank == 1 ? grid : line, rank == 1 ? "x,y" : "i", NULL,
                                          in, ARR(o, SHMESH_INT32, 1, 4, 0)));
    }
    /* Poisoned, or told by the job's abort record: the next call fails.  A
     * rank whose own group agreed may have completed the call itself. */
    int again = shmesh_barrier(ctx);
    printf("rank %d: then barrier -> %s\n", rank, shmesh_error_name(again));
    bool ok = (rc == SHMESH_ERR_MISMATCH || (rc == 0 && !strcmp(mode, "mismatch-groups"))) &&
              again == SHMESH_ERR_MISMATCH;
    exit(ok ? 0 : 4);
}

static int mode_lone_bad(void)
{
    int32_t x = rank, y;
    shmesh_array *in = ARR(&x, SHMESH_INT32, 0, 0, 0), *out = ARR(&y, SHMESH_INT32, 0, 0, 0);
    if (rank == 1) {
        CASE("lone-bad", shmesh_psum(line, "nope", NULL, in, out));
        exit(3); /* what a program does with an error: the others must not hang */
    }
    int rc = CASE("waiting", shmesh_psum(line, "i", NULL, in, out));
    return rc == SHMESH_ERR_PEER_DEAD ? 0 : 4;
}

int main(int argc, char **argv)
{
    start_four(argc, argv, &line, &grid);
    const char *mode = argv[1];
    int rc;
    if (!strcmp(mode, "local"))
        rc = mode_local();
    else if (!strcmp(mode, "ragged-bad"))
        rc = mode_ragged(false);
    else if (!strcmp(mode, "ragged-sizes"))
        rc = mode_ragged(true);
    else if (!strncmp(mode, "mismatch-", 9))
        rc = mode_mismatch(mode);
    else if (!strcmp(mode, "lone-bad"))
        rc = mode_lone_bad();
    else if (!strcmp(mode, "ragged-huge"))
        rc = mode_ragged_huge();
    else if (!strcmp(mode, "empty"))
        rc = mode_empty();
    else
        rc = 2;
    shmesh_mesh_destroy(line);
    shmesh_mesh_destroy(grid);
    if (rc)
        return rc; /* a failed job exits without finalize */
    return shmesh_finalize(ctx) ? 4 : 0;
}
