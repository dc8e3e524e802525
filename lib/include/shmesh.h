/* shmesh — a shared-memory multiprocess runtime for one node.
 *
 * A job is N processes ("ranks") started by `shmesh-run -n N -- prog`.  They
 * share one POSIX shared-memory segment and call collectives on it.  A
 * program started without the launcher is a job of one rank and runs
 * unchanged.
 *
 * Conventions
 *   - Every function returning int returns 0 (or a non-negative value) on
 *     success and a negative SHMESH_ERR_* code on failure.  The library never
 *     prints; shmesh_last_error() gives the sentence that explains a failure
 *     (what was expected, what was found, on which rank).
 *   - "Collective" functions must be called by every rank of the job, in the
 *     same order, with matching arguments.  A rank that calls something else
 *     gets SHMESH_ERR_MISMATCH, and so do its peers; nothing hangs.
 *   - After a peer dies, the job aborts, or a collective fails, the context
 *     is poisoned: every later call returns the same error at once.  Only
 *     shmesh_finalize() (which then just releases) and the accessors work.
 *   - A context belongs to one thread at a time.
 */
#ifndef SHMESH_H
#define SHMESH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SHMESH_API __attribute__((visibility("default")))
#define SHMESH_NORETURN __attribute__((noreturn))
#else
#define SHMESH_API
#define SHMESH_NORETURN
#endif

#define SHMESH_VERSION_MAJOR 0
#define SHMESH_VERSION_MINOR 1
#define SHMESH_VERSION_PATCH 0

/* Error codes: XX(name, value, description). */
#define SHMESH_ERROR_MAP(XX)                                                              \
    XX(INVALID, -1, "invalid argument")                                                   \
    XX(PEER_DEAD, -2, "a peer rank died")                                                 \
    XX(ABORTED, -3, "the job was aborted")                                                \
    XX(TIMEOUT, -4, "timed out")                                                          \
    XX(MISMATCH, -5, "ranks made different collective calls")                            \
    XX(NOMEM, -6, "out of memory")                                                        \
    XX(SYSTEM, -7, "system error")                                                        \
    XX(BAD_SEGMENT, -8, "the shared-memory segment is missing, corrupt or from another build")

typedef enum {
    SHMESH_OK = 0,
#define SHMESH_XX(name, value, text) SHMESH_ERR_##name = value,
    SHMESH_ERROR_MAP(SHMESH_XX)
#undef SHMESH_XX
} shmesh_error;

/* Element types.  The numbering is part of the ABI. */
typedef enum {
    SHMESH_BOOL = 0, /* one byte, 0 or 1 */
    SHMESH_INT8,
    SHMESH_INT16,
    SHMESH_INT32,
    SHMESH_INT64,
    SHMESH_UINT8,
    SHMESH_UINT16,
    SHMESH_UINT32,
    SHMESH_UINT64,
    SHMESH_FLOAT16,  /* IEEE binary16 */
    SHMESH_BFLOAT16, /* the upper half of a binary32 */
    SHMESH_FLOAT32,
    SHMESH_FLOAT64,
    SHMESH_DTYPE_COUNT
} shmesh_dtype;

typedef struct shmesh_ctx shmesh_ctx;

/* Joins the job described by the launcher's environment (SHMESH_SEGMENT,
 * SHMESH_RANK, SHMESH_WORLD_SIZE); without it, creates a job of one rank.
 * Collective: returns once every rank has joined.  On success *ctx is a new
 * context the caller owns; on failure *ctx is NULL and shmesh_last_error(NULL)
 * explains, on this thread.
 * Environment read: SHMESH_NOTIFY (uring|futex|auto), SHMESH_TIMEOUT
 * (seconds a single wait may last; default: no limit), SHMESH_SPIN (pause
 * iterations before blocking).  See docs/environment.md. */
SHMESH_API int shmesh_init(shmesh_ctx **ctx);

/* Collective: a barrier, then the context is released.  A peer that exits
 * after its finalize is not a failure for the others.  Returns the barrier's
 * result; the context is freed in every case (NULL is accepted), so a
 * failure is explained by shmesh_last_error(NULL). */
SHMESH_API int shmesh_finalize(shmesh_ctx *ctx);

/* Ends the whole job: records `why` in the segment so every other rank's
 * pending and later calls return SHMESH_ERR_ABORTED naming this rank, then
 * exits this process with status `code` (1 when code is 0 or out of
 * 1..255), which makes the launcher stop the others.  Any rank may call it
 * alone; ctx may be NULL (the process just exits). */
SHMESH_API SHMESH_NORETURN void shmesh_abort(shmesh_ctx *ctx, int code, const char *why);

SHMESH_API int shmesh_rank(const shmesh_ctx *ctx);
SHMESH_API int shmesh_world_size(const shmesh_ctx *ctx);
/* "uring" or "futex": how this rank blocks. */
SHMESH_API const char *shmesh_notifier(const shmesh_ctx *ctx);

/* Collective: returns when every rank has entered it. */
SHMESH_API int shmesh_barrier(shmesh_ctx *ctx);

/* Collective, in place: buf[i] becomes the sum over ranks of buf[i].  Every
 * rank gets the bitwise-identical result: ranks' values are added in rank
 * order (rank 0 first).  Integers wrap; FLOAT16 and BFLOAT16 accumulate in
 * float32 and round once.  BOOL is refused (JAX sums booleans as int32: use an
 * int32 buffer).  count may be 0; buf may be NULL only then.  All ranks must
 * pass the same count and dtype. */
SHMESH_API int shmesh_world_sum(shmesh_ctx *ctx, void *buf, size_t count, shmesh_dtype dtype);

/* "invalid argument", … for a SHMESH_ERR_* code; "success" for 0. */
SHMESH_API const char *shmesh_strerror(int err);
/* "SHMESH_ERR_INVALID", … ; "SHMESH_OK" for 0. */
SHMESH_API const char *shmesh_error_name(int err);
/* The sentence explaining this context's most recent failure ("" if none).
 * With NULL: the last shmesh_init or shmesh_finalize failure on the calling
 * thread. */
SHMESH_API const char *shmesh_last_error(const shmesh_ctx *ctx);

/* Bytes per element; 0 for an unknown dtype. */
SHMESH_API size_t shmesh_dtype_size(shmesh_dtype dtype);
/* "float32", … ; "?" for an unknown dtype. */
SHMESH_API const char *shmesh_dtype_name(shmesh_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
