/* Exchanges: a collective's data moving among its group through windows.
 *
 * In a window each member writes up to one payload of its outgoing stream
 * into its own slot buffer, posts its progress, waits for the other
 * members' posts of the same window, and reads what is meant for it from
 * their buffers.  A sender's stream is either one `broadcast` stream that
 * every member reads whole, or the concatenation of one segment per
 * destination position.  The receiving side either copies (`recv`) what each
 * member sent it, or `reduce`s the same range of every member's segment at
 * once, in position order. */
#ifndef SHMESH_ENGINE_EXCHANGE_H
#define SHMESH_ENGINE_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "mesh/group.h"
#include "ops/op.h"
#include "shmesh.h"

struct xchg;
typedef uint64_t (*xchg_bytes_fn)(const struct xchg *x, int from, int to);
typedef void (*xchg_pack_fn)(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst);
typedef void (*xchg_recv_fn)(const struct xchg *x, int from, uint64_t off, const void *src,
                             uint64_t len);
typedef void (*xchg_reduce_fn)(const struct xchg *x, uint64_t off, const void *const *src,
                               uint64_t len);

/* Zero-copy: when every member's buffers lie in the shared heap (and the
 * call moves at least SHMESH_ZC_MIN bytes), `direct` moves the data itself,
 * given every member's input (and output) as pointers in this process;
 * otherwise the staged windows run.  Members decide alike. */
typedef void (*xchg_direct_fn)(const struct xchg *x, unsigned char *const *in,
                               unsigned char *const *out);
/* Single copy (CMA): when the buffers are not all in the heap but every
 * member may read the others' memory, `cma` moves the data itself, given
 * every member's input and output addresses (in their own processes). */
typedef int (*xchg_cma_fn)(const struct xchg *x, const uint64_t *in_addr,
                           const uint64_t *out_addr);

struct xchg {
    shmesh_ctx *c;
    struct group g;
    bool broadcast;       /* bytes/pack see to = -1 */
    uint64_t unit;        /* window payloads hold whole units of this many bytes */
    xchg_bytes_fn bytes;  /* from, to: positions; what `from` sends `to` */
    xchg_pack_fn pack;    /* this device's segment for `to`, bytes [off, off+len) */
    xchg_recv_fn recv;    /* bytes [off, off+len) of what `from` sent this device */
    xchg_reduce_fn reduce;
    xchg_direct_fn direct; /* NULL: never zero-copy */
    xchg_cma_fn cma;       /* NULL: never single copy */
    /* When set, the staged path runs this instead of the streams. */
    int (*staged)(struct xchg *x, const struct call_desc *desc);
    const void *zin;      /* this member's input and output for `direct` */
    uint64_t zin_bytes;
    void *zout;
    uint64_t zout_bytes;
    bool zout_shared;     /* `direct` touches other members' outputs too */
    void *op;             /* the operation's own state */
};

/* bytes callback for exchanges that carry no data (barrier-like steps). */
uint64_t xchg_no_bytes(const struct xchg *x, int from, int to);

/* The windows themselves, for algorithms streams do not express:
 * win_open reclaims this rank's next slot buffer and returns its payload
 * (win_capacity bytes) to fill; win_exchange posts it (with `desc` for a
 * call's first window), waits for every member's same window, and leaves
 * their buffers in c->hdrs by position (seg_payload() gives the data, valid
 * until this rank's next win_exchange but one). */
uint64_t win_capacity(const shmesh_ctx *c);
unsigned char *win_open(shmesh_ctx *c, int *rc);
int win_exchange(shmesh_ctx *c, const struct group *g, const struct call_desc *desc);

/* Runs the exchange; `desc` (non-NULL for a call's first exchange) is
 * published in the first window and compared across the group. */
int xchg_run(struct xchg *x, const struct call_desc *desc);

#endif
