/* Across nodes (see net.h).
 *
 * Each member packs its whole transfer (engine/exchange.h: the same layout
 * the staged path cuts into windows) and sends each other member of the
 * group its part, behind a header with the call's hash (struct head; the
 * descriptions are exchanged only to explain a mismatch);
 * it receives each member's part for it, checks the headers, and hands the
 * parts to the transfers' recv or reduce exactly as the staged path does.
 * So every op's flow is carried unchanged, and a reduction combines the
 * members' data in member order, as on one node: the results are the same
 * bits as on one node.  Every pair of members exchanges a header and a
 * data message at every call, whatever it carries, so the pairs' messages
 * stay in step call after call (MPI keeps a pair's messages in order).
 *
 * A whole-array reduction of SHMESH_RSAG_MIN bytes or more goes as
 * reduce-scatter then all-gather instead: member q receives block q of
 * every member's input, reduces it in member order (the same bits again)
 * and sends the result to every member, so that each member sends and
 * receives 2 (n - 1) / n of the array rather than n - 1 times it.
 * Before them, the call posts a window on its node that nobody reads, so
 * that its node's ranks see it move on (engine/window.h).
 *
 * Not built yet: the hierarchical form that moves across nodes only what
 * must cross (node-local parts on shared memory): each member here
 * exchanges with every other member, on its node too, over MPI
 * (docs/multinode.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "engine/exchange.h"
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
        return ctx_poison(c, SHMESH_ERR_NOMEM, "%s (call #%" PRIu64 "): out of memory",
                          k->name, k->seq);
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
    return ctx_poison(k->c, SHMESH_ERR_NOMEM, "%s (call #%" PRIu64 "): out of memory", k->name,
                      k->seq);
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
        rc = ctx_poison(k->c, SHMESH_ERR_NOMEM, "%s (call #%" PRIu64 "): out of memory for "
                        "%" PRIu64 " bytes of messages across nodes", k->name, k->seq,
                        mine + in_sum);
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

/* A whole-array reduction as reduce-scatter then all-gather: member q
 * reduces block q over every member's block q, in member order (the same
 * bits as on one node), and sends it to every member. */
static int rsag_rounds(struct call *k, const uint64_t *hash, struct parts *p)
{
    const struct flow *f = &k->f;
    const struct transfers *st = flow_transfers(f);
    int n = k->g.n, me = k->g.me;
    uint64_t e = f->in_bytes / f->in_esz, ie = f->in_esz, oe = f->out_esz;
    uint64_t lo = block_lo(e, me, n), cnt = block_lo(e, me + 1, n) - lo, in_sum = 0;
    for (int q = 0; q < n; q++)
        if (q != me)
            in_sum += cnt * ie;
    /* Every member's block of this one's, and this one's own (copied: in
     * place, the reduction writes over the input). */
    unsigned char *in = job_buffer(k->c, 1, in_sum + cnt * ie);
    if (!in)
        return ctx_poison(k->c, SHMESH_ERR_NOMEM, "%s (call #%" PRIu64 "): out of memory for "
                          "%" PRIu64 " bytes", k->name, k->seq, in_sum + cnt * ie);
    const unsigned char *src = f->in.data;
    uint64_t at = 0, sent = 0, received = in_sum;
    for (int q = 0; q < n; q++) {
        uint64_t qlo = block_lo(e, q, n), qcnt = block_lo(e, q + 1, n) - qlo;
        p->send[q] = src + qlo * ie;
        p->len[q] = qcnt * ie;
        p->recv[q] = in + at;
        p->rlen[q] = cnt * ie;
        at += cnt * ie;
        if (q != me)
            sent += qcnt * ie;
    }
    memcpy(p->recv[me], src + lo * ie, cnt * ie);
    int rc = round_run(k, hash, p->send, p->len, p->recv, p->rlen);
    if (!rc && cnt)
        st->reduce(k, lo * ie, (const void *const *)p->recv, cnt * ie);
    if (rc)
        return rc;
    unsigned char *dst = f->out.data;
    for (int q = 0; q < n; q++) {
        uint64_t qlo = block_lo(e, q, n), qcnt = block_lo(e, q + 1, n) - qlo;
        p->send[q] = dst + lo * oe;
        p->len[q] = cnt * oe;
        p->recv[q] = dst + qlo * oe;
        p->rlen[q] = qcnt * oe;
        if (q != me) {
            sent += cnt * oe;
            received += qcnt * oe;
        }
    }
    if (!(rc = round_run(k, NULL, p->send, p->len, p->recv, p->rlen)))
        call_moved(k, sent, received);
    return rc;
}

static int net_step(struct call *k)
{
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
    uint64_t hash = call_hash(&k->d) ^ k->c->tuning;
    struct parts p;
    int rc = parts_new(k, &p);
    if (!rc)
        rc = rsag(k) ? rsag_rounds(k, &hash, &p) : transfers_round(k, &hash, &p);
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
