"""The errors that end a job, each in a job of its own (shmesh-run started
from here, only in the single-rank run: the others skip these tests
alike): Mismatch, PeerDead, Timeout, Aborted reach every surviving rank
as their classes, with the library's sentence; every job ends before its
deadline and leaves nothing in /dev/shm."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

import shmesh

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(shmesh.world_size() != 1,
                                reason="jobs are started from the single-rank run")

# what the launcher gives a rank: not passed on to the jobs started here
JOB_VARS = ("SHMESH_SEGMENT", "SHMESH_RANK", "SHMESH_WORLD_SIZE", "SHMESH_LOCAL_RANK",
            "SHMESH_LOCAL_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
            "SHMESH_TIMEOUT")


def run_job(launcher, n, mode, env=None, deadline=60, extra=(), script="jobs.py"):
    """`script` (beside this file) with argument `mode` in a job of n ranks
    (launcher options `extra`), which must end before `deadline` and leave
    no segment behind.  The job's gates (gate.py) are in a directory of its
    own, removed after it."""
    e = {k: v for k, v in os.environ.items() if k not in JOB_VARS}
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(shmesh.__file__)))
    e["SHMESH_LIBRARY"] = os.path.abspath(shmesh._lib.lib._name)
    e.update(env or {})
    cmd = [launcher, "-v", "--tag-output", "-n", str(n), *extra, "--timeout", str(deadline),
           "--grace", "2", "--", sys.executable, os.path.join(HERE, script), mode]
    gates = tempfile.mkdtemp(prefix="shmesh-test-gate-")
    e["SHMESH_TEST_GATE"] = gates
    try:
        p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=deadline + 15, text=True)
    finally:
        shutil.rmtree(gates, ignore_errors=True)
    seg = re.search(r"segment (/shmesh-[^ ,\n]+)", p.stderr)
    assert seg, "no segment named by the launcher:\n" + p.stderr
    assert not os.path.exists("/dev/shm" + seg.group(1)), "segment left in /dev/shm"
    assert p.returncode != 124, "the job ran past its deadline:\n" + p.stdout + p.stderr
    return p


def lines(p, cls):
    """{rank: message} of the lines "[R] rank R: CLS: MESSAGE" (--tag-output
    keeps the ranks' lines whole)."""
    found = {}
    for m in re.finditer(r"^\[\d+\] rank (\d+): %s: (.*)$" % cls, p.stdout, re.M):
        found[int(m.group(1))] = m.group(2)
    return found


@pytest.mark.parametrize("n", [2, 3])
def test_mismatch(launcher, n):
    p = run_job(launcher, n, "mismatch")
    got = lines(p, "Mismatch")
    assert sorted(got) == list(range(n)), p.stdout + p.stderr
    for r, msg in got.items():
        # the sentence names both calls (this rank's own where it saw the difference)
        assert msg.startswith("rank %d: " % r) and "shmesh_psum" in msg, msg
        assert len(set(re.findall(r"float64\[(\d+)\]", msg))) == 2, msg
    assert p.stdout.count("again Mismatch") == n, p.stdout
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("n", [2, 3])
def test_peer_dead(launcher, n):
    p = run_job(launcher, n, "peerdead")
    got = lines(p, "PeerDead")
    assert sorted(got) == list(range(n - 1)), p.stdout + p.stderr
    for msg in got.values():
        assert str(n - 1) in msg, msg  # names the rank that died
    assert p.returncode == 5, (p.returncode, p.stderr)


def test_peer_dead_async(launcher):
    """A peer dies while the others wait on a token: PeerDead from wait()."""
    p = run_job(launcher, 3, "asyncpeerdead")
    assert p.stdout.count(": dispatched") == 2, p.stdout
    got = lines(p, "PeerDead")
    assert sorted(got) == [0, 1], p.stdout + p.stderr
    for msg in got.values():
        assert "2" in msg, msg  # names the rank that died
    assert p.stdout.count("again PeerDead") == 2, p.stdout
    assert p.returncode == 5, (p.returncode, p.stderr)


def test_finalize_drains_async_work(launcher):
    p = run_job(launcher, 2, "asyncfinalize")
    assert sorted(re.findall(r"rank (\d+): drained", p.stdout)) == ["0", "1"], (
        p.stdout + p.stderr)
    assert p.returncode == 0, (p.returncode, p.stderr)


def test_async_with_several_devices_per_rank(launcher):
    p = run_job(launcher, 2, "asyncdevices", extra=("--devices-per-rank", "2"))
    assert sorted(re.findall(r"rank (\d+): devices ok", p.stdout)) == ["0", "1"], (
        p.stdout + p.stderr)
    assert p.returncode == 0, (p.returncode, p.stderr)


def test_timeout(launcher):
    # 5 s, not 1: the limit holds for every wait, the ranks' start-up
    # included, which a busy machine may spread over more than a second
    p = run_job(launcher, 2, "timeout", env={"SHMESH_TIMEOUT": "5"})
    got = lines(p, "Timeout")
    assert 0 in got, p.stdout + p.stderr
    assert "SHMESH_TIMEOUT (5.000 s)" in got[0] and "rank 1" in got[0], got[0]


def test_aborted(launcher):
    p = run_job(launcher, 3, "abort")
    got = lines(p, "Aborted")
    assert sorted(got) == [0, 1], p.stdout + p.stderr
    for msg in got.values():
        assert "jobs.py gives up" in msg and "2" in msg, msg
    assert p.returncode == 7, (p.returncode, p.stderr)
    assert "rank 2: aborting" in p.stdout and "abort returned" not in p.stdout, p.stdout


def test_timeout_error_is_a_timeout_error():
    assert issubclass(shmesh.Timeout, TimeoutError)


@pytest.mark.parametrize("mode", ["forkcall", "forkexit"])
def test_fork_child(launcher, mode):
    """A fork child of rank 0 (async work in flight): its calls on the
    inherited context are refused, saying why, and its exit runs no
    finalize (which was a collective in rank 0's name, or hung joining a
    progress thread the child does not have); the job goes on right."""
    p = run_job(launcher, 3, mode)
    assert sorted(re.findall(r"rank (\d+): fork ok", p.stdout)) == ["0", "1", "2"], (
        p.stdout + p.stderr)
    assert "rank 0: child exited with status 0" in p.stdout, p.stdout
    if mode == "forkcall":
        got = re.findall(r"child: (\w+): InvalidArgument: (.*)", p.stdout)
        assert [w for w, _ in got][:3] == ["psum", "barrier", "finalize"], p.stdout + p.stderr
        for _, msg in got:
            assert re.match(r"rank 0: \w+: this process \(pid \d+\) is a fork child of rank 0 "
                            r"\(pid \d+\), whose context it inherited: ", msg), msg
        # the parent's work in flight: refused alike, or (seen done before the
        # fork) its result, which is then right
        assert re.search(r"^\[0\] child: wait: (right result|InvalidArgument: rank 0: wait: "
                         r"this process .* is a fork child)", p.stdout, re.M), p.stdout
    assert "called shmesh_finalize" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert p.returncode == 0, (p.returncode, p.stderr)


@pytest.mark.parametrize("mode,status,text", [("raise", 1, "ZeroDivisionError: jobs.py divides "
                                                           "by zero"),
                                              ("exit3", 3, None)])
def test_failed_rank_is_named(launcher, mode, status, text):
    """An uncaught exception or sys.exit(3) on the last rank while the others
    still call: no finalize at exit (a collective: the others saw "rank 3
    called shmesh_finalize" as a Mismatch); the others' PeerDead names the
    rank and how it ended, the launcher names it, its status and the
    exception, and the job exits with that status."""
    n = 4
    p = run_job(launcher, n, mode)
    assert p.returncode == status, (p.returncode, p.stdout, p.stderr)
    # the first exit the launcher reports (with -v it lists every one) is the failure's
    failures = re.findall(r"^shmesh-run: (rank \d+ \(pid \d+\) (?:exited|killed).*)$", p.stderr,
                          re.M)
    assert failures and failures[0].startswith("rank %d (pid" % (n - 1)), p.stderr
    assert "exited with status %d" % status in failures[0], failures[0]
    if text:
        assert text in failures[0], failures[0]
    dead = re.findall(r"^\[(\d)\] shmesh\.PeerDead: rank (\d): peer rank (\d) failed during "
                      r"shmesh_psum .*$", p.stdout + p.stderr, re.M)
    assert sorted(int(d[0]) for d in dead) == list(range(n - 1)), p.stdout + p.stderr
    for line in re.findall(r"^\[\d\] shmesh\.PeerDead: .*$", p.stdout + p.stderr, re.M):
        assert "peer rank %d failed" % (n - 1) in line, line
        assert "exited with status %d" % status in line and (not text or text in line), line
    assert "Mismatch" not in p.stdout + p.stderr, p.stdout + p.stderr


def test_threads_refused_alike_on_every_rank(launcher):
    """Two threads calling at once: the context's thread is never disturbed,
    the other is refused every time, on every rank."""
    p = run_job(launcher, 3, "threads")
    assert sorted(re.findall(r"rank (\d+): threads ok", p.stdout)) == ["0", "1", "2"], (
        p.stdout + p.stderr)
    assert p.returncode == 0, (p.returncode, p.stderr)
