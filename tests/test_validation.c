/* Description: every argument error of the mesh collectives, made by all 4
 * ranks at once — unknown and repeated axes, bad axis_index_groups, wrong
 * output shapes and dtypes, out-of-range axes, JAX's divisibility rules,
 * bad permutations and sources, bad ragged arrays, bad meshes, output
 * shapes too large to address: each gives SHMESH_ERR_INVALID with a
 * sentence saying what was expected, on every rank, and the job goes on.
 * Then the errors only the group can see (a ragged slice out of range on one
 * rank, send and receive sizes that disagree, slices adding up to more than
 * 2^62 bytes: refused by every rank, nothing written) and calls that differ
 * between ranks (SHMESH_ERR_MISMATCH on every rank, naming both calls); a
 * rank that quits after a bad call leaves the others with PEER_DEAD, not a
 * hang.  Empty arrays whose data is NULL are accepted by every op.  A small
 * pbroadcast's source runs ahead of its receivers (eager windows): a
 * mismatch only it can see is found at its next call or within 64 calls,
 * and a receiver that dies stops it within as many. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* PROG (the path in that environment variable) MODE [ARG] under 4 ranks:
 * it must end by itself and leave nothing in /dev/shm. */
static void run_prog(const char *prog_env, const char *mode, const char *arg, struct run *r)
{
    const char *prog = getenv(prog_env);
    assert_non_null(prog);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "4", "--", (char *)prog, (char *)mode,
                    (char *)arg, NULL};
    run_cmd(argv, NULL, 60, r);
    if (r->timed_out)
        fail_msg("%s: timed out (a rank hung)\n%s\n%s", mode, r->out, r->err);
    char name[128];
    if (segment_left_behind(r, name, sizeof name))
        fail_msg("%s: segment %s left in /dev/shm", mode, name);
}

static void run_mode(const char *mode, struct run *r)
{
    run_prog("SHMESH_TEST_ERRORS", mode, NULL, r);
}

/* Every rank printed "case NAME -> CODE: ... words ...". */
static void expect_case(const struct run *r, const char *name, const char *code, const char *words,
                        int ranks)
{
    char head[128];
    snprintf(head, sizeof head, "case %s -> %s", name, code);
    int n = count_lines(r->out, head, words);
    if (n != ranks)
        fail_msg("%d ranks printed '%s' with '%s', expected %d:\n%s", n, head, words ? words : "",
                 ranks, r->out);
}

static const struct {
    const char *name, *words;
} local_cases[] = {
    {"unknown-axis", "unbound axis name 'z' (the mesh's axes are x, y)"},
    {"repeated-axis", "axis 'y' is named twice"},
    {"empty-axis-name", "empty axis name"},
    {"null-axes", "axes must not be NULL"},
    {"axis-index-null", "shmesh_axis_index: index must not be NULL"},
    {"axis-size-null", "shmesh_axis_size: size must not be NULL"},
    {"groups-duplicate", "must cover all indices exactly once, but 1 appears twice"},
    {"groups-out-of-range", "index 7 (group 1) is out of range for axes \"i\" of size 4"},
    {"groups-missing", "hold 3 indices and axes \"i\" have 4"},
    {"groups-unequal-gather", "must all have the same size, but group 0 has 1 members and group 1 has 3"},
    {"out-shape", "out must be int32[4], got int32[2]"},
    {"out-dtype", "out must be int32[4], got float32[4]"},
    {"bool-psum-needs-int32", "out must be int32[], got bool[]"},
    {"pmean-int-out", "out must be float32 (as JAX gives) or float64, got int32"},
    {"pargmax-two-axes", "only accepts a single axis, got \"x,y\""},
    {"pargmax-groups", "takes no axis_index_groups"},
    {"bad-dtype", "dtype 42, which is not a shmesh_dtype"},
    {"negative-dim", "dimension 0 of size -4"},
    {"null-data", "holds 4 elements but its data is NULL"},
    {"overlap", "in and out overlap"},
    {"gather-axis-range", "axis 2 is out of range for 2 dimensions (valid: -2..1)"},
    {"gather-out-shape", "out must be int32[4,4], got int32[16]"},
    {"scatter-untiled-size", "reduce_scatter operand scatter dimension size 4 must match shard count 2"},
    {"scatter-tiled-divisible", "scatter dimension size 6 must be divisible by shard_count 4"},
    {"scatter-bool", "cannot sum bool"},
    {"a2a-untiled-size", "to equal x.shape[split_axis], but they are 4 and 6 respectively"},
    {"a2a-tiled-divisible", "split_axis (6) has to be divisible by the size of the named axis \"i\" (4)"},
    {"a2a-axis-range", "concat_axis -3 is out of range"},
    {"pswapaxes-size", "but they are 2 and 4 respectively"},
    {"ppermute-dup-dest", "sources and destinations must be unique, got [(0, 1), (2, 1)]"},
    {"ppermute-dup-source-mod", "got [(0, 1), (4, 2)]"},
    {"pshuffle-not-perm", "does not represent a permutation of 0..3: [0, 1, 1, 2]"},
    {"pbroadcast-source", "source 4 is out of range for axes \"i\" of size 4"},
    {"pbroadcast-overlap", "in and out overlap (only the very same buffer is allowed)"},
    {"ragged-float-offsets", "input_offsets must be integer type, got float32"},
    {"ragged-rank2-sizes", "send_sizes must be rank 1 with positive dimension size, but got shape int64[2,2]"},
    {"ragged-not-multiple", "3 entries, not a multiple of the group size 4"},
    {"ragged-trailing-dims", "every dimension but the first"},
    {"gather-tiled-overflow",
     "out would be int8[2305843009213693952*4] (in int8[2305843009213693952] gathered over 4 "
     "members along axis 0): more than 2^62 bytes, too large to address"},
    {"gather-untiled-overflow",
     "out would be int32[4,576460752303423488] (in int32[576460752303423488] gathered over 4 "
     "members into new axis 0): more than 2^62 bytes"},
    {"a2a-tiled-overflow",
     "out would be int8[0,4611686018427387904*4] (in int8[0,4611686018427387904] split along "
     "axis 0, concatenated along axis 1 over 4 members): more than 2^62 bytes"},
    {"pmean-out-too-large",
     "out float64[2305843009213693952] has more than 2^62 bytes, too large to address"},
    {"ragged-row-overflow",
     "a row would be int8[1099511627776,1099511627776] (operand "
     "int8[0,1099511627776,1099511627776] past its first dimension): more than 2^62 bytes"},
    {"mesh-sizes", "(a=3 x b=2) must multiply to the job's device count 4 (4 ranks x 1 devices each)"},
    {"mesh-dup-names", "axis name 'a' is given twice"},
    {"mesh-order", "device 1 appears at positions 1 and 2"},
    {"mesh-name-comma", "without ',', '(', ')' or spaces, got 'a,b'"},
    {"op-code", "shmesh_op_call: op 0 is not the code of a collective over a mesh"},
    {"op-world", "shmesh_op_result: op 1 is not the code of a collective over a mesh"},
    {"op-groups", "shmesh_op_call: shmesh_ppermute takes no axis_index_groups"},
    {"op-shuffle-length", "shmesh_pshuffle: perm has 3 entries, the axes \"i\" have 4 devices"},
    {"op-result-null", "shmesh_op_result: result must not be NULL"},
    {"op-result-axis", "shmesh_pshuffle: "},
    {"op-result-batched", "has the batched axis 'b'; results' shapes on batched meshes are not "
                          "built"},
};

static void local_errors_on_every_rank(void **state)
{
    struct run r;
    run_mode("local", &r);
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    for (size_t i = 0; i < sizeof local_cases / sizeof *local_cases; i++)
        expect_case(&r, local_cases[i].name, "SHMESH_ERR_INVALID", local_cases[i].words, 4);
    /* Reductions take unequal subgroups: {0} and {1, 2, 3}. */
    expect_case(&r, "groups-unequal-psum", "SHMESH_OK", NULL, 4);
    assert_int_equal(count_lines(r.out, "rank 0: unequal psum gave 0", NULL), 1);
    assert_int_equal(count_lines(r.out, "unequal psum gave 6", NULL), 3);
    /* Refused calls were not made: the job goes on. */
    assert_int_equal(count_lines(r.out, "afterwards psum -> SHMESH_OK, 6", NULL), 4);
    run_free(&r);
}

static void ragged_refused_by_all(const char *mode, const char *words)
{
    struct run r;
    run_mode(mode, &r);
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    expect_case(&r, mode, "SHMESH_ERR_INVALID", words, 4);
    assert_int_equal(count_lines(r.out, "output untouched", NULL), 4);
    expect_case(&r, "ragged-good", "SHMESH_OK", NULL, 4);
    assert_int_equal(count_lines(r.out, "afterwards psum -> SHMESH_OK, 6", NULL), 4);
    run_free(&r);
}

static void ragged_slice_out_of_range(void **state)
{
    ragged_refused_by_all("ragged-bad", "rank 1's entry 2 (to group index 2): input_offsets 4 + "
                                        "send_sizes 1 leaves operand's 4 rows; nothing was sent");
}

static void ragged_sizes_disagree(void **state)
{
    ragged_refused_by_all("ragged-sizes", "it sends 1 rows but the receiver (rank 2) expects 2");
}

/* Slices that add up to more than 2^62 bytes: the group's verdict, as for a
 * slice out of range. */
static void ragged_too_large(void **state)
{
    struct run r;
    run_mode("ragged-huge", &r);
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    expect_case(&r, "ragged-huge", "SHMESH_ERR_INVALID",
                "rank 0's slices up to entry 1 add up to more than 2^62 bytes (rows of 1 "
                "bytes), too large to address; nothing was sent",
                4);
    assert_int_equal(count_lines(r.out, "afterwards psum -> SHMESH_OK, 6", NULL), 4);
    run_free(&r);
}

/* Empty arrays whose data is NULL are accepted by every op, on each path
 * that a call of no bytes can take; nothing is read or written through
 * NULL (the sanitize setup reports a memcpy or memset of NULL). */
static void empty_arrays_with_null_data(void **state)
{
    static const char *const ops[] = {
        "empty-psum",       "empty-psum-bool",   "empty-pmax",         "empty-pmin",
        "empty-pmean",      "empty-pargmax",     "empty-pargmin",      "empty-all-gather",
        "empty-all-gather-untiled", "empty-psum-scatter", "empty-all-to-all", "empty-pswapaxes",
        "empty-ppermute",   "empty-pshuffle",    "empty-pbroadcast",   "empty-ragged"};
    static char *paths[][3] = {
        {NULL},
        {"SHMESH_CMA_MIN=0", "SHMESH_CMA_BCAST_REDUCE_MIN=0", NULL},
        {"SHMESH_RSAG_MIN=0", "SHMESH_CMA=0", NULL},
    };
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
        const char *prog = getenv("SHMESH_TEST_ERRORS");
        assert_non_null(prog);
        char *argv[] = {(char *)launcher_path(), "-v", "-n", "4", "--", (char *)prog, "empty",
                        NULL};
        struct run r;
        run_cmd(argv, paths[p][0] ? paths[p] : NULL, 60, &r);
        if (r.timed_out || r.code != 0)
            fail_msg("%s: exit %d%s\n%s\n%s", paths[p][0] ? paths[p][0] : "default", r.code,
                     r.timed_out ? " (timed out)" : "", r.out, r.err);
        for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
            expect_case(&r, ops[i], "SHMESH_OK", NULL, 4);
        assert_int_equal(count_lines(r.out, "afterwards psum -> SHMESH_OK, 6", NULL), 4);
        run_free(&r);
    }
}

static void mismatch(const char *mode, const char *a, const char *b, int min_in_call)
{
    struct run r;
    run_mode(mode, &r);
    if (r.code != 0)
        fail_msg("%s: exit %d\n%s\n%s", mode, r.code, r.out, r.err);
    /* The ranks that met a different call name both calls... */
    int n = count_lines(r.out, a, b) + count_lines(r.out, b, a);
    if (n < min_in_call)
        fail_msg("%s: %d ranks named both calls, expected %d or more:\n%s", mode, n, min_in_call,
                 r.out);
    /* ...and every rank fails from then on. */
    assert_int_equal(count_lines(r.out, "then barrier -> SHMESH_ERR_MISMATCH", NULL), 4);
    run_free(&r);
}

static void mismatched_ops(void **state)
{
    mismatch("mismatch-op", "shmesh_psum(\"i\", int32[4] -> int32[4])",
             "shmesh_all_gather(\"i\", int32[4] -> int32[16], axis=0, tiled=true)", 4);
}

static void mismatched_shapes(void **state)
{
    mismatch("mismatch-shape", "int32[4] -> int32[4]", "int32[3] -> int32[3]", 4);
}

/* After repeated calls, whose descriptions are left in the slot buffers
 * and rewritten only when a call's hash changes. */
static void mismatched_after_repeats(void **state)
{
    mismatch("mismatch-after-repeats", "int32[4] -> int32[4]", "int32[3] -> int32[3]", 4);
}

/* The planned calls' hash (lib/front/plan.h) tells them from another. */
static void mismatched_after_planned_calls(void **state)
{
    mismatch("mismatch-planned", "int32[4] -> int32[4]", "int32[3] -> int32[3]", 4);
}

static void mismatched_groups(void **state)
{
    /* Ranks 2 and 3 agree with each other; 0 and 1 meet the difference. */
    mismatch("mismatch-groups", "axis_index_groups=[[0,2],[1,3]]", "axis_index_groups=[[0,1],[2,3]]",
             2);
}

static void mismatched_meshes(void **state)
{
    mismatch("mismatch-mesh", "shmesh_psum(\"i\"", "shmesh_psum(\"x,y\"", 2);
}

#define LONG_A "a_long_axis_name_of_31_chars_aa"
#define LONG_B "b_long_axis_name_of_31_chars_bb"

/* Axes "A,B,x" and "A,x" with names of 31 characters: the hash once covered
 * only 63 characters of the axes' text, which dropped B, and both calls
 * returned different sums without an error.  Every member meets a member of
 * the other call, and names both in full. */
static void mismatched_long_axes(void **state)
{
    mismatch("mismatch-long-axes",
             "shmesh_psum(\"" LONG_A "," LONG_B ",x\", int32[4] -> int32[4]) (call #4)",
             "shmesh_psum(\"" LONG_A ",x\", int32[4] -> int32[4]) (call #4)", 4);
}

/* Meshes (A,B,x,y) and (A,B,y,x): every name counts, in full and in order. */
static void mismatched_mesh_axis_order(void **state)
{
    mismatch("mismatch-mesh-order",
             "shmesh_mesh_create(" LONG_A "=1, " LONG_B "=1, x=2, y=2) (call #3)",
             "shmesh_mesh_create(" LONG_A "=1, " LONG_B "=1, y=2, x=2) (call #3)", 4);
}

/* The same names and sizes in another device order: described alike, so the
 * sentence says where they differ. */
static void mismatched_device_order(void **state)
{
    mismatch("mismatch-device-order",
             "called shmesh_mesh_create(x=2, y=2) (call #3) but rank",
             "called shmesh_mesh_create(x=2, y=2) (call #3) (with other axis_index_groups, "
             "permutation or device order)",
             4);
}

static void lone_bad_call_does_not_hang(void **state)
{
    struct run r;
    run_mode("lone-bad", &r);
    assert_int_equal(r.code, 3);
    expect_case(&r, "lone-bad", "SHMESH_ERR_INVALID", "unbound axis name 'nope'", 1);
    expect_case(&r, "waiting", "SHMESH_ERR_PEER_DEAD", "peer rank 1", 3);
    run_free(&r);
}

/* shmesh-test-eager MODE [ARG] under 4 ranks. */
static void run_eager(struct run *r, const char *mode, const char *arg)
{
    run_prog("SHMESH_TEST_EAGER", mode, arg, r);
}

#define SOURCE_0 "shmesh_pbroadcast(\"i\", int32[4] -> int32[4], source=0) (call #3)"
#define SOURCE_2 "shmesh_pbroadcast(\"i\", int32[4] -> int32[4], source=2) (call #3)"

/* Ranks 0 and 1 broadcast from member 0, 2 and 3 from member 2: each
 * receiver agrees with its source, so the call itself may succeed on every
 * rank; the sources compare their receivers' calls at the next call (a
 * barrier), and every rank fails there, naming both calls. */
static void mismatched_pbroadcast_sources(void **state)
{
    struct run r;
    run_eager(&r, "mismatch-sources", "0");
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    assert_int_equal(count_lines(r.out, "pbroadcast -> SHMESH_OK", NULL) +
                         count_lines(r.out, "pbroadcast -> SHMESH_ERR_MISMATCH", NULL),
                     4);
    assert_int_equal(count_lines(r.out, "then barrier -> SHMESH_ERR_MISMATCH", NULL), 4);
    int named = count_lines(r.out, SOURCE_0 " but rank 2 called " SOURCE_2, NULL) +
                count_lines(r.out, SOURCE_2 " but rank 0 called " SOURCE_0, NULL);
    if (named != 4)
        fail_msg("%d of 4 ranks named both calls:\n%s", named, r.out);
    run_free(&r);
}

/* The same, followed by agreeing pbroadcasts instead of a barrier: the
 * sources find the mismatch before they are 64 calls on, and every rank
 * stops there. */
static void mismatched_pbroadcast_found_within_64_calls(void **state)
{
    struct run r;
    run_eager(&r, "mismatch-sources", "100");
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    for (int rank = 0; rank < 4; rank++) {
        char head[64];
        snprintf(head, sizeof head, "rank %d: then ", rank);
        const char *at = strstr(r.out, head);
        int k = -1;
        char err[40] = "";
        if (!at || sscanf(at + strlen(head), "%d more ok, next -> %39[A-Z_]", &k, err) != 2 ||
            k > 63 || strcmp(err, "SHMESH_ERR_MISMATCH"))
            fail_msg("rank %d went %d calls on (%s), expected a mismatch within 63:\n%s", rank,
                     k, err, r.out);
    }
    assert_int_equal(count_lines(r.out, "then barrier -> SHMESH_ERR_MISMATCH", SOURCE_0), 4);
    run_free(&r);
}

/* Each rank takes the next for the source: all of them wait as receivers
 * for an entry no one posts.  Each shows where it waits, and finds its
 * source waiting there too: every rank fails with the mismatch, naming two
 * calls, long before the run's SHMESH_TIMEOUT. */
static void mismatched_pbroadcast_receivers(void **state)
{
    struct run r;
    run_eager(&r, "mismatch-receivers", NULL);
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    assert_int_equal(count_lines(r.out, "pbroadcast -> SHMESH_ERR_MISMATCH", NULL), 4);
    int named = 0;
    for (int s = 0; s < 4; s++) {
        char mine[96];
        snprintf(mine, sizeof mine, "source=%d) (call #3) but rank ", s);
        named += count_lines(r.out, mine, "source=");
    }
    if (named != 4)
        fail_msg("%d of 4 ranks named both calls:\n%s", named, r.out);
    run_free(&r);
}

/* Rank 3 receives with arrays of 3 elements where the source sends 4: it
 * refuses the source's entry (its output untouched) and names both calls;
 * the others learn it at the next call, every rank naming the same two. */
static void mismatched_pbroadcast_receiver_shape(void **state)
{
    struct run r;
    run_eager(&r, "mismatch-shape", NULL);
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    const char *both = "called shmesh_pbroadcast(\"i\", int32[3] -> int32[3], source=0) (call #3) "
                       "but rank 0 called shmesh_pbroadcast(\"i\", int32[4] -> int32[4], "
                       "source=0) (call #3)";
    assert_int_equal(count_lines(r.out, "rank 3: pbroadcast -> SHMESH_ERR_MISMATCH", both), 1);
    assert_int_equal(count_lines(r.out, "rank 3: output untouched", NULL), 1);
    assert_int_equal(count_lines(r.out, "output written", NULL), 0);
    assert_int_equal(count_lines(r.out, "then barrier -> SHMESH_ERR_MISMATCH", both), 4);
    run_free(&r);
}

/* Rank 1 dies after 5 pbroadcasts from rank 0: rank 0 runs ahead, then
 * waits for rank 1 to have read what it sent and finds it dead; so do the
 * others. */
static void dead_receiver_stops_the_source(void **state)
{
    struct run r;
    run_eager(&r, "dead-receiver", NULL);
    assert_int_equal(r.code, 3);
    for (int rank = 0; rank < 4; rank++) {
        if (rank == 1)
            continue;
        char head[64];
        snprintf(head, sizeof head, "rank %d: stopped after ", rank);
        const char *at = strstr(r.out, head);
        int k = -1;
        if (!at || sscanf(at + strlen(head), "%d", &k) != 1 || k > 70)
            fail_msg("rank %d: stopped after %d calls, expected 70 at most:\n%s", rank, k,
                     r.out);
    }
    assert_int_equal(count_lines(r.out, "-> SHMESH_ERR_PEER_DEAD", "peer rank 1"), 3);
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(local_errors_on_every_rank),
        cmocka_unit_test(ragged_slice_out_of_range),
        cmocka_unit_test(ragged_sizes_disagree),
        cmocka_unit_test(ragged_too_large),
        cmocka_unit_test(empty_arrays_with_null_data),
        cmocka_unit_test(mismatched_ops),
        cmocka_unit_test(mismatched_shapes),
        cmocka_unit_test(mismatched_after_repeats),
        cmocka_unit_test(mismatched_after_planned_calls),
        cmocka_unit_test(mismatched_groups),
        cmocka_unit_test(mismatched_meshes),
        cmocka_unit_test(mismatched_long_axes),
        cmocka_unit_test(mismatched_mesh_axis_order),
        cmocka_unit_test(mismatched_device_order),
        cmocka_unit_test(lone_bad_call_does_not_hang),
        cmocka_unit_test(mismatched_pbroadcast_sources),
        cmocka_unit_test(mismatched_pbroadcast_found_within_64_calls),
        cmocka_unit_test(mismatched_pbroadcast_receivers),
        cmocka_unit_test(mismatched_pbroadcast_receiver_shape),
        cmocka_unit_test(dead_receiver_stops_the_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
