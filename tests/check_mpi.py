#!/usr/bin/python3
"""Jobs an MPI launcher starts (docs/multinode.md), under Open MPI's mpirun:

    check_mpi.py MPIRUN SHMESH_RUN DEMO TRAIN LIBSHMESH PYTHON PYTHON_SRC TESTS_PYTHON
                 SHMESH_TOP [--sanitized]

- shmesh-demo on 4 ranks: the same lines as under shmesh-run;
- shmesh-train on 4 ranks: the same losses, bit for bit, as under shmesh-run;
- the Python suite (tests/python) on 2 ranks: every test passes, as many as
  under shmesh-run (PYTHON '' leaves it out);
- SHMESH_NODE_SIZE=2 on 4 ranks (two simulated nodes): every rank refuses
  at shmesh_init with the sentence that says meshes across nodes are not
  built yet, the job ends non-zero;
- a rank that exits during a job: the job ends non-zero, nothing hangs;
- shmesh-top finds the job (its first rank) and shows rank 0 waiting for
  rank 1, which sleeps between two calls;
- SHMESH_NET=none: every process a job of one rank;
- a libshmesh without the plugin beside it: the sentence that names it;
and after each, nothing of ours is left in /dev/shm.  Skipped (77) without
MPIRUN, or where it cannot start /bin/true (the machine's cause, not ours).
--sanitized (a sanitized build): the demo and the two nodes alone, with
LeakSanitizer off in the MPI jobs (Open MPI's own allocations at exit are
its leaks, in modules it has unloaded by then).  Runs as root with Open
MPI's two OMPI_ALLOW_RUN_AS_ROOT variables, and oversubscribes (more ranks
than cores is normal here).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def shm_now():
    return {f for f in os.listdir("/dev/shm") if f.startswith("shmesh")}


def run(argv, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    try:
        p = subprocess.run(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, text=True)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as x:
        return "timeout", (x.stdout or b"").decode(errors="replace") if isinstance(
            x.stdout, bytes) else (x.stdout or "")


def main(argv):
    mpirun, shmesh_run, demo, train, lib, python, python_src, tests_python, top = argv[1:10]
    sanitized = "--sanitized" in argv[10:]
    if not mpirun or not os.path.exists(mpirun):
        print("skipped: no mpirun (Debian: openmpi-bin)")
        return 77
    plugin = os.path.join(os.path.dirname(lib), "net", "libshmesh-net-mpi.so")
    if not os.path.exists(plugin):
        print("skipped: libshmesh-net-mpi.so was not built (Debian: libopenmpi-dev)")
        return 77
    os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                       "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    mpi = [mpirun, "--oversubscribe", "--mca", "btl", "self,vader"]
    if sanitized:
        os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        mpi += ["-x", "ASAN_OPTIONS"]
        python = ""
    # mpirun itself, with nothing of ours: where it cannot start a process
    # at all (a container it does not run in), the cause is the machine's.
    rc, out = run(mpi + ["-np", "1", "/bin/true"], timeout=60)
    if rc != 0:
        print("skipped: mpirun cannot start /bin/true here (%s):\n%s" % (rc, out[-1500:]))
        return 77
    before = shm_now()

    def clean(what):
        left = shm_now() - before
        check(not left, "%s: nothing left in /dev/shm%s" % (what, " (%s)" % left if left else ""))

    rc, out = run(mpi + ["-np", "4", demo])
    rc2, out2 = run([shmesh_run, "-n", "4", "--", demo])
    check(rc == 0 and rc2 == 0 and out == out2 and "world_sum: 4" in out,
          "shmesh-demo on 4 ranks under mpirun prints what it does under shmesh-run\n" + out
          + ("" if out == out2 else "shmesh-run:\n" + out2))
    clean("demo")

    if not sanitized:
        rc, out = run(mpi + ["-np", "4", train])
        rc2, out2 = run([shmesh_run, "-n", "4", "--", train])
        losses = [l for l in out.splitlines() if "loss" in l]
        check(rc == 0 and rc2 == 0 and len(losses) >= 10 and losses == [
            l for l in out2.splitlines() if "loss" in l],
            "shmesh-train on 4 ranks: the same %d losses as under shmesh-run" % len(losses))
        clean("train")

    if python:
        gate = tempfile.mkdtemp(prefix="shmesh-test-gate-")
        try:
            env = {"SHMESH_LIBRARY": lib, "PYTHONPATH": python_src, "SHMESH_RUN": shmesh_run,
                   "SHMESH_TEST_GATE": gate}
            xs = [a for k in env for a in ("-x", k)]
            # --tag-output: mpirun passes each rank's output on whole lines
            rc, out = run(mpi + ["--tag-output", "-np", "2"] + xs +
                          [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests_python],
                          env=env, timeout=300)
        finally:
            shutil.rmtree(gate, ignore_errors=True)
        summary = [l for l in out.splitlines() if " passed" in l]
        check(rc == 0 and len(summary) == 2 and "failed" not in out,
              "the Python suite on 2 ranks under mpirun: %s" % (summary[:1] or out[-2000:]))
        clean("python")

    rc, out = run(mpi + ["--tag-output", "-np", "4", demo], env={"SHMESH_NODE_SIZE": "2"})
    said = [l for l in out.splitlines() if "spans 2 nodes of 4 ranks" in l and
            "meshes across nodes are not built yet" in l]
    check(rc not in (0, "timeout") and len(said) == 4,
          "SHMESH_NODE_SIZE=2 on 4 ranks: all 4 refuse at shmesh_init, the job ends (%s)" % rc)
    clean("two nodes")

    if python:
        dies = ("import os, numpy as np, shmesh\n"
                "shmesh.init(); m = shmesh.Mesh(np.arange(shmesh.world_size()), ('i',))\n"
                "shmesh.psum(np.ones(2), 'i', mesh=m)\n"
                "if shmesh.rank() == 1: os._exit(3)\n"
                "shmesh.psum(np.ones(2), 'i', mesh=m)\n")
        env = {"SHMESH_LIBRARY": lib, "PYTHONPATH": python_src}
        xs = [a for k in env for a in ("-x", k)]
        rc, out = run(mpi + ["-np", "2"] + xs + [python, "-c", dies], env=env, timeout=120)
        check(rc not in (0, "timeout"), "a rank that exits mid-job: the job ends (%s)" % rc)
        clean("a rank that exits")

        sleeper = ("import time, numpy as np, shmesh\n"
                   "shmesh.init(); m = shmesh.Mesh(np.arange(shmesh.world_size()), ('i',))\n"
                   "for i in range(200):\n"
                   "    shmesh.psum(np.ones(2), 'i', mesh=m)\n"
                   "    if shmesh.rank() == 1 and i == 100: time.sleep(4)\n"
                   "m.close(); shmesh.finalize()\n")
        e = dict(os.environ, **env)
        job = subprocess.Popen(mpi + ["-np", "2"] + xs + [python, "-c", sleeper], env=e,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            seen = ""
            for _ in range(40):  # until rank 0 has waited a moment
                time.sleep(0.25)
                rc, seen = run([top, "--once"], timeout=30)
                if "rank 0 waits for rank 1" in seen:
                    break
        finally:
            out, _ = job.communicate(timeout=120)
        check("rank 0 waits for rank 1 in call #" in seen and job.returncode == 0,
              "shmesh-top shows the MPI job's rank 0 waiting for rank 1:\n" + seen)
        clean("shmesh-top")

        # one write of the whole line (os.write): the two ranks' lines may
        # not interleave, as print's separate writes did
        one = ("import os, shmesh; shmesh.init(); "
               "os.write(1, b'world %d\\n' % shmesh.world_size())")
        rc, out = run(mpi + ["-np", "2", "-x", "SHMESH_LIBRARY", "-x", "PYTHONPATH", "-x",
                             "SHMESH_NET", python, "-c", one], env=dict(env, SHMESH_NET="none"))
        check(rc == 0 and out.count("world 1") == 2,
              "SHMESH_NET=none: each process a job of one rank")

        # The library and the compiled module as the build lays them out
        # (lib/, python/), without lib/net/.
        lone = tempfile.mkdtemp(prefix="shmesh-test-noplugin-")
        try:
            os.mkdir(os.path.join(lone, "lib"))
            shutil.copy(os.path.realpath(lib), os.path.join(lone, "lib", "libshmesh.so"))
            build_python = os.path.join(os.path.dirname(os.path.dirname(lib)), "python")
            shutil.copytree(build_python, os.path.join(lone, "python"))
            rc, out = run([python, "-c", one], env={
                "SHMESH_LIBRARY": os.path.join(lone, "lib", "libshmesh.so"),
                "PYTHONPATH": python_src, "SHMESH_NET": "mpi"})
        finally:
            shutil.rmtree(lone, ignore_errors=True)
        check(rc != 0 and "SHMESH_NET=mpi, but libshmesh-net-mpi.so is not beside libshmesh"
              in out and "libopenmpi-dev" in out,
              "SHMESH_NET=mpi without the plugin: the sentence names it and what to install")
    print("%d checks failed" % len(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
