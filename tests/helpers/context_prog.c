/* shmesh-test-context: a context belongs to one process and one lifetime
 * (issue 24).  Modes:
 *   fork       (2 ranks) after an async call, rank 0 forks; the child's
 *              psum, token wait, shmesh_alloc and shmesh_finalize on the
 *              inherited context are refused (SHMESH_ERR_INVALID, saying
 *              why), the child's finalize returns, and the ranks' next psum
 *              is right (30: the child's 1000 never entered it)
 *   finalize-in-callback
 *              a host callback calls shmesh_finalize with its own context:
 *              refused, and the context goes on (a psum, then finalize)
 *   finalize-other-thread
 *              a second thread calls shmesh_finalize while the first is
 *              inside a blocking psum: refused with its reason (in
 *              shmesh_last_error(NULL) too), nothing freed, the psum right
 *   token-after-finalize
 *              (1 rank, without the launcher) waits on a token of a
 *              finalized context, and again once a new context (often at
 *              the same address) has dispatched as much: refused, never the
 *              new context's result
 *   poison-kept
 *              (2 ranks) ranks make different calls; a later local refusal
 *              (shmesh_free of a pointer that is no block) keeps the
 *              poisoning sentence first in shmesh_last_error
 * Prints "rank R: ok: ..." per check passed and "rank R: FAIL: ..." per
 * check failed; exit 0 pass, 1 fail. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/context.h" /* ctx->busy: whether another thread is inside */
#include "shmesh.h"

static shmesh_ctx *ctx;
static shmesh_mesh *line; /* "i" over every rank */
static int rank = -1, world, failures;
static const char *who = ""; /* " child" in rank 0's fork child */

static void check(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("rank %d%s: %s: ", rank, who, ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!ok)
        failures++;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

#define SCALAR(p) (&(shmesh_array){.data = (p), .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}})

static int psum_of(int32_t v, int32_t *out)
{
    *out = -1;
    return shmesh_psum(line, "i", NULL, SCALAR(&v), SCALAR(out));
}

static int start(void)
{
    if (shmesh_init(&ctx)) {
        printf("FAIL: shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);
    const char *names[] = {"i"};
    int sizes[] = {world};
    if (shmesh_mesh_create(ctx, 1, names, sizes, NULL, &line)) {
        printf("rank %d: FAIL: mesh: %s\n", rank, shmesh_last_error(ctx));
        return 1;
    }
    return 0;
}

static void finish(void)
{
    shmesh_mesh_destroy(line);
    int rc = shmesh_finalize(ctx);
    check(rc == 0, "finalize -> %s %s", shmesh_error_name(rc), rc ? shmesh_last_error(NULL) : "");
}

/* ---- fork ---------------------------------------------------------------- */

static void fork_child(shmesh_token parent_token)
{
    who = " child";
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getppid());
    int32_t out;
    int rc = psum_of(1000, &out);
    const char *why = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_INVALID && strstr(why, "rank 0") && strstr(why, "fork") &&
              strstr(why, pid),
          "psum on the parent's context -> %s: %s", shmesh_error_name(rc), why);
    rc = shmesh_barrier(ctx);
    check(rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(ctx), "fork"),
          "barrier -> %s: %s", shmesh_error_name(rc), shmesh_last_error(ctx));
    rc = shmesh_token_wait(parent_token);
    check(rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(ctx), "fork"),
          "token_wait(the parent's token) -> %s: %s", shmesh_error_name(rc),
          shmesh_last_error(ctx));
    void *p = shmesh_alloc(ctx, 64);
    check(!p && strstr(shmesh_last_error(ctx), "fork"), "shmesh_alloc -> %p: %s", p,
          shmesh_last_error(ctx));
    /* The mesh is this process's copy: freeing it is allowed. */
    shmesh_mesh_destroy(line);
    rc = shmesh_finalize(ctx);
    why = shmesh_last_error(NULL);
    check(rc == SHMESH_ERR_INVALID && strstr(why, "fork") && strstr(why, "rank 0"),
          "finalize -> %s: %s", shmesh_error_name(rc), why);
    fflush(stdout);
    _exit(failures ? 1 : 0);
}

static int mode_fork(void)
{
    if (world != 2) {
        printf("FAIL: fork wants 2 ranks\n");
        return 1;
    }
    int32_t a = rank + 1, sum = -1;
    shmesh_token t;
    int rc = shmesh_psum_async(line, "i", NULL, SCALAR(&a), SCALAR(&sum), &t);
    if (!rc)
        rc = shmesh_token_wait(t);
    check(rc == 0 && sum == 3, "async psum before the fork -> %s, %d", shmesh_error_name(rc),
          sum);
    if (rank == 0) {
        fflush(stdout);
        pid_t child = fork();
        if (child < 0) {
            check(false, "fork: %s", strerror(errno));
            return 1;
        }
        if (child == 0)
            fork_child(t);
        /* The child made its calls before the ranks' next psum; a child
         * that hangs is killed (the check fails), not waited for. */
        int status = 0;
        pid_t got = 0;
        for (int i = 0; i < 30000 && !(got = waitpid(child, &status, WNOHANG)); i++)
            sleep_ms(1);
        if (!got) {
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
        }
        check(got == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the fork child %s", !got ? "hung (killed after 30 s)"
                                   : WIFEXITED(status) && !WEXITSTATUS(status)
                                       ? "exited 0"
                                       : "failed");
    }
    int32_t out;
    rc = psum_of(rank ? 20 : 10, &out);
    check(rc == 0 && out == 30, "psum after the fork -> %s, %d (expected 30)",
          shmesh_error_name(rc), out);
    finish();
    return 0;
}

/* ---- finalize from a callback -------------------------------------------- */

struct in_callback {
    int rc;
    char why[CTX_ERR_MAX], why_null[CTX_ERR_MAX];
};

static void finalize_cb(void *arg, int device)
{
    (void)device;
    struct in_callback *f = arg;
    f->rc = shmesh_finalize(ctx);
    snprintf(f->why, sizeof f->why, "%s", shmesh_last_error(ctx));
    snprintf(f->why_null, sizeof f->why_null, "%s", shmesh_last_error(NULL));
}

static int mode_finalize_in_callback(void)
{
    struct in_callback f = {.rc = 1};
    shmesh_token t;
    int rc = shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, finalize_cb, &f, &t);
    if (!rc)
        rc = shmesh_token_wait(t);
    check(rc == 0, "the callback's token -> %s", shmesh_error_name(rc));
    check(f.rc == SHMESH_ERR_INVALID && strstr(f.why, "callback") && strstr(f.why, "rank "),
          "finalize in a callback -> %s: %s", shmesh_error_name(f.rc), f.why);
    check(strstr(f.why_null, "callback") != NULL, "shmesh_last_error(NULL) says it: %s",
          f.why_null);
    int32_t out;
    rc = psum_of(rank + 1, &out);
    check(rc == 0 && out == world * (world + 1) / 2, "afterwards psum -> %s, %d",
          shmesh_error_name(rc), out);
    finish();
    return 0;
}

/* ---- finalize from a second thread --------------------------------------- */

static atomic_int gate_open;

/* Holds the dispatch queue (and so the first thread's psum queued behind
 * it) until the second thread has tried; gives up after 30 s so nothing
 * hangs. */
static void gate_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
    for (int i = 0; i < 30000 && !atomic_load(&gate_open); i++)
        sleep_ms(1);
}

struct psummer {
    int rc;
    int32_t out;
};

static void *psum_thread(void *arg)
{
    struct psummer *p = arg;
    p->rc = psum_of(rank + 1, &p->out);
    return NULL;
}

static int mode_finalize_other_thread(void)
{
    shmesh_token g;
    int rc = shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, gate_cb, NULL, &g);
    check(rc == 0, "gate callback dispatched -> %s", shmesh_error_name(rc));
    struct psummer p = {.rc = 1};
    pthread_t th;
    if (pthread_create(&th, NULL, psum_thread, &p)) {
        check(false, "pthread_create");
        return 1;
    }
    /* The psum is queued behind the closed gate: once the thread is inside,
     * it stays inside until the gate opens. */
    int inside = 0;
    for (int i = 0; i < 30000 && !(inside = atomic_load(&ctx->busy)); i++)
        sleep_ms(1);
    check(inside != 0, "the first thread is inside its psum");
    rc = shmesh_finalize(ctx);
    char why_null[CTX_ERR_MAX], why[CTX_ERR_MAX];
    snprintf(why_null, sizeof why_null, "%s", shmesh_last_error(NULL));
    snprintf(why, sizeof why, "%s", shmesh_last_error(ctx));
    check(rc == SHMESH_ERR_INVALID, "finalize from a second thread -> %s",
          shmesh_error_name(rc));
    check(why_null[0] && strstr(why_null, "shmesh_finalize") && strstr(why_null, "thread") &&
              strstr(why_null, "rank "),
          "shmesh_last_error(NULL) says why: \"%s\"", why_null);
    check(why[0] && strstr(why, "shmesh_finalize"),
          "shmesh_last_error(ctx) on the refused thread says why: \"%s\"", why);
    atomic_store(&gate_open, 1);
    pthread_join(th, NULL);
    check(p.rc == 0 && p.out == world * (world + 1) / 2,
          "the first thread's psum -> %s, %d (expected %d)", shmesh_error_name(p.rc), p.out,
          world * (world + 1) / 2);
    rc = shmesh_token_wait(g);
    check(rc == 0, "the gate's token -> %s", shmesh_error_name(rc));
    finish();
    return 0;
}

/* ---- a token after finalize ---------------------------------------------- */

static int mode_token_after_finalize(void)
{
    int32_t v = 5, out = -1;
    shmesh_token old;
    int rc = shmesh_psum_async(line, "i", NULL, SCALAR(&v), SCALAR(&out), &old);
    if (!rc)
        rc = shmesh_token_wait(old);
    check(rc == 0 && out == 5 && old.ctx == ctx, "async psum -> %s, %d", shmesh_error_name(rc),
          out);
    shmesh_token undone; /* finalize waits for it */
    shmesh_barrier_async(ctx, &undone);
    shmesh_mesh_destroy(line);
    rc = shmesh_finalize(ctx);
    check(rc == 0, "finalize -> %s", shmesh_error_name(rc));
    shmesh_token toks[2] = {old, undone};
    int index = -1;
    for (int i = 0; i < 4; i++) {
        const char *what[] = {"token_wait", "token_test", "token_wait_all", "token_wait_any"};
        rc = i == 0   ? shmesh_token_wait(old)
             : i == 1 ? shmesh_token_test(undone)
             : i == 2 ? shmesh_token_wait_all(2, toks)
                      : shmesh_token_wait_any(2, toks, &index);
        const char *why = shmesh_last_error(NULL);
        check(rc == SHMESH_ERR_INVALID && strstr(why, "finalized"), "%s after finalize -> %s: %s",
              what[i], shmesh_error_name(rc), why);
    }
    /* A new context, often where the old one was, with as much dispatched:
     * the old token must not become one of its positions. */
    shmesh_ctx *was = ctx;
    if (start())
        return 1;
    printf("rank %d: the new context is %s\n", rank,
           ctx == was ? "at the old one's address" : "elsewhere");
    shmesh_token t[3];
    for (int i = 0; i < 3; i++)
        shmesh_psum_async(line, "i", NULL, SCALAR(&v), SCALAR(&out), &t[i]);
    rc = shmesh_token_wait_all(3, t);
    check(rc == 0, "the new context's tokens -> %s", shmesh_error_name(rc));
    rc = shmesh_token_wait(old);
    check(rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(NULL), "finalized"),
          "the old token beside a new context -> %s: %s", shmesh_error_name(rc),
          shmesh_last_error(NULL));
    rc = shmesh_token_test(t[2]);
    check(rc == 1, "the new context's token still tests done -> %d", rc);
    finish();
    return 0;
}

/* ---- the poisoning sentence is kept -------------------------------------- */

static int mode_poison_kept(void)
{
    int32_t out;
    int rc = rank == 0 ? psum_of(1, &out) : shmesh_barrier(ctx);
    char first[CTX_ERR_MAX];
    snprintf(first, sizeof first, "%s", shmesh_last_error(ctx));
    check(rc == SHMESH_ERR_MISMATCH, "different calls -> %s: %s", shmesh_error_name(rc), first);
    int32_t local;
    shmesh_free(ctx, &local); /* not a block: refused, locally */
    const char *now = shmesh_last_error(ctx);
    check(!strncmp(now, first, strlen(first)) && strstr(now, "shmesh_free"),
          "after a refused shmesh_free the explanation still starts with the poison: %s", now);
    rc = psum_of(1, &out);
    now = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_MISMATCH && !strncmp(now, first, strlen(first)),
          "a later psum -> %s, explained by the poison: %s", shmesh_error_name(rc), now);
    shmesh_mesh_destroy(line);
    rc = shmesh_finalize(ctx);
    check(rc == SHMESH_ERR_MISMATCH, "finalize -> %s", shmesh_error_name(rc));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: shmesh-test-context fork|finalize-in-callback|"
                        "finalize-other-thread|token-after-finalize|poison-kept\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (start())
        return 1;
    int rc;
    if (!strcmp(argv[1], "fork"))
        rc = mode_fork();
    else if (!strcmp(argv[1], "finalize-in-callback"))
        rc = mode_finalize_in_callback();
    else if (!strcmp(argv[1], "finalize-other-thread"))
        rc = mode_finalize_other_thread();
    else if (!strcmp(argv[1], "token-after-finalize"))
        rc = mode_token_after_finalize();
    else if (!strcmp(argv[1], "poison-kept"))
        rc = mode_poison_kept();
    else
        rc = 2;
    return rc || failures ? 1 : 0;
}
