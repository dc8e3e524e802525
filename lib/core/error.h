/* Errors: the per-context explanation of a failure, and the message of a
 * failure that has no context (shmesh_init, NULL arguments). */
#ifndef SHMESH_CORE_ERROR_H
#define SHMESH_CORE_ERROR_H

#include <stdbool.h>

#include "shmesh.h"

#define CTX_ERR_MAX 512

/* Thread-locals read on every call: the initial-exec model makes each read
 * one instruction instead of a call to __tls_get_addr (30 instructions a
 * call).  It takes a few bytes of the static TLS that glibc keeps spare for
 * libraries loaded later (dlopen, Python's ctypes). */
#define CTX_TLS_FAST __attribute__((tls_model("initial-exec")))

/* Sets the context's explanation ("rank R: " + the sentence) and returns
 * code.  On a poisoned context the sentence comes after the poison's,
 * which stays first. */
int ctx_fail(shmesh_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* As ctx_fail, and every later call returns `code` — unless the context
 * was poisoned already: the first poison's code and sentence stay. */
int ctx_poison(shmesh_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Some context of this process was poisoned: its job cannot go on alike on
 * every rank (net/boot.c ends a job of several nodes at exit then). */
extern _Atomic bool ctx_poisoned_here;
/* The explanation shmesh_last_error(NULL) gives (this thread's). */
void init_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The context this thread was refused (another thread was inside it), whose
 * explanation is then this thread's rather than the context's, which the
 * other thread owns: shmesh_last_error(ctx) gives it until this thread
 * enters the context again. */
extern _Thread_local const shmesh_ctx *error_refused_ctx CTX_TLS_FAST;

/* The context whose dispatcher this thread executes work of (its progress
 * thread, or a caller running work of an idle dispatcher), and the context
 * whose progress thread this is.  Engine work of ctx_executing runs
 * directly; a progress thread explains failures in its own buffer. */
extern _Thread_local const shmesh_ctx *ctx_executing CTX_TLS_FAST;
extern _Thread_local const shmesh_ctx *ctx_worker CTX_TLS_FAST;
/* The context whose host callback this thread is running: the callback
 * may not call the library with it (core/fail.c refuses). */
extern _Thread_local const shmesh_ctx *ctx_in_callback CTX_TLS_FAST;
/* Where this thread writes c's explanations. */
char *ctx_err_buf(shmesh_ctx *c);

#endif
