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

int ctx_fail(shmesh_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(ctx_err_buf(c), c->rank, fmt, ap);
    va_end(ap);
    return code;
}

int ctx_poison(shmesh_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *buf = ctx_err_buf(c);
    vset(buf, c->rank, fmt, ap);
    va_end(ap);
    /* The first poison's sentence is kept for the tokens it fails. */
    if (!atomic_exchange(&c->poison_said, true))
        memcpy(c->poison_err, buf, sizeof c->poison_err);
    c->poison = code;
    return code;
}

void init_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_err, sizeof init_err, fmt, ap);
    va_end(ap);
}
