/* Error codes, their names, and the per-context explanation. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"

static _Thread_local char init_err[CTX_ERR_MAX];
_Thread_local const shmesh_ctx *error_refused_ctx CTX_TLS_FAST;
_Thread_local const shmesh_ctx *ctx_executing CTX_TLS_FAST;
_Thread_local const shmesh_ctx *ctx_worker CTX_TLS_FAST;
_Thread_local const shmesh_ctx *ctx_in_callback CTX_TLS_FAST;

char *ctx_err_buf(shmesh_ctx *c) { return ctx_worker == c ? c->worker_err : c->err; }

const char *shmesh_strerror(int err)
{
    switch (err) {
    case SHMESH_OK:
        return "success";
#define SHMESH_XX(name, value, text)                                                           \
    case SHMESH_ERR_##name:                                                                    \
        return text;
        SHMESH_ERROR_MAP(SHMESH_XX)
#undef SHMESH_XX
    }
    return "unknown shmesh error";
}

const char *shmesh_error_name(int err)
{
    switch (err) {
    case SHMESH_OK:
        return "SHMESH_OK";
#define SHMESH_XX(name, value, text)                                                           \
    case SHMESH_ERR_##name:                                                                    \
        return "SHMESH_ERR_" #name;
        SHMESH_ERROR_MAP(SHMESH_XX)
#undef SHMESH_XX
    }
    return "SHMESH_ERR_UNKNOWN";
}

const char *shmesh_last_error(const shmesh_ctx *c)
{
    if (c && c == ctx_worker) /* a host callback asking about its refusal */
        return c->worker_err;
    return c && c != error_refused_ctx ? c->err : init_err;
}

static void vset(char *buf, int rank, const char *fmt, va_list ap)
{
    int n = snprintf(buf, CTX_ERR_MAX, "rank %d: ", rank);
    if (n < 0 || n >= CTX_ERR_MAX)
        n = 0;
    vsnprintf(buf + n, CTX_ERR_MAX - (size_t)n, fmt, ap);
}

/* A poisoned context's explanation: the sentence that poisoned it, then
 * what failed since (cut to fit).  The poison is why nothing works any
 * more; a later local refusal must not hide it. */
static void vset_after_poison(shmesh_ctx *c, char *buf, const char *fmt, va_list ap)
{
    char later[CTX_ERR_MAX];
    vset(later, c->job_rank, fmt, ap);
    size_t n = strnlen(c->poison_err, CTX_ERR_MAX - 1);
    memmove(buf, c->poison_err, n);
    /* Appended as far as it fits: the poison's sentence comes first whole. */
    const char *parts[] = {"; later, ", later};
    for (int i = 0; i < 2; i++)
        for (const char *p = parts[i]; *p && n < CTX_ERR_MAX - 1; p++)
            buf[n++] = *p;
    buf[n] = '\0';
}

int ctx_fail(shmesh_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (atomic_load(&c->poison_said)) {
        vset_after_poison(c, ctx_err_buf(c), fmt, ap);
    } else {
        char *buf = ctx_err_buf(c);
        vset(buf, c->job_rank, fmt, ap);
        if (c->fail_note && code == SHMESH_ERR_INVALID) {
            size_t n = strnlen(buf, CTX_ERR_MAX - 1);
            snprintf(buf + n, CTX_ERR_MAX - n, "%s", c->fail_note);
        }
    }
    va_end(ap);
    return code;
}

_Atomic bool ctx_poisoned_here;

int ctx_poison(shmesh_ctx *c, int code, const char *fmt, ...)
{
    atomic_store(&ctx_poisoned_here, true);
    va_list ap;
    va_start(ap, fmt);
    char *buf = ctx_err_buf(c);
    if (atomic_exchange(&c->poison_said, true)) {
        /* Poisoned already: the first poison stays, code and sentence. */
        vset_after_poison(c, buf, fmt, ap);
    } else {
        vset(buf, c->job_rank, fmt, ap);
        memcpy(c->poison_err, buf, sizeof c->poison_err);
        c->poison = code;
    }
    va_end(ap);
    return code;
}

void init_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_err, sizeof init_err, fmt, ap);
    va_end(ap);
}
