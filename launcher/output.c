/* The launcher's output: its own messages on stderr and, under --tag-output,
 * the ranks' lines prefixed with [rank].
 *
 * Each of stdout and stderr is a queue that a thread of its own writes with
 * plain blocking writes, whatever the descriptor is (pipe, terminal, socket,
 * file) and without touching its flags, which other processes may share.
 * The event loop only ever appends to a queue, so a reader that stalls never
 * stalls the launcher's deadlines or signals.  While a queue holds more than
 * OUT_HIGH bytes the loop stops reading the ranks' pipes of that stream: a
 * rank writing then waits, as it would writing to the reader directly.  At
 * the end of the job, output a reader takes nothing of for OUT_STALL_NS is
 * dropped and counted (out_finish reports it).
 *
 * Lines are gathered per rank and queued whole, so lines of different ranks
 * never interleave; a line longer than RELAY_LINE_MAX is cut into lines of
 * that length, each with the prefix. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

#define CHUNK (64u << 10)        /* the most one write() or one read() of a rank's pipe moves */
#define LINE_START (8u << 10)    /* a relay's first buffer */
#define LINE_BUDGET (64u << 20)  /* every relay's buffer together */

struct outq {
    int fd;
    const char *name;
    bool used;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the writer waits for bytes; out_finish for them to go */
    char *buf;         /* pending: buf[head, head + len) */
    size_t head, len, cap;
    int64_t since;     /* the last write that took something, or when bytes came to an empty queue */
    bool watch;        /* the loop waits to hear of the next change */
    int err;           /* a write failed with this errno: everything is dropped */
    bool given_up;     /* the reader took nothing for too long: everything is dropped */
    uint64_t dropped;
    pthread_t thread;
    bool started;
};

static struct outq queues[3]; /* [1] stdout, [2] stderr */
static int wake_fd = -1;
static bool ready;
static size_t line_bytes; /* the relays' buffers together */

static void wake_loop(struct outq *q)
{
    if (!q->watch)
        return;
    q->watch = false;
    uint64_t one = 1;
    ssize_t w = write(wake_fd, &one, sizeof one);
    (void)w;
}

static void *writer(void *arg)
{
    struct outq *q = arg;
    char *chunk = malloc(CHUNK);
    pthread_mutex_lock(&q->mu);
    while (chunk && !q->err) {
        if (q->len == 0) {
            pthread_cond_wait(&q->cv, &q->mu);
            continue;
        }
        size_t n = q->len < CHUNK ? q->len : CHUNK;
        memcpy(chunk, q->buf + q->head, n);
        pthread_mutex_unlock(&q->mu);
        ssize_t w = write(q->fd, chunk, n);
        int err = errno;
        if (w < 0 && err == EAGAIN) {
            /* Someone made the descriptor non-blocking: wait here instead. */
            struct pollfd p = {.fd = q->fd, .events = POLLOUT};
            poll(&p, 1, -1);
        }
        pthread_mutex_lock(&q->mu);
        if (w < 0 && (err == EAGAIN || err == EINTR))
            continue;
        if (w <= 0) {
            q->err = w < 0 ? err : EIO;
            if (!q->given_up)
                q->dropped += q->len;
            q->len = q->head = 0;
        } else if (q->given_up) {
            /* Counted as dropped when given up, delivered after all. */
            q->dropped -= (uint64_t)w < q->dropped ? (uint64_t)w : q->dropped;
        } else {
            q->head += (size_t)w;
            q->len -= (size_t)w;
            if (q->len == 0)
                q->head = 0;
        }
        q->since = now_ns();
        pthread_cond_broadcast(&q->cv);
        wake_loop(q);
    }
    pthread_mutex_unlock(&q->mu);
    free(chunk);
    return NULL;
}

void out_init(bool tag_output)
{
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int s = 1; s <= 2; s++) {
        struct outq *q = &queues[s];
        *q = (struct outq){.fd = s, .name = s == 1 ? "stdout" : "stderr"};
        q->used = s == 2 || tag_output;
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->cv, &ca);
    }
    pthread_condattr_destroy(&ca);
    ready = wake_fd >= 0;
}

void out_start(void)
{
    for (int s = 1; s <= 2; s++) {
        struct outq *q = &queues[s];
        if (ready && q->used && !q->started)
            q->started = pthread_create(&q->thread, NULL, writer, q) == 0;
    }
}

int out_wake_fd(void) { return wake_fd; }

/* Appends a, b and a newline if asked, as one piece. */
static void put(int stream, const char *a, size_t an, const char *b, size_t bn, bool nl)
{
    struct outq *q = &queues[stream];
    size_t n = an + bn + (nl ? 1 : 0);
    pthread_mutex_lock(&q->mu);
    if (!q->used || q->err || q->given_up) {
        q->dropped += n;
        pthread_mutex_unlock(&q->mu);
        return;
    }
    if (q->head + q->len + n > q->cap) {
        if (q->head) {
            memmove(q->buf, q->buf + q->head, q->len);
            q->head = 0;
        }
        if (q->len + n > q->cap) {
            size_t cap = q->cap ? q->cap * 2 : CHUNK;
            while (cap < q->len + n)
                cap *= 2;
            char *buf = realloc(q->buf, cap);
            if (!buf) {
                q->dropped += n;
                pthread_mutex_unlock(&q->mu);
                return;
            }
            q->buf = buf;
            q->cap = cap;
        }
    }
    char *p = q->buf + q->head + q->len;
    memcpy(p, a, an);
    if (bn)
        memcpy(p + an, b, bn);
    if (nl)
        p[an + bn] = '\n';
    if (q->len == 0)
        q->since = now_ns();
    q->len += n;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void say(const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof line, PROG ": ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    n = m < 0 ? n : n + m;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (!ready) {
        fwrite(line, 1, (size_t)n, stderr);
        return;
    }
    put(2, line, (size_t)n, NULL, 0, false);
}

void out_state(int stream, struct out_state *st)
{
    struct outq *q = &queues[stream];
    *st = (struct out_state){0};
    if (!ready || !q->used)
        return;
    pthread_mutex_lock(&q->mu);
    st->dropping = q->err || q->given_up;
    st->len = q->len;
    st->since = q->since;
    pthread_mutex_unlock(&q->mu);
    st->full = !st->dropping && st->len >= OUT_HIGH;
}

void out_watch(int stream, const struct out_state *seen)
{
    struct outq *q = &queues[stream];
    if (!ready || !q->used)
        return;
    pthread_mutex_lock(&q->mu);
    q->watch = true;
    if (q->len != seen->len || q->since != seen->since || (q->err || q->given_up) != seen->dropping)
        wake_loop(q); /* it moved since the loop looked */
    pthread_mutex_unlock(&q->mu);
}

void out_give_up(int stream)
{
    struct outq *q = &queues[stream];
    if (!ready || !q->used)
        return;
    pthread_mutex_lock(&q->mu);
    if (!q->given_up && !q->err) {
        q->given_up = true;
        q->dropped += q->len;
        q->len = q->head = 0;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
}

void out_finish(void)
{
    if (!ready)
        return;
    out_start(); /* in case the job never got as far */
    for (int s = 1; s <= 2; s++) {
        struct outq *q = &queues[s];
        pthread_mutex_lock(&q->mu);
        uint64_t dropped = q->dropped;
        int err = q->err;
        pthread_mutex_unlock(&q->mu);
        if (!dropped)
            continue;
        if (err == EPIPE)
            say("dropped %" PRIu64 " bytes of %s: %s was closed", dropped,
                s == 1 ? "rank output" : "output", q->name);
        else if (err)
            say("dropped %" PRIu64 " bytes of %s: writing %s failed: %s", dropped,
                s == 1 ? "rank output" : "output", q->name, strerror(err));
        else
            say("dropped %" PRIu64 " bytes of %s: %s was not read", dropped,
                s == 1 ? "rank output" : "output", q->name);
    }
    /* The last lines on stderr, given the reader's usual patience. */
    struct outq *q = &queues[2];
    pthread_mutex_lock(&q->mu);
    while (q->started && q->len && !q->err && !q->given_up) {
        int64_t until = q->since + OUT_STALL_NS;
        if (now_ns() >= until)
            break;
        struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
        pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
    pthread_mutex_unlock(&q->mu);
}

/* ---- the ranks' lines ---------------------------------------------------- */

void relay_init(struct relay *r, int rank, int fd, int stream)
{
    *r = (struct relay){.fd = fd, .stream = stream, .rank = rank};
}

static void emit(struct relay *r, const char *data, size_t len, bool add_newline)
{
    char prefix[24];
    int plen = snprintf(prefix, sizeof prefix, "[%d] ", r->rank);
    put(r->stream, prefix, (size_t)plen, data, len, add_newline);
}

/* A full buffer doubles, up to RELAY_LINE_MAX and within LINE_BUDGET. */
static bool grow(struct relay *r)
{
    size_t cap = r->cap ? r->cap * 2 : LINE_START;
    if (cap > RELAY_LINE_MAX)
        cap = RELAY_LINE_MAX;
    if (cap <= r->cap || (r->cap && line_bytes - r->cap + cap > LINE_BUDGET))
        return false;
    char *buf = realloc(r->buf, cap);
    if (!buf)
        return false;
    line_bytes += cap - r->cap;
    r->buf = buf;
    r->cap = cap;
    return true;
}

static void release(struct relay *r)
{
    free(r->buf);
    line_bytes -= r->cap;
    r->buf = NULL;
    r->len = r->cap = 0;
}

bool relay_pump(struct relay *r)
{
    if (r->len == r->cap && !grow(r) && r->len) {
        /* A line too long to keep: out it goes as a line of its own. */
        emit(r, r->buf, r->len, true);
        r->len = 0;
    }
    char spare[4096]; /* only when not even the first buffer could be had */
    char *dst = r->cap ? r->buf + r->len : spare;
    size_t room = r->cap ? r->cap - r->len : sizeof spare;
    ssize_t got = read(r->fd, dst, room < CHUNK ? room : CHUNK);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (got <= 0) {
        relay_close(r);
        return false;
    }
    if (!r->cap) {
        emit(r, spare, (size_t)got, spare[got - 1] != '\n');
        return true;
    }
    size_t start = 0, scan = r->len;
    r->len += (size_t)got;
    char *nl;
    while ((nl = memchr(r->buf + scan, '\n', r->len - scan))) {
        size_t end = (size_t)(nl - r->buf) + 1;
        emit(r, r->buf + start, end - start, false);
        start = scan = end;
    }
    memmove(r->buf, r->buf + start, r->len - start);
    r->len -= start;
    if (r->len == 0 && r->cap > LINE_START)
        release(r); /* a long line is over: give its memory back */
    return true;
}

void relay_close(struct relay *r)
{
    if (r->fd < 0)
        return;
    if (r->len)
        emit(r, r->buf, r->len, true); /* a last line without its newline gets one */
    int unread = 0;
    if (ioctl(r->fd, FIONREAD, &unread) == 0 && unread > 0) {
        struct outq *q = &queues[r->stream];
        pthread_mutex_lock(&q->mu);
        q->dropped += (uint64_t)unread;
        pthread_mutex_unlock(&q->mu);
    }
    close(r->fd);
    r->fd = -1;
    release(r);
}
