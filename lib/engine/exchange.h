/* Exchanges: transfers moved through windows, one window at a time, without
 * blocking (a stopped exchange resumes where it stood).  Each member's
 * transfer is cut into windows of win_capacity() bytes; the members agree on
 * the number of windows because every member plans every transfer alike. */
#ifndef SHMESH_ENGINE_EXCHANGE_H
#define SHMESH_ENGINE_EXCHANGE_H

#include "engine/call.h"

/* Plans the transfers `st` among the call's group into xr. */
void xrun_start(struct call *k, struct xrun *xr, const struct transfers *st);
/* Moves on: 0 when the exchange is complete, CALL_WAIT, or an error. */
int xrun_step(struct call *k, struct xrun *xr);

/* bytes callback for exchanges that carry no data (barrier-like steps). */
uint64_t transfers_no_bytes(const struct call *k, int from, int to);

#endif
