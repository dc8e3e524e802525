/* Exchanges: transfers moved through windows, one window at a time, without
 * blocking (a stopped exchange resumes where it stood).  Each member's
 * transfer is cut into windows of win_capacity() bytes; the members agree on
 * the number of windows because every member plans every transfer alike. */
#ifndef SHMESH_ENGINE_EXCHANGE_H
#define SHMESH_ENGINE_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/call.h"

/* Plans the transfers `st` among the call's group into xr. */
void xrun_start(struct call *k, struct xrun *xr, const struct transfers *st);
/* The layout of every member's transfer (k->s: xtotal, xoff_to and xlen_to
 * for this member's, xoff_from and xlen_from for what each sends it), as
 * every member computes it alike; xrun_start's first step. */
void xrun_plan(struct call *k, const struct transfers *st);
/* Bytes [lo, hi) of this member's whole transfer, packed into dst. */
void xrun_pack(struct call *k, const struct transfers *st, uint64_t lo, uint64_t hi,
               unsigned char *dst);
/* Moves on: 0 when the exchange is complete, CALL_WAIT, or an error.  A
 * window the call collects late (call.h: late_st) is collected before its
 * first. */
int xrun_step(struct call *k, struct xrun *xr);
/* Posts the exchange's current window, not collecting it (not for an
 * eager exchange; path.c posts a first window so, for the call to collect
 * late): 0, CALL_WAIT (called again, it goes on) or an error. */
int xrun_post(struct call *k, struct xrun *xr);
/* A complete exchange made ready to run again from its first window, as
 * planned (the call's first exchange: an eager one stays eager). */
static inline void xrun_rewind(struct xrun *xr)
{
    xr->w = 0;
    xr->phase = 0;
}

/* Where a piece [at, at + len) of a transfer meets the range
 * [off, off + rlen) of it that a window (or a pack or recv callback)
 * covers: [*a, *b), in the transfer's offsets; false when they do not
 * meet. */
static inline bool xpiece_meet(uint64_t at, uint64_t len, uint64_t off, uint64_t rlen,
                               uint64_t *a, uint64_t *b)
{
    *a = at > off ? at : off;
    *b = at + len < off + rlen ? at + len : off + rlen;
    return *a < *b;
}

/* bytes callback for exchanges that carry no data (barrier-like steps). */
uint64_t transfers_no_bytes(const struct call *k, int from, int to);

#endif
