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
 * The functions here never block: when they cannot go on they say whom the
 * call waits for (k->wait), and a later call resumes where they stopped. */
#ifndef SHMESH_ENGINE_WINDOW_H
#define SHMESH_ENGINE_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "shmesh.h"

struct call;

/* This rank's two slot buffers: which window each holds and which ranks may
 * still be reading it; the latest window seen posted by each rank; and the
 * highest progress read from each rank (progress never goes back, so a
 * lower value is not the rank's: the segment is corrupt). */
struct windows {
    int next_buf;
    uint64_t buf_tag[2];
    /* The hash of the call description this rank last wrote into each
     * buffer (desc_set: it wrote one). */
    uint64_t desc_hash[2];
    bool desc_set[2];
    int *buf_readers[2];
    int buf_nreaders[2];
    uint64_t *seen;
    uint64_t *prog;
};

/* 0, or SHMESH_ERR_NOMEM. */
int windows_init(struct windows *w, int world);
void windows_fini(struct windows *w);

/* Payload bytes of one window. */
uint64_t win_capacity(const shmesh_ctx *c);
/* This rank's next buffer, reclaimed, for the call's next window: its
 * payload to fill, or NULL with *rc = CALL_WAIT (a reader has not moved on)
 * or an error. */
unsigned char *win_open(struct call *k, int *rc);
/* Posts the buffer opened last as the call's next window among its group;
 * the call's first window carries its description and hash. */
void win_post(struct call *k);
/* Finds every member's buffer of the window posted last (k->s->hdrs, by
 * position; seg_payload() gives the data, valid until this rank's next post
 * but one): 0, CALL_WAIT, or an error (a mismatch). */
int win_collect(struct call *k);
/* Blocks until what k->wait names has happened; 0 or an error (the context
 * is then poisoned).  Asleep, it looks at the awaited rank's slot tags as
 * well as its progress each time the rank posts, so a progress word that
 * another process overwrote cannot hold it; a progress that goes back is an
 * error naming the rank. */
int win_wait(struct call *k);

#endif
