/* The process's live contexts (see registry.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/fail.h"
#include "core/registry.h"

/* Taken by registrations, token look-ups and, around fork(), by the fork
 * handlers: the child finds the list whole. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static shmesh_ctx *live;
/* The last dispatch position any finalized context handed out. */
static uint64_t high_water;
/* The rank of the last finalized context, for messages about its tokens
 * (a process holds one rank of a job). */
static int last_rank = -1;

static void before_fork(void) { pthread_mutex_lock(&lock); }

static void after_fork_parent(void) { pthread_mutex_unlock(&lock); }

/* In the child (one thread, a copy of the parent's memory): every context
 * is the parent's.  A flag, not a release: the child may use none of it,
 * and shmesh_finalize releases the child's copy. */
static void after_fork_child(void)
{
    for (shmesh_ctx *c = live; c; c = c->live_next)
        atomic_store_explicit(&c->busy, CTX_BUSY_FORKED, memory_order_relaxed);
    ctx_thread_forked();
    pthread_mutex_unlock(&lock);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int atfork_rc;

static void install(void)
{
    atfork_rc = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

int registry_add(shmesh_ctx *c)
{
    pthread_once(&once, install);
    if (atfork_rc)
        return SHMESH_ERR_SYSTEM;
    pthread_mutex_lock(&lock);
    c->seq_base = high_water;
    c->live_next = live;
    live = c;
    pthread_mutex_unlock(&lock);
    return 0;
}

void registry_remove(shmesh_ctx *c, uint64_t last)
{
    pthread_mutex_lock(&lock);
    for (shmesh_ctx **p = &live; *p; p = &(*p)->live_next)
        if (*p == c) {
            *p = c->live_next;
            break;
        }
    if (last > high_water)
        high_water = last;
    last_rank = c->job_rank;
    pthread_mutex_unlock(&lock);
}

/* Under lock. */
static shmesh_ctx *find(const shmesh_ctx *p)
{
    shmesh_ctx *c = live;
    while (c && c != p)
        c = c->live_next;
    return c;
}

bool registry_live(const shmesh_ctx *p)
{
    pthread_mutex_lock(&lock);
    bool yes = find(p) != NULL;
    pthread_mutex_unlock(&lock);
    return yes;
}

int registry_token(const shmesh_token *t, const char *fn, shmesh_ctx **out)
{
    *out = NULL;
    if (!t->ctx || !t->seq)
        return 0;
    pthread_mutex_lock(&lock);
    shmesh_ctx *c = find(t->ctx);
    /* At or below the base: a position of a finalized context that sat
     * where this one is. */
    bool gone = !c || t->seq <= c->seq_base;
    int rank = c ? c->job_rank : last_rank;
    pthread_mutex_unlock(&lock);
    if (gone) {
        char who[24] = "";
        if (rank >= 0)
            snprintf(who, sizeof who, "rank %d: ", rank);
        init_error("%s%s: the token's context (%p) was finalized, or is no context of this "
                   "process (expected a token of a live context): a token is refused after "
                   "shmesh_finalize, its work finished",
                   who, fn, (void *)t->ctx);
        return SHMESH_ERR_INVALID;
    }
    if (atomic_load_explicit(&c->busy, memory_order_relaxed) == CTX_BUSY_FORKED)
        return fail_forked(c, fn);
    *out = c;
    return 0;
}
