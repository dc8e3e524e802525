/* Paths: how a call's data moves.  One table (paths/table.c), one choice
 * per exchange (engine/path.c).
 *
 * Each path is an entry: the memory kinds it takes, whether it is a
 * candidate for the call (from what every member knows alike: the flow's
 * sizes and the thresholds, which are hashed into every call), whether it
 * needs every member's buffers published first (a handshake window), and
 * then whether it is eligible given what the members published.  The first
 * entry of the table that is a candidate and eligible runs; every member
 * decides from the same facts, so every member takes the same path.
 *
 *   zero-copy    every member's buffers in the shared heap: read (and for
 *                reductions write) them in place          paths/zero_copy.c
 *   single-copy  process_vm_readv out of peers' private memory, where every
 *                member may                               paths/single_copy.c
 *   rsag         large whole-array reductions: reduce-scatter then
 *                all-gather through the slots             paths/rsag.c
 *   staged       everything else: transfers through the slots paths/staged.c
 *
 * Device buffers take the device paths, first in the table: the device
 * path proper, which reads peers' device buffers through IPC handles, and
 * host staging, which takes every device call the device path does not:
 *
 *   device-ipc     every member's buffers device memory   paths/device_ipc.c
 *   device-staged  the device buffers copied to host memory, the call run
 *                  on the host paths, the output copied back
 *                                                         paths/device_staged.c
 *
 * A call whose group spans nodes (a job of several nodes, net/job.h) takes
 * the one path across nodes, after host staging for device buffers:
 *
 *   net            the transfers over MPI, through the network plugin
 *                                                         paths/net.c
 *
 * Which of the two a device call takes is decided here alone, from facts
 * hashed into every call (its buffers' kinds, flow, op and dtype, the
 * group's size), alike on every member.  Staging starts at the call's first
 * exchange; from then on its buffers are host memory, and its exchanges
 * choose among the host paths.
 *
 * A new path is one line of the table (and its file, with its header);
 * the ops and the engine are not touched. */
#ifndef SHMESH_ENGINE_PATH_H
#define SHMESH_ENGINE_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/call.h"
#include "shm/layout.h"

struct path {
    const char *name;
    unsigned kinds; /* enum mem_kind bits it takes, on every member */
    bool handshake; /* eligible() reads what the members published */
    /* Peers read or write the members' own buffers in place (not copies in
     * the segment's slots): a member that leaves such a call early tells
     * the job first (engine/window.c, core/fail.h fail_left_in_place). */
    bool in_place;
    /* It moves the call's device arrays only: an exchange of the op's own
     * host data (flow.host_data: ragged's offsets) of a call it takes goes
     * to the host paths. */
    bool arrays_only;
    /* Its step readies the call for the host paths, then runs the exchange
     * on them (path_on_host): the path it hands over to is the one named. */
    bool hands_over;
    /* It takes the calls whose group spans nodes (k->net), and no other
     * path does (but host staging, which hands them over to it). */
    bool across_nodes;
    /* From k->size (the flow's size), the flow's kind, in_bytes, whether it
     * reduces whole arrays, the group's size and the thresholds only (the
     * context remembers the last answer: engine/path.c). */
    bool (*candidate)(const struct call *k);
    bool (*eligible)(const struct call *k);
    /* NULL, or for a path with a handshake: whether this member's own
     * buffers already make it not eligible, whatever the others publish
     * (zero copy: an input outside the heap). */
    bool (*ruled_out)(const struct call *k);
    /* Moves the call's data: 0 when done, CALL_WAIT, or an error.  Starts
     * with k->stage == 0 and k->pos == 0. */
    int (*step)(struct call *k);
    /* NULL, or: a finished call's exchange (one, chosen without a
     * handshake) made ready to run again on this path from its start, its
     * plan kept (engine/call.h: call_again). */
    void (*replay)(struct call *k);
};

/* The table (paths/table.c): path_count entries in the order they are
 * tried; path_last takes every host call (and device-staged every device
 * call device-ipc does not). */
extern const struct path *const path_table[];
extern const size_t path_count;
extern const struct path *const path_last;

/* What the handshake publishes about each member (k->s->flags). */
enum hs_flag {
    HS_CMA = 1,      /* it may read every peer's memory */
    HS_IN_HEAP = 2,  /* its input lies in the shared heap */
    HS_OUT_HEAP = 4, /* its output too */
};

/* Candidates of the path table depend on the flow's kind, its sizes and the
 * group's size (and the context's thresholds, fixed): calls mostly repeat,
 * so the context keeps the last answer (struct shmesh_ctx). */
struct path_memo {
    uint64_t size, in_bytes;
    int n;
    int kind;
    bool allreduce, handshake, valid;
    unsigned candidates;
};

/* The memory kinds some path takes (the context keeps them). */
unsigned path_kinds(void);
/* Runs the call's current exchange: the handshake if a candidate needs it,
 * the choice, then the chosen path. */
int path_step(struct call *k);
/* The call's next exchange chooses its path again (a `then` step set up
 * another exchange, or the call now has host buffers). */
static inline void path_again(struct call *k)
{
    k->path = NULL;
    k->handshaken = false;
    k->stage = 0;
    k->pos = 0;
}
/* From a path that hands over (host staging, once the call's buffers are
 * host memory): the current exchange, chosen again among the host paths and
 * run there. */
int path_on_host(struct call *k);
/* SHMESH_DEBUG=paths: the line for the path of k (chosen, or run again). */
void path_debug(const struct call *k);

/* The path table's names, by index, into names[max] (for the trace's
 * readers), and a path's index there (SEG_TEV_NO_PATH for none). */
void path_names(char (*names)[SEG_TRACE_NAME], int max);
unsigned path_index(const struct path *p);

#endif
