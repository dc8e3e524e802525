"""The python-run test: ``python3 -m shmesh.run`` starts a job of the same
interpreter, as torchrun does.

    check_run.py SHMESH_RUN PYTHON

(the environment giving SHMESH_LIBRARY and PYTHONPATH).  Fails unless:
  - `PYTHON -m shmesh.run -n 2 ... prog.py a --b`, run from a folder that
    does not hold the package, has both ranks run PYTHON (sys.executable)
    with the arguments a --b, import shmesh and agree on a psum; the same
    with `-m MODULE` and with `--` before the script;
  - without SHMESH_RUN it finds the shmesh-run of the build tree the
    library came from;
  - no program, a SHMESH_RUN that is no executable: a clear error, exit
    status 2 and 1;
  - a rank that fails gives the job's status (shmesh-run's: the rank's);
  - the options that take a value in `shmesh-run --help` are those the
    module skips over (shmesh.run.VALUE_OPTIONS)."""
import os
import re
import subprocess
import sys
import tempfile

PROG = """import sys
import numpy as np
import shmesh
shmesh.init()
rank = shmesh.rank()
mesh = shmesh.Mesh(np.arange(shmesh.world_size()), ("i",))
s = shmesh.psum(np.array([rank + 1.0]), "i", mesh=mesh)
print("rank %d of %d: exe %s args %s sum %g" % (rank, shmesh.world_size(), sys.executable,
      sys.argv[1:], s[0]), flush=True)
shmesh.finalize()
status = [int(a[5:]) for a in sys.argv[1:] if a.startswith("exit=")]
sys.exit(status[0] if status and rank == 1 else 0)
"""


def run(python, args, env, cwd):
    return subprocess.run([python, "-m", "shmesh.run"] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, env=env, cwd=cwd)


def expect_job(p, python, args, what):
    if p.returncode:
        sys.exit("%s: exit status %d:\n%s" % (what, p.returncode, p.stdout))
    for r in range(2):
        line = "rank %d of 2: exe %s args %s sum 3" % (r, python, args)
        if line not in p.stdout:
            sys.exit("%s: no line '%s' in:\n%s" % (what, line, p.stdout))
    print("ok: %s" % what)


def main(argv):
    launcher, python = argv[1:3]
    launcher = os.path.abspath(launcher)  # the jobs run in another folder
    python = os.path.abspath(python) if os.path.basename(python) != python else python
    env = dict(os.environ, SHMESH_RUN=launcher)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "prog.py"), "w") as f:
            f.write(PROG)
        # The interpreter as the ranks see it: sys.executable of this one.
        exe = subprocess.run([python, "-c", "import sys; print(sys.executable)"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        common = ["-n", "2", "--gpus", "none", "--timeout", "100"]
        expect_job(run(python, common + ["prog.py", "a", "--b"], env, tmp), exe, ["a", "--b"],
                   "a script and its arguments")
        expect_job(run(python, common + ["-m", "prog", "x"], env, tmp), exe, ["x"],
                   "-m MODULE")
        expect_job(run(python, common + ["--", "prog.py", "-n", "1"], env, tmp), exe,
                   ["-n", "1"], "-- before the script, whose own options look like ours")
        bare = {k: v for k, v in env.items() if k != "SHMESH_RUN"}
        expect_job(run(python, common + ["prog.py"], bare, tmp), exe, [],
                   "shmesh-run found beside the library, SHMESH_RUN unset")
        p = run(python, common + ["prog.py", "exit=7"], env, tmp)
        if p.returncode != 7:
            sys.exit("a rank exiting 7: the job's status is %d, expected 7:\n%s"
                     % (p.returncode, p.stdout))
        print("ok: a rank exiting 7 gives status 7")
        p = run(python, ["-n", "2"], env, tmp)
        if p.returncode != 2 or "no program given" not in p.stdout:
            sys.exit("no program: status %d, expected 2 and 'no program given':\n%s"
                     % (p.returncode, p.stdout))
        print("ok: no program is refused")
        bad = dict(env, SHMESH_RUN=os.path.join(tmp, "none"))
        p = run(python, ["-n", "2", "prog.py"], bad, tmp)
        if p.returncode != 1 or "SHMESH_RUN names" not in p.stdout:
            sys.exit("a SHMESH_RUN that is no file: status %d, expected 1 and a message:\n%s"
                     % (p.returncode, p.stdout))
        print("ok: a SHMESH_RUN that is no file is refused")
    # The options that take a value, from shmesh-run's help: "-n, --np N",
    # "--gpus auto|none|LIST" ...
    helptext = subprocess.run([launcher, "--help"], stdout=subprocess.PIPE, text=True).stdout
    valued = set()
    for m in re.finditer(r"^ +(?:(-\w), )?(--[\w-]+) ([^ \n]\S*)", helptext, re.M):
        valued.update(o for o in m.group(1, 2) if o)
    sys.path.insert(0, os.environ.get("PYTHONPATH", "").split(os.pathsep)[0])
    from shmesh.run import VALUE_OPTIONS
    if valued != set(VALUE_OPTIONS):
        sys.exit("shmesh-run's options that take a value are %s; shmesh.run knows %s"
                 % (sorted(valued), sorted(VALUE_OPTIONS)))
    print("ok: shmesh.run knows shmesh-run's %d options that take a value" % len(valued))


if __name__ == "__main__":
    main(sys.argv)
