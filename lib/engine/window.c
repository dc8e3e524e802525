/* Windows over the segment's slot buffers (see window.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/debug.h"
#include "core/fail.h"
#include "engine/call.h"
#include "engine/state.h"
#include "engine/window.h"
#include "engine/status.h"
#include "trace/trace.h"

int windows_init(struct windows *w, int world)
{
    memset(w, 0, sizeof *w);
    int *r = calloc(WIN_BUFS * (size_t)world, sizeof *r);
    w->seen = calloc((size_t)world, sizeof *w->seen);
    w->prog = calloc((size_t)world, sizeof *w->prog);
    w->eager = calloc(SEG_EAGER_ENTRIES, sizeof *w->eager);
    w->eager_readers = calloc(SEG_EAGER_ENTRIES * (size_t)world, sizeof *w->eager_readers);
    w->next_in = calloc((size_t)world, sizeof *w->next_in);
    if (!r || !w->seen || !w->prog || !w->eager || !w->eager_readers || !w->next_in) {
        free(r);
        windows_fini(w);
        return SHMESH_ERR_NOMEM;
    }
    for (int b = 0; b < WIN_BUFS; b++)
        w->buf_readers[b] = r + (size_t)b * (size_t)world;
    w->next_control = WIN_CONTROL;
    return 0;
}

void windows_fini(struct windows *w)
{
    free(w->buf_readers[0]);
    free(w->seen);
    free(w->prog);
    free(w->eager);
    free(w->eager_readers);
    free((void *)w->next_in);
    memset(w, 0, sizeof *w);
}

uint64_t win_capacity(const shmesh_ctx *c) { return seg_payload_bytes(c->seg) / 64 * 64; }

/* What a rank's posts leave, and what cannot be right.
 *
 * A rank posts a window by storing its tag in the slot buffer, then its
 * progress; tags and progress only grow.  The fast paths read only tags
 * (and what this rank remembers); where they do not find what they want,
 * progress is read too, and checked: below a value read before, or above
 * every tag of the rank's buffers, it was not written by the rank. */

/* Rank r's buffer b (window.h: WIN_BUFS). */
static inline struct seg_slot_hdr *buf_of(const shmesh_ctx *c, int r, int b)
{
    return b < WIN_CONTROL ? seg_slot(c->seg, r, b) : seg_control(c->seg, r, b - WIN_CONTROL);
}

/* The eager window (window.h) call number seq uses. */
static unsigned eager_index(uint64_t seq) { return (unsigned)(seq % SEG_EAGER_ENTRIES); }

/* Rank r's eager window for the call of `tag`, and its receipt. */
static struct seg_slot_hdr *eager_entry(const shmesh_ctx *c, int r, uint64_t tag)
{
    return seg_eager(c->seg, r, eager_index(tag >> 32));
}

static struct seg_slot_hdr *eager_receipt(const shmesh_ctx *c, int r, uint64_t tag)
{
    return seg_receipt(c->seg, r, eager_index(tag >> 32));
}

/* The latest of the windows in rank r's slot buffers and control slots
 * (the last it posted there, or is posting) and, for near > 0, its eager window and
 * receipt of near's call (where a progress of `near` may come from). */
static uint64_t latest_tag(const shmesh_ctx *c, int r, uint64_t near)
{
    uint64_t a = 0, b;
    for (int i = 0; i < WIN_BUFS; i++) {
        b = atomic_load_explicit(&buf_of(c, r, i)->tag, memory_order_acquire);
        if (a < b)
            a = b;
    }
    if (near) {
        b = atomic_load_explicit(&eager_entry(c, r, near)->tag, memory_order_acquire);
        if (a < b)
            a = b;
        b = atomic_load_explicit(&eager_receipt(c, r, near)->tag, memory_order_acquire);
        if (a < b)
            a = b;
    }
    return a;
}

/* Rank r's progress into *p: 0, or -EBADMSG when it is below a value read
 * before (which engine_of(c)->win.prog[r] keeps). */
static int progress_of(shmesh_ctx *c, int r, uint64_t *p)
{
    uint64_t v =
        atomic_load_explicit(&seg_ctrl(c->seg, r)->progress.value, memory_order_acquire);
    *p = v;
    if (v < engine_of(c)->win.prog[r])
        return -EBADMSG;
    engine_of(c)->win.prog[r] = v;
    return 0;
}

#define WIN_FMT "call #%" PRIu64 " window %" PRIu64
#define WIN_ARGS(t) (uint64_t)(t) >> 32, (uint64_t)(t) & 0xffffffffu

static int went_back(struct call *k, int r, uint64_t p)
{
    return fail_corrupt(k->c, k->name, k->seq, r, "rank %d's progress went back from " WIN_FMT
                        " to " WIN_FMT, r, WIN_ARGS(engine_of(k->c)->win.prog[r]), WIN_ARGS(p));
}

static int beyond(struct call *k, int r, uint64_t p, uint64_t t)
{
    return fail_corrupt(k->c, k->name, k->seq, r, "rank %d's progress is " WIN_FMT
                        ", past the last window in its slot buffers (" WIN_FMT ")", r,
                        WIN_ARGS(p), WIN_ARGS(t));
}

static int check_owed(struct call *k, uint64_t upto);

/* How many calls past this rank's a reader's tag is believed (below). */
#define TAG_AHEAD 64

/* Whether t, the latest tag read in a reader's buffers while its progress
 * is still at `old` or below, shows that it posted a window after `old`
 * (its tag goes before its progress, so it may show first; and its
 * progress word may have been overwritten), this rank being in call `seq`.
 * A tag more than TAG_AHEAD calls past `seq` is not believed: a reader that
 * far ahead posted progress past `old` long ago, and almost any value
 * another process writes there is that large (believed, it let this rank
 * overwrite a buffer the reader still read); then the progress is waited
 * for. */
static inline bool tag_moved_on(uint64_t t, uint64_t old, uint64_t seq)
{
    return t > old && (t >> 32) <= seq + TAG_AHEAD;
}

/* This rank's buffer b for the call's next window (win_open's). */
static inline __attribute__((always_inline)) struct seg_slot_hdr *open_buf(struct call *k, int b,
                                                                          int *rc)
{
    shmesh_ctx *c = k->c;
    struct windows *w = &engine_of(c)->win;
    if (w->owed && (*rc = check_owed(k, UINT64_MAX)))
        return NULL;
    uint64_t old = w->buf_tag[b], last = w->buf_tag[w->last_buf];
    /* Usually this rank already saw the buffer's last readers move on (they
     * posted the window it read last), and nothing shared is read. */
    for (; k->at < w->buf_nreaders[b]; k->at++) {
        int r = w->buf_readers[b][k->at];
        if (r == c->rank || w->seen[r] > old)
            continue;
        uint64_t p;
        if (progress_of(c, r, &p)) {
            *rc = went_back(k, r, p);
            return NULL;
        }
        if (p <= old) {
            /* Its tag goes first: it may have posted a later window already
             * (or its progress word was overwritten). */
            uint64_t t = latest_tag(c, r, 0);
            if (!tag_moved_on(t, old, k->seq)) {
                k->wait = (struct wait_for){r, old + 1, false, false, 0, 0, false};
                *rc = CALL_WAIT;
                return NULL;
            }
            p = t < last ? t : last; /* a tag is trusted for this buffer only */
        } else if (p > last + (UINT64_C(1) << 32)) {
            /* More than a call ahead of this rank: possible (it ran calls
             * with others), and then its slots show it. */
            uint64_t t = latest_tag(c, r, p);
            if (p > t) {
                *rc = beyond(k, r, p, t);
                return NULL;
            }
        }
        w->seen[r] = p;
    }
    k->at = 0;
    *rc = 0;
    return buf_of(c, c->rank, b);
}

unsigned char *win_open(struct call *k, int *rc)
{
    struct seg_slot_hdr *h = open_buf(k, engine_of(k->c)->win.next_buf, rc);
    return h ? seg_payload(h) : NULL;
}

unsigned char *win_open_control(struct call *k, int *rc)
{
    struct seg_slot_hdr *h = open_buf(k, engine_of(k->c)->win.next_control, rc);
    return h ? seg_payload(h) : NULL;
}

/* k's hash, computed once (a plan brings its own: front/plan.h). */
static inline __attribute__((always_inline)) uint64_t hash_of(struct call *k)
{
    if (!k->hashed) {
        k->hash = call_hash(&k->d) ^ k->c->tuning;
        k->hashed = true;
    }
    return k->hash;
}

/* k's description into the place h keeps it (seg_call_desc), with the
 * thresholds its hash was made with. */
static void put_desc(const struct call *k, struct seg_slot_hdr *h)
{
    struct call_desc *d = seg_call_desc(k->c->seg, h);
    memcpy(d, &k->d, sizeof k->d);
    d->tuning = k->c->tuning;
}

/* Rank r posted window `tag`: it has read everything before it. */
static inline void saw(shmesh_ctx *c, int r, uint64_t tag)
{
    if (engine_of(c)->win.seen[r] < tag)
        engine_of(c)->win.seen[r] = tag;
}

/* Header h of the call's first window gets the call's hash, and its
 * description unless it holds that one already (`held`, with the hash
 * `held_hash`).  The description is read only by a member whose own call's
 * hash differs, to explain the mismatch: when calls repeat, a post writes
 * its header's line, not the description's 600 bytes (10 lines) as well. */
static inline __attribute__((always_inline)) void put_call(struct call *k, struct seg_slot_hdr *h,
                                                            bool held, uint64_t held_hash)
{
    h->call_hash = hash_of(k);
    if (!held || held_hash != k->hash)
        put_desc(k, h);
    k->check_hash = true;
    k->desc_pending = false;
}

static inline __attribute__((always_inline)) void post(struct call *k, int b, const int *readers,
                                                      int nreaders)
{
    shmesh_ctx *c = k->c;
    struct windows *w = &engine_of(c)->win;
    struct seg_slot_hdr *mine = buf_of(c, c->rank, b);
    uint64_t tag = (k->seq << 32) | k->window++;
    if (k->desc_pending) {
        put_call(k, mine, w->desc_set[b], w->desc_hash[b]);
        w->desc_hash[b] = k->hash;
        w->desc_set[b] = true;
    } else {
        k->check_hash = false;
    }
    /* Release: payload, hash and description before the tag. */
    atomic_store_explicit(&mine->tag, tag, memory_order_release);
    w->buf_tag[b] = tag;
    if (nreaders) /* win_post_alone's: none (and no array) */
        memcpy(w->buf_readers[b], readers, sizeof *readers * (size_t)nreaders);
    w->buf_nreaders[b] = nreaders;
    if (b < WIN_CONTROL)
        w->next_buf = b ^ 1;
    else
        w->next_control = b ^ 1;
    w->last_buf = b;
    seg_progress_post(&c->me->progress, tag); /* for sleepers and reclaimers */
    k->tag = tag;
    k->at = 0;
}

void win_post(struct call *k) { post(k, engine_of(k->c)->win.next_buf, k->g.ranks, k->g.n); }

void win_post_control(struct call *k)
{
    post(k, engine_of(k->c)->win.next_control, k->g.ranks, k->g.n);
}

void win_post_alone(struct call *k) { post(k, engine_of(k->c)->win.next_buf, NULL, 0); }

/* Where rank r holds window `tag`: one of its slot buffers, its eager
 * window, its control slot or its receipt. */
static struct seg_slot_hdr *holding(const shmesh_ctx *c, int r, uint64_t tag)
{
    _Atomic unsigned char *next = &engine_of(c)->win.next_in[r];
    unsigned first = atomic_load_explicit(next, memory_order_relaxed);
    for (unsigned b = first; b < first + 2; b++) {
        struct seg_slot_hdr *h = seg_slot(c->seg, r, (int)(b & 1));
        if (atomic_load_explicit(&h->tag, memory_order_acquire) == tag) {
            atomic_store_explicit(next, (unsigned char)((b + 1) & 1), memory_order_relaxed);
            return h;
        }
    }
    struct seg_slot_hdr *h = eager_entry(c, r, tag);
    if (atomic_load_explicit(&h->tag, memory_order_acquire) == tag)
        return h;
    for (int i = 0; i < 2; i++) {
        h = seg_control(c->seg, r, i);
        if (atomic_load_explicit(&h->tag, memory_order_acquire) == tag)
            return h;
    }
    h = eager_receipt(c, r, tag);
    return atomic_load_explicit(&h->tag, memory_order_acquire) == tag ? h : NULL;
}

/* SHMESH_DEBUG=waits: the wait in k->wait is over. */
static void debug_wait(const struct call *k)
{
    const struct wait_for *wf = &k->wait;
    /* A window's tag, or for a reclaim the tag it must pass. */
    uint64_t t = wf->window ? wf->target : wf->target - 1;
    debug_line(k->c,
               "call #%" PRIu64 " %s waited %.1f us for rank %d %s (call #%" PRIu64
               " window %" PRIu64 ")",
               k->seq, k->name, (double)(debug_now() - wf->t0) / 1e3,
               ctx_job_rank_of(k->c, wf->rank),
               wf->window ? "to post its window" : "to move past its window", t >> 32,
               t & 0xffffffffu);
}

struct window_wait {
    shmesh_ctx *c;
    int r;
    uint64_t tag;           /* the window, or what a reclaim waits for r to reach */
    struct seg_slot_hdr *h; /* found */
    uint64_t bad;           /* a progress value that went back */
    bool eager;             /* wait_for's: r waiting in the same window ends it too */
    uint64_t seq;           /* the waiting call's number (tag_moved_on) */
};

/* An eager receiver's wait for r's entry `tag`: whether r waits as a
 * receiver in that very window (win_eager_collect then finds out why). */
static bool waits_too(const struct window_wait *ww)
{
    return ww->eager && atomic_load_explicit(&seg_eager_wait(ww->c->seg, ww->r)->tag,
                                             memory_order_acquire) == ww->tag;
}

/* The spin: r's slot tags (a window), or its progress (a reclaim). */
static bool window_ready(const void *arg)
{
    struct window_wait *ww = (struct window_wait *)arg;
    return (ww->h = holding(ww->c, ww->r, ww->tag)) != NULL || waits_too(ww);
}

static bool progress_ready(const void *arg)
{
    const struct window_wait *ww = arg;
    return atomic_load_explicit(&seg_ctrl(ww->c->seg, ww->r)->progress.value,
                                memory_order_acquire) >= ww->tag;
}

/* Asleep, after each post of r: its tags and its progress.  Either shows a
 * window or a reclaim done; progress at the window or past it also ends the
 * wait, and win_collect finds out why the window is missing. */
static int window_wait_ready(void *arg)
{
    struct window_wait *ww = arg;
    if ((ww->h = holding(ww->c, ww->r, ww->tag)) || waits_too(ww))
        return 1;
    uint64_t p;
    if (progress_of(ww->c, ww->r, &p)) {
        ww->bad = p;
        return -EBADMSG;
    }
    return p >= ww->tag;
}

static int reclaim_ready(void *arg)
{
    struct window_wait *ww = arg;
    uint64_t p;
    if (progress_of(ww->c, ww->r, &p)) {
        ww->bad = p;
        return -EBADMSG;
    }
    return p >= ww->tag || tag_moved_on(latest_tag(ww->c, ww->r, 0), ww->tag - 1, ww->seq);
}

/* The mismatch of this rank's call #seq (ours) with rank r's, whose window
 * h holds (NULL: r went past the window without it). */
static int mismatch(shmesh_ctx *c, uint64_t seq, const struct call_desc *d, int r,
                    struct seg_slot_hdr *h)
{
    struct call_desc ours = *d;
    ours.tuning = c->tuning;
    if (!h)
        return call_mismatch(c, seq, &ours, r, NULL);
    struct call_desc theirs;
    memcpy(&theirs, seg_call_desc(c->seg, h), sizeof theirs);
    /* Read as published, but its texts end inside it (the rest is bounded
     * where it is printed: op, dtypes, ndim). */
    theirs.axes[sizeof theirs.axes - 1] = '\0';
    theirs.groups[sizeof theirs.groups - 1] = '\0';
    return call_mismatch(c, seq, &ours, r, &theirs);
}

/* Rank r's window `tag` into *hp: 0 (*hp NULL: r went past the window
 * without it), CALL_WAIT (k->wait says for whom), or an error.  Where the
 * caller blocks, spins for it first. */
static int find_window(struct call *k, int r, uint64_t tag, struct seg_slot_hdr **hp)
{
    shmesh_ctx *c = k->c;
    struct seg_slot_hdr *h = holding(c, r, tag);
    if (!h && engine_of(c)->blocking) {
        /* The caller would wait for it anyway: spin here, and the data is
         * read the moment it arrives (win_wait would spin alike). */
        struct window_wait ww = {c, r, tag, NULL, 0, false, k->seq};
        k->wait = (struct wait_for){r, tag, true, true, 0, 0, false};
        if (c->debug & DEBUG_WAITS)
            k->wait.t0 = debug_now();
        if (c->trace)
            k->wait.t_trace = trace_now(c->trace);
        if (seg_spin(&c->waiter, window_ready, &ww)) {
            h = ww.h;
            if (c->debug & DEBUG_WAITS)
                debug_wait(k);
            if (c->trace)
                trace_wait(c, k);
        }
    }
    if (!h) {
        uint64_t prog;
        if (progress_of(c, r, &prog))
            return went_back(k, r, prog);
        if (prog < tag) {
            if (!engine_of(c)->blocking)
                k->wait = (struct wait_for){r, tag, true, false, 0, 0, false};
            return CALL_WAIT;
        }
        /* r went past this window without it: it formed another group or
         * ran another number of windows, unless its progress is past
         * anything it posted. */
        if (!(h = holding(c, r, tag))) {
            uint64_t t = latest_tag(c, r, prog);
            if (prog > t)
                return beyond(k, r, prog, t);
        }
    }
    if (h)
        saw(c, r, tag);
    *hp = h;
    return 0;
}

/* Member p's window k->tag, found at h in rank r's buffers (NULL: r went
 * past it), into k->s->hdrs[p]: 0, or the mismatch its hash shows. */
static inline int take(struct call *k, int p, int r, struct seg_slot_hdr *h)
{
    if (!h || (k->check_hash && h->call_hash != k->hash))
        return mismatch(k->c, k->seq, &k->d, r, h);
    k->s->hdrs[p] = h;
    return 0;
}

/* Member p's buffer of the window posted last into k->s->hdrs[p]: 0,
 * CALL_WAIT, or an error. */
static int collect(struct call *k, int p)
{
    shmesh_ctx *c = k->c;
    int r = k->g.ranks[p];
    if (r == c->rank) {
        /* The window posted last, or an earlier one collected late (call.h:
         * late_st). */
        const struct windows *w = &engine_of(c)->win;
        k->s->hdrs[p] =
            k->tag == w->buf_tag[w->last_buf] ? buf_of(c, c->rank, w->last_buf)
                                              : holding(c, c->rank, k->tag);
        return 0;
    }
    struct seg_slot_hdr *h;
    int rc = find_window(k, r, k->tag, &h);
    return rc ? rc : take(k, p, r, h);
}

int win_collect(struct call *k)
{
    for (; k->at < k->g.n; k->at++) {
        int rc = collect(k, k->at);
        if (rc)
            return rc;
    }
    k->at = 0;
    return 0;
}

/* Eager windows (window.h). */

/* Sent entry e: every reader posted its window, with the entry's hash. */
static int check_entry(struct call *k, unsigned e)
{
    shmesh_ctx *c = k->c;
    struct windows *w = &engine_of(c)->win;
    struct eager_rec *rec = &w->eager[e];
    const int *readers = w->eager_readers + (size_t)e * (size_t)c->world;
    uint64_t tag = rec->tag;
    for (; w->owed_at < rec->nreaders; w->owed_at++) {
        int r = readers[w->owed_at];
        if (r == c->rank)
            continue;
        /* Where a receiver posts it, else wherever r holds it (or why not). */
        struct seg_slot_hdr *h = seg_receipt(c->seg, r, e);
        if (atomic_load_explicit(&h->tag, memory_order_acquire) == tag) {
            saw(c, r, tag);
        } else {
            int rc = find_window(k, r, tag, &h);
            if (rc)
                return rc;
        }
        if (!h || h->call_hash != rec->hash) {
            struct call_desc ours;
            memcpy(&ours, seg_call_desc(c->seg, seg_eager(c->seg, c->rank, e)), sizeof ours);
            return mismatch(c, tag >> 32, &ours, r, h);
        }
    }
    rec->checked = true;
    w->owed--;
    w->owed_at = 0;
    return 0;
}

/* Every entry this rank sent in a call numbered up to `upto` and did not
 * check yet, oldest first (entry s mod SEG_EAGER_ENTRIES holds call s): 0,
 * CALL_WAIT or an error. */
static int check_owed(struct call *k, uint64_t upto)
{
    struct windows *w = &engine_of(k->c)->win;
    for (uint64_t s = w->owed_oldest; w->owed && s <= upto; w->owed_oldest = ++s) {
        unsigned e = eager_index(s);
        const struct eager_rec *rec = &w->eager[e];
        if (rec->sent && !rec->checked && rec->tag >> 32 == s) {
            int rc = check_entry(k, e);
            if (rc)
                return rc;
        }
    }
    return 0;
}

unsigned char *win_eager_open(struct call *k, int *rc)
{
    shmesh_ctx *c = k->c;
    struct windows *w = &engine_of(c)->win;
    const uint64_t n = SEG_EAGER_ENTRIES;
    /* An entry sent is checked before any window n - 1 calls later (see
     * below): in batches of half the entries, whose reads overlap. */
    if (w->owed && w->owed_oldest + n - 1 <= k->seq && (*rc = check_owed(k, k->seq - n / 2)))
        return NULL;
    unsigned e = eager_index(k->seq);
    const struct eager_rec *rec = &w->eager[e];
    if (rec->tag && !rec->sent) {
        /* Received: its source checked it before it posted a window n - 1
         * calls later.  Not n: when the source's entry of this call is the
         * same (n calls later), it may be this rank that sends, and the
         * source, a receiver then, posts after it read this rank's window. */
        uint64_t need = ((rec->tag >> 32) + n - 1) << 32;
        if (w->seen[rec->from] < need) {
            uint64_t p;
            if (progress_of(c, rec->from, &p)) {
                *rc = went_back(k, rec->from, p);
                return NULL;
            }
            if (p < need && latest_tag(c, rec->from, need) < need) {
                k->wait = (struct wait_for){rec->from, need, false, false, 0, 0, false};
                *rc = CALL_WAIT;
                return NULL;
            }
            w->seen[rec->from] = need;
        }
    }
    *rc = 0;
    return seg_payload(seg_eager(c->seg, c->rank, e));
}

void win_eager_post(struct call *k, int from)
{
    shmesh_ctx *c = k->c;
    struct windows *w = &engine_of(c)->win;
    unsigned e = eager_index(k->seq);
    struct eager_rec *rec = &w->eager[e];
    bool sent = from == k->g.me;
    /* The source posts its entry, a receiver its receipt; entry e's
     * description (theirs alike) is rec->hash's. */
    struct seg_slot_hdr *mine =
        sent ? seg_eager(c->seg, c->rank, e) : seg_receipt(c->seg, c->rank, e);
    uint64_t tag = (k->seq << 32) | k->window++;
    put_call(k, mine, rec->tag != 0, rec->hash);
    /* Release: payload, hash and description before the tag. */
    atomic_store_explicit(&mine->tag, tag, memory_order_release);
    rec->tag = tag;
    rec->hash = k->hash;
    rec->sent = sent;
    rec->checked = false;
    rec->from = k->g.ranks[from];
    if (rec->sent) {
        int *readers = w->eager_readers + (size_t)e * (size_t)c->world;
        const int *ranks = k->g.ranks, n = k->g.n;
        for (int q = 0; q < n; q++) /* mostly a few: no memcpy call */
            readers[q] = ranks[q];
        rec->nreaders = n;
        if (w->owed++ == 0)
            w->owed_oldest = k->seq;
        k->s->hdrs[from] = mine;
    }
    seg_progress_post(&c->me->progress, tag);
    k->tag = tag;
    k->at = 0;
}

/* A receiver about to wait for its source's entry (window k->tag): it
 * shows where it waits (its hash and description first, then the tag, then
 * its bell: a member asleep on it looks again), then looks where the source
 * would show the same.  If the source waits there as a receiver too, the
 * two disagree about the source, and no entry would ever come: a mismatch.
 * Each posts before it looks, so one of two such members at least sees the
 * other. */
static int eager_wait(struct call *k, int from)
{
    shmesh_ctx *c = k->c;
    int r = k->g.ranks[from];
    struct seg_slot_hdr *mine = seg_eager_wait(c->seg, c->rank);
    if (atomic_load_explicit(&mine->tag, memory_order_relaxed) != k->tag) {
        put_desc(k, mine);
        mine->call_hash = k->hash;
        atomic_store_explicit(&mine->tag, k->tag, memory_order_release);
        seg_progress_ring(&c->me->progress); /* a full barrier before the look */
    }
    struct seg_slot_hdr *theirs = seg_eager_wait(c->seg, r);
    if (atomic_load_explicit(&theirs->tag, memory_order_acquire) == k->tag)
        return mismatch(c, k->seq, &k->d, r, theirs);
    k->wait.eager = true;
    return CALL_WAIT;
}

int win_eager_collect(struct call *k, int from)
{
    hash_of(k);
    k->tag = (k->seq << 32) | k->window; /* the window to find: this rank posts it after */
    k->check_hash = true;
    /* Where a source posts it, looked at first: the usual case, in one load
     * (collect looks in the slot buffers before). */
    shmesh_ctx *c = k->c;
    int r = k->g.ranks[from];
    struct seg_slot_hdr *h = eager_entry(c, r, k->tag);
    if (atomic_load_explicit(&h->tag, memory_order_acquire) == k->tag) {
        saw(c, r, k->tag);
        return take(k, from, r, h);
    }
    int rc = collect(k, from);
    return rc == CALL_WAIT ? eager_wait(k, from) : rc;
}

int win_wait(struct call *k)
{
    shmesh_ctx *c = k->c;
    struct wait_for *wf = &k->wait;
    struct seg_waiter w = c->waiter;
    if ((c->debug & DEBUG_WAITS) && !wf->t0)
        wf->t0 = debug_now();
    if (c->trace && !wf->t_trace)
        wf->t_trace = trace_now(c->trace);
    struct window_wait ww = {c, wf->rank, wf->target, NULL, 0, wf->eager, k->seq};
    /* A window's tag shares a cache line with the payload's start: spinning
     * on it brings a small window over in one transfer.  The buffer cannot
     * be reused under us: r reuses it only after this rank posts later. */
    if (!wf->spun && seg_spin(&c->waiter, wf->window ? window_ready : progress_ready, &ww))
        goto done;
    w.spin_ns = w.yield_ns = 0; /* spun already */
    int culprit = wf->rank;
    status_block(c, wf);
    int rc = seg_wait_until(&w, &seg_ctrl(c->seg, wf->rank)->progress,
                            wf->window ? window_wait_ready : reclaim_ready, &ww, wf->rank,
                            &culprit);
    status_unblock(c);
    if (rc == -EBADMSG)
        return went_back(k, wf->rank, ww.bad);
    if (rc) {
        char who[32];
        snprintf(who, sizeof who, "rank %d", ctx_job_rank_of(c, wf->rank));
        rc = fail_wait(c, k->name, k->seq, rc, culprit, who);
        /* Peers may still be reading or writing this member's buffers. */
        return k->path && k->path->in_place ? fail_left_in_place(c, rc) : rc;
    }
done:
    if (c->debug & DEBUG_WAITS)
        debug_wait(k);
    if (c->trace)
        trace_wait(c, k);
    return 0;
}
