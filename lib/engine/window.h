/* Windows: the steps every exchange is made of.
 *
 * In a window each member writes up to one payload into its own slot
 * buffer, posts it (its progress becomes the window's tag), and reads what
 * it needs from the other members' buffers of the same window.  Windows are
 * named by tag = (call << 32) | index: ranks agree on call numbers, and
 * within a call the members of a group agree on the number of windows, so
 * groups that never meet may run different numbers of windows without
 * confusing anyone.  A slot buffer is reused two windows later, and only
 * once every rank that could read it (that window's group) has posted a
 * later window: a rank reads a window's data before it posts its next one.
 *
 * Eager windows carry a call that is one small window of one member's data
 * for all (a pbroadcast of up to EAGER_PAYLOAD bytes), so that its source
 * need not meet its receivers: each member has SEG_EAGER_ENTRIES of them,
 * and the call numbered s uses entry s mod SEG_EAGER_ENTRIES of each.
 *   - The source writes its entry and goes on: it may run up to
 *     SEG_EAGER_ENTRIES calls ahead of its receivers.
 *   - A receiver waits for the source's entry, checks its hash against its
 *     own call's and copies the data; then it posts its receipt (its hash,
 *     no data; four receipts share a cache line): posted, it has read the
 *     source's entry.
 *   - The source checks the receivers' receipts (posted, same hash) before
 *     any window of a regular exchange and before any window
 *     SEG_EAGER_ENTRIES - 1 calls later: a mismatch it alone could see (two
 *     members that each take themselves for the source) is found then, at
 *     the latest at shmesh_finalize.
 *   - A receiver reuses its receipt once that call's source has posted a
 *     window SEG_EAGER_ENTRIES - 1 calls later (it has checked the receipt).
 *   - A receiver that has to wait for its source's entry first shows where
 *     it waits (seg_eager_wait: the window, its hash and description), then
 *     looks whether its source shows the same: members that disagree about
 *     the source so that each waits as a receiver for another (rank r
 *     taking r + 1 for the source, all around) would otherwise wait for an
 *     entry nobody posts.  One of two such members at least sees the other
 *     (each posts, with a full barrier, before it looks), and its wait also
 *     ends when its source shows it.
 *   - No member waits for a window of the call it is in before it posts its
 *     own, but an eager receiver for its source's, which waits for none:
 *     whatever the groups and sources, nothing waits in a circle.
 *
 * The functions here never block: when they cannot go on they say whom the
 * call waits for (k->wait), and a later call resumes where they stopped. */
#ifndef SHMESH_ENGINE_WINDOW_H
#define SHMESH_ENGINE_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/layout.h"
#include "shmesh.h"

struct call;

/* A rank's buffers for windows: its two slot buffers (0 and 1), which data
 * windows take in turn, and its two control slots (WIN_CONTROL and the one
 * after, shm/layout.h), which the windows of control exchanges take in turn. */
#define WIN_BUFS 4
#define WIN_CONTROL 2

/* This rank's buffers: which window each holds and which ranks may still
 * be reading it; the latest window seen posted by each rank; and the
 * highest progress read from each rank (progress never goes back, so a
 * lower value is not the rank's: the segment is corrupt). */
struct windows {
    int next_buf; /* the slot buffer of the next data window */
    int next_control; /* the buffer of the next control window */
    int last_buf; /* the buffer of the window posted last (its tag: buf_tag[last_buf]) */
    uint64_t buf_tag[WIN_BUFS];
    /* The hash of the call description this rank last wrote into each
     * buffer (desc_set: it wrote one). */
    uint64_t desc_hash[WIN_BUFS];
    bool desc_set[WIN_BUFS];
    int *buf_readers[WIN_BUFS];
    int buf_nreaders[WIN_BUFS];
    uint64_t *seen;
    uint64_t *prog;
    /* Per peer: the slot buffer its next window is likely in (it posts
     * into its two in turn), looked at first: a look at the other one
     * takes that line from the peer, whose next post must take it back
     * (6-9% of a 2-rank 8-byte call).  A hint only: both are looked at. */
    _Atomic unsigned char *next_in;
    /* This rank's eager windows: what each holds, and for those it sent,
     * who had to post it too (eager_readers, world entries each). */
    struct eager_rec {
        uint64_t tag;       /* 0: none yet */
        uint64_t hash;      /* its call's, whose description it holds */
        bool sent;          /* this rank was the source */
        bool checked;       /* sent: the readers' entries were found alike */
        int from;           /* received: the source's rank */
        int nreaders;
    } *eager;
    int *eager_readers;
    int owed;             /* entries sent and not yet checked */
    uint64_t owed_oldest; /* no entry of an earlier call is owed */
    int owed_at;          /* the reader the check of the oldest goes on from */
};

/* 0, or SHMESH_ERR_NOMEM. */
int windows_init(struct windows *w, int world);
void windows_fini(struct windows *w);

/* Payload bytes of one window in a slot buffer (a control slot holds
 * SEG_CONTROL_PAYLOAD). */
uint64_t win_capacity(const shmesh_ctx *c);
/* This rank's next buffer, reclaimed, for the call's next window: its
 * payload to fill, or NULL with *rc = CALL_WAIT (a reader has not moved on,
 * or not yet posted the window this rank ran ahead of) or an error (that
 * window's readers made another call: a mismatch). */
unsigned char *win_open(struct call *k, int *rc);
/* Posts the buffer opened last as the call's next window among its group;
 * the call's first window carries its description and hash. */
void win_post(struct call *k);
/* The same in this rank's next control slot, for an exchange of a few bytes
 * (flow.h: transfers' `control`), which so leaves the slot buffers' turns
 * to the data windows. */
unsigned char *win_open_control(struct call *k, int *rc);
void win_post_control(struct call *k);
/* The same for a window nobody reads: this rank's progress moves past the
 * call (a call across nodes, paths/net.c, whose data goes over MPI), so
 * that the node's ranks waiting to reuse their buffers see it move on. */
void win_post_alone(struct call *k);
/* Finds every member's buffer of the window posted last (k->s->hdrs, by
 * position; seg_payload() gives the data, valid until this rank's next post
 * but one): 0, CALL_WAIT, or an error (a mismatch). */
int win_collect(struct call *k);

/* Payload bytes of an eager window. */
#define EAGER_PAYLOAD (SEG_EAGER_BYTES - SEG_SLOT_HDR)
/* This member's eager window for the call's next window, reclaimed (the
 * source's payload to fill), or NULL with *rc as win_open's. */
unsigned char *win_eager_open(struct call *k, int *rc);
/* Posts the eager window opened last (`from`: the source's position; a
 * receiver posts after it read the source's, win_eager_collect).  The
 * source's own window goes into k->s->hdrs[from]. */
void win_eager_post(struct call *k, int from);
/* A receiver: member from's eager window of the call's next window, into
 * k->s->hdrs[from]; 0, CALL_WAIT or an error (a mismatch). */
int win_eager_collect(struct call *k, int from);
/* Blocks until what k->wait names has happened; 0 or an error (the context
 * is then poisoned).  Asleep, it looks at the awaited rank's slot tags as
 * well as its progress each time the rank posts, so a progress word that
 * another process overwrote cannot hold it; a progress that goes back is an
 * error naming the rank. */
int win_wait(struct call *k);

#endif
