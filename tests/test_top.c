/* shmesh-top (tools/top.c): a job's view and its diagnosis.
 *
 *   test-top GROUP...     the groups, in order (meson: cli fake jobs; other-user)
 *   test-top cli          arguments, and no job to attach to
 *   test-top fake         a segment this process creates and fills by hand,
 *                         as a launcher would hold it (its name set to
 *                         shmesh-run, children as ranks): each kind of rank
 *                         the others may wait for, chains and a cycle,
 *                         waits for an effect's program point and for tokens
 *   test-top jobs         real jobs of shmesh-test-top under shmesh-run: a
 *                         rank that sleeps between calls, one that skips one,
 *                         one that runs a long callback the others wait for
 *                         (their dispatch queues for its program point,
 *                         every main thread for a token); the live view
 *                         (--json) ends with its job
 *   test-top other-user   another user (nobody, through runuser) is refused;
 *                         exits 77 (skipped) when not root or without runuser
 *
 * Everything runs with a deadline, and every process a test starts is
 * killed by its process group, the fake ranks by their pids. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "proc.h"
#include "shm/segment.h"

#define WORLD 4
/* enum call_op's number of psum: the op table's line, plus one for OP_NONE
 * (shm/optable.h); the fake job's calls use it. */
#include "shm/optable.h"
enum {
    TOP_OP_NONE = 0,
#define TOP_OP_ID(ID, ...) TOP_OP_##ID,
    SHMESH_OPS(TOP_OP_ID)
#undef TOP_OP_ID
};

static const char *top_path(void) { return need_env("SHMESH_TOP"); }

/* shmesh-top with these arguments (NULL-terminated). */
static void top(struct run *r, char *const env[], ...)
{
    va_list ap;
    va_start(ap, env);
    int rc = run_prog_v(r, env, 20, top_path(), ap);
    va_end(ap);
    assert_int_equal(rc, 0);
    assert_false(r->timed_out);
}

/* As top(), for use while a job runs: no assertion (a failure's jump
 * would leave the job running); a run that could not start has code -1. */
static void top_quiet(struct run *r, const char *a, const char *b, const char *c)
{
    char *argv[] = {(char *)top_path(), (char *)a, (char *)b, (char *)c, NULL};
    if (run_cmd(argv, NULL, 60, r)) {
        memset(r, 0, sizeof *r);
        r->code = -1;
        r->out = strdup("");
        r->err = strdup("cannot run shmesh-top");
    }
}

static void expect_in(const struct run *r, const char *text, const char *what)
{
    if (!strstr(r->out, text))
        fail_msg("%s: expected '%s' in shmesh-top's output (exit %d)\nstdout:\n%s\nstderr:\n%s",
                 what, text, r->code, r->out, r->err);
}

/* The number of seconds shmesh-top printed right after `text` (its first
 * occurrence): at least `secs`, which the test set that long ago (no less
 * can have passed), and not absurdly more.  It grows while shmesh-top
 * starts, which on a busy machine may take a second or more: no upper
 * bound that a slow start could pass. */
static void expect_secs(const struct run *r, const char *text, double secs, const char *what)
{
    const char *p = strstr(r->out, text);
    if (!p)
        fail_msg("%s: expected '%s' in shmesh-top's output (exit %d)\nstdout:\n%s\nstderr:\n%s",
                 what, text, r->code, r->out, r->err);
    char *end;
    double got = strtod(p + strlen(text), &end);
    if (end == p + strlen(text) || got < secs - 0.05 || got > secs + 300)
        fail_msg("%s: expected at least %.1f s after '%s' in shmesh-top's output, found "
                 "'%.12s'\nstdout:\n%s",
                 what, secs, text, p + strlen(text), r->out);
}

/* ---- arguments, no job ---------------------------------------------------- */

static void bad_arguments(void **state)
{
    static const char *const bad[][3] = {
        {"--bogus", NULL, NULL},     {"--interval", "0", NULL}, {"--interval", "x", NULL},
        {"12", "34", NULL},          {"notapid", NULL, NULL},   {"--once", "-5", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct run r;
        top(&r, NULL, bad[i][0], bad[i][1], bad[i][2], NULL);
        if (r.code != 2 || !strstr(r.err, "Usage: shmesh-top"))
            fail_msg("shmesh-top %s %s: expected exit 2 and the usage, got exit %d\n%s", bad[i][0],
                     bad[i][1] ? bad[i][1] : "", r.code, r.err);
        run_free(&r);
    }
    struct run r;
    top(&r, NULL, "--help", NULL);
    assert_int_equal(r.code, 0);
    expect_in(&r, "--interval", "--help");
    run_free(&r);
}

/* An empty /proc (SHMESH_SYSROOT): no job, whatever else runs here. */
static void no_job(void **state)
{
    char root[] = "/tmp/shmesh-top-test-XXXXXX";
    assert_non_null(mkdtemp(root));
    char proc[64];
    snprintf(proc, sizeof proc, "%s/proc", root);
    assert_int_equal(mkdir(proc, 0700), 0);
    char env[96];
    snprintf(env, sizeof env, "SHMESH_SYSROOT=%s", root);
    char *const envs[] = {env, NULL};
    struct run r;
    top(&r, envs, "--once", NULL);
    bool ok = r.code == 1 && strstr(r.err, "no shmesh job of user") && !r.out[0];
    if (!ok)
        fail_msg("--once without a job: expected exit 1 and 'no shmesh job of user', got exit "
                 "%d\nstdout:\n%s\nstderr:\n%s",
                 r.code, r.out, r.err);
    run_free(&r);
    /* A pid that is not running, and one that is not a launcher. */
    top(&r, envs, "--once", "--json", "999999", NULL);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "no process 999999"));
    run_free(&r);
    rmdir(proc);
    rmdir(root);
    char self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    top(&r, NULL, "--once", self, NULL);
    if (r.code != 1 || !strstr(r.err, "not shmesh-run"))
        fail_msg("a pid that is no launcher: expected exit 1 and 'not shmesh-run', got %d\n%s",
                 r.code, r.err);
    run_free(&r);
}

/* ---- a job filled by hand -------------------------------------------------- */

static struct seg *fake;
static pid_t fake_ranks[WORLD];
static char fake_pid[32];

/* Ranks that sleep until killed, children of this process like a
 * launcher's. */
static int fake_setup(void **state)
{
    for (int r = 0; r < WORLD; r++) {
        fake_ranks[r] = fork();
        if (fake_ranks[r] == 0) {
            prctl(PR_SET_NAME, "top-fake-rank");
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (;;)
                pause();
        }
        assert_true(fake_ranks[r] > 0);
    }
    struct seg_create_opts o = {.world_size = WORLD, .numa = 0};
    char err[256];
    if (seg_create(&o, &fake, err, sizeof err))
        fail_msg("seg_create: %s", err);
    /* As the launcher keeps it: the descriptor open, the name gone. */
    seg_unlink(fake);
    prctl(PR_SET_NAME, "shmesh-run");
    snprintf(fake_pid, sizeof fake_pid, "%d", (int)getpid());
    return 0;
}

static int fake_teardown(void **state)
{
    prctl(PR_SET_NAME, "test-top");
    for (int r = 0; r < WORLD; r++) {
        if (fake_ranks[r] > 0) {
            kill(fake_ranks[r], SIGKILL);
            waitpid(fake_ranks[r], NULL, 0);
        }
    }
    seg_close(fake);
    fake = NULL;
    return 0;
}

enum { IDLE = SEG_ACT_IDLE, CALL = SEG_ACT_CALL, WAIT = SEG_ACT_WAIT };

/* Rank r: attached, alive, in or after call `call` (a psum), `act`, waiting
 * for `for_rank` since `secs` seconds ago. */
static void set_rank(int r, int act, uint64_t call, int for_rank, double secs)
{
    struct seg_ctrl *c = seg_ctrl(fake, r);
    struct seg_status *s = &c->status;
    atomic_store(&c->pid, fake_ranks[r]);
    atomic_store(&c->state, SEG_RANK_ATTACHED);
    atomic_store(&s->call, SEG_STATUS_CALL(call, TOP_OP_PSUM));
    atomic_store(&s->wait_rank, for_rank);
    atomic_store(&s->wait_tag, call << 32);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    atomic_store(&s->wait_since, now - (int64_t)(secs * 1e9));
    atomic_store(&s->bytes, 4 * (call - (act == IDLE ? 0 : 1)));
    snprintf(s->notifier, sizeof s->notifier, "futex");
    atomic_store(&s->activity, (uint32_t)act);
}

/* Rank r's call (as set_rank left it) is a callback, and it waits for its
 * peer's program point `point` of effect `effect` rather than a window. */
static void set_point(int r, uint64_t point, const char *effect)
{
    struct seg_status *s = &seg_ctrl(fake, r)->status;
    uint64_t call = atomic_load(&s->call) >> 8;
    atomic_store(&s->call, SEG_STATUS_CALL(call, TOP_OP_CALLBACK));
    atomic_store(&s->wait_point, point);
    snprintf(s->wait_effect, sizeof s->wait_effect, "%s", effect);
    atomic_store(&s->wait_kind, SEG_WAIT_POINT);
}

/* A thread of rank r blocks on a token: position seq of its dispatch
 * queue, of which `done` finished, for `secs` seconds. */
static void set_token(int r, uint64_t seq, uint64_t done, double secs)
{
    struct seg_ctrl *c = seg_ctrl(fake, r);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    atomic_store(&c->status.token_since, now - (int64_t)(secs * 1e9));
    atomic_store(&c->status.token_seq, seq);
    atomic_store(&c->done.value, done);
}

/* Ranks 0-2 wait in call #7 for rank 3 (rank 0 through rank 1), each
 * blocked a few seconds; rank 3 as the test sets it. */
static void waiting_for_3(void)
{
    set_rank(0, WAIT, 7, 1, 2.5);
    set_rank(1, WAIT, 7, 3, 3.5);
    set_rank(2, WAIT, 7, 3, 1.5);
}

static void show(struct run *r, bool json)
{
    if (json)
        top(r, NULL, "--once", "--json", fake_pid, NULL);
    else
        top(r, NULL, "--once", fake_pid, NULL);
    if (r->code != 0)
        fail_msg("shmesh-top --once %s: exit %d\n%s", fake_pid, r->code, r->err);
}

static void fake_outside_call(void **state)
{
    waiting_for_3();
    set_rank(3, IDLE, 6, -1, 0);
    struct run r;
    show(&r, false);
    print_message("%s", r.out); /* for the log: what a hung job looks like */
    expect_secs(&r, "ranks 0-2 wait for rank 3 in call #7 (psum), blocked for ", 3.5,
                "chain to 3");
    expect_in(&r, "rank 3 is outside any call (its last call: #6 psum)", "rank 3 idle");
    run_free(&r);
    show(&r, true);
    expect_in(&r, "\"for\":3,\"cycle\":null,\"doing\":\"outside_call\",\"its_call\":6,"
                  "\"its_op\":\"psum\",\"waiters\":[0,1,2],\"call\":7,\"op\":\"psum\"",
              "json");
    expect_in(&r, "{\"rank\":1,", "json rank 1");
    /* Rank 1 is the first that waits for rank 3. */
    expect_secs(&r, "\"activity\":\"wait\",\"call\":7,\"op\":\"psum\",\"wait_rank\":3,"
                    "\"wait_call\":7,\"wait_window\":0,\"waited_s\":",
                3.5, "json rank 1's wait");
    /* Rank 1 waits for 3 itself, rank 0 for 1. */
    expect_in(&r, "\"wait_rank\":1,\"wait_call\":7,", "json rank 0's wait");
    expect_in(&r, "\"notifier\":\"futex\",\"calls\":6,\"bytes\":24,", "json counters");
    run_free(&r);
}

static void fake_in_call(void **state)
{
    waiting_for_3();
    set_rank(3, CALL, 8, -1, 0);
    struct run r;
    show(&r, false);
    expect_in(&r, "rank 3 is in call #8 (psum), not blocked (running, or spinning", "3 running");
    run_free(&r);
}

static void fake_exited(void **state)
{
    waiting_for_3();
    set_rank(3, IDLE, 6, -1, 0);
    /* Rank 3's process gone (reaped: its pid names no one, or someone else). */
    kill(fake_ranks[3], SIGKILL);
    waitpid(fake_ranks[3], NULL, 0);
    struct run r;
    show(&r, false);
    char want[128];
    snprintf(want, sizeof want, "rank 3 (pid %d) has exited without finalizing (its last call: "
                                "#6 psum)", (int)fake_ranks[3]);
    fake_ranks[3] = 0;
    expect_in(&r, want, "3 exited");
    expect_in(&r, "ranks 0-2 wait for rank 3 in call #7", "waiters of the dead rank");
    run_free(&r);
}

static void fake_never_attached(void **state)
{
    waiting_for_3();
    struct seg_ctrl *c = seg_ctrl(fake, 3);
    atomic_store(&c->state, SEG_RANK_EMPTY);
    atomic_store(&c->pid, 0);
    struct run r;
    show(&r, false);
    expect_in(&r, "rank 3 never attached", "3 not attached");
    run_free(&r);
}

static void fake_cycle(void **state)
{
    set_rank(0, WAIT, 7, 1, 1);
    set_rank(1, WAIT, 7, 0, 1);
    set_rank(2, WAIT, 7, 1, 1);
    set_rank(3, IDLE, 9, -1, 0);
    struct run r;
    show(&r, false);
    expect_in(&r, "ranks 0-2 wait in a cycle (0 -> 1 -> 0) in call #7 (psum)", "cycle");
    expect_in(&r, "a deadlock", "cycle");
    run_free(&r);
    show(&r, true);
    expect_in(&r, "\"for\":null,\"cycle\":[0,1],\"doing\":\"cycle\"", "json cycle");
    run_free(&r);
}

/* Ranks 1-3's calls #9 (callbacks) wait for rank 0 to pass point 4 of
 * effect "log", which rank 0 runs; every rank's main thread waits for a
 * token.  Then nothing but a token wait: a rank whose dispatch queue runs
 * work of its own (no call), which used to read "no rank is blocked". */
static void fake_point_and_tokens(void **state)
{
    set_rank(0, CALL, 9, -1, 0);
    atomic_store(&seg_ctrl(fake, 0)->status.call, SEG_STATUS_CALL(9, TOP_OP_CALLBACK));
    for (int r = 1; r < WORLD; r++) {
        set_rank(r, WAIT, 9, 0, 2.1);
        set_point(r, 4, "log");
        set_token(r, 12, 11, 2.1);
    }
    set_token(0, 12, 11, 2.1);
    struct run r;
    show(&r, false);
    print_message("%s", r.out);
    expect_secs(&r, "ranks 1-3 wait for rank 0 in call #9 (callback) to pass point 4 of effect "
                    "\"log\", blocked for ",
                2.1, "point wait");
    expect_in(&r, "rank 0 is in call #9 (callback), not blocked", "point's owner");
    expect_secs(&r, "rank 0 waits for a token (position 12 of its dispatch queue, 11 finished), "
                    "blocked for ",
                2.1, "rank 0's token");
    expect_in(&r,
              " s; its dispatch queue is in call #9 (callback), not blocked (running its "
              "callback)",
              "rank 0's dispatch queue");
    expect_in(&r,
              "ranks 1-3 wait for tokens of their own dispatch queues, which wait as shown above",
              "the others' tokens");
    run_free(&r);
    show(&r, true);
    expect_secs(&r, "\"wait_rank\":0,\"wait_call\":9,\"wait_window\":0,\"waited_s\":", 2.1,
                "json point wait");
    expect_in(&r, "\"wait_kind\":\"point\",\"wait_point\":4,\"wait_effect\":\"log\",",
              "json point");
    expect_secs(&r, "\"token_wait\":12,\"token_waited_s\":", 2.1, "json token");
    expect_in(&r, "\"tokens\":[\"rank 0 waits for a token", "json tokens");
    run_free(&r);

    /* Only token waits: rank 2's dispatch queue runs work of its own. */
    for (int i = 0; i < WORLD; i++) {
        set_rank(i, IDLE, 9, -1, 0);
        atomic_store(&seg_ctrl(fake, i)->status.token_seq, 0);
    }
    set_token(2, 5, 3, 1.1);
    show(&r, false);
    expect_secs(&r, "rank 2 waits for a token (position 5 of its dispatch queue, 3 finished), "
                    "blocked for ",
                1.1, "token alone");
    expect_in(&r, " s; its dispatch queue is outside any collective call",
              "token alone's dispatch queue");
    if (strstr(r.out, "no rank is blocked"))
        fail_msg("a token wait shown as 'no rank is blocked':\n%s", r.out);
    run_free(&r);
    show(&r, true);
    expect_in(&r, "\"summary\":\"rank 2 waits for a token", "json summary");
    run_free(&r);
}

static void fake_nobody_waits(void **state)
{
    set_rank(0, IDLE, 9, -1, 0);
    set_rank(1, CALL, 10, -1, 0);
    set_rank(2, IDLE, 9, -1, 0);
    set_rank(3, CALL, 10, -1, 0);
    struct run r;
    show(&r, false);
    expect_in(&r, "ranks 1, 3 are in a call but not blocked", "running ranks");
    assert_null(strstr(r.out, "wait for"));
    run_free(&r);
    for (int i = 0; i < WORLD; i++)
        atomic_store(&seg_ctrl(fake, i)->state, SEG_RANK_FINALIZED);
    show(&r, false);
    expect_in(&r, "every rank has finalized", "all finalized");
    run_free(&r);
}

/* A rank writes terminal escapes into what the table shows of it (the
 * abort reason, its notifier): they never reach the screen as control
 * characters; the reason is shown escaped. */
static void fake_control_characters(void **state)
{
    waiting_for_3();
    set_rank(3, IDLE, 6, -1, 0);
    memcpy(seg_ctrl(fake, 2)->status.notifier, "\033[2J\a", 6);
    seg_abort(fake, SEG_CAUSE_RANK_ABORT, 1, 0, "rank 1 says \033]0;owned\007\033[31mred\r\n");
    struct run r;
    show(&r, false);
    for (const char *p = r.out; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\n')
            fail_msg("control character 0x%02x at byte %d of shmesh-top's text:\n%s",
                     (unsigned char)*p, (int)(p - r.out), r.out);
    expect_in(&r, "job aborted: rank 1 says \\x1b]0;owned\\x07\\x1b[31mred\\r\\n", "reason");
    run_free(&r);
}

/* While the live view runs, another process cuts the segment to its first
 * page: shmesh-top says so and exits, instead of dying of SIGBUS. */
static void truncate_after(pid_t top_pid, void *arg)
{
    /* Once it showed the job (its stdout is a memfd of the harness's). */
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/fd/1", (int)top_pid);
    double t0 = mono_secs();
    for (bool shown = false; !shown && mono_secs() - t0 < 15; sleep_secs(0.05)) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
        if (fd >= 0)
            close(fd);
        buf[n > 0 ? n : 0] = '\0';
        shown = strstr(buf, "{\"job\":") != NULL;
    }
    assert_int_equal(ftruncate(fake->fd, 4096), 0);
}

static void fake_truncated(void **state)
{
    waiting_for_3();
    set_rank(3, IDLE, 6, -1, 0);
    char *argv[] = {(char *)top_path(), "--json", "--interval", "0.1", fake_pid, NULL};
    struct run r;
    run_cmd_with(argv, NULL, 20, &r, truncate_after, NULL);
    /* As it was, for the teardown (nothing here reads it meanwhile). */
    assert_int_equal(ftruncate(fake->fd, (off_t)fake->size), 0);
    if (r.timed_out || r.code != 1 || !strstr(r.err, "was truncated to 4096 bytes by another "
                                                     "process"))
        fail_msg("exit %d%s, expected 1 and a word on the truncation; stderr:\n%s", r.code,
                 r.timed_out ? " (killed at the deadline)" : "", r.err);
    run_free(&r);
}

/* ---- real jobs ------------------------------------------------------------ */

struct poll_job {
    const char *want;    /* shmesh-top's text must hold it */
    const char *want2;   /* and this */
    const char *json;    /* --json's, this */
    char text[8192];     /* the last text snapshot */
    char jtext[8192];
    bool seen;
};

static const char *top_prog_path(void) { return need_env("SHMESH_TEST_TOP"); }

/* While the job runs: shmesh-top until it shows what is expected (60 s at
 * most: a busy machine may take seconds to start the ranks), then the
 * launcher is told to stop. */
static void poll_job(pid_t launcher, void *arg)
{
    struct poll_job *p = arg;
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)launcher);
    double t0 = mono_secs();
    while (mono_secs() - t0 < 60 && !p->seen) {
        sleep_secs(0.3);
        struct run r;
        top_quiet(&r, "--once", pid, NULL);
        snprintf(p->text, sizeof p->text, "exit %d\n%s%s", r.code, r.out, r.err);
        bool ok = r.code == 0 && strstr(r.out, p->want) && strstr(r.out, p->want2);
        run_free(&r);
        if (!ok)
            continue;
        top_quiet(&r, "--once", "--json", pid);
        snprintf(p->jtext, sizeof p->jtext, "exit %d\n%s%s", r.code, r.out, r.err);
        p->seen = r.code == 0 && strstr(r.out, p->json);
        run_free(&r);
    }
    kill(launcher, SIGTERM);
}

static void run_job(const char *mode, struct poll_job *p)
{
    char *argv[] = {(char *)launcher_path(), "-n", "4", "--timeout", "120", "-v", "--",
                    (char *)top_prog_path(), (char *)mode, NULL};
    struct run r;
    assert_int_equal(run_cmd_with(argv, NULL, 150, &r, poll_job, p), 0);
    char name[128];
    bool left = segment_left_behind(&r, name, sizeof name);
    if (!p->seen)
        fail_msg("job %s: shmesh-top never showed '%s' and '%s' (json: '%s') within 60 s; "
                 "last text:\n%s\nlast json:\n%s\njob's stdout:\n%s\nstderr:\n%s",
                 mode, p->want, p->want2, p->json, p->text, p->jtext, r.out, r.err);
    if (left)
        fail_msg("job %s: segment %s left behind in /dev/shm", mode, name);
    assert_false(r.timed_out);
    run_free(&r);
}

/* The job's calls: shmesh_init makes none that a status shows, the mesh is
 * #1, the 3 psums #2-#4: the one they wait in is #5. */
static void job_sleep(void **state)
{
    struct poll_job p = {
        .want = "ranks 0, 1, 3 wait for rank 2 in call #5 (psum)",
        .want2 = "rank 2 is outside any call (its last call: #4 psum)",
        .json = "\"for\":2,\"cycle\":null,\"doing\":\"outside_call\",\"its_call\":4,"
                "\"its_op\":\"psum\",\"waiters\":[0,1,3],\"call\":5,\"op\":\"psum\"",
    };
    run_job("sleep", &p);
}

static void job_stuck(void **state)
{
    struct poll_job p = {
        .want = "ranks 0-2 wait for rank 3 in call #5 (psum)",
        .want2 = "rank 3 is outside any call (its last call: #4 psum)",
        .json = "\"for\":3,\"cycle\":null,\"doing\":\"outside_call\",\"its_call\":4,"
                "\"its_op\":\"psum\",\"waiters\":[0,1,2],\"call\":5,\"op\":\"psum\"",
    };
    run_job("stuck", &p);
}

/* The mesh is #1, the psums #2-#4, the effect's registration #5: the
 * callback is #6.  Rank 0 runs it (asleep); the others' dispatch queues
 * wait for rank 0 to pass its point, and every main thread for its token. */
static void job_effect(void **state)
{
    struct poll_job p = {
        .want = "ranks 1-3 wait for rank 0 in call #6 (callback) to pass point 1 of effect "
                "\"log\"",
        .want2 = "rank 0 waits for a token (position 1 of its dispatch queue, 0 finished), "
                 "blocked for",
        .json = "\"wait_kind\":\"point\",\"wait_point\":1,\"wait_effect\":\"log\",",
    };
    run_job("effect", &p);
    /* Not the only thing said: the others' token waits, and rank 0's call. */
    if (!strstr(p.text, "rank 0 is in call #6 (callback), not blocked") ||
        !strstr(p.text,
                "ranks 1-3 wait for tokens of their own dispatch queues, which wait as shown "
                "above") ||
        !strstr(p.text,
                "its dispatch queue is in call #6 (callback), not blocked (running its "
                "callback)"))
        fail_msg("job effect: shmesh-top's text lacks rank 0's callback or the token waits:\n%s",
                 p.text);
}

struct live {
    struct run top;
};

/* Until the launcher `pid` has made its segment and set it up: shmesh-top
 * --once shows the job, or refuses it as another user's (before that it
 * finds no segment, or one whose header is not written yet); 60 s at
 * most. */
static void await_segment(const char *pid)
{
    double t0 = mono_secs();
    for (;;) {
        struct run r;
        top_quiet(&r, "--once", pid, NULL);
        bool there = r.code == 0 || strstr(r.err, "belongs to");
        run_free(&r);
        if (there || mono_secs() - t0 > 60)
            return;
        sleep_secs(0.05);
    }
}

/* The live view of a job that ends by itself: it stops with the job. */
static void watch_live(pid_t launcher, void *arg)
{
    struct live *l = arg;
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)launcher);
    await_segment(pid);
    top_quiet(&l->top, "--json", "--interval=0.2", pid);
}

static void job_live(void **state)
{
    /* Rank 2 sleeps 6 s, then the job finishes: at 0.2 s a snapshot, the
     * view has five several times over, however slowly the job starts. */
    char *argv[] = {(char *)launcher_path(), "-n", "4", "--timeout", "120", "--",
                    (char *)top_prog_path(), "sleep", "6", NULL};
    struct live l = {0};
    struct run r;
    assert_int_equal(run_cmd_with(argv, NULL, 150, &r, watch_live, &l), 0);
    int lines = count_lines(l.top.out, "{\"job\":", NULL);
    bool ok = l.top.code == 0 && lines >= 5 && count_lines(l.top.out, NULL, NULL) == lines &&
              strstr(l.top.out, "\"for\":2,") && strstr(l.top.err, "has ended");
    if (!ok)
        fail_msg("live view: expected exit 0, at least 5 JSON lines (got %d), one saying the "
                 "others wait for rank 2, and 'has ended'; exit %d\nstdout:\n%.4000s\n"
                 "stderr:\n%s",
                 lines, l.top.code, l.top.out, l.top.err);
    assert_int_equal(r.code, 0);
    run_free(&l.top);
    run_free(&r);
}

/* ---- another user ---------------------------------------------------------- */

static const char *runuser_path(void)
{
    static const char *const where[] = {"/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser",
                                        "/bin/runuser"};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
        if (access(where[i], X_OK) == 0)
            return where[i];
    return NULL;
}

/* nobody runs shmesh-top on this process's (root's) fake job: refused, no
 * rank data. */
static void other_user(void **state)
{
    waiting_for_3();
    set_rank(3, IDLE, 6, -1, 0);
    char *argv[] = {(char *)runuser_path(), "-u", "nobody", "--", (char *)top_path(), "--once",
                    fake_pid, NULL};
    struct run r;
    assert_int_equal(run_cmd(argv, NULL, 20, &r), 0);
    bool ok = r.code == 1 && !r.out[0] &&
              strstr(r.err, "belongs to user root: shmesh-top attaches only to your own jobs");
    if (!ok)
        fail_msg("nobody attaching to root's job %s: expected exit 1, no output and the "
                 "refusal, got exit %d\nstdout:\n%s\nstderr:\n%s",
                 fake_pid, r.code, r.out, r.err);
    run_free(&r);
    /* And as JSON: nothing either. */
    char *argv2[] = {(char *)runuser_path(), "-u", "nobody", "--", (char *)top_path(), "--once",
                     "--json", fake_pid, NULL};
    assert_int_equal(run_cmd(argv2, NULL, 20, &r), 0);
    if (r.code != 1 || r.out[0])
        fail_msg("nobody, --json: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err);
    run_free(&r);
}

static bool is_launcher_of(pid_t pid, const struct proc_stat *st, void *leader)
{
    pid_t l = *(pid_t *)leader;
    return !strcmp(st->comm, "shmesh-run") && (pid == l || st->ppid == l);
}

/* The launcher that runuser (pid `leader`) started: runuser itself once
 * it has executed shmesh-run, or its child; 0 when none shows up. */
static pid_t launcher_in_group(pid_t leader)
{
    for (int tries = 0; tries < 1200; tries++) {
        pid_t found = find_process(is_launcher_of, &leader);
        if (found)
            return found;
        sleep_secs(0.05);
    }
    return 0;
}

struct as_root {
    pid_t launcher;
    struct run top;
};

/* While nobody's job runs: root's shmesh-top on it, then the job stops. */
static void root_looks(pid_t runuser, void *arg)
{
    struct as_root *a = arg;
    a->launcher = launcher_in_group(runuser);
    if (a->launcher) {
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int)a->launcher);
        await_segment(pid);
        char *argv[] = {(char *)top_path(), "--once", pid, NULL};
        if (run_cmd(argv, NULL, 20, &a->top))
            a->top = (struct run){.code = -1, .out = strdup(""), .err = strdup("cannot run")};
        kill(a->launcher, SIGTERM); /* it stops its ranks */
    }
    killpg(runuser, SIGTERM);
}

/* Root on nobody's job: refused too, though root could read it. */
static void root_refused(void **state)
{
    char *argv[] = {(char *)runuser_path(), "-u", "nobody", "--", (char *)launcher_path(), "-n",
                    "4", "--timeout", "60", "--", (char *)top_prog_path(), "sleep", "50", NULL};
    struct as_root a = {0};
    struct run r;
    assert_int_equal(run_cmd_with(argv, NULL, 90, &r, root_looks, &a), 0);
    if (!a.launcher)
        fail_msg("no shmesh-run of nobody's job found\nstdout:\n%s\nstderr:\n%s", r.out, r.err);
    bool ok = a.top.code == 1 && !a.top.out[0] &&
              strstr(a.top.err, "belongs to user nobody: shmesh-top attaches only to your own");
    if (!ok)
        fail_msg("root attaching to nobody's job %d: expected exit 1, no output and the "
                 "refusal, got exit %d\nstdout:\n%s\nstderr:\n%s\njob's stderr:\n%s",
                 (int)a.launcher, a.top.code, a.top.out, a.top.err, r.err);
    run_free(&a.top);
    assert_false(r.timed_out);
    run_free(&r);
}

/* Why another user cannot be tried here, or NULL. */
static const char *other_user_impossible(void)
{
    if (geteuid() != 0)
        return "not root: cannot run shmesh-top as another user";
    if (!runuser_path())
        return "no runuser";
    if (!getpwnam("nobody"))
        return "no user nobody";
    /* nobody must be able to run the tool at all. */
    char *argv[] = {(char *)runuser_path(), "-u", "nobody", "--", (char *)top_path(), "--help",
                    NULL};
    struct run r;
    if (run_cmd(argv, NULL, 20, &r) || r.code != 0) {
        static char why[512];
        snprintf(why, sizeof why, "nobody cannot run %s (exit %d): %s", top_path(), r.code,
                 r.err);
        return why;
    }
    run_free(&r);
    return NULL;
}

/* Each group named on the command line, in order; the exit status is
 * the number of failed tests, or 77 when the only group is other-user and
 * it cannot run here. */
static int run_group(const char *group)
{
    if (!strcmp(group, "cli")) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(bad_arguments),
            cmocka_unit_test(no_job),
        };
        return cmocka_run_group_tests_name("cli", tests, NULL, NULL);
    }
    if (!strcmp(group, "fake")) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(fake_outside_call, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_in_call, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_exited, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_never_attached, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_cycle, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_point_and_tokens, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_nobody_waits, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_control_characters, fake_setup, fake_teardown),
            cmocka_unit_test_setup_teardown(fake_truncated, fake_setup, fake_teardown),
        };
        return cmocka_run_group_tests_name("fake", tests, NULL, NULL);
    }
    if (!strcmp(group, "jobs")) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(job_sleep),
            cmocka_unit_test(job_stuck),
            cmocka_unit_test(job_effect),
            cmocka_unit_test(job_live),
        };
        return cmocka_run_group_tests_name("jobs", tests, NULL, NULL);
    }
    if (!strcmp(group, "other-user")) {
        const char *why = other_user_impossible();
        if (why) {
            printf("SKIP: %s\n", why);
            return 77;
        }
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(other_user, fake_setup, fake_teardown),
            cmocka_unit_test(root_refused),
        };
        return cmocka_run_group_tests_name("other-user", tests, NULL, NULL);
    }
    fprintf(stderr, "usage: test-top cli|fake|jobs|other-user...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        run_group("");
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        int rc = run_group(argv[i]);
        if (rc == 77 && argc == 2)
            return 77;
        failed += rc == 77 ? 0 : rc;
    }
    return failed;
}
