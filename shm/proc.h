/* proc.h: the few things shmesh reads from /proc and sysfs, parsed once.
 *
 * Peer liveness (notify.c), the single-copy path's ancestry check, the
 * launcher's leftover sweep, GPU discovery and shmesh-top all read a
 * process's stat line or a one-line file; this is the one parser. */
#ifndef SHMESH_SHM_PROC_H
#define SHMESH_SHM_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Fields of /proc/PID/stat: the state letter ('R', 'S', 'Z', ...), the
 * parent, and the start time (clock ticks after boot: with the pid, it
 * names one process even after the pid is reused). */
struct proc_stat {
    char state;
    pid_t ppid;
    unsigned long long start;
    char comm[17]; /* the command name (the kernel keeps 15 bytes of it) */
};

/* Reads ROOT/PID/stat (root NULL: "/proc"; tests give a directory of
 * their own).  False when it cannot be read or parsed (a process gone). */
bool proc_read_stat(const char *root, pid_t pid, struct proc_stat *st);

/* The first line of a small procfs or sysfs file, without its newline;
 * false when it cannot be read or is empty. */
bool proc_read_line(const char *path, char *buf, size_t len);

#endif
