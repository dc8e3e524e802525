/* proc.c: /proc/PID/stat and one-line files (proc.h). */
#include "proc.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The start of a file into buf (NUL-terminated): bytes read, or -1. */
static ssize_t read_head(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return n;
}

bool proc_read_stat(const char *root, pid_t pid, struct proc_stat *st)
{
    char path[PATH_MAX], buf[1024];
    snprintf(path, sizeof path, "%s/%d/stat", root ? root : "/proc", (int)pid);
    if (read_head(path, buf, sizeof buf) <= 0)
        return false;
    /* "pid (comm) state ppid ...": the command name may hold anything, ')'
     * and spaces included, so the fields start after the last ')'. */
    const char *p = strrchr(buf, ')');
    int ppid;
    unsigned long long start;
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime priority nice num_threads
     * itrealvalue starttime */
    if (!p || sscanf(p + 1, " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d"
                            " %*d %*d %*d %llu",
                     &st->state, &ppid, &start) != 3)
        return false;
    st->ppid = (pid_t)ppid;
    st->start = start;
    const char *open = strchr(buf, '(');
    size_t n = open && open < p ? (size_t)(p - open - 1) : 0;
    if (n >= sizeof st->comm)
        n = sizeof st->comm - 1;
    memcpy(st->comm, open ? open + 1 : "", n);
    st->comm[n] = '\0';
    return true;
}

bool proc_read_line(const char *path, char *buf, size_t len)
{
    if (len == 0 || read_head(path, buf, len) <= 0)
        return false;
    buf[strcspn(buf, "\n")] = '\0';
    return true;
}
