"""Start a job of this interpreter: ``python3 -m shmesh.run``, like torchrun.

    python3 -m shmesh.run [-n N] [shmesh-run options] [--] SCRIPT.py [ARGS...]
    python3 -m shmesh.run [-n N] [shmesh-run options] -m MODULE [ARGS...]

Runs ``shmesh-run OPTIONS -- <this interpreter> SCRIPT.py ARGS`` (or ``-m
MODULE``): every rank runs the Python that started this command
(``sys.executable``), never whichever ``python3`` comes first on PATH, and
finds this shmesh package (its folder is put first on the ranks'
PYTHONPATH).  The options are shmesh-run's (``-n``, ``--devices-per-rank``,
``--timeout``, ``--trace``, ...; ``python3 -m shmesh.run --help`` lists
them); the first argument that is neither an option nor an option's value
is the script, and ``--`` may mark it.

shmesh-run is looked for, in order: the file SHMESH_RUN names; the build
tree the library was loaded from (``launcher/shmesh-run`` beside its
``lib/``); ``shmesh-run`` on PATH (installed).  The exit status is the
job's (shmesh-run's): 0, the failing rank's status, 124 after --timeout."""
import os
import shutil
import sys

from . import _lib

# shmesh-run's options that take a value (as `-n N`, not `-nN` or `--np=N`);
# tests/python/check_run.py compares them with `shmesh-run --help`.
VALUE_OPTIONS = frozenset([
    "-n", "--np", "--devices-per-rank", "--gpus", "--timeout", "--grace", "--shm-size",
    "--bind-to", "--trace", "--trace-events",
])

USAGE = """usage: python3 -m shmesh.run [-n N] [shmesh-run options] [--] SCRIPT.py [ARGS...]
       python3 -m shmesh.run [-n N] [shmesh-run options] -m MODULE [ARGS...]
Starts shmesh-run with this interpreter (%s) as every rank's program."""


def split(argv):
    """(shmesh-run's options, the program: SCRIPT ARGS or -m MODULE ARGS)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1:]
        if a == "-m" or a == "-" or not a.startswith("-"):
            return argv[:i], argv[i:]
        i += 2 if a in VALUE_OPTIONS else 1
    return argv, []


def find_launcher():
    """The shmesh-run to start, or SystemExit saying where it was looked for."""
    given = os.environ.get("SHMESH_RUN")
    if given:
        if os.access(given, os.X_OK):
            return given
        sys.exit("shmesh.run: SHMESH_RUN names %s, which is not an executable file; expected "
                 "the path of shmesh-run" % given)
    looked = []
    if _lib.lib_path:
        built = os.path.join(os.path.dirname(os.path.dirname(_lib.lib_path)), "launcher",
                             "shmesh-run")
        if os.access(built, os.X_OK):
            return built
        looked.append(built)
    on_path = shutil.which("shmesh-run")
    if on_path:
        return on_path
    looked.append("shmesh-run on PATH")
    sys.exit("shmesh.run: cannot find shmesh-run (looked for %s); build it (./run.sh "
             "--build-only), install it, or set SHMESH_RUN to its path" % ", ".join(looked))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    opts, prog = split(argv)
    asks = {"-h", "--help", "-V", "--version"}
    if not prog and not asks.intersection(opts):
        print(USAGE % sys.executable, file=sys.stderr)
        print("shmesh.run: no program given: expected a script (or -m MODULE) after the "
              "options", file=sys.stderr)
        return 2
    if prog[:1] == ["-m"] and len(prog) < 2:
        print("shmesh.run: -m needs a module name", file=sys.stderr)
        return 2
    launcher = find_launcher()
    if not prog:  # --help or --version: shmesh-run's
        if "-h" in opts or "--help" in opts:
            print(USAGE % sys.executable)
            print("The options are shmesh-run's:\n")
            sys.stdout.flush()
        os.execv(launcher, [launcher] + opts)
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if _lib.lib_path and "SHMESH_LIBRARY" not in env:
        env["SHMESH_LIBRARY"] = _lib.lib_path  # the ranks load the library this one did
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(launcher, [launcher] + opts + ["--", sys.executable] + prog, env)


if __name__ == "__main__":
    sys.exit(main())
