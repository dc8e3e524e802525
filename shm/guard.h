/* A segment cut short by another process.
 *
 * Any process of the job's user can truncate the segment's file (through
 * /proc/PID/fd of a process that holds it: ftruncate needs no more), and
 * POSIX shared memory cannot be sealed against it (F_SEAL_SHRINK is for
 * memfds).  A mapped page past the new end of the file then faults with
 * SIGBUS on the next access, in any process that maps it: a rank inside a
 * collective, the launcher reading the trace rings, shmesh-top.
 *
 * Every segment this process maps (seg_create, seg_attach, seg_observe) is
 * registered here, and a SIGBUS handler, installed with the first, turns a
 * fault inside a registered mapping into something the process survives:
 *
 *   - with a read-write descriptor (the launcher's, a rank's), the file's
 *     size is restored (ftruncate): the pages past the cut come back as
 *     zeros, shared again with every process that maps them;
 *   - otherwise (shmesh-top's read-only mapping, or a restore that failed),
 *     the lost pages are replaced in this process by private zero pages;
 *
 * and the faulting access is retried.  A writer then aborts the job
 * (SEG_CAUSE_CORRUPT, the reason naming the truncation and who saw it), so
 * every rank's next wait or call fails with SHMESH_ERR_BAD_SEGMENT; the
 * access that faulted, and what its call computes from it, sees zeros: as
 * with any write into the segment by another process, that call's result
 * is not trusted, but every later call fails.  A fault elsewhere goes to
 * the handler that was there before (or kills the process as it would
 * have).  A SIGBUS handler that the program installs after the segment
 * was mapped (Python's faulthandler, which pytest enables) replaces this
 * one until the next segment is mapped: meanwhile such a program dies of
 * the fault as before. */
#ifndef SHMESH_SHM_GUARD_H
#define SHMESH_SHM_GUARD_H

#include <stdbool.h>
#include <stdint.h>

struct seg;

/* Registers s's mapping; `who` ("rank 3", "shmesh-run") names this process
 * in the abort reason, `writable` says it may write the segment (restore
 * its size through s->fd, record the abort).  Without a free slot the
 * segment is simply not guarded. */
void seg_guard_add(struct seg *s, const char *who, bool writable);
/* Before the mapping goes away. */
void seg_guard_remove(struct seg *s);
/* Whether a fault in s's mapping was caught; *found: the file's size then,
 * or UINT64_MAX when it could not be read. */
bool seg_guard_tripped(const struct seg *s, uint64_t *found);

#endif
