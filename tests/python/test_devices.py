"""Several devices per rank from Python (shmesh-run --devices-per-rank K),
in jobs of their own started from the single-rank run (the others skip
alike).  devices_job.py runs every collective on a mesh of 8 devices held
as 8 ranks of 1, 4 ranks of 2 and 1 rank of 8; each device's results must
be the same bit for bit in the three jobs (as the library promises), and
those of the job of 8 ranks are checked against numpy for the main ops.
The jobs with K > 1 must refuse an input without the leading device axis
on every rank, and go on.  About 6 s."""
import os
import re

import numpy as np
import pytest

import shmesh
from devices_job import x_of, i_of
from test_jobs import run_job

JOBS = {"8x1": (8, 1), "4x2": (4, 2), "1x8": (1, 8)}  # ranks, devices per rank

pytestmark = pytest.mark.skipif(shmesh.world_size() != 1,
                                reason="jobs are started from the single-rank run")


def run(launcher, n, k, outdir):
    p = run_job(launcher, n, str(outdir), deadline=60, script="devices_job.py",
                extra=("--devices-per-rank", str(k)))
    assert p.returncode == 0, "%d x %d failed (%d):\n%s%s" % (n, k, p.returncode, p.stdout,
                                                               p.stderr)
    return p


@pytest.fixture(scope="module")
def jobs(launcher, tmp_path_factory):
    """{job: (its output, {device: {case: array}})}."""
    got = {}
    for name, (n, k) in JOBS.items():
        d = tmp_path_factory.mktemp("devices-" + name)
        p = run(launcher, n, k, d)
        files = {}
        for dev in range(8):
            with np.load(os.path.join(d, "dev%d.npz" % dev)) as z:
                files[dev] = {k: z[k] for k in z.files}
        got[name] = (p.stdout, files)
    return got


def test_same_results_whatever_holds_the_devices(jobs):
    base = jobs["8x1"][1]
    assert len(base[0]) >= 25, sorted(base[0])
    for name in ("4x2", "1x8"):
        other = jobs[name][1]
        for dev in range(8):
            assert sorted(other[dev]) == sorted(base[dev]), (name, dev)
            for case, want in base[dev].items():
                have = other[dev][case]
                assert have.dtype == want.dtype and have.shape == want.shape, \
                    (name, dev, case, have.dtype, have.shape, want.dtype, want.shape)
                assert have.tobytes() == want.tobytes(), (name, dev, case, have, want)


def coords(d):
    """Device d's (a, b, c) on the (2, 2, 2) mesh of ids 0..7."""
    return d // 4, d // 2 % 2, d % 2


def test_results_are_right(jobs):
    """The job of 8 ranks against numpy (the others equal it)."""
    res = jobs["8x1"][1]
    for d in range(8):
        a, b, c = coords(d)
        r = res[d]
        same_bc = [e for e in range(8) if coords(e)[1:] == (b, c)]   # varies a
        assert r["axis_index_b"] == b
        assert r["axis_index_cab"] == c * 4 + a * 2 + b
        np.testing.assert_array_equal(r["psum_a"], sum(x_of(e) for e in same_bc))
        np.testing.assert_array_equal(r["psum_abc"].astype(np.float64),
                                      sum(x_of(e).astype(np.float64) for e in range(8)))
        same_ab = [e for e in range(8) if coords(e)[:2] == (a, b)]   # varies c
        np.testing.assert_array_equal(r["pmax_c"], np.maximum(*[i_of(e) for e in same_ab]))
        # all_gather over ("a", "c"): index a * 2 + c, the b coordinate fixed
        group = sorted((e for e in range(8) if coords(e)[1] == b),
                       key=lambda e: coords(e)[0] * 2 + coords(e)[2])
        np.testing.assert_array_equal(r["all_gather"], np.stack([x_of(e) for e in group]))
        np.testing.assert_array_equal(r["after_refusal"], r["psum_a"])
        np.testing.assert_array_equal(r["from_blocks"],
                                      np.arange(48, dtype=np.float32).reshape(8, 6))


def test_missing_device_axis_refused_on_every_rank(jobs):
    for name, ranks, k in (("4x2", 4, 2), ("1x8", 1, 8)):
        out = jobs[name][0]
        refused = re.findall(r"^(?:\[\d+\] )?refused: (.*)$", out, re.M)
        assert len(refused) == ranks, out
        for msg in refused:
            assert ("holds %d devices" % k) in msg and "got shape (3,)" in msg, msg
        ndim = re.findall(r"^(?:\[\d+\] )?too many dimensions: (.*)$", out, re.M)
        assert len(ndim) == ranks, out
        for msg in ndim:
            assert "at most 8 dimensions (9 with the device axis), got 10" in msg, msg
    assert "refused" not in jobs["8x1"][0]
