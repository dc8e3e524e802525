/* Description: shmesh-run end to end — exit statuses, fail-fast with grace,
 * a rank killed inside a barrier, signals, --timeout, --tag-output (long
 * lines whole, a reader that never reads), the environment, GPUs (faked),
 * --devices-per-rank (SHMESH_LOCAL_DEVICES, K GPUs per rank, refusals),
 * --gpus (a list, ranks sharing a GPU, none, refusals; CUDA_DEVICE_ORDER;
 * each rank bound near its GPU through a fake sysfs),
 * exec failures, usage errors, the open-file limit, refusals that free
 * what they hold; a rank that leaves early is blamed; --trace on a FIFO
 * nobody reads, and a long trace in bounded memory; a segment another
 * process truncates; nothing left in /dev/shm or in the process table
 * afterwards, also when the launcher or its job process is killed with
 * SIGKILL or a rank leaves children behind (in a session of their own,
 * without the job's environment). */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "proc.h"

static void assert_clean(const struct run *r)
{
    char name[128];
    if (segment_left_behind(r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm\nstderr:\n%s", name, r->err);
}

/* The pids a helper printed as "rank R: sleeping, pid P". */
static int sleeping_pids(const char *out, pid_t *pids, int max)
{
    int n = 0;
    const char *p = out;
    while (n < max && (p = strstr(p, "sleeping, pid "))) {
        p += strlen("sleeping, pid ");
        pids[n++] = (pid_t)atoi(p);
    }
    return n;
}

static void all_ranks_exit_zero(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 30, "-v", "-n", "4", "--", "@rank", "info", NULL);
    assert_false(r.timed_out);
    assert_int_equal(r.code, 0);
    if (count_lines(r.out, "of 4: notifier", NULL) != 4)
        fail_msg("expected 4 ranks to report:\n%s\nstderr:\n%s", r.out, r.err);
    for (int k = 0; k < 4; k++) {
        char want[32];
        snprintf(want, sizeof want, "rank %d of 4", k);
        assert_int_equal(count_lines(r.out, want, NULL), 1);
    }
    assert_clean(&r);
    run_free(&r);
}

/* One rank exits 7; the others sleep and ignore the abort flag, so the
 * launcher must kill them after --grace and exit 7. */
static void one_rank_exits_7(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 90, "-v", "-n", "4", "--grace", "1", "--", "@rank",
                 "exit-after-barrier", "2", "7", NULL);
    assert_false(r.timed_out);
    assert_int_equal(r.code, 7);
    if (!count_lines(r.err, "rank 2 (pid", "exited with status 7; stopping 3 other ranks"))
        fail_msg("no failure line in:\n%s", r.err);
    assert_int_equal(count_lines(r.err, "sending SIGKILL", NULL), 1);
    /* The grace and some: the ranks it must kill would sleep 60 s, so 20 s
     * tells the two apart on a busy machine too. */
    if (r.secs > 1.0 + 20)
        fail_msg("launcher took %.2f s with --grace 1", r.secs);
    pid_t pids[8];
    int n = sleeping_pids(r.out, pids, 8);
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++)
        if (pid_alive(pids[i]))
            fail_msg("rank pid %d still alive after the launcher exited", (int)pids[i]);
    assert_clean(&r);
    run_free(&r);
}

static void killed_in_barrier(const char *notifier)
{
    char env_notify[32];
    snprintf(env_notify, sizeof env_notify, "SHMESH_NOTIFY=%s", notifier);
    char *env[] = {env_notify, NULL};
    struct run r;
    run_launcher(&r, env, 60, "-v", "-n", "4", "--", "@rank", "kill-in-barrier", "2", NULL);
    assert_false(r.timed_out);
    assert_int_equal(r.code, 137);
    if (!count_lines(r.err, "rank 2 (pid", "killed by SIGKILL; stopping 3 other ranks"))
        fail_msg("launcher did not name rank 2 and SIGKILL:\n%s", r.err);
    /* Ranks 0, 1 and 3 get PEER_DEAD naming rank 2, within 20 s (without
     * SHMESH_TIMEOUT a death nobody noticed would be waited for without end;
     * rank 0 kills 300 ms into the barrier). */
    double ms[8];
    int n = op_times_ms(r.out, "shmesh_barrier -> SHMESH_ERR_PEER_DEAD", ms, 8);
    if (n != 3)
        fail_msg("%d ranks reported PEER_DEAD, expected 3:\n%s", n, r.out);
    for (int i = 0; i < n; i++)
        if (ms[i] > 300 + 20000)
            fail_msg("PEER_DEAD came %.0f ms after entering the barrier", ms[i]);
    assert_int_equal(count_lines(r.out, "SHMESH_ERR_PEER_DEAD", "peer rank 2 failed"), 6);
    /* The context is poisoned: the next calls fail at once with the same.
     * 50 of them within 5 s: one that waited even a notifier's slice
     * (100 ms) before learning it would take longer, however busy the
     * machine. */
    n = op_times_ms(r.out, "shmesh_barrier (again, 50 times) -> SHMESH_ERR_PEER_DEAD", ms, 8);
    if (n != 3)
        fail_msg("%d ranks failed again with PEER_DEAD, expected 3:\n%s", n, r.out);
    for (int i = 0; i < n; i++)
        if (ms[i] > 5000)
            fail_msg("50 calls after PEER_DEAD took %.0f ms: they waited\n%s", ms[i], r.out);
    assert_clean(&r);
    run_free(&r);
}

static void killed_in_barrier_futex(void **state) { killed_in_barrier("futex"); }

static void killed_in_barrier_uring(void **state)
{
    if (!uring_available())
        skip();
    killed_in_barrier("uring");
}

static void send_sigterm(pid_t pid, void *arg)
{
    sleep_secs(0.7);
    kill(pid, SIGTERM);
}

static int pids_in(const char *file, pid_t *pids, int max);
static void temp_file(char *path, size_t len);

/* The ranks write their pids into `file` once ready; SIGTERM then (not
 * after a guess at how long starting takes). */
struct sigterm_ready {
    const char *file;
    int ranks;
};

static void sigterm_when_ready(pid_t pid, void *arg)
{
    const struct sigterm_ready *w = arg;
    double t0 = mono_secs();
    pid_t pids[64];
    while (pids_in(w->file, pids, 64) < w->ranks && mono_secs() - t0 < 60)
        sleep_secs(0.02);
    kill(pid, SIGTERM);
}

/* A job of `ranks` that write their pid once ready (`script`'s $1), sent
 * SIGTERM then: exit 143 and no rank left alive. */
static void sigterm_job(int ranks, const char *grace, const char *script, struct run *r)
{
    char file[64], n[8];
    temp_file(file, sizeof file);
    snprintf(n, sizeof n, "%d", ranks);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", n, "--grace", (char *)grace, "--",
                    "/bin/sh", "-c", (char *)script, "sh", file, (char *)rank_prog_path(), NULL};
    struct sigterm_ready w = {file, ranks};
    run_cmd_with(argv, NULL, 90, r, sigterm_when_ready, &w);
    pid_t pids[64];
    int got = pids_in(file, pids, 64);
    unlink(file);
    assert_false(r->timed_out);
    assert_int_equal(r->code, 128 + SIGTERM);
    assert_int_equal(got, ranks);
    for (int i = 0; i < got; i++)
        if (pid_alive(pids[i]))
            fail_msg("rank pid %d still alive after the launcher exited", (int)pids[i]);
}

static void sigterm_to_launcher(void **state)
{
    struct run r;
    sigterm_job(4, "5", "echo $$ >> \"$1\"; exec \"$2\" sleep", &r);
    assert_int_equal(count_lines(r.err, "received SIGTERM; forwarding it to 4 ranks", NULL), 1);
    assert_clean(&r);
    run_free(&r);
}

/* A rank that ignores SIGTERM is killed once the grace period is over. */
static void sigterm_ignored_then_killed(void **state)
{
    struct run r;
    sigterm_job(2, "0.5", "trap '' TERM; echo $$ >> \"$1\"; while :; do sleep 0.05; done", &r);
    assert_int_equal(count_lines(r.err, "still running after the 0.5 s grace period", NULL), 1);
    assert_clean(&r);
    run_free(&r);
}

static void timeout_exits_124(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 60, "-v", "-n", "2", "--timeout", "0.5", "--", "@rank", "sleep",
                 NULL);
    assert_false(r.timed_out);
    assert_int_equal(r.code, 124);
    assert_int_equal(count_lines(r.err, "longer than --timeout 0.5 s", NULL), 1);
    assert_true(r.secs < 20); /* the ranks would sleep 60 s */
    assert_clean(&r);
    run_free(&r);
}

static void exec_failure_reported_once(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 30, "-v", "-n", "3", "--", "/nonexistent/shmesh-prog", NULL);
    assert_false(r.timed_out);
    assert_int_equal(r.code, 127);
    assert_int_equal(count_lines(r.err, "cannot run '/nonexistent/shmesh-prog'",
                                 "No such file or directory"),
                     1);
    assert_clean(&r);
    run_free(&r);
}

static void tag_output_prefixes_lines(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 30, "-v", "--tag-output", "-n", "3", "--", "/bin/sh", "-c",
                 "echo \"first $RANK\"; printf 'no newline %s' \"$RANK\"; "
                 "echo \"to stderr $RANK\" >&2",
                 NULL);
    assert_int_equal(r.code, 0);
    for (int k = 0; k < 3; k++) {
        char a[32], b[32], c[32];
        snprintf(a, sizeof a, "[%d] first %d\n", k, k);
        snprintf(b, sizeof b, "[%d] no newline %d\n", k, k);
        snprintf(c, sizeof c, "[%d] to stderr %d\n", k, k);
        if (!strstr(r.out, a) || !strstr(r.out, b))
            fail_msg("missing '%s' or '%s' in:\n%s", a, b, r.out);
        if (!strstr(r.err, c))
            fail_msg("missing '%s' in:\n%s", c, r.err);
    }
    /* Every line of stdout is tagged. */
    assert_int_equal(count_lines(r.out, NULL, NULL), count_lines(r.out, "[", "] "));
    assert_clean(&r);
    run_free(&r);
}

static void environment_per_rank(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 30, "-v", "-n", "2", "--", "/bin/sh", "-c",
                 "echo \"env $SHMESH_RANK/$SHMESH_WORLD_SIZE $RANK/$WORLD_SIZE "
                 "$LOCAL_RANK/$LOCAL_WORLD_SIZE $SHMESH_LOCAL_RANK seg=$SHMESH_SEGMENT\"",
                 NULL);
    assert_int_equal(r.code, 0);
    assert_int_equal(count_lines(r.out, "env 0/2 0/2 0/2 0 seg=/shmesh-", NULL), 1);
    assert_int_equal(count_lines(r.out, "env 1/2 1/2 1/2 1 seg=/shmesh-", NULL), 1);
    assert_clean(&r);
    run_free(&r);
}

/* With fake AMD GPUs under SHMESH_SYSROOT each rank sees one device. */
static void one_gpu_per_rank(void **state)
{
    char root[] = "/tmp/shmesh-sysroot-XXXXXX";
    assert_non_null(mkdtemp(root));
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "for n in 0 1 2; do mkdir -p %s/sys/class/kfd/kfd/topology/nodes/$n; done; "
             "echo 0 > %s/sys/class/kfd/kfd/topology/nodes/0/gpu_id; "
             "echo 4242 > %s/sys/class/kfd/kfd/topology/nodes/1/gpu_id; "
             "echo 4343 > %s/sys/class/kfd/kfd/topology/nodes/2/gpu_id",
             root, root, root, root);
    assert_int_equal(system(cmd), 0);
    char env_root[128];
    snprintf(env_root, sizeof env_root, "SHMESH_SYSROOT=%s", root);
    char *env[] = {env_root, "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", NULL};
    struct run r;
    /* No -n: one rank per GPU found. */
    run_launcher(&r, env, 30, "-v", "--", "/bin/sh", "-c",
                 "echo \"rank $RANK of $WORLD_SIZE gpu $HIP_VISIBLE_DEVICES "
                 "cuda ${CUDA_VISIBLE_DEVICES:-unset}\"",
                 NULL);
    assert_int_equal(r.code, 0);
    assert_int_equal(count_lines(r.out, "rank 0 of 2 gpu 0 cuda unset", NULL), 1);
    assert_int_equal(count_lines(r.out, "rank 1 of 2 gpu 1 cuda unset", NULL), 1);
    assert_clean(&r);
    run_free(&r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* What each rank of a job started by run_bound prints. */
#define SAY_CPU                                                                                \
    "echo \"rank $RANK cpu $SHMESH_CPU allowed $(grep Cpus_allowed_list /proc/self/status "     \
    "| cut -f2)\""

/* Rank k's CPU in the output of SAY_CPU, checked to be the one CPU it may
 * run on. */
static int pinned_cpu(const char *out, long k)
{
    char line[64];
    snprintf(line, sizeof line, "rank %ld cpu ", k);
    const char *p = strstr(out, line);
    if (!p)
        fail_msg("no line for rank %ld:\n%s", k, out);
    int cpu = -1;
    char allowed[32] = "";
    if (sscanf(p + strlen(line), "%d allowed %31s", &cpu, allowed) != 2)
        fail_msg("unreadable: %s", p);
    char want[16];
    snprintf(want, sizeof want, "%d", cpu);
    assert_string_equal(allowed, want); /* pinned to exactly that CPU */
    return cpu;
}

/* --bind-to core: a CPU of its own per rank, named in SHMESH_CPU. */
static void bind_to_core(void **state)
{
    cpu_set_t mine;
    long cpus = usable_cpus(&mine);
    if (cpus < 2)
        skip();
    struct run r;
    run_launcher(&r, NULL, 30, "-v", "--bind-to", "core", "-n", "2", "--", "/bin/sh", "-c", SAY_CPU,
                 NULL);
    assert_int_equal(r.code, 0);
    for (int k = 0; k < 2; k++)
        pinned_cpu(r.out, k);
    run_free(&r);
    char np[24];
    snprintf(np, sizeof np, "%ld", cpus + 1);
    run_launcher(&r, NULL, 30, "--bind-to", "core", "-n", np, "--", "/bin/true", NULL);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--bind-to core needs a core per rank"));
    assert_non_null(strstr(r.err, "core:overload-allowed"));
    run_free(&r);

    /* core:overload-allowed: one more rank than CPUs, each pinned to one
     * CPU, taken in turn: the last rank shares rank 0's. */
    run_launcher(&r, NULL, 30, "--bind-to", "core:overload-allowed", "-n", np, "--", "/bin/sh",
                 "-c", SAY_CPU, NULL);
    assert_int_equal(r.code, 0);
    int first = pinned_cpu(r.out, 0);
    for (long k = 1; k <= cpus; k++) {
        int cpu = pinned_cpu(r.out, k);
        assert_true(CPU_ISSET(cpu, &mine));
        if (k < cpus)
            assert_int_not_equal(cpu, first); /* the others first */
        else
            assert_int_equal(cpu, first);
    }
    run_free(&r);
}

/* The default placement on one NUMA node pins nothing, but names a start
 * CPU per rank (shmesh_init moves the rank there): CPUs of their own while
 * there are enough, then in turn; --bind-to none names none. */
static void bind_default_start_cpus(void **state)
{
    cpu_set_t mine;
    long cpus = usable_cpus(&mine);
    if (cpus < 2)
        skip();
    long np = cpus < 4 ? cpus + 1 : 4;
    char nps[24], allowed[256] = "";
    snprintf(nps, sizeof nps, "%ld", np);
    assert_true(cpus_allowed_list(getpid(), allowed, sizeof allowed));
    struct run r;
    run_launcher(&r, NULL, 30, "-n", nps, "--", "/bin/sh", "-c",
                 "echo \"rank $RANK start ${SHMESH_START_CPU:-unset} allowed $(grep "
                 "Cpus_allowed_list /proc/self/status | cut -f2)\"",
                 NULL);
    assert_int_equal(r.code, 0);
    int start[4];
    for (long k = 0; k < np; k++) {
        char want[64], got_allowed[256] = "";
        snprintf(want, sizeof want, "rank %ld start ", k);
        const char *p = strstr(r.out, want);
        if (!p || sscanf(p + strlen(want), "%d allowed %255s", &start[k], got_allowed) != 2)
            fail_msg("no start CPU for rank %ld:\n%s", k, r.out);
        assert_string_equal(got_allowed, allowed); /* not pinned */
        assert_true(CPU_ISSET(start[k], &mine));
        for (long q = 0; q < k; q++)
            if (k < cpus)
                assert_int_not_equal(start[k], start[q]);
        if (k == cpus)
            assert_int_equal(start[k], start[0]);
    }
    run_free(&r);
    /* shmesh_init moves each rank to its start CPU and leaves it free. */
    run_launcher(&r, NULL, 30, "-n", "2", "--", "@rank", "placement", NULL);
    assert_int_equal(r.code, 0);
    for (int k = 0; k < 2; k++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d start %d: as free as before", k, start[k]);
        assert_int_equal(count_lines(r.out, want, NULL), 1);
    }
    run_free(&r);
    run_launcher(&r, NULL, 30, "--bind-to", "none", "-n", "2", "--", "/bin/sh", "-c",
                 "echo \"rank $RANK start ${SHMESH_START_CPU:-unset}\"", NULL);
    assert_int_equal(r.code, 0);
    assert_int_equal(count_lines(r.out, "rank 0 start unset", NULL), 1);
    assert_int_equal(count_lines(r.out, "rank 1 start unset", NULL), 1);
    run_free(&r);
}

static void usage_errors(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 10, NULL);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "no program given"));
    run_free(&r);
    run_launcher(&r, NULL, 10, "-n", "0", "--", "/bin/true", NULL);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "-n expects a number of ranks from 1 to 4096, got '0'"));
    run_free(&r);
    run_launcher(&r, NULL, 10, "--grace", "soon", "--", "/bin/true", NULL);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--grace expects a number of seconds >= 0, got 'soon'"));
    run_free(&r);
    run_launcher(&r, NULL, 10, "--frobnicate", NULL);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "unknown option '--frobnicate'"));
    run_free(&r);
    run_launcher(&r, NULL, 10, "--help", NULL);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(r.out, "Usage: shmesh-run"));
    run_free(&r);
}

/* A program that never joins is no failure: the job is just processes.
 * (No GPU, whatever the machine has: with fewer GPUs than ranks the
 * launcher prints a note, which more_ranks_than_gpus checks.) */
static void non_shmesh_program(void **state)
{
    char env_root[128];
    snprintf(env_root, sizeof env_root, "SHMESH_SYSROOT=%s", fake_sysroot(0));
    char *env[] = {env_root, NULL};
    struct run r;
    run_launcher(&r, env, 10, "-v", "-n", "3", "--", "/bin/true", NULL);
    fake_sysroot_remove();
    assert_int_equal(r.code, 0);
    if (strstr(r.err, "note:"))
        fail_msg("a note for a plain job:\n%s", r.err);
    assert_clean(&r);
    run_free(&r);
}

/* One (fake) NVIDIA GPU and three ranks: a note, and every rank gets it. */
static void more_ranks_than_gpus(void **state)
{
    char env_root[128];
    snprintf(env_root, sizeof env_root, "SHMESH_SYSROOT=%s", fake_sysroot(1));
    char *env[] = {env_root, "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", NULL};
    struct run r;
    run_launcher(&r, env, 10, "-v", "-n", "3", "--", "/bin/sh", "-c",
                 "echo \"rank $RANK gpu ${CUDA_VISIBLE_DEVICES:-unset} "
                 "hip ${HIP_VISIBLE_DEVICES:-unset}\"",
                 NULL);
    fake_sysroot_remove();
    assert_int_equal(r.code, 0);
    if (count_lines(r.err, "note: 3 ranks share 1 GPU (CUDA_VISIBLE_DEVICES is given round-robin)",
                    NULL) != 1)
        fail_msg("no note on the shared GPU:\n%s", r.err);
    for (int k = 0; k < 3; k++) {
        char want[48];
        snprintf(want, sizeof want, "rank %d gpu 0 hip unset", k);
        if (count_lines(r.out, want, NULL) != 1)
            fail_msg("no '%s' in:\n%s", want, r.out);
    }
    assert_clean(&r);
    run_free(&r);
}

/* shmesh-run with the options `opts` (NULL-terminated) under the fake root
 * `root`, every rank running the shell command `script`.  No GPU variable
 * of the test's environment reaches the job, unless `extra` (entries as
 * run_cmd takes them, NULL-terminated, may be NULL) sets it. */
static void sysroot_job(struct run *r, const char *root, const char *const *opts,
                        const char *script, const char *const *extra)
{
    char env_root[128];
    snprintf(env_root, sizeof env_root, "SHMESH_SYSROOT=%s", root);
    char *env[16] = {env_root, "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                     "SHMESH_LOCAL_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MPS_PIPE_DIRECTORY"};
    int e = 6;
    while (extra && *extra && e < 15)
        env[e++] = (char *)*extra++;
    env[e] = NULL;
    char *argv[24];
    int n = 0;
    argv[n++] = (char *)launcher_path();
    while (*opts && n < 19)
        argv[n++] = (char *)*opts++;
    argv[n++] = "--";
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = (char *)script;
    argv[n] = NULL;
    run_cmd(argv, env, 30, r);
}

/* shmesh-run with the options `opts` (NULL-terminated) over `gpus` fake
 * NVIDIA GPUs (0: none), every rank printing its devices. */
static void devices_job(struct run *r, int gpus, const char *const *opts)
{
    sysroot_job(r, fake_sysroot(gpus), opts,
                "echo \"rank $RANK of $WORLD_SIZE devices ${SHMESH_LOCAL_DEVICES:-unset} "
                "gpus ${CUDA_VISIBLE_DEVICES:-unset}\"",
                NULL);
    fake_sysroot_remove();
}

/* Each of the job's `lines` ("rank 1 of 2 devices 2 gpus 2,3") is printed
 * by exactly one rank, after a clean exit. */
static void expect_ranks(const struct run *r, const char *const *lines)
{
    if (r->code != 0)
        fail_msg("exit %d; stderr:\n%s", r->code, r->err);
    for (; *lines; lines++)
        if (count_lines(r->out, *lines, NULL) != 1)
            fail_msg("no line '%s' in:\n%s\nstderr:\n%s", *lines, r->out, r->err);
}

/* --devices-per-rank K without GPUs: K CPU devices, said in
 * SHMESH_LOCAL_DEVICES; 1 without the option. */
static void devices_per_rank_cpu(void **state)
{
    struct run r;
    devices_job(&r, 0, (const char *[]){"-v", "-n", "2", "--devices-per-rank", "3", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 2 devices 3 gpus unset",
                                      "rank 1 of 2 devices 3 gpus unset", NULL});
    assert_int_equal(count_lines(r.err, "starting 2 ranks of '/bin/sh', 3 CPU devices each",
                                 NULL), 1);
    assert_clean(&r);
    run_free(&r);
    devices_job(&r, 0, (const char *[]){"-v", "-n", "2", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 2 devices 1 gpus unset",
                                      "rank 1 of 2 devices 1 gpus unset", NULL});
    assert_clean(&r);
    run_free(&r);
}

/* With 4 (fake) GPUs and K = 2, rank r sees GPUs 2r and 2r+1; without -n
 * there is a rank per K GPUs; more devices than GPUs are shared
 * round-robin with a note, as more ranks than GPUs are. */
static void devices_per_rank_gpus(void **state)
{
    static const char *const two_ranks[] = {"rank 0 of 2 devices 2 gpus 0,1",
                                            "rank 1 of 2 devices 2 gpus 2,3", NULL};
    struct run r;
    devices_job(&r, 4, (const char *[]){"-v", "-n", "2", "--devices-per-rank", "2", NULL});
    expect_ranks(&r, two_ranks);
    if (strstr(r.err, "note:"))
        fail_msg("a note for a job that fits its GPUs:\n%s", r.err);
    assert_int_equal(count_lines(r.err, "starting 2 ranks of '/bin/sh', 2 GPU devices each",
                                 NULL), 1);
    assert_clean(&r);
    run_free(&r);
    devices_job(&r, 4, (const char *[]){"-v", "--devices-per-rank=2", NULL});
    expect_ranks(&r, two_ranks);
    assert_clean(&r);
    run_free(&r);
    devices_job(&r, 4, (const char *[]){"-v", "-n", "3", "--devices-per-rank", "2", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 3 devices 2 gpus 0,1",
                                      "rank 1 of 3 devices 2 gpus 2,3",
                                      "rank 2 of 3 devices 2 gpus 0,1", NULL});
    assert_int_equal(count_lines(r.err, "note: 3 ranks of 2 devices each share 4 GPUs "
                                        "(CUDA_VISIBLE_DEVICES is given round-robin)", NULL), 1);
    assert_clean(&r);
    run_free(&r);
}

/* A job shmesh-run must refuse: over `gpus` fake GPUs, with `opts`. */
struct refusal {
    int gpus;
    const char *opts[7];
    const char *message;
};

/* Each refused with exit 2 before anything starts, saying `message`. */
static void expect_refusals(const struct refusal *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct run r;
        devices_job(&r, cases[i].gpus, cases[i].opts);
        if (r.code != 2 || count_lines(r.err, cases[i].message, NULL) != 1 || r.out[0])
            fail_msg("case %zu: exit %d, expected 2, no rank started and '%s'; stdout:\n%s\n"
                     "stderr:\n%s", i, r.code, cases[i].message, r.out, r.err);
        run_free(&r);
    }
}

/* A rank cannot hold one GPU twice, and K is 1 to 64: exit 2 before
 * anything starts, saying what was expected and found. */
static void devices_per_rank_refused(void **state)
{
    static const struct refusal cases[] = {
        {4, {"-n", "2", "--devices-per-rank", "5"},
         "shmesh-run: --devices-per-rank 5 with 2 ranks: each rank needs 5 different GPUs, and 4 "
         "GPUs were found (CUDA_VISIBLE_DEVICES); a rank cannot hold one GPU twice"},
        {1, {"--devices-per-rank", "2"},
         "shmesh-run: --devices-per-rank 2 with 1 rank: each rank needs 2 different GPUs, and 1 "
         "GPU was found (CUDA_VISIBLE_DEVICES); a rank cannot hold one GPU twice"},
        {0, {"--devices-per-rank", "0"},
         "shmesh-run: --devices-per-rank expects a number of devices from 1 to 64, got '0'"},
        {0, {"--devices-per-rank", "-1"},
         "shmesh-run: --devices-per-rank expects a number of devices from 1 to 64, got '-1'"},
        {0, {"--devices-per-rank=abc"},
         "shmesh-run: --devices-per-rank expects a number of devices from 1 to 64, got 'abc'"},
        {0, {"--devices-per-rank", "65"},
         "shmesh-run: --devices-per-rank expects a number of devices from 1 to 64, got '65'"},
        {0, {"--devices-per-rank="},
         "shmesh-run: --devices-per-rank expects a number of devices from 1 to 64, got ''"},
    };
    expect_refusals(cases, sizeof cases / sizeof *cases);
}

/* ---- --gpus ------------------------------------------------------------ */

/* --gpus LIST instead of the GPUs found: ids in order, K per rank, ranks
 * sharing a GPU when an id repeats (no note of the sharing itself: the list
 * says so; only that no MPS daemon runs, which gpus_shared_mps checks);
 * without -n, a rank per K ids; with no GPU found at all,
 * CUDA_VISIBLE_DEVICES. */
static void gpus_listed(void **state)
{
    struct run r;
    devices_job(&r, 1, (const char *[]){"-v", "--gpus", "0,0,0", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 3 devices 1 gpus 0", "rank 1 of 3 devices 1 gpus 0",
                                      "rank 2 of 3 devices 1 gpus 0", NULL});
    if (count_lines(r.err, "note:", NULL) != count_lines(r.err, "note: ranks share an NVIDIA GPU "
                                                                "and no MPS daemon runs", NULL))
        fail_msg("a note for GPUs shared on purpose:\n%s", r.err);
    assert_int_equal(count_lines(r.err, "starting 3 ranks of '/bin/sh', 1 GPU device each", NULL), 1);
    assert_clean(&r);
    run_free(&r);
    devices_job(&r, 4, (const char *[]){"-v", "--gpus", "1,3", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 2 devices 1 gpus 1", "rank 1 of 2 devices 1 gpus 3",
                                      NULL});
    assert_clean(&r);
    run_free(&r);
    devices_job(&r, 4, (const char *[]){"-v", "--devices-per-rank", "2", "--gpus", "3,2,01,0", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 2 devices 2 gpus 3,2",
                                      "rank 1 of 2 devices 2 gpus 1,0", NULL});
    assert_clean(&r);
    run_free(&r);
    devices_job(&r, 0, (const char *[]){"-v", "-n", "2", "--gpus", "5,GPU-8932f937-d72c", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 2 devices 1 gpus 5",
                                      "rank 1 of 2 devices 1 gpus GPU-8932f937-d72c", NULL});
    assert_clean(&r);
    run_free(&r);
}

/* Ranks sharing an NVIDIA GPU, listed or round-robin: one note that no MPS
 * daemon runs (each call on device buffers then waits for the GPU's time
 * slices), none when its control pipe is there, none for distinct GPUs. */
static void gpus_shared_mps(void **state)
{
    const char *mps = "note: ranks share an NVIDIA GPU and no MPS daemon runs";
    struct run r;
    devices_job(&r, 2, (const char *[]){"--gpus", "1,1", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 2 devices 1 gpus 1", NULL});
    assert_int_equal(count_lines(r.err, mps, "nvidia-cuda-mps-control -d"), 1);
    run_free(&r);
    devices_job(&r, 1, (const char *[]){"-n", "2", NULL});
    assert_int_equal(count_lines(r.err, "note: 2 ranks share 1 GPU", NULL), 1);
    assert_int_equal(count_lines(r.err, mps, NULL), 1);
    run_free(&r);
    devices_job(&r, 2, (const char *[]){"--gpus", "0,1", NULL});
    assert_int_equal(count_lines(r.err, "note:", NULL), 0);
    run_free(&r);
    /* The daemon's control pipe where MPS keeps it: no note. */
    const char *root = fake_sysroot(1);
    char dir[256], control[300];
    snprintf(dir, sizeof dir, "%s/tmp", root);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/tmp/nvidia-mps", root);
    mkdir(dir, 0755);
    snprintf(control, sizeof control, "%s/control", dir);
    assert_int_equal(mkfifo(control, 0600), 0);
    sysroot_job(&r, root, (const char *[]){"--gpus", "0,0", NULL}, "true", NULL);
    unlink(control);
    rmdir(dir);
    fake_sysroot_remove();
    assert_int_equal(r.code, 0);
    assert_int_equal(count_lines(r.err, "note:", NULL), 0);
    run_free(&r);
}

/* --gpus none: CPU devices, a rank per online CPU, and the GPU variables as
 * the user left them; auto is the default. */
static void gpus_none(void **state)
{
    static const char script[] = "echo \"rank $RANK of $WORLD_SIZE gpus ${CUDA_VISIBLE_DEVICES:-unset} "
                                 "hip ${HIP_VISIBLE_DEVICES:-unset} order ${CUDA_DEVICE_ORDER:-unset}\"";
    const char *root = fake_sysroot(2);
    struct run r;
    sysroot_job(&r, root, (const char *[]){"-v", "--gpus", "none", NULL}, script, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (r.code != 0 || count_lines(r.out, "gpus unset hip unset order unset", NULL) != cpus)
        fail_msg("exit %d, expected %ld ranks without GPUs:\n%s\nstderr:\n%s", r.code, cpus, r.out,
                 r.err);
    assert_int_equal(count_lines(r.err, "CPU device each", NULL), 1);
    assert_clean(&r);
    run_free(&r);
    sysroot_job(&r, root, (const char *[]){"-n", "2", "--gpus", "none", NULL}, script,
                (const char *[]){"CUDA_VISIBLE_DEVICES=1", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 2 gpus 1 hip unset order unset",
                                      "rank 1 of 2 gpus 1 hip unset order unset", NULL});
    run_free(&r);
    /* The last --gpus counts. */
    sysroot_job(&r, root, (const char *[]){"--gpus", "none", "--gpus", "auto", NULL}, script, NULL);
    expect_ranks(&r, (const char *[]){"rank 0 of 2 gpus 0 hip unset order PCI_BUS_ID",
                                      "rank 1 of 2 gpus 1 hip unset order PCI_BUS_ID", NULL});
    run_free(&r);
    /* CUDA_DEVICE_ORDER as the user set it. */
    sysroot_job(&r, root, (const char *[]){"-n", "1", NULL}, script,
                (const char *[]){"CUDA_DEVICE_ORDER=FASTEST_FIRST", NULL});
    expect_ranks(&r, (const char *[]){"rank 0 of 1 gpus 0 hip unset order FASTEST_FIRST", NULL});
    run_free(&r);
    fake_sysroot_remove();
}

/* Lists that cannot make the job: exit 2, naming what was expected and
 * what was found. */
static void gpus_refused(void **state)
{
    static const struct refusal cases[] = {
        {2, {"--gpus", "0,1", "-n", "3"},
         "shmesh-run: --gpus with -n 3: expected 3 GPU ids (one per rank), found 2"},
        {4, {"-n", "2", "--devices-per-rank", "2", "--gpus", "0,1,2"},
         "shmesh-run: --gpus with -n 2 and --devices-per-rank 2: expected 4 GPU ids (2 per rank), "
         "found 3"},
        {4, {"--devices-per-rank", "2", "--gpus", "0,1,2"},
         "shmesh-run: --gpus with --devices-per-rank 2: expected a multiple of 2 GPU ids (2 per "
         "rank), found 3"},
        {2, {"--devices-per-rank", "2", "--gpus", "0,0"},
         "shmesh-run: --gpus with --devices-per-rank 2: rank 0 would hold GPU 0 twice (entries 1 "
         "and 2 of the list); a rank cannot hold one GPU twice"},
        {4, {"--devices-per-rank", "2", "--gpus", "0,1,2,02"},
         "rank 1 would hold GPU 2 twice (entries 3 and 4 of the list)"},
        {2, {"--gpus", "0,2"},
         "shmesh-run: --gpus: expected GPU ids from 0 to 1 (2 GPUs were found, numbered as "
         "CUDA_VISIBLE_DEVICES numbers them), found 2"},
        {0, {"--gpus", "0,,1"},
         "shmesh-run: --gpus expects auto, none or a comma-separated list of GPU ids (integers "
         "from 0, or GPU-/MIG- UUIDs), got '0,,1': entry 2 is empty"},
        {0, {"--gpus", "0, 1"}, "got '0, 1': entry 2, ' 1', is not a GPU id"},
        {0, {"--gpus", "-1"}, "got '-1': entry 1, '-1', is not a GPU id"},
        {0, {"--gpus", "GPU-"}, "got 'GPU-': entry 1, 'GPU-', is not a GPU id"},
        {0, {"--gpus", "0,"}, "got '0,': entry 2 is empty"},
        {0, {"--gpus="}, "got '': entry 1 is empty"},
    };
    expect_refusals(cases, sizeof cases / sizeof *cases);
}

/* Writes `text` and a newline to `rel` under `root`, making directories. */
static void write_fake(const char *root, const char *rel, const char *text)
{
    char path[512], cmd[2 * sizeof path + 512];
    assert_true(snprintf(path, sizeof path, "%s/%s", root, rel) < (int)sizeof path);
    assert_true(snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && echo '%s' > '%s'", path,
                         text, path) < (int)sizeof cmd);
    assert_int_equal(system(cmd), 0);
}

/* This process's Cpus_allowed_list, as /proc/self/status shows it. */
static void own_cpus(char *buf, size_t len)
{
    FILE *f = fopen("/proc/self/status", "re");
    assert_non_null(f);
    char line[4096];
    buf[0] = '\0';
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18))
            snprintf(buf, len, "%.*s", (int)strcspn(line + 18 + strspn(line + 18, " \t"), "\n"),
                     line + 18 + strspn(line + 18, " \t"));
    fclose(f);
    assert_true(buf[0] != '\0');
}

/* --bind-to numa (the default) runs a rank on the CPUs near its GPU that
 * it may use: GPU 0's local_cpulist names one CPU this process may run on,
 * GPU 1's only one it may not (that rank is left as it was); with
 * --bind-to none nothing changes.  -v says where each rank went. */
static void gpus_bind_near(void **state)
{
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
    int allowed = -1, forbidden = -1;
    for (int c = 0; c < CPU_SETSIZE && (allowed < 0 || forbidden < 0); c++) {
        if (CPU_ISSET(c, &mine) && allowed < 0)
            allowed = c;
        if (!CPU_ISSET(c, &mine) && forbidden < 0)
            forbidden = c;
    }
    assert_true(allowed >= 0 && forbidden >= 0);
    char all[256], one[16], other[16];
    own_cpus(all, sizeof all);
    snprintf(one, sizeof one, "%d", allowed);
    snprintf(other, sizeof other, "%d", forbidden);
    const char *root = fake_sysroot(2);
    write_fake(root, "sys/bus/pci/devices/0000:01:00.0/numa_node", "0");
    write_fake(root, "sys/bus/pci/devices/0000:01:00.0/local_cpulist", one);
    write_fake(root, "sys/bus/pci/devices/0000:02:00.0/numa_node", "-1");
    write_fake(root, "sys/bus/pci/devices/0000:02:00.0/local_cpulist", other);
    static const char script[] = "echo \"rank $RANK gpu $CUDA_VISIBLE_DEVICES cpus $(grep "
                                 "Cpus_allowed_list /proc/self/status | cut -f2)\"";
    struct run r;
    sysroot_job(&r, root, (const char *[]){"-v", "--gpus", "0,1,0", NULL}, script, NULL);
    char want[512];
    snprintf(want, sizeof want, "rank 0 gpu 0 cpus %s\n", one);
    if (r.code != 0 || !strstr(r.out, want))
        fail_msg("exit %d, expected '%s' in:\n%s\nstderr:\n%s", r.code, want, r.out, r.err);
    snprintf(want, sizeof want, "rank 2 gpu 0 cpus %s\n", one);
    if (!strstr(r.out, want))
        fail_msg("expected '%s' in:\n%s", want, r.out);
    snprintf(want, sizeof want, "rank 1 gpu 1 cpus %s\n", all);
    if (!strstr(r.out, want))
        fail_msg("expected '%s' (left as it was) in:\n%s\nstderr:\n%s", want, r.out, r.err);
    snprintf(want, sizeof want, "shmesh-run: rank 0: GPU 0 at 0000:01:00.0, NUMA node 0; CPUs %s\n",
             one);
    if (!strstr(r.err, want))
        fail_msg("expected '%s' in:\n%s", want, r.err);
    snprintf(want, sizeof want, "shmesh-run: rank 1: GPU 1 at 0000:02:00.0, NUMA node unknown; not "
             "bound: none of its CPUs (%s) is allowed\n", other);
    if (!strstr(r.err, want))
        fail_msg("expected '%s' in:\n%s", want, r.err);
    assert_clean(&r);
    run_free(&r);

    sysroot_job(&r, root, (const char *[]){"-v", "--bind-to", "none", "--gpus", "0", NULL}, script,
                NULL);
    snprintf(want, sizeof want, "rank 0 gpu 0 cpus %s\n", all);
    if (r.code != 0 || !strstr(r.out, want))
        fail_msg("exit %d, expected '%s' in:\n%s\nstderr:\n%s", r.code, want, r.out, r.err);
    assert_int_equal(count_lines(r.err, "rank 0: GPU 0 at 0000:01:00.0, NUMA node 0; not bound "
                                        "(--bind-to none)", NULL), 1);
    run_free(&r);
    fake_sysroot_remove();
}

/* Options and settings that cannot make a job are usage errors (2), like
 * any other bad option; the message names what was wrong. */
static void bad_sizes_exit_2(void **state)
{
    static const struct {
        const char *env, *shm_size, *np, *message;
    } cases[] = {
        {"SHMESH_SLOT_BYTES=-4096", NULL, "1", "SHMESH_SLOT_BYTES"},
        {"SHMESH_SLOT_BYTES=2199023259648", NULL, "1", "SHMESH_SLOT_BYTES"}, /* 1 TiB + 4 KiB */
        {NULL, "1M", "8", "--shm-size 1M is too small: 8 ranks need at least"},
        {"SHMESH_SHM_SIZE=1M", NULL, "8",
         "SHMESH_SHM_SIZE (1048576 bytes) is too small: 8 ranks need at least"},
        {NULL, "-4096", "1", "--shm-size expects a size such as 256M or 1G, got '-4096'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *env[] = {(char *)cases[i].env, NULL};
        struct run r;
        if (cases[i].shm_size)
            run_launcher(&r, env, 10, "-n", cases[i].np, "--shm-size", cases[i].shm_size, "--",
                         "/bin/true", NULL);
        else
            run_launcher(&r, env, 10, "-n", cases[i].np, "--", "/bin/true", NULL);
        if (r.code != 2 || !strstr(r.err, cases[i].message))
            fail_msg("%s%s: exit %d, expected 2 and '%s'; stderr:\n%s",
                     cases[i].env ? cases[i].env : "--shm-size ",
                     cases[i].env ? "" : cases[i].shm_size, r.code, cases[i].message, r.err);
        run_free(&r);
    }
}

/* --tag-output holds two pipes per rank.  A soft limit too low is raised
 * (the ranks get the limit as it was); a hard one too low is a clear
 * error, not a failed poll. */
static void open_file_limit(void **state)
{
    char script[256];
    snprintf(script, sizeof script,
             "ulimit -n 256 && exec %s -n 200 --tag-output -- /bin/true", launcher_path());
    char *hard[] = {"/bin/sh", "-c", script, NULL};
    struct run r;
    run_cmd(hard, NULL, 60, &r);
    if (r.code != 1 || count_lines(r.err, "open files", "ulimit -n") != 1 || strstr(r.err, "poll"))
        fail_msg("exit %d, expected 1 and one line about open files; stderr:\n%s", r.code, r.err);
    run_free(&r);

    struct rlimit lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &lim), 0);
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < 1024)
        skip();
    snprintf(script, sizeof script,
             "ulimit -Sn 256 && exec %s -n 200 --tag-output -- /bin/sh -c 'echo \"limit "
             "$(ulimit -Sn)\"'",
             launcher_path());
    char *soft[] = {"/bin/sh", "-c", script, NULL};
    run_cmd(soft, NULL, 120, &r);
    if (r.code != 0 || count_lines(r.out, "] limit 256", NULL) != 200)
        fail_msg("exit %d, expected 0 and 200 ranks with a limit of 256; stderr:\n%s\nstdout:\n%.2000s",
                 r.code, r.err, r.out);
    run_free(&r);
}

/* Nothing reads the launcher's stdout, and ranks write without end: the
 * timeout and a signal still act at once, and what could not be written is
 * counted on stderr. */
static void stalled_stdout(void **state)
{
    char *argv[] = {(char *)launcher_path(), "-v", "--tag-output", "--timeout", "2", "-n", "2",
                    "--", "/bin/sh", "-c", "exec yes \"rank $RANK fills a pipe nobody reads\"",
                    NULL};
    struct run_opts o = {.timeout = 60, .stdout_unread = true};
    struct run r;
    run_cmd_opts(argv, &o, &r);
    if (r.timed_out || r.code != 124 || r.secs > 2 + 15)
        fail_msg("exit %d after %.1f s%s, expected 124 soon after 2 s; stderr:\n%s", r.code,
                 r.secs, r.timed_out ? " (killed)" : "", r.err);
    if (count_lines(r.err, "shmesh-run: dropped ", " bytes of rank output: stdout was not read") != 1)
        fail_msg("no count of dropped output:\n%s", r.err);
    assert_clean(&r);
    run_free(&r);

    char *no_timeout[] = {(char *)launcher_path(), "-v", "--tag-output", "-n", "2", "--",
                          "/bin/sh", "-c", "exec yes \"rank $RANK fills a pipe nobody reads\"",
                          NULL};
    o.during = send_sigterm; /* after 0.7 s */
    run_cmd_opts(no_timeout, &o, &r);
    if (r.timed_out || r.code != 128 + SIGTERM || r.secs > 0.7 + 15)
        fail_msg("exit %d after %.1f s%s, expected 143 soon after 0.7 s; stderr:\n%s", r.code,
                 r.secs, r.timed_out ? " (killed)" : "", r.err);
    assert_int_equal(count_lines(r.err, "received SIGTERM; forwarding it to 2 ranks", NULL), 1);
    assert_clean(&r);
    run_free(&r);
}

/* Whether `text` holds the line "[rank] " followed by `len` times `c`. */
static bool has_long_line(const char *text, int rank, char c, size_t len)
{
    char prefix[16];
    int plen = snprintf(prefix, sizeof prefix, "[%d] ", rank);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n == (size_t)plen + len && !memcmp(line, prefix, (size_t)plen)) {
            size_t k = (size_t)plen;
            while (k < n && line[k] == c)
                k++;
            if (k == n)
                return true;
        }
        line = end ? end + 1 : NULL;
    }
    return false;
}

/* Two ranks write a 200 KB line each, in pieces, at the same time: each
 * arrives as one line.  A line over 1 MiB is cut into lines of 1 MiB. */
static void long_lines_whole(void **state)
{
    struct run r;
    run_launcher(&r, NULL, 60, "-v", "--tag-output", "-n", "2", "--", "/bin/sh", "-c",
                 "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do "
                 "head -c 10000 /dev/zero | tr '\\0' \"$RANK\"; sleep 0.01; done; echo; "
                 "echo \"short $RANK\"",
                 NULL);
    assert_int_equal(r.code, 0);
    for (int k = 0; k < 2; k++)
        if (!has_long_line(r.out, k, (char)('0' + k), 200000))
            fail_msg("rank %d's 200 KB line is not whole (%d lines of output)", k,
                     count_lines(r.out, NULL, NULL));
    assert_int_equal(count_lines(r.out, NULL, NULL), 4);
    assert_clean(&r);
    run_free(&r);

    /* 2.5 MiB without a newline: two lines of 1 MiB, then the rest. */
    run_launcher(&r, NULL, 60, "-v", "--tag-output", "-n", "1", "--", "/bin/sh", "-c",
                 "head -c 2621440 /dev/zero | tr '\\0' x", NULL);
    assert_int_equal(r.code, 0);
    if (count_lines(r.out, NULL, NULL) != 3 || !has_long_line(r.out, 0, 'x', 1 << 20) ||
        !has_long_line(r.out, 0, 'x', 1 << 19))
        fail_msg("expected 2 lines of 1 MiB and one of 512 KiB, got %d lines",
                 count_lines(r.out, NULL, NULL));
    assert_clean(&r);
    run_free(&r);
}

/* Segments in /dev/shm made by the launcher of pid `pid` (named
 * /shmesh-PID-...): how many, each removed. */
static int remove_segments_of(pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "shmesh-%d-", (int)pid);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) {
            char name[300];
            snprintf(name, sizeof name, "/%s", e->d_name);
            shm_unlink(name);
            n++;
        }
    closedir(d);
    return n;
}

static void note_pid(pid_t pid, void *arg) { *(pid_t *)arg = pid; }

/* --trace naming a FIFO that nobody reads: refused at once (open() would
 * block before any signal or --timeout could act), nothing left. */
static void trace_fifo_without_reader(void **state)
{
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/shmesh-fifo-%d", (int)getpid());
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    char *argv[] = {(char *)launcher_path(), "-n", "2", "--timeout", "2", "--trace", fifo, "--",
                    "/bin/true", NULL};
    pid_t launcher = 0;
    struct run r;
    run_cmd_with(argv, NULL, 15, &r, note_pid, &launcher);
    unlink(fifo);
    int left = remove_segments_of(launcher);
    if (r.timed_out || r.code != 2 || !strstr(r.err, "--trace: nobody reads the FIFO"))
        fail_msg("exit %d%s, expected 2 and a refusal naming the FIFO; stderr:\n%s", r.code,
                 r.timed_out ? " (killed at the test's deadline: it blocked)" : "", r.err);
    if (left)
        fail_msg("%d segment%s left in /dev/shm", left, left == 1 ? "" : "s");
    run_free(&r);
}

/* A rank that leaves with status 0 while its peers wait for it: the
 * launcher notes it and blames it, also when the peers noticed it gone and
 * said so in the segment before the launcher looked (the launcher is
 * stopped meanwhile), and the job exits with the first failure's status. */
static void leaving_early_is_blamed(void **state)
{
    const char *modes[] = {"leave-early", "leave-early-unseen"};
    for (int m = 0; m < 2; m++) {
        struct run r;
        run_launcher(&r, NULL, 30, "-v", "-n", "3", "--", "@rank", modes[m], NULL);
        assert_false(r.timed_out);
        if (r.code != 3 ||
            count_lines(r.err, "note: rank 1 (pid", "exited with status 0 without calling "
                                                   "shmesh_finalize") != 1 ||
            count_lines(r.err, "after rank 1 (pid", "left the job early") != 1 ||
            count_lines(r.err, "exited with status 3; stopping", NULL) != 0)
            fail_msg("%s: exit %d, expected 3, a note on rank 1 and the failure blamed on it; "
                     "stderr:\n%s",
                     modes[m], r.code, r.err);
        assert_clean(&r);
        run_free(&r);
    }
}

/* A traced job far longer than its rings (800 000 calls, no event lost
 * unless the machine starves the drain): the launcher writes the JSON in
 * memory bounded by the rings, so it succeeds under a 32 MiB limit on its
 * data (it took 64 bytes per call, 64 MiB here, and failed).  Not under
 * ASan, whose shadow memory no such limit admits. */
static void trace_memory_bounded(void **state)
{
#if defined(__SANITIZE_ADDRESS__)
    skip();
#endif
    char script[1024];
    snprintf(script, sizeof script,
             "ulimit -d 32768 && exec '%s' -v -n 4 --timeout 120 --trace /dev/null -- '%s' paced "
             "200000",
             launcher_path(), need_env("SHMESH_TEST_TRACE_FAKE"));
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    struct run r;
    run_cmd(argv, NULL, 150, &r);
    if (r.timed_out || r.code != 0 ||
        !count_lines(r.err, "shmesh-run: trace of ", " calls on 4 ranks written to /dev/null"))
        fail_msg("exit %d%s, expected 0 and the trace written; stderr:\n%s", r.code,
                 r.timed_out ? " (killed at the test's deadline)" : "", r.err);
    assert_clean(&r);
    run_free(&r);
}

/* Whether the launcher's standard output (a memfd of the harness's, read
 * through /proc) holds `text` yet. */
static bool launcher_printed(pid_t launcher, const char *text)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/fd/1", (int)launcher);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return strstr(buf, text) != NULL;
}

/* Once the job's ranks are in their loop of calls (shmesh-bench printed
 * its table's head), cut its segment to its first page through the
 * launcher's descriptor, as any process of the user can. */
static void truncate_segment_of(pid_t launcher, void *arg)
{
    double t0 = mono_secs();
    while (!launcher_printed(launcher, "#wrong") && mono_secs() - t0 < 60)
        sleep_secs(0.05);
    sleep_secs(0.1);
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)launcher);
    DIR *d = opendir(dir);
    struct dirent *e;
    bool *done = arg;
    while (d && !*done && (e = readdir(d))) {
        char link[320], target[256];
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strncmp(target, "/dev/shm/shmesh-", 16))
            continue;
        int fd = open(link, O_RDWR | O_CLOEXEC);
        *done = fd >= 0 && ftruncate(fd, 4096) == 0;
        if (fd >= 0)
            close(fd);
    }
    if (d)
        closedir(d);
}

/* Another process truncates a running job's segment: the ranks' calls fail
 * with SHMESH_ERR_BAD_SEGMENT saying so, and neither a rank nor the
 * launcher (reading the trace rings, or a rank's state as it exits) dies
 * of SIGBUS; nothing is left. */
static void truncated_segment(void **state)
{
    for (int traced = 0; traced < 2; traced++) {
        char *argv[] = {(char *)launcher_path(), "-v", "-n", "2", "--timeout", "60", "--trace",
                        "/dev/null", "--", (char *)need_env("SHMESH_BENCH"), "-o", "psum", "-b",
                        "8", "-e", "8", "-w", "0", "-n", "100000000", "-c", "0", NULL};
        if (!traced) /* without --trace /dev/null */
            memmove(&argv[6], &argv[8], 15 * sizeof *argv);
        bool done = false;
        struct run r;
        run_cmd_with(argv, NULL, 90, &r, truncate_segment_of, &done);
        const char *what = traced ? "traced" : "untraced";
        if (!done)
            fail_msg("%s: the segment could not be truncated; stderr:\n%s", what, r.err);
        /* shmesh-bench says "rank R: psum: <strerror>: <the context's message>". */
        if (r.timed_out || r.code == 0 || r.code == 128 + SIGBUS || strstr(r.err, "SIGBUS") ||
            !count_lines(r.err, "the shared-memory segment is missing, corrupt",
                         "the segment was truncated to 4096 bytes by another process"))
            fail_msg("%s: exit %d%s, expected a failure without SIGBUS, the ranks' calls failing "
                     "with BAD_SEGMENT that names the truncation; stdout:\n%.3000s\nstderr:\n%s",
                     what, r.code, r.timed_out ? " (killed at the deadline)" : "", r.out, r.err);
        assert_clean(&r);
        run_free(&r);
    }
}

/* Refusals that come after the launcher allocated (GPU ids, the bind
 * plan, the segment): each frees what it holds, which the sanitized build
 * checks (LeakSanitizer reports at exit; the plain build only sees the
 * status). */
static void refusals_free_everything(void **state)
{
    static const struct {
        const char *shell; /* run through /bin/sh -c, with the launcher as $0 */
        int code;
        const char *says;
    } cases[] = {
        {"exec \"$0\" --gpus 0,0 -n 2 --trace /nonexistent-dir/t.json -- /bin/true", 2,
         "cannot open '/nonexistent-dir/t.json' for writing"},
        {"exec \"$0\" --gpus 0,0 -n 2 --shm-size 100T -- /bin/true", 1, "/dev/shm has no room"},
        {"ulimit -n 64 && exec \"$0\" --gpus 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
         "0,0,0,0,0,0,0,0,0,0,0,0,0,0 --tag-output -- /bin/true",
         1, "open files"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *argv[] = {"/bin/sh", "-c", (char *)cases[i].shell, (char *)launcher_path(), NULL};
        struct run r;
        run_cmd(argv, NULL, 30, &r);
        if (r.code != cases[i].code || !strstr(r.err, cases[i].says) ||
            strstr(r.err, "LeakSanitizer"))
            fail_msg("%s: exit %d, expected %d, '%s' and no leak; stderr:\n%s", cases[i].shell,
                     r.code, cases[i].code, cases[i].says, r.err);
        run_free(&r);
    }
}

/* ---- a job's processes end with it ---------------------------------------- */

/* Processes (not zombies) whose command line holds `token`, not this one. */
static int procs_with(const char *token, pid_t *pids, int max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (memmem(buf, len, token, strlen(token)) && pid_alive(pid))
            pids[n++] = pid;
    }
    closedir(d);
    return n;
}

/* The pids the ranks wrote into `file`, one a line. */
static int pids_in(const char *file, pid_t *pids, int max)
{
    FILE *f = fopen(file, "re");
    if (!f)
        return 0;
    int n = 0, v;
    while (n < max && fscanf(f, "%d", &v) == 1)
        pids[n++] = (pid_t)v;
    fclose(f);
    return n;
}

/* Waits up to `secs` until every pid in `file` has exited, no process holds
 * `file` in its command line (launcher, job process, ranks) and `segment` (may
 * be empty) is gone from /dev/shm.  On failure, kills and removes what is
 * left and returns a description of it. */
static const char *job_gone(const char *file, const char *segment, double secs, char *why,
                            size_t len)
{
    double t0 = mono_secs();
    for (;;) {
        pid_t pids[64], procs[64];
        int n = pids_in(file, pids, 64), alive = -1;
        for (int i = 0; i < n && alive < 0; i++)
            if (pid_alive(pids[i]))
                alive = i;
        int np = procs_with(file, procs, 64);
        bool seg = segment[0] && shm_exists(segment);
        if (alive < 0 && np == 0 && !seg)
            return NULL;
        if (mono_secs() - t0 > secs) {
            snprintf(why, len, "after %.1f s: %s%d%s, %d process%s of the job%s%s", secs,
                     alive >= 0 ? "pid " : "", alive >= 0 ? (int)pids[alive] : 0,
                     alive >= 0 ? " alive" : "(pids gone)", np, np == 1 ? "" : "es",
                     seg ? ", segment left: " : "", seg ? segment : "");
            for (int i = 0; i < n; i++)
                kill(pids[i], SIGKILL);
            for (int i = 0; i < np; i++)
                kill(procs[i], SIGKILL);
            if (seg)
                shm_unlink(segment);
            return why;
        }
        sleep_secs(0.05);
    }
}

struct when_ready {
    const char *file;
    int lines;  /* pids the job writes into file */
    int joined; /* ranks among them that must have attached to the segment */
};

/* How many of the processes whose pids `file` holds have a shmesh segment
 * mapped (a rank that attached to its job). */
static int attached_in(const char *file)
{
    pid_t pids[64];
    int n = pids_in(file, pids, 64), attached = 0;
    for (int i = 0; i < n; i++) {
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/maps", (int)pids[i]);
        FILE *f = fopen(path, "re");
        bool found = false;
        while (f && !found && fgets(line, sizeof line, f))
            found = strstr(line, "/dev/shm/shmesh-") != NULL;
        if (f)
            fclose(f);
        attached += found;
    }
    return attached;
}

/* Once the job wrote its pids and `joined` ranks attached to the segment,
 * SIGKILL the launcher. */
static void sigkill_when_ready(pid_t pid, void *arg)
{
    const struct when_ready *w = arg;
    double t0 = mono_secs();
    pid_t pids[64];
    while ((pids_in(w->file, pids, 64) < w->lines ||
            attached_in(w->file) < w->joined) &&
           mono_secs() - t0 < 60)
        sleep_secs(0.02);
    kill(pid, SIGKILL);
}

static void temp_file(char *path, size_t len)
{
    snprintf(path, len, "/tmp/shmesh-job-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

/* The launcher is killed with SIGKILL while ranks 0 and 1 sit in the job
 * (joined) and rank 2 never calls shmesh_init; each rank started a `sleep`,
 * and one in a session of its own.  Ranks, their children and the segment's
 * name are all gone soon after. */
static void sigkill_launcher_leaves_nothing(void **state)
{
    char file[64];
    temp_file(file, sizeof file);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "3", "--", "/bin/sh", "-c",
                    "sleep 77 & echo $! >> \"$1\"; setsid sleep 77 & echo $! >> \"$1\"; "
                    "echo $$ >> \"$1\"; "
                    "if [ \"$RANK\" != 2 ]; then exec \"$2\" sleep; fi; exec sleep 78",
                    "sh", file, (char *)rank_prog_path(), NULL};
    struct when_ready w = {file, 9, 2};
    struct run r;
    run_cmd_with(argv, NULL, 90, &r, sigkill_when_ready, &w);
    assert_int_equal(r.code, 128 + SIGKILL);
    char segment[128] = "", why[256];
    find_segment_name(r.err, segment, sizeof segment);
    const char *left = job_gone(file, segment, 30, why, sizeof why);
    pid_t pids[64];
    int n = pids_in(file, pids, 64);
    unlink(file);
    if (left)
        fail_msg("%s\nstderr:\n%s", left, r.err);
    assert_int_equal(n, 9);
    assert_true(segment[0]);
    run_free(&r);
}

/* Each rank of these jobs starts a process that leaves everything the job
 * could know it by: its session and process group (setsid), its parent (a
 * double fork) and its environment (env -i); then it sleeps as a rank. */
#define ESCAPEE_SCRIPT                                                                        \
    "setsid /bin/sh -c 'env -i /bin/sleep 83 & echo $! >> \"$1\"' sh \"$1\"; "                  \
    "echo $$ >> \"$1\"; exec \"$2\" sleep"

/* SIGKILL of shmesh-run: the escapees end too. */
static void escapees_end_with_killed_launcher(void **state)
{
    char file[64];
    temp_file(file, sizeof file);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "2", "--", "/bin/sh", "-c",
                    ESCAPEE_SCRIPT, "sh", file, (char *)rank_prog_path(), NULL};
    struct when_ready w = {file, 4, 2};
    struct run r;
    run_cmd_with(argv, NULL, 90, &r, sigkill_when_ready, &w);
    char segment[128] = "", why[256];
    find_segment_name(r.err, segment, sizeof segment);
    const char *left = job_gone(file, segment, 10, why, sizeof why);
    pid_t pids[64];
    int n = pids_in(file, pids, 64);
    unlink(file);
    if (left)
        fail_msg("%s\nstderr:\n%s", left, r.err);
    assert_int_equal(r.code, 128 + SIGKILL);
    assert_int_equal(n, 4);
    run_free(&r);
}

/* The process of shmesh-run's that supervises the ranks (named shmesh-job),
 * or a helper of shmesh-run's such as a watchdog: the first child of
 * `launcher` whose name starts with "shmesh-" but is not shmesh-run. */
static bool is_launcher_helper(pid_t pid, const struct proc_stat *st, void *launcher)
{
    return st->ppid == *(pid_t *)launcher && !strncmp(st->comm, "shmesh-", 7) &&
           strcmp(st->comm, "shmesh-run");
}

static pid_t launcher_helper(pid_t launcher)
{
    return find_process(is_launcher_helper, &launcher);
}

struct helper_kill {
    const char *file;
    pid_t killed;
};

/* Once the ranks wrote their pids, SIGKILL the launcher's helper. */
static void sigkill_helper_when_ready(pid_t pid, void *arg)
{
    struct helper_kill *h = arg;
    double t0 = mono_secs();
    pid_t pids[64];
    while ((pids_in(h->file, pids, 64) < 4 || attached_in(h->file) < 2) &&
           mono_secs() - t0 < 60)
        sleep_secs(0.02);
    h->killed = launcher_helper(pid);
    if (h->killed > 0)
        kill(h->killed, SIGKILL);
}

/* SIGKILL of the process that keeps the job (not of shmesh-run): the job
 * cannot go on unwatched.  shmesh-run says so, ends what is left, escapees
 * included, and exits. */
static void killed_job_process_is_noticed(void **state)
{
    char file[64];
    temp_file(file, sizeof file);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "2", "--", "/bin/sh", "-c",
                    ESCAPEE_SCRIPT, "sh", file, (char *)rank_prog_path(), NULL};
    struct helper_kill h = {file, 0};
    struct run r;
    run_cmd_with(argv, NULL, 90, &r, sigkill_helper_when_ready, &h);
    char segment[128] = "", why[256];
    find_segment_name(r.err, segment, sizeof segment);
    const char *left = job_gone(file, segment, 10, why, sizeof why);
    unlink(file);
    if (h.killed <= 0)
        fail_msg("no helper process of shmesh-run found; stderr:\n%s", r.err);
    char want[96];
    snprintf(want, sizeof want, "(pid %d) was killed by SIGKILL", (int)h.killed);
    if (r.timed_out || r.code != 128 + SIGKILL || count_lines(r.err, "shmesh-run: ", want) != 1)
        fail_msg("exit %d%s, expected 137 and a line saying '%s'; stderr:\n%s", r.code,
                 r.timed_out ? " (killed at the test's deadline: the job went on)" : "", want,
                 r.err);
    if (left)
        fail_msg("%s\nstderr:\n%s", left, r.err);
    run_free(&r);
}

/* A clean job whose ranks leave children behind, one in the rank's process
 * group and one in a session of its own, both holding stdout: the launcher
 * returns at once and neither child is left. */
static void leftovers_end_with_the_job(const char *tag)
{
    char file[64];
    temp_file(file, sizeof file);
    char *argv[12];
    int n = 0;
    argv[n++] = (char *)launcher_path();
    argv[n++] = "-v";
    if (tag)
        argv[n++] = (char *)tag;
    char *rest[] = {"-n", "2", "--", "/bin/sh", "-c",
                    "sleep 79 & echo $! >> \"$1\"; setsid sleep 79 & echo $! >> \"$1\"; "
                    "echo \"rank $RANK done\"",
                    "sh", file, NULL};
    memcpy(&argv[n], rest, sizeof rest);
    struct run r;
    run_cmd(argv, NULL, 30, &r);
    char why[256];
    const char *left = job_gone(file, "", 10, why, sizeof why);
    pid_t pids[8];
    n = pids_in(file, pids, 8);
    unlink(file);
    if (left)
        fail_msg("%s: %s\nstderr:\n%s", tag ? tag : "untagged", left, r.err);
    assert_int_equal(r.code, 0);
    assert_int_equal(n, 4);
    assert_int_equal(count_lines(r.out, "rank ", " done"), 2);
    /* The children it must not wait for sleep 79 s. */
    if (r.secs > 20)
        fail_msg("%s: the launcher took %.2f s", tag ? tag : "untagged", r.secs);
    assert_clean(&r);
    run_free(&r);
}

static void leftovers_end_tagged(void **state) { leftovers_end_with_the_job("--tag-output"); }
static void leftovers_end_untagged(void **state) { leftovers_end_with_the_job(NULL); }

/* A test that failed half way leaves its fake root: gone at the end. */
static int remove_sysroot(void **state)
{
    fake_sysroot_remove();
    return 0;
}

/* test-launcher [PATTERN]: the tests whose names match (cmocka's filter, * and ?). */
int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(all_ranks_exit_zero),
        cmocka_unit_test(one_rank_exits_7),
        cmocka_unit_test(killed_in_barrier_futex),
        cmocka_unit_test(killed_in_barrier_uring),
        cmocka_unit_test(sigterm_to_launcher),
        cmocka_unit_test(sigterm_ignored_then_killed),
        cmocka_unit_test(timeout_exits_124),
        cmocka_unit_test(exec_failure_reported_once),
        cmocka_unit_test(tag_output_prefixes_lines),
        cmocka_unit_test(environment_per_rank),
        cmocka_unit_test(one_gpu_per_rank),
        cmocka_unit_test(bind_to_core),
        cmocka_unit_test(bind_default_start_cpus),
        cmocka_unit_test(usage_errors),
        cmocka_unit_test(non_shmesh_program),
        cmocka_unit_test(more_ranks_than_gpus),
        cmocka_unit_test(devices_per_rank_cpu),
        cmocka_unit_test(devices_per_rank_gpus),
        cmocka_unit_test(devices_per_rank_refused),
        cmocka_unit_test(gpus_listed),
        cmocka_unit_test(gpus_shared_mps),
        cmocka_unit_test(gpus_none),
        cmocka_unit_test(gpus_refused),
        cmocka_unit_test(gpus_bind_near),
        cmocka_unit_test(bad_sizes_exit_2),
        cmocka_unit_test(open_file_limit),
        cmocka_unit_test(stalled_stdout),
        cmocka_unit_test(long_lines_whole),
        cmocka_unit_test(trace_fifo_without_reader),
        cmocka_unit_test(leaving_early_is_blamed),
        cmocka_unit_test(trace_memory_bounded),
        cmocka_unit_test(truncated_segment),
        cmocka_unit_test(refusals_free_everything),
        cmocka_unit_test(sigkill_launcher_leaves_nothing),
        cmocka_unit_test(escapees_end_with_killed_launcher),
        cmocka_unit_test(killed_job_process_is_noticed),
        cmocka_unit_test(leftovers_end_tagged),
        cmocka_unit_test(leftovers_end_untagged),
    };
    return cmocka_run_group_tests(tests, NULL, remove_sysroot);
}
