"""The errors that end a job, each in a job of its own (shmesh-run started
from here, only in the single-rank run: the others skip these tests
alike): Mismatch, PeerDead, Timeout, Aborted reach every surviving rank
as their classes, with the library's sentence; every job ends before its
deadline and leaves nothing in /dev/shm."""
import os
import re
import subprocess
import sys

import pytest

import shmesh

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(shmesh.world_size() != 1,
                                reason="jobs are started from the single-rank run")

# what the launcher gives a rank: not passed on to the jobs started here
JOB_VARS = ("SHMESH_SEGMENT", "SHMESH_RANK", "SHMESH_WORLD_SIZE", "SHMESH_LOCAL_RANK",
            "SHMESH_LOCAL_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
            "SHMESH_TIMEOUT")


def run_job(launcher, n, mode, env=None, deadline=30, extra=(), script="jobs.py"):
    """`script` (beside this file) with argument `mode` in a job of n ranks
    (launcher options `extra`), which must end before `deadline` and leave
    no segment behind."""
    e = {k: v for k, v in os.environ.items() if k not in JOB_VARS}
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(shmesh.__file__)))
    e["SHMESH_LIBRARY"] = os.path.abspath(shmesh._lib.lib._name)
    e.update(env or {})
    cmd = [launcher, "-v", "--tag-output", "-n", str(n), *extra, "--timeout", str(deadline),
           "--grace", "2", "--", sys.executable, os.path.join(HERE, script), mode]
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=deadline + 15, text=True)
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
    p = run_job(launcher, 2, "timeout", env={"SHMESH_TIMEOUT": "1"})
    got = lines(p, "Timeout")
    assert 0 in got, p.stdout + p.stderr
    assert "SHMESH_TIMEOUT (1.000 s)" in got[0] and "rank 1" in got[0], got[0]


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
