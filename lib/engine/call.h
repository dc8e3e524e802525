/* Calls: one collective in flight, as an object that owns its parameters,
 * its scratch and its position in the protocol, and can be stepped.
 *
 * An op prepares a call (checks the arguments, resolves the group, fills the
 * flow and the description), then submits it: the call gets the next call
 * number and joins the context's queue.  call_progress() advances the queue
 * as far as it can without blocking; a call that cannot go on says what it
 * waits for (a rank's progress reaching a window), and call_wait() blocks on
 * exactly that, then progresses again.  The blocking API is submit + wait.
 *
 * Calls move through the segment in the order they were submitted (call
 * numbers are what ranks compare), one after the other: a later call starts
 * its first window as soon as the earlier one has posted its last, while
 * peers may still be reading it, so any number may be outstanding. */
#ifndef SHMESH_ENGINE_CALL_H
#define SHMESH_ENGINE_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/flow.h"
#include "memory/kind.h"
#include "engine/group.h"
#include "engine/desc.h"
#include "shmesh.h"

/* Returned by steps (and call_progress) that cannot go on without waiting. */
#define CALL_WAIT 1

enum call_state {
    CALL_PREPARED, /* arguments accepted, not submitted */
    CALL_QUEUED,   /* submitted, numbered */
    CALL_DONE,     /* finished: rc holds its result */
};

/* What a waiting call needs: rank `rank`'s progress to reach `target`.  For
 * a window the waiter first spins on the rank's slot tags, where a small
 * window's data arrives in the same cache-line transfer. */
struct wait_for {
    int rank;
    uint64_t target;
    bool window;
    bool spun; /* the spin and yield phases are over already */
    int64_t t0; /* SHMESH_DEBUG=waits: when the wait began */
    uint64_t t_trace; /* tracing: the same, in event-clock ticks */
    /* An eager receiver's wait for its source's entry: it also ends when
     * the source shows it waits as a receiver in the same window (a
     * mismatch, engine/window.h). */
    bool eager;
};

/* Per-call scratch, sized for every device of the job, recycled through the
 * context. */
#define BOUNCE_BYTES (64u << 10)
struct call_scratch {
    struct call_scratch *next;
    int members;                /* the per-member arrays' length */
    bool locals_written;        /* locals holds non-zeros (call_group) */
    int *ranks, *locals;        /* the group's members */
    int *dest, *src_of;         /* permutations */
    const void **srcs;
    struct seg_slot_hdr **hdrs; /* members' buffers of the last window */
    uint64_t *xoff_to, *xlen_to, *xoff_from, *xlen_from, *xtotal; /* transfer plans */
    unsigned char **zin, **zout; /* members' buffers mapped here (zero copy) */
    uint64_t *cin, *cout;        /* members' buffer addresses (single copy) */
    uint64_t *hin, *hout;        /* members' published heap offsets (zero copy) */
    uint32_t *flags;             /* members' handshake flags (enum hs_flag) */
    int32_t *status;             /* members' published status: errno (or 0), the rank it
                                    could not read; two entries each */
    unsigned char *bounce;       /* BOUNCE_BYTES of private scratch */
};

/* An exchange in progress (engine/exchange.c). */
struct xrun {
    const struct transfers *st;
    uint64_t window, nwin, w; /* payload per window, windows, the current one */
    int phase;
    int from; /* an eager exchange's source (engine/window.h); else -1 */
    bool control; /* its windows go through the control slots (a few bytes of control) */
};

struct path;

struct call {
    /* Set by call_init. */
    shmesh_ctx *c;
    enum call_op op;
    const char *name; /* "shmesh_psum", for messages */
    struct call_scratch *s;

    /* Cleared by call_init (from op_state to the end of this block). */
    /* The op's own state, and what it does between exchanges (ragged: check
     * every slice, then move the rows): 0 when the call is complete, 1 when
     * it set up another exchange, or an error. */
    void *op_state;
    int (*then)(struct call *k);
    void (*op_free)(struct call *k);
    /* Several devices per rank (front/local_devices.c,
     * front/devices_transfers.c), for an op whose members publish
     * parameters before data moves (ragged: the offsets and sizes): the
     * bytes of parameters this device publishes to its group, and this
     * member's part of the call.  With `write` false, local() checks the
     * call from every member's parameters (k->s->zin[q]) and, when it
     * passes, sets f.transfers to the data's member-to-member transfers;
     * then with `write` true it writes the output from each member's input
     * (k->s->zin[q]; NULL: a member whose data the transfers brought).
     * NULL: the input is published and paths/peer.c computes (peer_local). */
    uint64_t pub_bytes;
    void (*pub_pack)(const struct call *k, void *dst);
    int (*local)(struct call *k, bool write);
    /* The flow's buffers were replaced (host staging of device buffers):
     * an op that keeps its own copies of the arrays takes the new ones. */
    void (*rebind)(struct call *k);
    /* FLOW_TRANSFERS on device buffers (paths/device_ipc.c): copies what
     * member `from` sends this member out of from's input, mapped here at
     * `src`, into this member's output, with copy() (0 or its error). */
    int (*dev_rows)(struct call *k, int from, const unsigned char *src,
                    int (*copy)(void *arg, void *dst, const void *src, uint64_t n), void *arg);
    /* The chosen path's own state for the call in flight (host staging's
     * copies, paths/device_staged.c; the device path's publications,
     * paths/device_ipc.c), and how the path ends it: at the call's end, with
     * the call's result (0 or an error), giving the result to report; when a
     * call is released unfinished, with SHMESH_ERR_ABORTED.  It clears both. */
    void *path_state;
    int (*path_end)(struct call *k, int rc);
    /* The group spans nodes (net/job.h): its ranks are the job's, and
     * paths/net.c alone carries the call. */
    bool net;
    /* Position in the protocol. */
    enum call_state state;
    int rc;
    uint32_t window;     /* the next window's index within the call */
    bool desc_pending;   /* the next window is the call's first: it carries d */
    bool hashed;         /* `hash` is d's already (from a plan, front/plan.h, or computed) */
    bool check_hash;     /* the window posted last carried d: compare members' */
    bool handshaken;     /* members' buffers are published (zero/single copy) */
    int at;              /* the member (or reader) a resumed wait goes on from */
    int stage;           /* the current step's own position */
    uint64_t pos;
    /* A window this member posted and has not collected yet (the handshake
     * of a member that knew its path alone, engine/path.c): the exchange
     * collects it before its own first window, checks its hash as a call's
     * first window's, hands each member's `late_st->unit` bytes to
     * late_st->recv, then runs late_check (engine/exchange.c). */
    const struct transfers *late_st;
    uint64_t late_tag;
    int (*late_check)(struct call *k);
    const struct path *path;
    int32_t err, err_peer; /* a peer path's failed read: errno (data, published to the
                              group; never returned), whose buffer */
    struct call *next;   /* in the context's queue */

    uint64_t size;       /* flow_size(), once the path is being chosen (0 before: what
                            the status counts for a call that moved nothing) */
    /* Traffic between processes (engine/traffic.h): bytes of this member's data
     * that other processes took (they read it, or this one wrote it into
     * theirs), and bytes of theirs it took.  Exchanges of the engine's own
     * (handshakes, status windows) are not counted. */
    uint64_t sent, received;

    /* Set before they are read. */
    struct group g;                 /* by the op */
    enum mem_kind in_kind, out_kind; /* call_buffers */
    uint64_t in_heap, out_heap;     /* offsets in the segment, when in the heap */
    uint64_t seq;        /* call number, from submission */
    uint64_t tag;        /* the window posted last */
    uint64_t hash;       /* of the description, with the context's thresholds */
    unsigned candidates; /* bit i: entry i of the path table is a candidate */
    struct xrun xr;
    struct wait_for wait;
    int64_t t_start;     /* SHMESH_DEBUG: when it was submitted */
    uint64_t t_enter;    /* tracing: the same, in event-clock ticks */

    /* Last, the two large parts: the description (call_desc_clear: it is
     * hashed and published) and the flow (filled by the op's flow_init). */
    struct call_desc d;
    struct flow f;
};

/* Starts a call of `op` on context c: scratch from the context's pool.  The
 * op then fills group, flow and description.  Fails only for memory. */
int call_init(struct call *k, shmesh_ctx *c, enum call_op op);
/* The group: n members, this device at `me`, their device ids (copied as
 * ranks and local devices; `per` devices per rank: the mesh's).  In a job
 * of several nodes the ids are the job's: a group on this node gets the
 * node's ranks, one that spans nodes the job's, and k->net. */
void call_group(struct call *k, int n, int me, const int *ids, int per);
/* The group a call of one device per rank had (k->g.ranks, k->net), given
 * again as it was (front/plan.h). */
void call_group_kept(struct call *k, int n, int me, const int *ranks, bool net);
/* The world: every rank, in rank order (the job's, k->net, in a job of
 * several nodes). */
void call_group_world(struct call *k);
/* call_init for a world-wide step with no data (barrier, finalize, mesh
 * creation, callbacks: op says which): the world as the group, an empty
 * flow; the caller fills the description. */
int call_world_step(struct call *k, shmesh_ctx *c, enum call_op op);
/* Classifies the flow's arrays (host, shared heap, device) and refuses
 * buffers no path takes. */
int call_buffers(struct call *k);

/* Whether the call's buffers are device memory (call_buffers; the same on
 * every member: it is in the call's hash). */
static inline bool call_on_device(const struct call *k)
{
    return k->d.in_device | k->d.out_device;
}

/* Numbers and queues the call (it counts from now on: refused calls are not
 * made, so they must not shift the call numbers ranks compare). */
int call_submit(struct call *k);
/* Advances the context's queue without blocking: 0 when every submitted
 * call is done, CALL_WAIT when the first unfinished one waits. */
int call_progress(shmesh_ctx *c);
/* Blocks until k is done; its result. */
int call_wait(struct call *k);
/* Frees the context's pool of scratch and its spare dispatch block (when
 * the context goes). */
void call_scratch_free_all(shmesh_ctx *c);
/* Gives the scratch back (and the op's state); safe to repeat. */
void call_release(struct call *k);
/* Every call's end: when rc is 0, submit and wait; then release.  With a
 * dispatcher (engine/dispatch.h) the call is its work instead, waited for. */
int call_finish(struct call *k, int rc);
/* The same, for the front door (front/front.c): with `async` not NULL (an
 * `_async` form), the call is dispatched to the dispatcher (started if need
 * be) and its token written to *async, without waiting; run at once
 * (*async untouched) when this thread is executing the context's work. */
int call_finish_async(struct call *k, int rc, shmesh_token *async);
/* For an `_async` form: a call to prepare where the dispatcher keeps it, so
 * that dispatching it copies nothing (a block of c's), or NULL (none to be
 * had: prepare one of the caller's).  Such a call ends with
 * call_finish_block, as call_finish_async ends one of the caller's. */
struct call *call_block_take(shmesh_ctx *c);
int call_finish_block(struct call *k, int rc, shmesh_token *async);

/* Kept calls (front/plan.h): a call run again in place.  The second and
 * later runs of a kept call skip its preparation, the choice of its path
 * and the plan of its exchange, and do what its first run did.  A kept
 * call is a block of its own, dispatched as it is (an `_async` form, or a
 * blocking call behind queued work) or run at once; the thread that runs
 * it gives it back through its state. */
enum call_kept_state {
    KEPT_IDLE,   /* ready for call_again */
    KEPT_BUSY,   /* in flight */
    KEPT_SPENT,  /* no call in it (new, or released after an error): prepare one */
    KEPT_NEVER,  /* released: it ran, but its path runs no call again (engine/path.h) */
    KEPT_ORPHAN, /* given up in flight: its runner frees it */
};
/* A block for a kept call (KEPT_SPENT), or NULL (out of memory). */
struct call *call_kept_new(void);
/* Kept call k's state (acquire: a state given back shows the run's writes). */
enum call_kept_state call_kept_state(struct call *k);
/* Kept call k given up: freed now, or by its runner when in flight. */
void call_kept_free(struct call *k);
/* call_again: k cannot run again as it stands (its buffers are of other
 * kinds now). */
#define CALL_NOT_AGAIN 2
/* Kept call k's end, as call_finish_async ends a call (rc: its preparation's
 * result): run, or dispatched with `async`'s token or waited for.  Its run
 * leaves it KEPT_IDLE when it went without error in one exchange on a path
 * that can run it again, KEPT_NEVER when it went without error but cannot
 * be run again, else KEPT_SPENT. */
int call_finish_kept(struct call *k, int rc, shmesh_token *async);
/* Kept call k (KEPT_IDLE) entered again, with new buffers of its arrays'
 * shapes: 0, and k is ready for call_finish_kept; CALL_NOT_AGAIN (nothing
 * done: give k up, prepare the call apart); or the context's error
 * (ctx_enter's, as call_init returns it), and nothing done. */
int call_again(struct call *k, void *in, void *out);

#endif
