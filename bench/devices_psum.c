/* devices_psum: the time of one collective over every device of the job,
 * and the bytes it moves between processes, for comparing layouts of the
 * same devices (ranks x devices per rank):
 *
 *   shmesh-run -n 4 -- build/bench/devices-psum [FLOATS] [--op OP] [--check-traffic]
 *   shmesh-run -n 2 --devices-per-rank 2 -- build/bench/devices-psum [FLOATS] ...
 *   shmesh-run -n 1 --devices-per-rank 4 -- build/bench/devices-psum [FLOATS] ...
 *
 * A 1-D mesh "i" over every device; each device's input holds FLOATS
 * float32 (default 2), its id + 1.  OP (default psum): psum, psum_scatter
 * (tiled), all_to_all (tiled, split and concat along the only axis),
 * all_gather (tiled), pbroadcast (from device 0) or ragged_all_to_all
 * (rows of one float, each device's block i to device i, as all_to_all);
 * FLOATS must be a multiple of the devices for psum_scatter, all_to_all
 * and ragged_all_to_all.  Three
 * repetitions of 2000 calls (fewer for large arrays: about 256 MiB of input
 * per device and repetition, at least 5) after a twentieth as many warm-up
 * calls (at least 1); rank 0 prints the median repetition's time per call,
 * the bytes a rank received from other processes per call (the most of any
 * rank: shmesh_traffic_get) beside the least the op needs with N devices,
 * R ranks of K devices and S bytes of input each (a rank receives, for a
 * reduction in device order, its share of the other ranks' K inputs each,
 * then their reduced shares):
 *   psum                      (R - 1) / R (K + 1) S
 *   psum_scatter, all_to_all, (N - K) K S / N (each local device's block of
 *   ragged_all_to_all         every device of the other ranks)
 *   all_gather                (N - K) S (every other rank's inputs, once)
 *   pbroadcast                S (device 0's input, once, on the other ranks)
 * and checks the last call's results.  With --check-traffic it fails (exit
 * 1) when a rank received more than 1% over that least (FLOATS a multiple of
 * 64 R splits a psum evenly).  --groups G (psum): axis_index_groups of G
 * consecutive indices, [[0..G-1], [G..2G-1], ...]; a subgroup then spans
 * R' = G / K ranks when K divides G, whose least is (R'-1)/R' (K+1) S, or
 * lies in one rank when G divides K, whose least is 0 (other G: no least). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "shmesh.h"

#define CALLS_MAX 2000
#define CALLS_BYTES (256L << 20) /* input per device and repetition */
#define MAXLOCAL 64

#define fail(ctx, what, rc) bench_fail("devices-psum", ctx, what, rc)

enum op { PSUM, SCATTER, ALL_TO_ALL, ALL_GATHER, BROADCAST, RAGGED, NOPS };
static const char *const op_names[NOPS] = {"psum", "psum_scatter", "all_to_all", "all_gather",
                                           "pbroadcast", "ragged_all_to_all"};

static const shmesh_groups *groups; /* --groups */
/* ragged_all_to_all: per local device, input_offsets, send_sizes,
 * output_offsets and recv_sizes (int64, one entry per device). */
static shmesh_array ragged_params[4][MAXLOCAL];

static int call(enum op op, shmesh_mesh *m, const shmesh_array *in, shmesh_array *out)
{
    switch (op) {
    case PSUM: return shmesh_psum(m, "i", groups, in, out);
    case SCATTER: return shmesh_psum_scatter(m, "i", NULL, 0, true, in, out);
    case ALL_TO_ALL: return shmesh_all_to_all(m, "i", NULL, 0, 0, true, in, out);
    case ALL_GATHER: return shmesh_all_gather(m, "i", NULL, 0, true, in, out);
    case RAGGED:
        return shmesh_ragged_all_to_all(m, "i", NULL, in, out, ragged_params[0], ragged_params[1],
                                        ragged_params[2], ragged_params[3]);
    default: return shmesh_pbroadcast(m, "i", 0, in, out);
    }
}

/* Element e of an output of `out_count` (every input is its device's id
 * + 1). */
static float expected(enum op op, int devices, long out_count, long e)
{
    switch (op) {
    case PSUM:
    case SCATTER: return (float)devices * (float)(devices + 1) / 2;
    case ALL_TO_ALL:
    case RAGGED:
    case ALL_GATHER: return (float)(e / (out_count / devices) + 1); /* block i from device i */
    default: return 1.0f;
    }
}

int main(int argc, char **argv)
{
    long count = argc > 1 ? atol(argv[1]) : 2;
    bool check_traffic = false;
    enum op op = PSUM;
    int group = 0;
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "--check-traffic")) {
            check_traffic = true;
        } else if (!strcmp(argv[a], "--groups") && a + 1 < argc) {
            group = atoi(argv[++a]);
            group = group < 1 ? -1 : group;
        } else if (!strcmp(argv[a], "--op") && a + 1 < argc) {
            for (op = 0; op < NOPS && strcmp(argv[a + 1], op_names[op]); op++)
                ;
            a++;
        } else {
            op = NOPS;
        }
    }
    shmesh_ctx *ctx;
    bool bad = op == NOPS || group < 0 || (group && op != PSUM);
    if (count < 1 || bad || shmesh_init(&ctx)) {
        fprintf(stderr,
                "usage: shmesh-run ... -- %s [FLOATS >= 1] [--op psum|psum_scatter|all_to_all|"
                "all_gather|pbroadcast|ragged_all_to_all] [--groups G >= 1 (psum)] [--check-traffic] (%s)\n",
                argv[0], bad ? "bad argument" : shmesh_last_error(NULL));
        return 2;
    }
    int devices = shmesh_device_count(ctx), k = shmesh_local_device_count(ctx), rc;
    int world = shmesh_world_size(ctx), me = shmesh_rank(ctx);
    const char *names[] = {"i"};
    shmesh_mesh *mesh;
    if (k > MAXLOCAL || (rc = shmesh_mesh_create(ctx, 1, names, &devices, NULL, &mesh)))
        return fail(ctx, "shmesh_mesh_create", k > MAXLOCAL ? SHMESH_ERR_INVALID : rc);
    if ((op == SCATTER || op == ALL_TO_ALL || op == RAGGED) && count % devices)
        return fail(ctx, "FLOATS must be a multiple of the devices", SHMESH_ERR_INVALID);
    if (group && devices % group)
        return fail(ctx, "--groups G must divide the devices", SHMESH_ERR_INVALID);
    int *indices = malloc(sizeof *indices * (size_t)devices);
    if (!indices)
        return fail(ctx, "malloc", SHMESH_ERR_NOMEM);
    for (int i = 0; i < devices; i++)
        indices[i] = i;
    shmesh_groups gs = {devices / (group ? group : 1), group, indices, NULL};
    groups = group ? &gs : NULL;
    long out_count = op == SCATTER ? count / devices : op == ALL_GATHER ? count * devices : count;
    int ids[MAXLOCAL];
    shmesh_mesh_local_devices(mesh, ids, MAXLOCAL);
    float *in = malloc(sizeof *in * (size_t)count * (size_t)k);
    float *out = malloc(sizeof *out * (size_t)out_count * (size_t)k);
    int64_t *table = malloc(sizeof *table * 4 * (size_t)devices * (size_t)k);
    if (!in || !out || !table)
        return fail(ctx, "malloc", SHMESH_ERR_NOMEM);
    for (int l = 0; l < k; l++) /* device ids[l] sends block i to device i, at its own block */
        for (int w = 0; w < 4; w++) {
            int64_t *t = table + ((size_t)l * 4 + (size_t)w) * (size_t)devices;
            for (int i = 0; i < devices; i++)
                t[i] = w == 0 ? i * (count / devices) : w == 2 ? ids[l] * (count / devices)
                                                             : count / devices;
            ragged_params[w][l] = (shmesh_array){.data = t, .dtype = SHMESH_INT64, .ndim = 1,
                                                 .shape = {devices}};
        }
    shmesh_array a_in[MAXLOCAL], a_out[MAXLOCAL];
    for (int l = 0; l < k; l++) {
        for (long i = 0; i < count; i++)
            in[l * count + i] = (float)(ids[l] + 1);
        a_in[l] = (shmesh_array){.data = in + l * count, .dtype = SHMESH_FLOAT32, .ndim = 1,
                                 .shape = {count}};
        a_out[l] = (shmesh_array){.data = out + l * out_count, .dtype = SHMESH_FLOAT32, .ndim = 1,
                                  .shape = {out_count}};
    }
    long calls = CALLS_BYTES / (count * (long)sizeof(float));
    calls = calls > CALLS_MAX ? CALLS_MAX : calls < 5 ? 5 : calls;
    for (long i = 0; i < calls / 20 + 1; i++)
        if ((rc = call(op, mesh, a_in, a_out)))
            return fail(ctx, op_names[op], rc);
    double t[3];
    shmesh_traffic tr0, tr1;
    shmesh_traffic_get(ctx, &tr0);
    for (int rep = 0; rep < 3; rep++) {
        if ((rc = shmesh_barrier(ctx)))
            return fail(ctx, "shmesh_barrier", rc);
        double t0 = (bench_now_us() / 1e6);
        for (long i = 0; i < calls; i++)
            if ((rc = call(op, mesh, a_in, a_out)))
                return fail(ctx, op_names[op], rc);
        t[rep] = ((bench_now_us() / 1e6) - t0) / (double)calls * 1e6;
    }
    shmesh_traffic_get(ctx, &tr1);
    /* The barriers add nothing: they move no data. */
    int64_t *got = calloc((size_t)world, sizeof *got);
    if (!got)
        return fail(ctx, "calloc", SHMESH_ERR_NOMEM);
    got[me] = (int64_t)(tr1.received - tr0.received);
    if ((rc = shmesh_world_sum(ctx, got, (size_t)world, SHMESH_INT64)))
        return fail(ctx, "shmesh_world_sum", rc);
    int64_t most = 0;
    for (int r = 0; r < world; r++)
        most = got[r] > most ? got[r] : most;
    free(got);
    double per_call = (double)most / (3.0 * (double)calls), S = (double)count * sizeof(float);
    /* The ranks a psum's group spans (its subgroup's, with --groups). */
    int span = !group ? world : group % k == 0 ? group / k : k % group == 0 ? 1 : 0;
    double least = op == PSUM && !span                ? -1
                   : op == PSUM                       ? (double)(span - 1) / span * (k + 1) * S
                   : op == SCATTER || op == ALL_TO_ALL || op == RAGGED
                       ? (double)(devices - k) * k * S / devices
                   : op == ALL_GATHER                  ? (double)(devices - k) * S
                                                       : (world > 1 ? S : 0);
    static const char *const least_text[NOPS] = {"(R-1)/R (K+1) S", "(N-K) K S/N", "(N-K) K S/N",
                                                 "(N-K) S", "S", "(N-K) K S/N"};
    long wrong = 0;
    for (int l = 0; l < k; l++) {
        /* A subgroup of G from g0 = id / G * G sums g0 + 1 .. g0 + G. */
        float sub = group ? (float)group * (float)(ids[l] / group * group) +
                                (float)group * (float)(group + 1) / 2
                          : 0;
        for (long i = 0; i < out_count; i++)
            wrong += out[l * out_count + i] != (group ? sub : expected(op, devices, out_count, i));
    }
    double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    double median = t[2] < lo ? lo : t[2] > hi ? hi : t[2];
    bool too_much = check_traffic && least >= 0 && per_call > least * 1.01;
    char sub_text[48] = "";
    if (group)
        snprintf(sub_text, sizeof sub_text, " in subgroups of %d", group);
    if (me == 0)
        printf("devices %d (%d ranks x %d), %ld float32: %s%s %.2f us per call (median of 3 "
               "x %ld); received %.0f bytes per call and rank (most), least %s = %.0f%s\n",
               devices, world, k, count, op_names[op], sub_text, median, calls, per_call,
               least < 0 ? "unknown" : group ? "(R'-1)/R' (K+1) S" : least_text[op],
               least < 0 ? 0 : least,
               wrong ? ", WRONG RESULTS" : too_much ? ", TOO MUCH TRAFFIC" : "");
    free(indices);
    free(in);
    free(out);
    free(table);
    shmesh_mesh_destroy(mesh);
    return shmesh_finalize(ctx) || wrong || too_much ? 1 : 0;
}
