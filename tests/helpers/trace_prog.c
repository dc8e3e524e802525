/* Collectives for shmesh-run --trace's tests (check_trace.py), through the
 * public API: on a 2x2 mesh of 4 ranks, ROUNDS rounds of psum over both
 * axes, all_gather, ppermute (a ring), psum over "y" alone (groups of two)
 * and a barrier.  Says "trace_prog: rank R calls N" on stdout, N counting
 * those calls only (the trace also holds the library's own: the mesh's
 * creation, finalize).
 *
 *   trace_prog ok [ROUNDS]    (default 5)
 *   trace_prog slow [ROUNDS]  the same, rank 2 starting each round 100 us late
 *   trace_prog repeat [ROUNDS]  rounds of 6 like psums over both axes, an
 *                             all_gather and a barrier (runs of like calls:
 *                             repeat records in the ring)
 *   trace_prog die [ROUNDS]   the rounds, then rank 2 enters one more psum
 *                             that the others do not enter (they sleep until
 *                             the launcher stops them), and a thread of its
 *                             exits 3 once it blocks there: its trace ends
 *                             inside that call (unfinished). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmesh.h"

static int check(int rc, const char *what, int rank)
{
    if (rc) {
        fprintf(stderr, "trace_prog: rank %d: %s failed: %s (%s)\n", rank, what,
                shmesh_error_name(rc), shmesh_last_error(NULL));
        exit(1);
    }
    return 0;
}

static shmesh_array vec(float *data, int64_t n)
{
    shmesh_array a = {.data = data, .dtype = SHMESH_FLOAT32, .ndim = 1, .bdim = SHMESH_NOT_MAPPED};
    a.shape[0] = n;
    return a;
}

/* The state letter of this process's main thread ('R', 'S', ...). */
static char main_thread_state(void)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)getpid());
    FILE *f = fopen(path, "re");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

/* Exits 3 once the main thread sleeps: blocked in its psum, for the others
 * never come (60 s at most). */
static void *die_soon(void *arg)
{
    (void)arg;
    for (int i = 0; i < 60000 && main_thread_state() != 'S'; i++)
        usleep(1000);
    _exit(3);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    shmesh_ctx *ctx;
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "trace_prog: shmesh_init failed: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    int rank = shmesh_rank(ctx), world = shmesh_world_size(ctx);
    if (world != 4) {
        fprintf(stderr, "trace_prog: expected 4 ranks (a 2x2 mesh), found %d\n", world);
        return 1;
    }
    const char *names[] = {"x", "y"};
    int sizes[] = {2, 2};
    shmesh_mesh *mesh;
    check(shmesh_mesh_create(ctx, 2, names, sizes, NULL, &mesh), "shmesh_mesh_create", rank);

    enum { N = 1024 };
    static float in[N], out[4 * N];
    for (int i = 0; i < N; i++)
        in[i] = (float)(rank + i);
    shmesh_array a = vec(in, N), o = vec(out, N);
    shmesh_array gathered = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 2,
                             .bdim = SHMESH_NOT_MAPPED};
    gathered.shape[0] = 4;
    gathered.shape[1] = N;
    const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
    int calls = 0;
    for (int r = 0; r < rounds; r++) {
        /* "slow": rank 2 computes 100 us longer before each round (a
         * straggler, for the picture in docs/profiling.md). */
        if (!strcmp(mode, "slow") && rank == 2)
            usleep(100);
        if (!strcmp(mode, "repeat")) {
            for (int i = 0; i < 6; i++)
                check(shmesh_psum(mesh, "x,y", NULL, &a, &o), "psum", rank);
            check(shmesh_all_gather(mesh, "x,y", NULL, 0, false, &a, &gathered), "all_gather", rank);
            check(shmesh_barrier(ctx), "barrier", rank);
            calls += 8;
            continue;
        }
        check(shmesh_psum(mesh, "x,y", NULL, &a, &o), "psum", rank);
        check(shmesh_all_gather(mesh, "x,y", NULL, 0, false, &a, &gathered), "all_gather", rank);
        check(shmesh_ppermute(mesh, "x,y", ring, 4, &a, &o), "ppermute", rank);
        check(shmesh_psum(mesh, "y", NULL, &a, &o), "psum over y", rank);
        check(shmesh_barrier(ctx), "barrier", rank);
        calls += 5;
    }
    printf("trace_prog: rank %d calls %d\n", rank, calls);
    fflush(stdout);
    if (!strcmp(mode, "die")) {
        if (rank == 2) {
            pthread_t t;
            pthread_create(&t, NULL, die_soon, NULL);
        } else {
            sleep(60); /* the launcher stops us once rank 2 has died */
        }
        /* Rank 2 dies in it; the others get an error or are stopped. */
        shmesh_psum(mesh, "x,y", NULL, &a, &o);
        shmesh_mesh_destroy(mesh);
        shmesh_finalize(ctx); /* fails after the death: it frees the context all the same */
        return 1;
    }
    shmesh_mesh_destroy(mesh);
    check(shmesh_finalize(ctx), "shmesh_finalize", rank);
    return 0;
}
