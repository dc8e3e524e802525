/* The context: one rank's membership of a job. */
#ifndef SHMESH_CORE_CONTEXT_H
#define SHMESH_CORE_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "memory/heap.h"
#include "shm/segment.h"
#include "shm/wait.h"
#include "shmesh.h"

#define BOUNCE_BYTES (64u << 10)

struct shmesh_ctx {
    int rank;
    int world;
    struct seg *seg;
    struct notify *notify;
    struct seg_waiter waiter;
    struct seg_ctrl *me;
    uint64_t calls;   /* collective calls begun; the current one's number */
    uint32_t window;  /* the next window's index within the current call */
    /* This rank's two slot buffers: which window each holds and which ranks
     * may still be reading it (they must move past it before it is reused). */
    int next_buf;
    uint64_t buf_tag[2];
    int *buf_readers[2];
    int buf_nreaders[2];
    const char *op;   /* the public function being run, for messages */
    int poison;       /* 0, or the error every later call returns */
    int next_mesh_id;
    struct heap heap;
    /* Scratch, world entries each, in one allocation. */
    void *scratch;
    int *all_ranks;   /* 0..world-1 */
    const void **srcs;
    struct seg_slot_hdr **hdrs;
    uint64_t *xoff_to, *xlen_to, *xoff_from, *xlen_from, *xtotal;
    uint64_t *seen;   /* the latest window seen posted by each rank */
    unsigned char **zin, **zout; /* members' buffers, for zero-copy */
    uint64_t *cin, *cout;        /* members' buffer addresses, for single copy */
    bool *peer_cma;              /* members that may read every peer's memory */
    bool cma_ok;                 /* this rank may */
    uint64_t probe_word;
    uint64_t cma_min;            /* SHMESH_CMA_MIN */
    uint64_t tuning;             /* hash of the thresholds: ranks must agree */
    unsigned char *bounce;       /* BOUNCE_BYTES of private scratch */
    uint64_t zc_min;  /* the smallest call that may go zero-copy (SHMESH_ZC_MIN) */
    uint64_t rsag_min; /* the smallest staged reduction that takes rsag (SHMESH_RSAG_MIN) */
    int *perm_dest, *perm_src;
    char err[CTX_ERR_MAX];
};

#endif
