/* Across nodes (see net.h).
 *
 * First the call posts a window on its node that nobody reads, so that the
 * node's ranks see it move on (engine/window.h).  Then each member packs
 * its transfers (engine/exchange.h: the same layout the staged path cuts
 * into windows), sends each other member of the group its part over MPI
 * behind a header with the call's hash (struct head: the data rides in the
 * same message up to INLINE_MAX bytes; the descriptions are exchanged only
 * to explain a mismatch), receives each member's part, checks the headers
 * and hands the parts to the transfers' recv or reduce exactly as the
 * staged path does.  So every op's flow is carried unchanged, and a
 * reduction combines the members' data in member order: the same bits as
 * on one node.  Every pair of members exchanges a message each way at
 * every call, whatever it carries, so the pairs' messages stay in step
 * call after call (MPI keeps a pair's messages in order).  Moves send
 * straight out of the input and receive straight into the output where a
 * block is one run of the array.
 *
 * A whole-array reduction of SHMESH_RSAG_MIN bytes or more goes as
 * reduce-scatter then all-gather instead: member q receives block q of
 * every member's input, reduces it in member order (the same bits again)
 * and sends the result to every member, so that each member sends and
 * receives 2 (n - 1) / n of the array rather than n - 1 times it.
 *
 * With SHMESH_NET_HIERARCHICAL=1, psum, pmax and pmin reduce inside each
 * node first, on its segment (below: "hierarchical"), in another order of
 * the sums, and all_gather and pbroadcast cross each node boundary once (a
 * "relay"): across nodes goes only what must cross (docs/multinode.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/context.h"
#include "engine/exchange.h"
#include "engine/flow.h"
#include "engine/traffic.h"
#include "engine/window.h"
#include "net/job.h"
#include "paths/net.h"
#include "paths/state.h"

/* What precedes a call's data to each member in its first round: the
 * call's hash (call_hash ^ tuning, as windows carry it) and the bytes of
 * data that follow.  Data of up to INLINE_MAX bytes travels in the same
 * message, copied behind it; more goes as a message of its own. */
struct head {
    uint64_t hash, bytes;
};
#define INLINE_MAX 4096

static bool across_nodes(const struct call *k) { return k->net; }

/* The hash a call's headers carry: call_hash ^ tuning, as windows do. */
static uint64_t net_hash(const struct call *k) { return call_hash(&k->d) ^ k->c->tuning; }

/* Out of memory in the middle of a call (`bytes` of it, 0: some): the
 * context poisoned, as the call cannot go on alike on every member. */
static int no_memory(struct call *k, uint64_t bytes)
{
    if (!bytes)
        return ctx_poison(k->c, SHMESH_ERR_NOMEM, "%s (call #%" PRIu64 "): out of memory",
                          k->name, k->seq);
    return ctx_poison(k->c, SHMESH_ERR_NOMEM,
                      "%s (call #%" PRIu64 "): out of memory for %" PRIu64 " bytes", k->name,
                      k->seq, bytes);
}

/* Members' calls differ (member q's header did not match): both named
 * where q's description comes back in time (q found the same, and sends
 * its own), the context poisoned, the node told (its ranks may wait in
 * calls this one will not make). */
static int mismatch(struct call *k, int q, size_t got)
{
    shmesh_ctx *c = k->c;
    int who = k->g.ranks[q];
    struct call_desc mine = k->d, theirs;
    mine.tuning = c->tuning;
    struct net_msg m = {.peer = who, .send = &mine, .send_bytes = sizeof mine,
                        .recv = &theirs, .recv_cap = sizeof theirs};
    char text[CTX_ERR_MAX - 16];
    /* A second (a moment's) exchange of the two descriptions: only the
     * peer's sentence depends on it. */
    if (got != SIZE_MAX && !job_exchange(c, k->name, k->seq, &m, 1, 2000000000) &&
        m.recv_bytes == sizeof theirs)
        call_mismatch_text(text, sizeof text, k->seq, &k->d, who, &theirs, NULL);
    else
        snprintf(text, sizeof text, "called %s (call #%" PRIu64 ") but rank %d (on node %d) "
                 "made another call: its message %s",
                 k->name, k->seq, who, c->job->node_of[who],
                 got == SIZE_MAX ? "was longer than this call's" : "differed");
    ctx_poison(c, SHMESH_ERR_MISMATCH, "%s", text);
    char reason[SEG_REASON_MAX];
    snprintf(reason, sizeof reason, "rank %d: %.*s", c->job_rank, (int)sizeof reason - 16, text);
    seg_abort(c->seg, SEG_CAUSE_MISMATCH, c->rank, 0, reason);
    return SHMESH_ERR_MISMATCH;
}

/* One round of messages: to each other member q, len[q] bytes from send[q],
 * and from q, rlen[q] bytes into recv[q]; with `hash`, the call's, a
 * header first each way (struct head), checked: a mismatch.  The headers
 * (and the data they carry) go first and are checked before any larger
 * data is received, so that members whose calls differ find it alike.
 * Counts the bytes that cross nodes. */
static int round_run(struct call *k, const uint64_t *hash, const void *const *send,
                     const uint64_t *len, void *const *recv, const uint64_t *rlen)
{
    shmesh_ctx *c = k->c;
    int n = k->g.n, me = k->g.me, m = 0;
    size_t hb = sizeof(struct head);
    /* Headers, with the small data behind them: this member's to q and
     * q's to it, at q * slot of one block. */
    size_t slot = 2 * (hb + INLINE_MAX);
    unsigned char *hbuf = hash ? malloc(slot * (size_t)n) : NULL;
    struct net_msg *msgs = calloc((size_t)n, sizeof *msgs);
    if (!msgs || (hash && !hbuf)) {
        free(msgs);
        free(hbuf);
        return no_memory(k, 0);
    }
    struct job *j = c->job;
    int rc = 0;
    if (hash) {
        for (int q = 0; q < n; q++) {
            if (q == me)
                continue;
            unsigned char *out = hbuf + slot * (size_t)q, *in = out + hb + INLINE_MAX;
            struct head h = {*hash, len[q]};
            memcpy(out, &h, hb);
            bool inline_out = len[q] <= INLINE_MAX;
            if (inline_out && len[q])
                memcpy(out + hb, send[q], len[q]);
            msgs[m++] = (struct net_msg){.peer = k->g.ranks[q], .send = out,
                                         .send_bytes = hb + (inline_out ? len[q] : 0),
                                         .recv = in, .recv_cap = hb + INLINE_MAX};
        }
        rc = job_exchange(c, k->name, k->seq, msgs, m, 0);
        for (int q = 0, i = 0; q < n && !rc; q++) {
            if (q == me)
                continue;
            const struct net_msg *got = &msgs[i++];
            const unsigned char *in = hbuf + slot * (size_t)q + hb + INLINE_MAX;
            bool inline_in = rlen[q] <= INLINE_MAX;
            struct head h = {0, 0};
            if (got->recv_bytes >= hb && got->recv_bytes != SIZE_MAX)
                memcpy(&h, in, hb);
            if (got->recv_bytes == SIZE_MAX || got->recv_bytes < hb || h.hash != *hash ||
                h.bytes != rlen[q] || got->recv_bytes != hb + (inline_in ? rlen[q] : 0))
                rc = mismatch(k, q, got->recv_bytes);
            else if (inline_in && rlen[q])
                memcpy(recv[q], in + hb, rlen[q]);
        }
    }
    /* The data that did not travel with its header (all of it without). */
    m = 0;
    for (int q = 0; q < n && !rc; q++) {
        if (q == me)
            continue;
        bool out = !hash || len[q] > INLINE_MAX, in = !hash || rlen[q] > INLINE_MAX;
        if (out || in)
            msgs[m++] = (struct net_msg){.peer = k->g.ranks[q], .send = out ? send[q] : NULL,
                                         .send_bytes = len[q], .recv = in ? recv[q] : NULL,
                                         .recv_cap = rlen[q]};
    }
    if (!rc && m)
        rc = job_exchange(c, k->name, k->seq, msgs, m, 0);
    for (int i = 0; i < m && !rc; i++)
        if (msgs[i].recv && msgs[i].recv_bytes != msgs[i].recv_cap)
            rc = ctx_poison(c, SHMESH_ERR_SYSTEM, "%s (call #%" PRIu64 "): rank %d sent %zu "
                            "bytes where %zu were due", k->name, k->seq, msgs[i].peer,
                            msgs[i].recv_bytes, msgs[i].recv_cap);
    for (int q = 0; q < n && !rc; q++)
        if (q != me && j->node_of[k->g.ranks[q]] != j->node) { /* the data, not headers */
            j->sent += len[q];
            j->received += rlen[q];
        }
    free(msgs);
    free(hbuf);
    return rc;
}

/* Per-member arrays of a round. */
struct parts {
    const void **send;
    void **recv;
    uint64_t *len, *rlen;
};

static int parts_new(struct call *k, struct parts *p)
{
    size_t n = (size_t)k->g.n;
    p->send = calloc(n, sizeof *p->send);
    p->recv = calloc(n, sizeof *p->recv);
    p->len = calloc(2 * n, sizeof *p->len);
    p->rlen = p->len ? p->len + n : NULL;
    if (p->send && p->recv && p->len)
        return 0;
    return no_memory(k, 0);
}

static void parts_free(struct parts *p)
{
    free(p->send);
    free(p->recv);
    free(p->len);
}

/* Any flow: each member's transfer packed whole, each other member sent its
 * part and the parts received handed to recv or reduce, as the staged path
 * does (engine/exchange.h). */
static int transfers_round(struct call *k, const uint64_t *hash, struct parts *p)
{
    const struct transfers *st = flow_transfers(&k->f);
    struct call_scratch *s = k->s;
    int n = k->g.n, me = k->g.me;
    xrun_plan(k, st);
    uint64_t mine = s->xtotal[me], in_sum = 0, sent = 0;
    for (int q = 0; q < n; q++)
        if (q != me)
            in_sum += s->xlen_from[q];
    unsigned char *out = job_buffer(k->c, 0, mine), *in = job_buffer(k->c, 1, in_sum);
    int rc = 0;
    if (!out || !in) {
        rc = no_memory(k, mine + in_sum);
        goto done;
    }
    if (mine)
        xrun_pack(k, st, 0, mine, out);
    uint64_t at = 0;
    for (int q = 0; q < n; q++) {
        if (q == me)
            continue;
        p->send[q] = out + (st->broadcast ? 0 : s->xoff_to[q]);
        p->len[q] = st->broadcast ? mine : s->xlen_to[q];
        p->recv[q] = in + at;
        p->rlen[q] = s->xlen_from[q];
        at += s->xlen_from[q];
        sent += p->len[q];
    }
    if ((rc = round_run(k, hash, p->send, p->len, p->recv, p->rlen)))
        goto done;
    /* This member's own part, from its packed transfer. */
    p->recv[me] = out + s->xoff_from[me];
    if (st->reduce) {
        if (s->xlen_from[me])
            st->reduce(k, 0, (const void *const *)p->recv, s->xlen_from[me]);
    } else {
        for (int q = 0; q < n; q++)
            if (s->xlen_from[q])
                st->recv(k, q, 0, p->recv[q], s->xlen_from[q]);
    }
    if (!st->control)
        call_moved(k, sent, in_sum);
done:
    return rc;
}

/* A move of whole blocks (FLOW_MOVE) whose input and output do not
 * overlap: each part sent straight out of the input and received straight
 * into the output where its block is one run of the array (packed and
 * unpacked where it is not), this member's own part copied: no copy of
 * the rest. */
static bool move_direct(const struct call *k)
{
    const struct flow *f = &k->f;
    return f->kind == FLOW_MOVE &&
           !bytes_overlap(f->in.data, f->in_bytes, f->out.data, f->out_bytes);
}

static int move_round(struct call *k, const uint64_t *hash, struct parts *p)
{
    const struct flow *f = &k->f;
    const struct transfers *st = flow_transfers(f);
    struct call_scratch *s = k->s;
    int n = k->g.n, me = k->g.me;
    xrun_plan(k, st);
    /* Which parts go through staging: their bytes at s->cin (sends) and
     * s->cout (receives), offsets into one buffer; UINT64_MAX: direct. */
    uint64_t staged = 0, sent = 0, received = 0;
    struct box src, dst;
    uint64_t off;
    for (int q = 0; q < n; q++) {
        s->cin[q] = s->cout[q] = UINT64_MAX;
        if (q == me)
            continue;
        p->len[q] = st->broadcast ? s->xtotal[me] : s->xlen_to[q];
        p->rlen[q] = s->xlen_from[q];
        sent += p->len[q];
        received += p->rlen[q];
        if (p->len[q] && flow_part(k, me, q, &src, &dst) && box_contiguous(&src, &off))
            p->send[q] = (const unsigned char *)f->in.data + off * f->in_esz;
        else if (p->len[q])
            s->cin[q] = staged, staged += p->len[q];
        else
            p->send[q] = f->in.data;
        if (p->rlen[q] && flow_part(k, q, me, &src, &dst) && box_contiguous(&dst, &off))
            p->recv[q] = (unsigned char *)f->out.data + off * f->out_esz;
        else if (p->rlen[q])
            s->cout[q] = staged, staged += p->rlen[q];
        else
            p->recv[q] = f->out.data;
    }
    unsigned char *buf = job_buffer(k->c, 0, staged);
    if (!buf)
        return no_memory(k, staged);
    for (int q = 0; q < n; q++) {
        if (s->cin[q] != UINT64_MAX) {
            p->send[q] = buf + s->cin[q];
            st->pack(k, st->broadcast ? -1 : q, 0, p->len[q], buf + s->cin[q]);
        }
        if (s->cout[q] != UINT64_MAX)
            p->recv[q] = buf + s->cout[q];
    }
    int rc = round_run(k, hash, p->send, p->len, p->recv, p->rlen);
    if (rc)
        return rc;
    for (int q = 0; q < n; q++)
        if (q != me && s->cout[q] != UINT64_MAX)
            st->recv(k, q, 0, p->recv[q], p->rlen[q]);
    if (flow_part(k, me, me, &src, &dst))
        box_copy(&src, f->in.data, &dst, f->out.data);
    call_moved(k, sent, received);
    return 0;
}

/* Whether a call is a whole-array reduction large enough for reduce-scatter
 * then all-gather (the node's rsag threshold, SHMESH_RSAG_MIN), with an
 * element for each member: the same answer on every member. */
static bool rsag(const struct call *k)
{
    const struct flow *f = &k->f;
    return flow_allreduce(f) && f->in_esz && k->size >= paths_of(k->c)->rsag_min &&
           f->in_bytes / f->in_esz >= (uint64_t)k->g.n;
}

/* Member q's block of e elements: [lo, hi). */
static uint64_t block_lo(uint64_t e, int q, int n) { return e * (uint64_t)q / (uint64_t)n; }

/* Elements [base, base + e) of a whole-array reduction: this member's
 * sources at src (a copy of them, not the output), combined with the
 * flow's reduction over k->g, in its order, into the same elements of the
 * output on every member.  All exchanged and combined at once, or with
 * `split` as reduce-scatter then all-gather: member q reduces block q of
 * every member's sources and sends it to every member (each member sends
 * 2 (n - 1) / n of them).  Counts the traffic. */
static int allreduce_blocks(struct call *k, const uint64_t *hash, struct parts *p,
                            const unsigned char *src, uint64_t base, uint64_t e, bool split)
{
    const struct flow *f = &k->f;
    const struct transfers *st = flow_transfers(f);
    int n = k->g.n, me = k->g.me;
    uint64_t ie = f->in_esz, oe = f->out_esz;
    uint64_t lo = split ? block_lo(e, me, n) : 0, cnt = split ? block_lo(e, me + 1, n) - lo : e;
    /* Every member's block of this one's, and this one's own (copied: in
     * place, the reduction writes over the input). */
    unsigned char *in = job_buffer(k->c, 1, cnt * ie * (uint64_t)n);
    if (!in)
        return no_memory(k, cnt * ie * (uint64_t)n);
    uint64_t sent = 0, received = 0;
    for (int q = 0; q < n; q++) {
        uint64_t qlo = split ? block_lo(e, q, n) : 0;
        uint64_t qcnt = split ? block_lo(e, q + 1, n) - qlo : e;
        p->send[q] = src + qlo * ie;
        p->len[q] = qcnt * ie;
        p->recv[q] = in + cnt * ie * (uint64_t)q;
        p->rlen[q] = cnt * ie;
        if (q != me) {
            sent += p->len[q];
            received += p->rlen[q];
        }
    }
    memcpy(p->recv[me], src + lo * ie, cnt * ie);
    int rc = round_run(k, hash, p->send, p->len, p->recv, p->rlen);
    if (!rc && cnt)
        st->reduce(k, (base + lo) * ie, (const void *const *)p->recv, cnt * ie);
    if (!rc && split) { /* every member's reduced block to every member */
        unsigned char *dst = (unsigned char *)f->out.data + base * oe;
        for (int q = 0; q < n; q++) {
            uint64_t qlo = block_lo(e, q, n);
            p->send[q] = dst + lo * oe;
            p->len[q] = cnt * oe;
            p->recv[q] = dst + qlo * oe;
            p->rlen[q] = (block_lo(e, q + 1, n) - qlo) * oe;
            if (q != me) {
                sent += p->len[q];
                received += p->rlen[q];
            }
        }
        rc = round_run(k, NULL, p->send, p->len, p->recv, p->rlen);
    }
    if (!rc)
        call_moved(k, sent, received);
    return rc;
}

/* ---- Hierarchical whole-array reductions (SHMESH_NET_HIERARCHICAL) ----
 *
 * Every node holding members of the group holds L of them.  Inside the
 * node, member i (its i-th there, in group order) reduces block i of the
 * node's members' inputs (reduce-scatter through the node's windows, as
 * the staged path moves them); it exchanges that partial block with the
 * members i of the other nodes and combines the nodes' partials in node
 * order into block i of its output; the node's members then all-gather the
 * blocks.  Across nodes goes only each node's partial result. */
struct hier {
    int *sub, nsub, isub;       /* the node's members (segment ranks), this one's index */
    int *across, nacross, iacross; /* the members i of each node (job ranks), by node */
    struct group full;          /* the call's group, given back at the end */
    uint64_t e, esz;            /* elements, element bytes */
    unsigned char *partial;     /* block isub of the node's reduction */
    /* A shared move relayed (all_gather): node d's j-th member's index in
     * the group at grid[d * nsub + j] (d counts the group's nodes); each
     * member's transfer's bytes, by group index; this member's relay: the
     * transfers of the members isub of every node, in node order. */
    bool relay;
    int *grid;
    uint64_t *tlen;
    unsigned char *buf;
};

static uint64_t hier_lo(const struct hier *h, int j) { return block_lo(h->e, j, h->nsub); }

/* k's group for the node's part: the node's members. */
static void group_node(struct call *k, const struct hier *h)
{
    k->g = (struct group){.n = h->nsub, .me = h->isub, .ranks = h->sub,
                          .locals = h->full.locals};
}

/* k's group across nodes: the members of this one's index on every node. */
static void group_across(struct call *k, const struct hier *h)
{
    k->g = (struct group){.n = h->nacross, .me = h->iacross, .ranks = h->across,
                          .locals = h->full.locals};
}

static uint64_t hier_bytes(const struct hier *h, int j)
{
    return (hier_lo(h, j + 1) - hier_lo(h, j)) * h->esz;
}

static uint64_t rs_bytes(const struct call *k, int from, int to)
{
    return hier_bytes(k->path_state, to);
}

static void rs_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct hier *h = k->path_state;
    memcpy(dst, (const unsigned char *)k->f.in.data + hier_lo(h, to) * h->esz + off, len);
}

static void rs_reduce(const struct call *k, uint64_t off, const void *const *src, uint64_t len)
{
    const struct hier *h = k->path_state;
    reduce_run(k->f.red, k->f.in.dtype, k->f.out.dtype, h->partial + off, src, h->nsub,
               (size_t)(len / h->esz), 1);
}

static uint64_t ag_bytes(const struct call *k, int from, int to)
{
    (void)to;
    return hier_bytes(k->path_state, from);
}

static void ag_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct hier *h = k->path_state;
    (void)to;
    memcpy(dst, (const unsigned char *)k->f.out.data + hier_lo(h, h->isub) * h->esz + off, len);
}

static void ag_recv(const struct call *k, int from, uint64_t off, const void *src, uint64_t len)
{
    const struct hier *h = k->path_state;
    if (from != h->isub)
        memcpy((unsigned char *)k->f.out.data + hier_lo(h, from) * h->esz + off, src, len);
}

static const struct transfers node_rs = {.bytes = rs_bytes, .pack = rs_pack, .reduce = rs_reduce};
static const struct transfers node_ag = {.broadcast = true, .bytes = ag_bytes, .pack = ag_pack,
                                         .recv = ag_recv};

static int hier_end(struct call *k, int rc)
{
    struct hier *h = k->path_state;
    k->g = h->full;
    free(h);
    k->path_state = NULL;
    k->path_end = NULL;
    return rc;
}

/* The hierarchy of k's group when the call takes it (the same answer on
 * every member: the setting is hashed, the rest is the call's): its state,
 * set as the path's; NULL otherwise. */
static struct hier *hier_of(struct call *k)
{
    const struct flow *f = &k->f;
    shmesh_ctx *c = k->c;
    bool reduce = flow_allreduce(f) && (f->red == RED_SUM || f->red == RED_MAX ||
                                        f->red == RED_MIN) &&
                  f->in.dtype == f->out.dtype && f->in_esz;
    bool relay = f->kind == FLOW_MOVE && flow_shared(f);
    if (!paths_of(c)->net_hierarchical || k->path_state || !(reduce || relay))
        return NULL;
    const struct job *j = c->job;
    int n = k->g.n, me = k->g.me, mine = j->node_of[k->g.ranks[me]];
    /* Members per node, the same on every node that holds some. */
    int *count = calloc((size_t)j->nodes, sizeof *count), per = 0, nodes = 0;
    if (!count)
        return NULL;
    for (int q = 0; q < n; q++)
        count[j->node_of[k->g.ranks[q]]]++;
    bool even = true;
    for (int d = 0; d < j->nodes; d++)
        if (count[d]) {
            even &= !per || count[d] == per;
            per = count[d];
            nodes++;
        }
    free(count);
    if (!even)
        return NULL;
    size_t cells = (size_t)per * (size_t)nodes;
    struct hier *h = calloc(1, sizeof *h + sizeof(uint64_t) * (size_t)n +
                                   sizeof(int) * ((size_t)(per + nodes) + cells));
    if (!h)
        return NULL;
    h->tlen = (uint64_t *)(h + 1);
    h->sub = (int *)(h->tlen + n);
    h->across = h->sub + per;
    h->grid = h->across + nodes;
    h->relay = relay;
    for (int d = 0, at = 0; d < j->nodes; d++) {
        int seen = 0;
        for (int q = 0; q < n; q++)
            if (j->node_of[k->g.ranks[q]] == d)
                h->grid[at * per + seen++] = q;
        at += seen > 0;
    }
    for (int q = 0; q < n; q++)
        if (j->node_of[k->g.ranks[q]] == mine) {
            if (q == me)
                h->isub = h->nsub;
            h->sub[h->nsub++] = j->seg_rank[k->g.ranks[q]];
        }
    /* The members isub of each node, by node number. */
    for (int d = 0; d < j->nodes; d++) {
        int seen = 0;
        for (int q = 0; q < n; q++)
            if (j->node_of[k->g.ranks[q]] == d && seen++ == h->isub) {
                if (q == me)
                    h->iacross = h->nacross;
                h->across[h->nacross++] = k->g.ranks[q];
            }
    }
    h->full = k->g;
    h->esz = f->in_esz;
    h->e = f->in_esz ? f->in_bytes / f->in_esz : 0;
    k->path_state = h;
    k->path_end = hier_end;
    return h;
}

/* ---- A shared move relayed (SHMESH_NET_HIERARCHICAL: all_gather) ----
 *
 * Member i of each node sends its transfer (its input) across nodes to the
 * members i of the other nodes only, then the node's members broadcast to
 * each other, on the node's segment, what they hold: their own and what
 * they received.  Each transfer crosses to each other node once. */
static uint64_t relay_bytes(const struct call *k, int from, int to)
{
    const struct hier *h = k->path_state;
    (void)to;
    uint64_t b = 0;
    for (int d = 0; d < h->nacross; d++)
        b += h->tlen[h->grid[d * h->nsub + from]];
    return b;
}

static void relay_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct hier *h = k->path_state;
    (void)to;
    memcpy(dst, h->buf + off, len);
}

/* Bytes [off, off + len) of member `from`'s relay: pieces of the members
 * (d, from)'s transfers, each handed to the flow's own recv. */
static void relay_recv(const struct call *k, int from, uint64_t off, const void *src,
                       uint64_t len)
{
    const struct hier *h = k->path_state;
    if (from == h->isub) /* delivered already */
        return;
    const struct transfers *st = flow_transfers(&k->f);
    uint64_t at = 0;
    for (int d = 0; d < h->nacross && len; d++) {
        int q = h->grid[d * h->nsub + from];
        uint64_t a, b;
        if (xpiece_meet(at, h->tlen[q], off, len, &a, &b))
            st->recv(k, q, a - at, (const unsigned char *)src + (a - off), b - a);
        at += h->tlen[q];
    }
}

static const struct transfers node_relay = {.broadcast = true, .bytes = relay_bytes,
                                            .pack = relay_pack, .recv = relay_recv};

/* Across nodes, then the node's broadcast started (stage 20). */
static int relay_start(struct call *k, struct hier *h)
{
    const struct transfers *st = flow_transfers(&k->f);
    xrun_plan(k, st); /* the whole group's transfers */
    uint64_t total = 0, mine = 0;
    for (int q = 0; q < h->full.n; q++)
        h->tlen[q] = k->s->xtotal[q];
    for (int d = 0; d < h->nacross; d++) {
        if (d == h->iacross)
            mine = total;
        total += h->tlen[h->grid[d * h->nsub + h->isub]];
    }
    h->buf = job_buffer(k->c, 0, total);
    struct parts p;
    if (!h->buf)
        return no_memory(k, total);
    int me = h->full.me, rc;
    if (h->tlen[me])
        st->pack(k, -1, 0, h->tlen[me], h->buf + mine);
    group_across(k, h);
    if ((rc = parts_new(k, &p)))
        return rc;
    uint64_t at = 0, sent = 0, received = 0;
    for (int d = 0; d < h->nacross; d++) {
        uint64_t len = h->tlen[h->grid[d * h->nsub + h->isub]];
        p.send[d] = h->buf + mine;
        p.len[d] = h->tlen[me];
        p.recv[d] = h->buf + at;
        p.rlen[d] = len;
        if (d != h->iacross) {
            sent += p.len[d];
            received += len;
        }
        at += len;
    }
    uint64_t hash = net_hash(k);
    rc = round_run(k, &hash, p.send, p.len, p.recv, p.rlen);
    parts_free(&p);
    if (rc) {
        k->g = h->full;
        return rc;
    }
    call_moved(k, sent, received);
    /* What this member holds goes into its own output at once. */
    at = 0;
    for (int d = 0; d < h->nacross; d++) {
        int q = h->grid[d * h->nsub + h->isub];
        if (h->tlen[q])
            st->recv(k, q, 0, h->buf + at, h->tlen[q]);
        at += h->tlen[q];
    }
    group_node(k, h);
    xrun_start(k, &k->xr, &node_relay);
    k->stage = 20;
    return 0;
}

static int relay_step(struct call *k)
{
    struct hier *h = k->path_state;
    group_node(k, h);
    int rc = xrun_step(k, &k->xr);
    if (rc != CALL_WAIT)
        k->g = h->full;
    return rc;
}

/* Stages: 10 the node's reduce-scatter, 11 across nodes, 12 the node's
 * all-gather (a node of one member: straight across). */
static int hier_step(struct call *k)
{
    struct hier *h = k->path_state;
    int rc;
    if (k->stage == 10 || k->stage == 12) {
        group_node(k, h);
        if ((rc = xrun_step(k, &k->xr)))
            return rc; /* CALL_WAIT: resumed here */
        if (k->stage == 12) {
            k->g = h->full;
            return 0;
        }
        k->stage = 11;
    }
    /* Across nodes: this node's partial block among the members holding
     * it on the others, combined in node order (for SHMESH_RSAG_MIN bytes
     * and more among more than two nodes, reduce-scatter + all-gather). */
    uint64_t e = hier_bytes(h, h->isub) / h->esz;
    bool split = h->nacross > 2 && e >= (uint64_t)h->nacross &&
                 e * h->esz >= paths_of(k->c)->rsag_min;
    uint64_t hash = net_hash(k);
    struct parts p;
    group_across(k, h);
    if (!(rc = parts_new(k, &p)))
        rc = allreduce_blocks(k, &hash, &p, h->partial, hier_lo(h, h->isub), e, split);
    parts_free(&p);
    if (rc || h->nsub == 1) {
        k->g = h->full;
        return rc;
    }
    group_node(k, h);
    xrun_start(k, &k->xr, &node_ag);
    k->stage = 12;
    return hier_step(k);
}

/* The hierarchy's first step: the partial block's buffer, and the node's
 * reduce-scatter started (a node of one member: its input is the partial,
 * after a window nobody reads, as net_step posts). */
static int hier_start(struct call *k, struct hier *h)
{
    uint64_t bytes = hier_bytes(h, h->isub);
    h->partial = job_buffer(k->c, 0, bytes);
    if (!h->partial)
        return no_memory(k, bytes);
    if (h->nsub == 1) {
        memcpy(h->partial, k->f.in.data, bytes);
        k->stage = 11;
        return 0;
    }
    group_node(k, h);
    xrun_start(k, &k->xr, &node_rs);
    k->stage = 10;
    return 0;
}

static int net_step(struct call *k)
{
    if (k->stage >= 20) /* resumed in a relay */
        return relay_step(k);
    if (k->stage >= 10) /* resumed in the hierarchy */
        return hier_step(k);
    if (k->stage == 0) {
        struct hier *h = hier_of(k);
        if (h && h->nsub > 1) {
            int rc = h->relay ? relay_start(k, h) : hier_start(k, h);
            return rc ? rc : h->relay ? relay_step(k) : hier_step(k);
        }
    }
    /* First a window of this call in the segment, which nobody reads: the
     * node's ranks see this one move past its earlier windows, as after
     * any call on the node (engine/window.h). */
    if (k->stage == 0) {
        int rc;
        if (!win_open(k, &rc))
            return rc;
        win_post_alone(k);
        k->stage = 1;
    }
    if (k->path_end == hier_end) { /* a hierarchy with one member per node */
        struct hier *h = k->path_state;
        if (h->relay) { /* nothing to relay: each node's one member */
            hier_end(k, 0);
        } else {
            int rc = hier_start(k, h);
            return rc ? rc : hier_step(k);
        }
    }
    uint64_t hash = net_hash(k);
    struct parts p;
    int rc = parts_new(k, &p);
    if (!rc)
        rc = rsag(k)          ? allreduce_blocks(k, &hash, &p, k->f.in.data, 0,
                                                 k->f.in_bytes / k->f.in_esz, true)
             : move_direct(k) ? move_round(k, &hash, &p)
                              : transfers_round(k, &hash, &p);
    parts_free(&p);
    return rc;
}

const struct path path_net = {
    .name = "net",
    .kinds = MEM_HOST | MEM_HEAP,
    .across_nodes = true,
    .candidate = across_nodes,
    .step = net_step,
};
