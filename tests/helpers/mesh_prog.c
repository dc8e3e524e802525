/* shmesh-test-mesh: checks mesh values on this rank and prints what it
 * found (the driver is tests/test_mesh.c).
 *
 *   shmesh-test-mesh values    one process of 8 devices (SHMESH_LOCAL_DEVICES=8):
 *                              accessors, equality and hashes, abstract meshes,
 *                              the mesh stack, collectives on the current and on
 *                              a local mesh
 *   shmesh-test-mesh local     under shmesh-run -n 2 --devices-per-rank 4: local
 *                              meshes for device orders that form sub-blocks and
 *                              one that does not
 *
 * Every check that fails prints "rank R: FAIL <what>"; the last line is
 * "rank R: N checks ok".  Exit status 0 when all held, 1 when not, 2 for bad
 * usage or a failed shmesh_init. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

static shmesh_ctx *ctx;
static int rank, checks, failed;

static void check(int ok, const char *fmt, ...)
{
    checks++;
    if (ok)
        return;
    failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("rank %d: FAIL ", rank);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* An error: code SHMESH_ERR_INVALID and `words` in the message. */
static void check_refused(int rc, const char *msg, const char *words, const char *what)
{
    check(rc == SHMESH_ERR_INVALID && strstr(msg, words), "%s: got %s '%s', expected '%s'", what,
          shmesh_error_name(rc), msg, words);
    printf("rank %d: %s refused: %s\n", rank, what, msg);
}

static const char *xy[] = {"x", "y"};

static void values(void)
{
    check(shmesh_local_device_count(ctx) == 8, "local device count %d",
          shmesh_local_device_count(ctx));
    check(shmesh_device_count(ctx) == 8, "device count %d", shmesh_device_count(ctx));
    check(shmesh_device_id(ctx, 3) == 3 && shmesh_device_id(ctx, 8) == -1, "device ids");
    check(shmesh_device_process(ctx, 7) == 0 && shmesh_device_process(ctx, 8) == -1,
          "device processes");

    int sizes[] = {4, 2}, order[] = {7, 6, 5, 4, 3, 2, 1, 0};
    shmesh_mesh *a, *b, *c;
    check(!shmesh_mesh_create(ctx, 2, xy, sizes, NULL, &a), "mesh a: %s", shmesh_last_error(ctx));
    check(!shmesh_mesh_create(ctx, 2, xy, sizes, NULL, &b), "mesh b");
    check(!shmesh_mesh_create(ctx, 2, xy, sizes, order, &c), "mesh c");
    check(shmesh_mesh_ndim(a) == 2 && !strcmp(shmesh_mesh_axis_name(a, 1), "y") &&
              shmesh_mesh_dim_size(a, 0) == 4 && shmesh_mesh_size(a) == 8 &&
              !shmesh_mesh_axis_name(a, 2) && shmesh_mesh_dim_size(a, -1) == -1,
          "accessors");
    check(shmesh_mesh_equal(a, b) && shmesh_mesh_hash(a) == shmesh_mesh_hash(b),
          "equal meshes compare and hash equal");
    check(!shmesh_mesh_equal(a, c) && shmesh_mesh_same_shape(a, c),
          "another device order: not equal, same shape");
    int ids[8];
    check(shmesh_mesh_device_ids(c, ids, 8) == 8 && ids[0] == 7 && ids[7] == 0, "device ids of c");
    check(shmesh_mesh_local_devices(c, ids, 8) == 8 && ids[1] == 6, "local devices of c");
    check(shmesh_mesh_is_multi_process(a) == 0, "one process");
    char text[128];
    shmesh_mesh_text(a, text, sizeof text);
    check(!strcmp(text, "Mesh('x': 4, 'y': 2)"), "text %s", text);

    /* Abstract meshes: a shape, no devices. */
    shmesh_mesh *abs_a, *abs_n;
    check(!shmesh_mesh_abstract(a, &abs_a), "abstract of a");
    check(!shmesh_abstract_mesh_create(2, xy, sizes, &abs_n), "abstract mesh");
    check(shmesh_mesh_equal(abs_a, abs_n) && shmesh_mesh_hash(abs_a) == shmesh_mesh_hash(abs_n),
          "abstract meshes of one shape are equal");
    check(!shmesh_mesh_equal(abs_a, a) && shmesh_mesh_same_shape(abs_a, a),
          "an abstract mesh never equals a concrete one");
    shmesh_mesh_text(abs_a, text, sizeof text);
    check(!strcmp(text, "AbstractMesh('x': 4, 'y': 2)"), "text %s", text);
    int size = 0;
    check(!shmesh_axis_size(abs_a, "x,y", &size) && size == 8, "axis size on an abstract mesh");
    int rc = shmesh_mesh_device_ids(abs_a, ids, 8);
    check_refused(rc, shmesh_last_error(NULL), "has no device ids", "device ids of an abstract mesh");
    rc = shmesh_mesh_local_devices(abs_a, ids, 8);
    check_refused(rc, shmesh_last_error(NULL), "has no local devices", "local devices of an abstract mesh");
    shmesh_mesh *lm;
    rc = shmesh_mesh_local_mesh(abs_a, &lm);
    check_refused(rc, shmesh_last_error(NULL), "has no local mesh", "local mesh of an abstract mesh");
    rc = shmesh_mesh_is_multi_process(abs_a);
    check_refused(rc, shmesh_last_error(NULL), "has no processes", "is_multi_process of an abstract mesh");
    rc = shmesh_mesh_push(abs_a);
    check_refused(rc, shmesh_last_error(NULL), "cannot be the mesh context", "pushing an abstract mesh");
    float v = 1, s = 0;
    shmesh_array in = {.data = &v, .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}}, out = {.data = &s, .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
    rc = shmesh_psum(abs_a, "x", NULL, &in, &out);
    check_refused(rc, shmesh_last_error(NULL), "collectives need a concrete mesh",
                  "a collective on an abstract mesh");
    shmesh_mesh_destroy(abs_n);
    rc = shmesh_abstract_mesh_create(2, xy, (int[]){4, 0}, &abs_n);
    check(!abs_n, "a refused mesh is NULL");
    check_refused(rc, shmesh_last_error(NULL), "sizes must be positive", "a size of 0");

    /* The stack: NULL is the innermost pushed mesh. */
    rc = shmesh_psum(NULL, "x", NULL, &in, &out);
    check_refused(rc, shmesh_last_error(NULL), "none is pushed", "a NULL mesh with none pushed");
    check(!shmesh_mesh_current(), "nothing pushed");
    int idx = -1;
    rc = shmesh_axis_index(NULL, "x", &idx);
    check_refused(rc, shmesh_last_error(NULL), "none is pushed", "axis_index with none pushed");
    check(!shmesh_mesh_push(a) && !shmesh_mesh_push(c) && shmesh_mesh_current() == c, "push");
    /* On c, this process's first device in mesh order is 7, at (0, 0). */
    check(!shmesh_axis_index(NULL, "x,y", &idx) && idx == 0 && !shmesh_axis_size(NULL, "x", &size) &&
              size == 4,
          "axis_index and axis_size on the current mesh: %d, %d", idx, size);
    rc = shmesh_mesh_pop(a);
    check_refused(rc, shmesh_last_error(NULL), "pops must match pushes", "popping out of order");
    float in8[8], out8[8];
    shmesh_array ins[8], outs[8];
    shmesh_mesh_local_devices(c, ids, 8);
    for (int l = 0; l < 8; l++) {
        in8[l] = (float)(ids[l] + 1);
        ins[l] = (shmesh_array){.data = &in8[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
        outs[l] = (shmesh_array){.data = &out8[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
    }
    /* On c (the current mesh), position (i, j) holds device 7 - (2i + j):
     * the sum over y of devices 7-2i and 6-2i, plus one each. */
    check(!shmesh_psum(NULL, "y", NULL, ins, outs), "psum on the current mesh: %s",
          shmesh_last_error(ctx));
    for (int l = 0; l < 8; l++) {
        int i = (7 - ids[l]) / 2;
        check(out8[l] == (float)(8 - 2 * i + 7 - 2 * i), "device %d: psum over y %g", ids[l],
              out8[l]);
    }
    check(!shmesh_axis_index_of(c, "y,x", 4, &idx) && idx == 5,
          "axis_index_of device 4 over (y,x): %d", idx); /* device 4 is at (1, 1) */
    check(!shmesh_mesh_pop(c) && shmesh_mesh_current() == a && !shmesh_mesh_pop(a) &&
              !shmesh_mesh_current(),
          "pops");

    /* One process: the local mesh is the mesh, and collectives on it stay
     * here. */
    check(!shmesh_mesh_local_mesh(c, &lm) && shmesh_mesh_equal(lm, c), "local mesh of c");
    check(!shmesh_pmax(lm, "x,y", NULL, ins, outs), "pmax on the local mesh: %s",
          shmesh_last_error(ctx));
    for (int l = 0; l < 8; l++)
        check(out8[l] == 8.0f, "device %d: pmax %g", ids[l], out8[l]);
    shmesh_mesh_destroy(lm);
    shmesh_mesh_destroy(abs_a);
    shmesh_mesh_destroy(a);
    shmesh_mesh_destroy(b);
    shmesh_mesh_destroy(c);
}

/* A mesh x=4, y=2 of the 8 devices of 2 ranks (4 each) in `order`; its local
 * mesh on this rank: refused with `words`, or of shape lx x ly holding ids
 * `want` (row-major). */
static void local_case(const char *name, const int *order, int lx, int ly, const int *want,
                       const char *words)
{
    int sizes[] = {4, 2};
    shmesh_mesh *m, *lm = NULL;
    check(!shmesh_mesh_create(ctx, 2, xy, sizes, order, &m), "%s: mesh", name);
    check(shmesh_mesh_is_multi_process(m) == 1, "%s: multi-process", name);
    int rc = shmesh_mesh_local_mesh(m, &lm);
    if (words) {
        check_refused(rc, shmesh_last_error(ctx), words, name);
    } else {
        int ids[8], n = 0;
        check(!rc, "%s: %s", name, shmesh_last_error(ctx));
        if (!rc)
            n = shmesh_mesh_device_ids(lm, ids, 8);
        check(!rc && shmesh_mesh_dim_size(lm, 0) == lx && shmesh_mesh_dim_size(lm, 1) == ly &&
                  n == lx * ly && !memcmp(ids, want + rank * n, sizeof *ids * (size_t)n),
              "%s: local mesh %dx%d", name, lx, ly);
        char text[64];
        shmesh_mesh_text(lm, text, sizeof text);
        printf("rank %d: %s: local mesh %s\n", rank, name, text);
        /* A collective on it stays in this process: each rank alone. */
        float in[4], out[4];
        shmesh_array ins[4], outs[4];
        for (int l = 0; l < n; l++) {
            in[l] = 1;
            ins[l] = (shmesh_array){.data = &in[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
            outs[l] = (shmesh_array){.data = &out[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
        }
        check(!rc && !shmesh_psum(lm, "x,y", NULL, ins, outs) && out[0] == (float)n,
              "%s: psum on the local mesh", name);
    }
    shmesh_mesh_destroy(lm);
    shmesh_mesh_destroy(m);
}

/* Random device orders on meshes of 8 devices: the local mesh exists
 * exactly when this rank's devices fill the box their coordinates span
 * (counted here, not searched for as the library does), and then holds
 * them in mesh order. */
static void local_random(void)
{
    static const int shapes[][4] = {{1, 8}, {2, 4, 2}, {2, 2, 4}, {3, 2, 2, 2}};
    uint64_t x = 12345;
    int formed = 0, refused = 0;
    for (int t = 0; t < 200; t++) {
        const int *sh = shapes[t % 4];
        int nd = sh[0], order[8], ids[8];
        const char *names[] = {"a", "b", "c"};
        for (int i = 0; i < 8; i++)
            order[i] = i;
        for (int i = 7; i > 0; i--) { /* the same shuffle on every rank */
            x = x * 6364136223846793005u + 1442695040888963407u;
            int j = (int)((x >> 33) % (uint64_t)(i + 1)), tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        shmesh_mesh *m, *lm = NULL;
        check(!shmesh_mesh_create(ctx, nd, names, sh + 1, order, &m), "random mesh %d", t);
        int lo[3] = {8, 8, 8}, hi[3] = {-1, -1, -1}, mine = 0;
        for (int p = 0; p < 8; p++) {
            if (shmesh_device_process(ctx, order[p]) != rank)
                continue;
            mine++;
            for (int d = nd - 1, rem = p; d >= 0; d--) {
                int c = rem % sh[1 + d];
                rem /= sh[1 + d];
                lo[d] = c < lo[d] ? c : lo[d];
                hi[d] = c > hi[d] ? c : hi[d];
            }
        }
        int volume = 1;
        for (int d = 0; d < nd; d++)
            volume *= hi[d] - lo[d] + 1;
        int rc = shmesh_mesh_local_mesh(m, &lm);
        check((rc == 0) == (volume == mine), "random mesh %d: local mesh %s, box %d for %d devices",
              t, rc ? "refused" : "made", volume, mine);
        if (!rc && volume == mine) {
            int want[8], n = 0;
            for (int p = 0; p < 8; p++)
                if (shmesh_device_process(ctx, order[p]) == rank)
                    want[n++] = order[p];
            check(shmesh_mesh_device_ids(lm, ids, 8) == n && !memcmp(ids, want, sizeof *ids * (size_t)n),
                  "random mesh %d: the local mesh's devices", t);
            for (int d = 0; d < nd; d++)
                check(shmesh_mesh_dim_size(lm, d) == hi[d] - lo[d] + 1, "random mesh %d: size", t);
        }
        formed += !rc;
        refused += rc != 0;
        shmesh_mesh_destroy(lm);
        shmesh_mesh_destroy(m);
    }
    printf("rank %d: random orders: %d local meshes, %d refused\n", rank, formed, refused);
    check(formed > 0 && refused > 0, "random orders give both outcomes");
}

/* pbroadcast in place (in and out the very same buffers) over the 8
 * devices of 2 ranks, 4 each, from a device of the other rank and from one
 * of this rank: every buffer ends as the source's input. */
static void local_broadcast_in_place(void)
{
    const char *names[] = {"x"};
    shmesh_mesh *m;
    check(!shmesh_mesh_create(ctx, 1, names, (int[]){8}, NULL, &m), "mesh x=8");
    int ids[4];
    shmesh_mesh_local_devices(m, ids, 4);
    for (int source = 2; source < 8; source += 3) {
        float buf[4][3];
        shmesh_array a[4];
        for (int l = 0; l < 4; l++) {
            for (int i = 0; i < 3; i++)
                buf[l][i] = (float)(10 * ids[l] + i);
            a[l] = (shmesh_array){.data = buf[l], .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {3}};
        }
        int rc = shmesh_pbroadcast(m, "x", source, a, a);
        bool same = !rc;
        for (int l = 0; l < 4 && same; l++)
            for (int i = 0; i < 3; i++)
                same &= buf[l][i] == (float)(10 * source + i);
        check(same, "pbroadcast in place from device %d: %s", source,
              rc ? shmesh_last_error(ctx) : "a buffer differs from the source's input");
    }
    if (!failed)
        printf("rank %d: pbroadcast in place over 2 x 4 devices ok\n", rank);
    shmesh_mesh_destroy(m);
}

static void local(void)
{
    /* Rank 0 holds devices 0-3, rank 1 devices 4-7. */
    static const int rows_want[] = {0, 1, 2, 3, 4, 5, 6, 7};
    local_case("rows", NULL, 2, 2, rows_want, NULL);
    /* Column y=0 holds 0-3, y=1 holds 4-7. */
    static const int cols[] = {0, 4, 1, 5, 2, 6, 3, 7}, cols_want[] = {0, 1, 2, 3, 4, 5, 6, 7};
    local_case("columns", cols, 4, 1, cols_want, NULL);
    /* Rank 0 at positions 0, 1, 2 and 5: the block x 0:3 holds device 4. */
    static const int ragged[] = {0, 1, 2, 4, 5, 3, 6, 7};
    local_case("not a block", ragged, 0, 0, NULL, "must form a contiguous sub-block");
    local_random();
    local_broadcast_in_place();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2 || shmesh_init(&ctx)) {
        fprintf(stderr, "usage: shmesh-test-mesh values|local (%s)\n", shmesh_last_error(NULL));
        return 2;
    }
    rank = shmesh_rank(ctx);
    if (!strcmp(argv[1], "values"))
        values();
    else if (!strcmp(argv[1], "local"))
        local();
    else
        return 2;
    printf("rank %d: %d checks%s\n", rank, checks, failed ? ", some failed" : " ok");
    return shmesh_finalize(ctx) || failed ? 1 : 0;
}
