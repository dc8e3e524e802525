/* The board: counters every rank of an effects program reads and writes, in
 * the job's shared heap (shardable, ordered-all, peer-death, timeout).
 * Rank 0 allocates it and sends its offset in the segment (found through
 * /proc/self/maps: the segment is one shared file mapping, and a page's file
 * offset is the same in every process); each rank finds that offset in its
 * own mapping of the same file.  Included once, by a program's .c file,
 * instead of effects_common.h. */
#ifndef SHMESH_TESTS_EFFECTS_BOARD_H
#define SHMESH_TESTS_EFFECTS_BOARD_H

#include "effects_common.h"

#define BOARD_LOG 256
#define MAXPOINTS 1024

struct board {
    _Atomic int64_t started[MAXPOINTS];  /* per program point: parts that began */
    _Atomic int64_t finished[MAXPOINTS]; /* per program point: parts that ended */
    _Atomic int64_t violations;
    _Atomic int64_t runs;       /* how many times the placed callback ran */
    _Atomic int64_t ran_rank;   /* where */
    _Atomic int64_t ran_device; /* with which device argument */
    _Atomic int64_t flag;
    _Atomic int64_t kill_ns; /* CLOCK_MONOTONIC when rank 2 killed itself */
    _Atomic int64_t ready;   /* ranks that dispatched what they then wait for */
    _Atomic int64_t log_n;
    int64_t log[BOARD_LOG];
};

static struct board *board;

struct vma {
    uintptr_t lo, hi;
    uint64_t pgoff, ino;
    unsigned maj, min;
};

/* The mapping holding p (want_p), or the mapping of file (maj, min, ino)
 * holding file offset off. */
static inline bool find_vma(const void *p, const struct vma *file, uint64_t off, struct vma *out)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        struct vma v;
        unsigned long lo, hi;
        unsigned long long pgoff, ino;
        if (sscanf(line, "%lx-%lx %*s %llx %x:%x %llu", &lo, &hi, &pgoff, &v.maj, &v.min, &ino) !=
            6)
            continue;
        v.lo = lo;
        v.hi = hi;
        v.pgoff = pgoff;
        v.ino = ino;
        if (p)
            found = (uintptr_t)p >= v.lo && (uintptr_t)p < v.hi;
        else
            found = v.ino == file->ino && v.maj == file->maj && v.min == file->min &&
                    off >= v.pgoff && off < v.pgoff + (v.hi - v.lo);
        if (found)
            *out = v;
    }
    fclose(f);
    return found;
}

static inline void board_setup(void)
{
    void *probe = shmesh_alloc(ctx, 64);
    if (!probe) {
        printf("rank %d: FAIL: shmesh_alloc(64): %s\n", rank, why());
        exit(3);
    }
    struct vma mine;
    int64_t off = 0;
    if (world > 1 && !find_vma(probe, NULL, 0, &mine)) {
        printf("rank %d: FAIL: heap block %p is in no mapping of /proc/self/maps\n", rank, probe);
        exit(3);
    }
    if (rank == 0) {
        board = shmesh_alloc(ctx, sizeof *board);
        if (!board) {
            printf("rank 0: FAIL: shmesh_alloc(%zu): %s\n", sizeof *board, why());
            exit(3);
        }
        memset(board, 0, sizeof *board);
        if (world > 1) {
            struct vma v;
            if (!find_vma(board, NULL, 0, &v) || v.ino != mine.ino ||
                (uintptr_t)board + sizeof *board > v.hi) {
                printf("rank 0: FAIL: the board is not in the segment's mapping\n");
                exit(3);
            }
            off = (int64_t)((uintptr_t)board - v.lo + v.pgoff);
        }
    }
    MUST(shmesh_world_sum(ctx, &off, 1, SHMESH_INT64));
    if (rank != 0) {
        struct vma v;
        if (!find_vma(NULL, &mine, (uint64_t)off, &v)) {
            printf("rank %d: FAIL: segment offset %" PRId64 " is not mapped here\n", rank, off);
            exit(3);
        }
        board = (struct board *)(v.lo + ((uint64_t)off - v.pgoff));
    }
    shmesh_free(ctx, probe);
}

/* Rank 0 clears the board; everyone sees it cleared. */
static inline void board_reset(void)
{
    if (rank == 0)
        memset(board, 0, sizeof *board);
    MUST(shmesh_barrier(ctx));
}


#endif
