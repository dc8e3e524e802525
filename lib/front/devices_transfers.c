/* Several devices per rank, for ops that publish parameters first (see
 * devices_transfers.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/fail.h"
#include "engine/flow.h"
#include "front/devices_transfers.h"
#include "ops/ops.h"

/* One pair's transfer in a rank's stream to (or from) another rank: device
 * call k's transfer from member `from` to member `to` of its group. */
struct piece {
    int peer;  /* the other rank */
    int slot;  /* the sending device's place on its rank (id % per) */
    int order; /* the receiving device's index in the group */
    int from, to;
    struct call *k; /* this rank's device: the sender's or the receiver's */
    uint64_t len;
};

/* A world-wide broadcast of one row per rank (rows of `row` bytes). */
struct rows_of_ranks {
    unsigned char *rows;
    uint64_t row;
    int me;
};

struct tx_run {
    struct rows_of_ranks params; /* exchange 1: `per` devices' parameters per rank */
    struct rows_of_ranks sizes;  /* exchange 2: what each rank sends each rank */
    struct piece *send, *recv;   /* exchange 3, sorted by (peer, slot, order) */
    int nsend, nrecv;
    int *send_at, *recv_at;      /* world + 1: where each peer's pieces start */
    bool *refused;               /* per local device: its group refused the call */
    bool discard;                /* this rank refused: it writes nothing */
    int me, world;
};

static struct tx_run *run_of(const struct call *k) { return k->op_state; }

static uint64_t row_bytes(const struct call *k, int from, int to)
{
    (void)from, (void)to;
    return ((const struct rows_of_ranks *)k->op_state)->row;
}

static void row_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct rows_of_ranks *b = k->op_state;
    (void)to;
    memcpy(dst, b->rows + (uint64_t)b->me * b->row + off, (size_t)len);
}

static void row_recv(const struct call *k, int from, uint64_t off, const void *src, uint64_t len)
{
    const struct rows_of_ranks *b = k->op_state;
    memcpy(b->rows + (uint64_t)from * b->row + off, src, (size_t)len);
}

static const struct transfers rows_of_ranks = {.broadcast = true,
                                              .control = true,
                                              .unit = 1,
                                              .bytes = row_bytes,
                                              .pack = row_pack,
                                              .recv = row_recv};

/* What rank `from` sends rank `to` (exchange 2's row of `from`). */
static uint64_t *sizes_of(const struct tx_run *x, int from)
{
    return (uint64_t *)(x->sizes.rows + (uint64_t)from * x->sizes.row);
}

/* Exchange 3. */
static uint64_t data_bytes(const struct call *k, int from, int to)
{
    const struct tx_run *x = run_of(k);
    return from == to ? 0 : sizes_of(x, from)[to];
}

/* Visits the pieces ps[0..n) that overlap bytes [off, off+len) of the
 * stream they make, with the piece's own offset and the stream's. */
static void walk(const struct piece *ps, int n, uint64_t off, uint64_t len, bool pack,
                 unsigned char *buf)
{
    uint64_t pos = 0, end = off + len;
    for (int i = 0; i < n && pos < end; i++) {
        const struct piece *p = ps + i;
        uint64_t a = pos > off ? pos : off, b = pos + p->len < end ? pos + p->len : end;
        if (a < b) {
            const struct transfers *t = p->k->f.transfers;
            if (pack)
                t->pack(p->k, p->to, a - pos, b - a, buf + (a - off));
            else
                t->recv(p->k, p->from, a - pos, buf + (a - off), b - a);
        }
        pos += p->len;
    }
}

static void data_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct tx_run *x = run_of(k);
    int a = x->send_at[to];
    walk(x->send + a, x->send_at[to + 1] - a, off, len, true, dst);
}

static void data_recv(const struct call *k, int from, uint64_t off, const void *src, uint64_t len)
{
    const struct tx_run *x = run_of(k);
    int a = x->recv_at[from];
    if (x->discard)
        return;
    walk(x->recv + a, x->recv_at[from + 1] - a, off, len, false, (unsigned char *)src);
}

static const struct transfers data_transfers = {
    .unit = 1, .bytes = data_bytes, .pack = data_pack, .recv = data_recv};

static int by_peer(const void *va, const void *vb)
{
    const struct piece *a = va, *b = vb;
    if (a->peer != b->peer)
        return a->peer < b->peer ? -1 : 1;
    if (a->slot != b->slot)
        return a->slot < b->slot ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

/* Sorts ps[0..n) and notes where each peer's pieces start (at[world]: n). */
static void index_pieces(struct piece *ps, int n, int *at, int world)
{
    qsort(ps, (size_t)n, sizeof *ps, by_peer);
    for (int r = 0, i = 0; r <= world; r++) {
        while (i < n && ps[i].peer < r)
            i++;
        at[r] = i;
    }
}

/* The pieces this rank's devices send to and receive from other ranks,
 * after every device's check: none in a group that refused the call (its
 * members all did), the others as their transfers say. */
static void lay_pieces(struct tx_run *x, struct call *ks, const int *ids, int nlocal, int per)
{
    x->nsend = x->nrecv = 0;
    for (int l = 0; l < nlocal; l++) {
        struct call *k = &ks[l];
        const struct transfers *t = k->f.transfers;
        for (int q = 0; q < k->g.n && !x->refused[l]; q++) {
            int r = k->g.ranks[q];
            if (r == x->me)
                continue;
            /* k sends member q; member q sends k. */
            x->send[x->nsend++] = (struct piece){r, ids[l] % per, q, k->g.me, q, k,
                                                 t->bytes(k, k->g.me, q)};
            x->recv[x->nrecv++] = (struct piece){r, k->g.locals[q], k->g.me, q, k->g.me, k,
                                                 t->bytes(k, q, k->g.me)};
        }
    }
    index_pieces(x->send, x->nsend, x->send_at, x->world);
    index_pieces(x->recv, x->nrecv, x->recv_at, x->world);
}

/* Every local device's check (exchange 1 done): every member of a group
 * reaches the same verdict (x->refused).  The first refusal's error (its
 * sentence kept), or 0. */
static int check_devices(struct tx_run *x, shmesh_ctx *c, struct call *ks, int nlocal, int per)
{
    uint64_t each = ks[0].pub_bytes;
    char first[CTX_ERR_MAX];
    int rc = 0;
    for (int l = 0; l < nlocal; l++) {
        struct call *k = &ks[l];
        for (int q = 0; q < k->g.n; q++)
            k->s->zin[q] = x->params.rows + ((uint64_t)k->g.ranks[q] * (uint64_t)per +
                                             (uint64_t)k->g.locals[q]) * each;
        int got = k->local(k, false);
        x->refused[l] = got != 0;
        if (got && !rc) {
            rc = got;
            snprintf(first, sizeof first, "%s", ctx_err_buf(c));
        }
    }
    if (rc)
        snprintf(ctx_err_buf(c), CTX_ERR_MAX, "%s", first);
    return rc;
}

int dev_transfers_run(shmesh_ctx *c, struct call *ks, const int *ids, int nlocal, int per)
{
    struct call *k0 = &ks[0];
    int world = c->world, me = c->rank, pieces = 0;
    for (int l = 0; l < nlocal; l++)
        pieces += ks[l].g.n;
    struct tx_run x = {.me = me, .world = world};
    uint64_t each = k0->pub_bytes;
    x.params = (struct rows_of_ranks){NULL, (uint64_t)per * each, me};
    x.sizes = (struct rows_of_ranks){NULL, sizeof(uint64_t) * (uint64_t)world, me};
    x.params.rows = malloc((size_t)(x.params.row * (uint64_t)world) + 1);
    x.sizes.rows = calloc((size_t)world, (size_t)x.sizes.row);
    x.refused = calloc((size_t)nlocal, sizeof *x.refused);
    x.send = malloc(sizeof *x.send * (size_t)pieces + 1);
    x.recv = malloc(sizeof *x.recv * (size_t)pieces + 1);
    x.send_at = malloc(sizeof *x.send_at * (size_t)(world + 1));
    x.recv_at = malloc(sizeof *x.recv_at * (size_t)(world + 1));
    int rc = 0;
    if (!x.params.rows || !x.sizes.rows || !x.refused || !x.send || !x.recv || !x.send_at || !x.recv_at) {
        rc = ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory for %d ranks x %d devices' "
                      "parameters", k0->name, world, per);
        goto out;
    }
    /* 1: every device's parameters, at its id. */
    for (int l = 0; l < nlocal; l++)
        ks[l].pub_pack(&ks[l], x.params.rows + (uint64_t)ids[l] * each);
    if ((rc = op_world_transfers(c, k0->name, &k0->d, &rows_of_ranks, &x.params, NULL, 0)))
        goto out;
    /* 2: what each rank sends each other: its devices' verdicts are its
     * peers' in each group. */
    int refused = check_devices(&x, c, ks, nlocal, per);
    x.discard = refused != 0;
    lay_pieces(&x, ks, ids, nlocal, per);
    for (int i = 0; i < x.nsend; i++)
        sizes_of(&x, me)[x.send[i].peer] += x.send[i].len;
    if ((rc = op_world_transfers(c, k0->name, &k0->d, &rows_of_ranks, &x.sizes, NULL, 0)))
        goto out;
    /* What this rank takes from each other rank is what that rank sends
     * it: both computed from the same parameters and verdicts. */
    for (int r = 0; r < world; r++) {
        uint64_t expect = 0;
        for (int i = x.recv_at[r]; i < x.recv_at[r + 1]; i++)
            expect += x.recv[i].len;
        if (r != me && expect != sizes_of(&x, r)[me]) {
            rc = fail_job(c, SHMESH_ERR_BAD_SEGMENT,
                          "%s: rank %d sends this rank %" PRIu64 " bytes but this rank's "
                          "devices expect %" PRIu64 " from it",
                          k0->name, r, sizes_of(&x, r)[me], expect);
            goto out;
        }
    }
    /* 3: the rows between ranks, then those between this rank's devices. */
    if ((rc = op_world_transfers(c, k0->name, &k0->d, &data_transfers, &x, NULL, 0)))
        goto out;
    /* A rank that refused the call for one of its devices sent its other
     * groups' rows and wrote nothing. */
    if ((rc = refused))
        goto out;
    for (int l = 0; l < nlocal && !rc; l++) {
        struct call *k = &ks[l];
        for (int q = 0; q < k->g.n; q++) {
            int from = -1;
            for (int m = 0; m < nlocal && k->g.ranks[q] == me; m++)
                if (ids[m] % per == k->g.locals[q])
                    from = m;
            k->s->zin[q] = from < 0 ? NULL : ks[from].f.in.data;
        }
        rc = k->local(k, true);
    }
out:
    free(x.params.rows);
    free(x.sizes.rows);
    free(x.refused);
    free(x.send);
    free(x.recv);
    free(x.send_at);
    free(x.recv_at);
    return rc;
}
