/* The SIGBUS guard of mapped segments (see guard.h).  Everything the
 * handler does is async-signal-safe: loads from a static table, fstat,
 * ftruncate, mmap, the abort record's atomics and futex wakes. */
#include "guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segment.h"

#define GUARD_SLOTS 64
#define GUARD_TAKEN ((uintptr_t)1) /* a slot being filled or emptied */
#define GUARD_REPEATS 8            /* the same page faulting again after a repair: give up */

struct guard_slot {
    _Atomic uintptr_t base; /* 0: free */
    struct seg *seg;
    size_t size;
    int fd; /* read-write descriptor of the file, or -1 */
    dev_t dev;
    ino_t ino;
    bool writable;
    char who[40];
    _Atomic bool tripped;
    _Atomic uint64_t found;
    _Atomic uintptr_t last_page;
    _Atomic int repeats;
};

static struct guard_slot slots[GUARD_SLOTS];
static struct sigaction previous; /* the action ours replaced */
static _Atomic int chaining;      /* a handler of ours inside `previous` */
static uintptr_t page_size = 4096;
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- text without snprintf -------------------------------------------------- */

struct text {
    char *p;
    size_t len, cap;
};

static void put(struct text *t, const char *s)
{
    while (*s && t->len + 1 < t->cap)
        t->p[t->len++] = *s++;
    t->p[t->len] = '\0';
}

static void put_u64(struct text *t, uint64_t v)
{
    char digits[24];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10));
    char one[2] = {0, 0};
    while (n) {
        one[0] = digits[--n];
        put(t, one);
    }
}

/* ---- the handler ------------------------------------------------------------ */

/* A fault that is not ours: to the handler that was there before, or the
 * default action (the access faults again and kills, as without us). */
static void chain(int sig, siginfo_t *si, void *uc)
{
    /* Not back into `previous` from itself (a handler that saved ours as
     * its own previous one, and calls it): the default action then. */
    bool nested = atomic_fetch_add(&chaining, 1) > 0;
    bool called = false;
    if (!nested && (previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
        previous.sa_sigaction(sig, si, uc);
        called = true;
    } else if (!nested && !(previous.sa_flags & SA_SIGINFO) && previous.sa_handler != SIG_DFL &&
               previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        called = true;
    }
    atomic_fetch_sub(&chaining, 1);
    if (called)
        return;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (si->si_code <= 0)
        raise(sig); /* sent, not a fault: delivered as we return */
}

/* Notes the fault, and tells the job: every time, since a second cut may
 * have taken the header and the abort record with it. */
static void record(struct guard_slot *g, uint64_t found)
{
    if (!atomic_exchange(&g->tripped, true))
        atomic_store(&g->found, found);
    if (!g->writable)
        return;
    char reason[SEG_REASON_MAX];
    struct text t = {reason, 0, sizeof reason};
    put(&t, "the segment was truncated");
    if (found != UINT64_MAX) {
        put(&t, " to ");
        put_u64(&t, found);
        put(&t, " bytes");
    }
    put(&t, " by another process (expected ");
    put_u64(&t, g->size);
    put(&t, " bytes), seen by ");
    put(&t, g->who);
    put(&t, ": what it held past the cut is lost");
    seg_abort(g->seg, SEG_CAUSE_CORRUPT, -1, 0, reason);
}

/* Makes the faulting access at `addr` work again (see guard.h): false when
 * nothing could be done. */
static bool repair(struct guard_slot *g, uintptr_t base, uintptr_t addr)
{
    uintptr_t page = addr & ~(page_size - 1);
    if (atomic_exchange(&g->last_page, page) == page) {
        if (atomic_fetch_add(&g->repeats, 1) >= GUARD_REPEATS)
            return false;
    } else {
        atomic_store(&g->repeats, 0);
    }
    uint64_t found = UINT64_MAX;
    struct stat st;
    if (g->fd >= 0 && fstat(g->fd, &st) == 0 && st.st_dev == g->dev && st.st_ino == g->ino)
        found = (uint64_t)st.st_size;
    bool cut = found < g->size;
    /* The abort first, while the pages past the cut still fault, so that no
     * rank reads their zeros as its peers' words before the job knows why
     * (unless the header itself was cut: then just after). */
    bool header_kept = cut && found >= sizeof(struct seg_header);
    if (header_kept)
        record(g, found);
    if (cut && g->writable && ftruncate(g->fd, (off_t)g->size) == 0) {
        record(g, found);
        return true;
    }
    /* Private zero pages from the cut (or the faulting page) to the end of
     * the mapping; a page that faults below the cut (no memory left for a
     * hole another process punched) alone. */
    uintptr_t from = page, to = page + page_size;
    if (cut || found == UINT64_MAX) {
        to = base + g->size;
        if (cut) {
            uintptr_t at = base + (found + page_size - 1) / page_size * page_size;
            from = at < page ? at : page;
        }
    }
    int prot = g->writable ? PROT_READ | PROT_WRITE : PROT_READ;
    if (mmap((void *)from, to - from, prot, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
        MAP_FAILED)
        return false;
    record(g, found);
    return true;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    uintptr_t addr = (uintptr_t)si->si_addr;
    if (si->si_code > 0) {
        for (int i = 0; i < GUARD_SLOTS; i++) {
            uintptr_t base = atomic_load_explicit(&slots[i].base, memory_order_acquire);
            if (base > GUARD_TAKEN && addr >= base && addr - base < slots[i].size) {
                if (!repair(&slots[i], base, addr))
                    chain(sig, si, uc);
                errno = saved;
                return;
            }
        }
    }
    chain(sig, si, uc);
    errno = saved;
}

/* Ours, unless it is already: with the first segment, and again with a
 * later one if another handler took its place meanwhile (it is then the
 * one faults outside the segments go to). */
static void install(void)
{
    pthread_mutex_lock(&install_lock);
    long p = sysconf(_SC_PAGESIZE);
    if (p > 0)
        page_size = (uintptr_t)p;
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) == 0 &&
        !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &previous);
    }
    pthread_mutex_unlock(&install_lock);
}

/* ---- the table -------------------------------------------------------------- */

void seg_guard_add(struct seg *s, const char *who, bool writable)
{
    s->guard = -1;
    install();
    struct stat st;
    bool known = s->fd >= 0 && fstat(s->fd, &st) == 0;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        uintptr_t free_slot = 0;
        struct guard_slot *g = &slots[i];
        if (!atomic_compare_exchange_strong(&g->base, &free_slot, GUARD_TAKEN))
            continue;
        g->seg = s;
        g->size = s->size;
        g->fd = known ? s->fd : -1;
        g->dev = known ? st.st_dev : 0;
        g->ino = known ? st.st_ino : 0;
        g->writable = writable && !s->readonly;
        size_t n = strlen(who) < sizeof g->who - 1 ? strlen(who) : sizeof g->who - 1;
        memcpy(g->who, who, n);
        g->who[n] = '\0';
        atomic_store(&g->tripped, false);
        atomic_store(&g->found, 0);
        atomic_store(&g->last_page, 0);
        atomic_store(&g->repeats, 0);
        atomic_store_explicit(&g->base, (uintptr_t)s->base, memory_order_release);
        s->guard = i;
        return;
    }
}

void seg_guard_remove(struct seg *s)
{
    if (s->guard < 0 || s->guard >= GUARD_SLOTS)
        return;
    atomic_store_explicit(&slots[s->guard].base, 0, memory_order_release);
    s->guard = -1;
}

bool seg_guard_tripped(const struct seg *s, uint64_t *found)
{
    if (s->guard < 0 || s->guard >= GUARD_SLOTS)
        return false;
    const struct guard_slot *g = &slots[s->guard];
    if (!atomic_load(&g->tripped))
        return false;
    if (found)
        *found = atomic_load(&g->found);
    return true;
}
