/* shmesh-test-eager: small pbroadcasts go through eager windows, whose
 * source runs up to 64 calls ahead of its receivers (lib/engine/window.h).
 * Under shmesh-run -n 4, a line "i" of 4 and a grid x=2, y=2.  Modes:
 *   rotate     600 rounds of pbroadcasts whose source, group and size change
 *              from call to call (a rank sends in one call and receives in
 *              the call that reuses its entry), between psums and a larger
 *              pbroadcast that meets its group: every result checked.
 *              Prints "rank R: rotate ok"; exit 0, or 1 after "FAILED".
 *   mismatch-sources
 *              ranks 0 and 1 broadcast from member 0, ranks 2 and 3 from
 *              member 2: each receiver agrees with the source it reads, so
 *              only the sources can find the mismatch, after the call.
 *              Then N more agreeing pbroadcasts (argv[2], 0: none) and a
 *              barrier.  Prints "rank R: pbroadcast -> ERR", "rank R: then
 *              K more ok, next -> ERR: message", "rank R: then barrier ->
 *              ERR"; exit 0.
 *   mismatch-receivers
 *              rank r broadcasts from member (r + 1) mod 4: every rank takes
 *              its source for a receiver's source, so all wait as receivers
 *              and no entry ever comes; each must find the mismatch.  Prints
 *              "rank R: pbroadcast -> ERR: message"; exit 0.
 *   mismatch-shape
 *              every rank broadcasts from member 0, rank 3 with arrays of 3
 *              elements, the others of 4: rank 3, a receiver, must refuse
 *              the source's entry.  Prints "rank R: pbroadcast -> ERR:
 *              message", "rank R: output untouched|written" when it failed,
 *              and "rank R: then barrier -> ERR: message"; exit 0.
 *   dead-receiver
 *              rank 1 receives 5 pbroadcasts and exits; rank 0 broadcasts
 *              on, up to 10000 calls: it must stop with an error.  Prints
 *              "rank R: stopped after K calls -> ERR: message"; exit 0. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmesh.h"
#include "checks.h"

static shmesh_mesh *line, *grid; /* start_four's */
static int failed;

static shmesh_array arr(void *data, shmesh_dtype dt, int64_t n)
{
    return (shmesh_array){.data = data, .dtype = dt, .ndim = 1, .shape = {n},
                          .bdim = SHMESH_NOT_MAPPED};
}

/* Rank r sits at x = r / 2, y = r % 2 of the grid (row-major ids): the rank of
 * member m of this rank's group along axes. */
static int rank_of(const char *axes, int m)
{
    if (!strcmp(axes, "i"))
        return m;
    return !strcmp(axes, "x") ? m * 2 + rank % 2 : (rank / 2) * 2 + m;
}

static int32_t value(int r, int round, int j) { return r * 1000003 + round * 17 + j; }

/* One pbroadcast of n int32 over axes from member src, checked. */
static void bcast(const char *axes, int src, int64_t n, int round)
{
    static int32_t in[1024], out[1024];
    for (int64_t j = 0; j < n; j++) {
        in[j] = value(rank, round, (int)j);
        out[j] = -1;
    }
    shmesh_mesh *m = !strcmp(axes, "i") ? line : grid;
    shmesh_array a = arr(in, SHMESH_INT32, n), o = arr(out, SHMESH_INT32, n);
    int rc = shmesh_pbroadcast(m, axes, src, &a, &o);
    if (rc) {
        printf("rank %d: FAILED round %d pbroadcast \"%s\" from %d: %s\n", rank, round, axes, src,
               shmesh_last_error(ctx));
        exit(1);
    }
    int from = rank_of(axes, src);
    for (int64_t j = 0; j < n; j++)
        if (out[j] != value(from, round, (int)j)) {
            printf("rank %d: FAILED round %d pbroadcast \"%s\" from member %d (rank %d), "
                   "%lld elements: [%lld] = %d, expected %d\n",
                   rank, round, axes, src, from, (long long)n, (long long)j, out[j],
                   value(from, round, (int)j));
            failed = 1;
            return;
        }
}

static int mode_rotate(void)
{
    static const char *const axes[] = {"i", "x", "y"};
    for (int round = 0; round < 600 && !failed; round++) {
        /* Periods 3, 5 and 7 against 64 entries: sources and groups meet
         * every entry in every role. */
        const char *ax = axes[round % 3];
        int size = !strcmp(ax, "i") ? 4 : 2;
        int src = (round / 3 + round / 5) % size;
        int64_t n = 1 + (round % 7) * 85; /* 4 to 2044 bytes */
        bcast(ax, src, n, round);
        if (round % 11 == 0) {
            int32_t v = rank + 1, s = 0;
            shmesh_array a = arr(&v, SHMESH_INT32, 1), o = arr(&s, SHMESH_INT32, 1);
            if (shmesh_psum(line, "i", NULL, &a, &o) || s != 10) {
                printf("rank %d: FAILED round %d psum gave %d: %s\n", rank, round, s,
                       shmesh_last_error(ctx));
                return 1;
            }
        }
        if (round % 13 == 0)
            bcast("i", round % 4, 1000, round); /* 4000 bytes: meets everyone */
    }
    if (!failed)
        printf("rank %d: rotate ok\n", rank);
    return failed;
}

static int mode_mismatch_sources(int more)
{
    int32_t v[4] = {rank, rank, rank, rank}, o[4];
    shmesh_array a = arr(v, SHMESH_INT32, 4), b = arr(o, SHMESH_INT32, 4);
    int rc = shmesh_pbroadcast(line, "i", rank < 2 ? 0 : 2, &a, &b);
    printf("rank %d: pbroadcast -> %s\n", rank, shmesh_error_name(rc));
    int k = 0;
    for (; !rc && k < more; k++)
        rc = shmesh_pbroadcast(line, "i", 1, &a, &b);
    if (more)
        printf("rank %d: then %d more ok, next -> %s: %s\n", rank, rc ? k - 1 : k,
               shmesh_error_name(rc), rc ? shmesh_last_error(ctx) : "");
    int again = shmesh_barrier(ctx);
    printf("rank %d: then barrier -> %s: %s\n", rank, shmesh_error_name(again),
           again ? shmesh_last_error(ctx) : "");
    exit(0);
}

static int mode_mismatch_receivers(void)
{
    int32_t v[4] = {rank, rank, rank, rank}, o[4];
    shmesh_array a = arr(v, SHMESH_INT32, 4), b = arr(o, SHMESH_INT32, 4);
    int rc = shmesh_pbroadcast(line, "i", (rank + 1) % 4, &a, &b);
    printf("rank %d: pbroadcast -> %s: %s\n", rank, shmesh_error_name(rc),
           rc ? shmesh_last_error(ctx) : "");
    exit(0);
}

static int mode_mismatch_shape(void)
{
    int32_t v[4] = {rank, rank, rank, rank}, o[4] = {-1, -1, -1, -1};
    int64_t n = rank == 3 ? 3 : 4;
    shmesh_array a = arr(v, SHMESH_INT32, n), b = arr(o, SHMESH_INT32, n);
    int rc = shmesh_pbroadcast(line, "i", 0, &a, &b);
    printf("rank %d: pbroadcast -> %s: %s\n", rank, shmesh_error_name(rc),
           rc ? shmesh_last_error(ctx) : "");
    if (rc)
        printf("rank %d: output %s\n", rank,
               o[0] == -1 && o[1] == -1 && o[2] == -1 && o[3] == -1 ? "untouched" : "written");
    int again = shmesh_barrier(ctx);
    printf("rank %d: then barrier -> %s: %s\n", rank, shmesh_error_name(again),
           again ? shmesh_last_error(ctx) : "");
    exit(0);
}

static int mode_dead_receiver(void)
{
    int32_t v[2] = {rank, rank}, o[2];
    shmesh_array a = arr(v, SHMESH_INT32, 2), b = arr(o, SHMESH_INT32, 2);
    int rc = 0, k = 0;
    for (; k < 10000; k++) {
        if (rank == 1 && k == 5)
            _exit(3); /* gone, without a word */
        if ((rc = shmesh_pbroadcast(line, "i", 0, &a, &b)))
            break;
    }
    printf("rank %d: stopped after %d calls -> %s: %s\n", rank, k, shmesh_error_name(rc),
           rc ? shmesh_last_error(ctx) : "");
    exit(0);
}

int main(int argc, char **argv)
{
    start_four(argc, argv, &line, &grid);
    int rc = 2;
    if (!strcmp(argv[1], "rotate"))
        rc = mode_rotate();
    else if (!strcmp(argv[1], "mismatch-sources"))
        rc = mode_mismatch_sources(argc > 2 ? atoi(argv[2]) : 0);
    else if (!strcmp(argv[1], "mismatch-receivers"))
        rc = mode_mismatch_receivers();
    else if (!strcmp(argv[1], "mismatch-shape"))
        rc = mode_mismatch_shape();
    else if (!strcmp(argv[1], "dead-receiver"))
        rc = mode_dead_receiver();
    shmesh_mesh_destroy(line);
    shmesh_mesh_destroy(grid);
    if (rc)
        return rc;
    return shmesh_finalize(ctx) ? 4 : 0;
}
