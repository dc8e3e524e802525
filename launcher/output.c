/* --tag-output: each rank's lines, prefixed with [rank], written whole so
 * that lines of different ranks never interleave. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "launcher.h"

void relay_init(struct relay *r, int rank, int fd, int out_fd)
{
    r->rank = rank;
    r->fd = fd;
    r->out_fd = out_fd;
    r->at_line_start = true;
    r->len = 0;
}

static void write_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* our reader went away: the ranks' output is lost, not the job */
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

/* Writes `len` bytes that end a line (or fill the buffer), with the prefix
 * when they start one. */
static void emit(struct relay *r, const char *data, size_t len, bool ends_line,
                 bool add_newline)
{
    char prefix[24];
    struct iovec iov[3];
    int n = 0;
    if (r->at_line_start) {
        int plen = snprintf(prefix, sizeof prefix, "[%d] ", r->rank);
        iov[n++] = (struct iovec){prefix, (size_t)plen};
    }
    iov[n++] = (struct iovec){(void *)data, len};
    if (add_newline)
        iov[n++] = (struct iovec){"\n", 1};
    write_all(r->out_fd, iov, n);
    r->at_line_start = ends_line || add_newline;
}

bool relay_pump(struct relay *r)
{
    ssize_t got = read(r->fd, r->buf + r->len, sizeof r->buf - r->len);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (got <= 0) {
        relay_flush(r);
        close(r->fd);
        r->fd = -1;
        return false;
    }
    r->len += (size_t)got;
    size_t start = 0;
    for (;;) {
        char *nl = memchr(r->buf + start, '\n', r->len - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - r->buf) + 1;
        emit(r, r->buf + start, end - start, true, false);
        start = end;
    }
    if (start == 0 && r->len == sizeof r->buf) {
        /* A line longer than the buffer goes out in pieces, prefixed once. */
        emit(r, r->buf, r->len, false, false);
        start = r->len;
    }
    memmove(r->buf, r->buf + start, r->len - start);
    r->len -= start;
    return true;
}

void relay_flush(struct relay *r)
{
    if (r->len) {
        emit(r, r->buf, r->len, false, true);
        r->len = 0;
    } else if (!r->at_line_start) {
        struct iovec nl = {"\n", 1};
        write_all(r->out_fd, &nl, 1);
        r->at_line_start = true;
    }
}
