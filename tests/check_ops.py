#!/usr/bin/env python3
"""Description: the op table (shm/optable.h) is the one list of ops, and
every consumer's list equals it:
  - the library's shmesh_op_count/shmesh_op_get give the table's rows, in its
    order, with its columns (name, scope, bus, bool_in, params; code = line + 1);
  - the library exports shmesh_<name> exactly for the ops whose sig is not
    internal, and shmesh_<name>_async exactly for those with has_async;
  - shmesh-bench --list-ops names the rows whose bus is not NONE, with their
    bus kind and bool column;
  - the Python package (python/shmesh) offers a wrapper for every mesh op
    and an _async form exactly where the table has one, no other *_async
    function, and names every world op of the table (_WORLD_OPS) with a
    wrapper that exists.

Usage: check_ops.py LIBSHMESH.so SHMESH_BENCH OPTABLE.h [PYTHON PYTHON_SRC]
(PYTHON: an interpreter that imports numpy, '' for none: the package's
checks are then skipped, said so).  Exit 0 pass, 1 fail."""
import ctypes
import json
import os
import re
import subprocess
import sys

SCOPES = ("world", "mesh")
SIGS = ("internal", "world", "reduction", "axis_tiled", "all_to_all", "axis", "ragged",
        "ppermute", "pshuffle", "pbroadcast")
BUSES = ("none", "zero", "allreduce", "spread", "one")


class OpInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("code", ctypes.c_int), ("scope", ctypes.c_int),
                ("sig", ctypes.c_int), ("has_async", ctypes.c_bool),
                ("bool_input", ctypes.c_bool), ("bus", ctypes.c_int),
                ("params", ctypes.c_char_p)]


def table_rows(path):
    """[(ID, name, scope, bus, bool_in, params)] of SHMESH_OPS's X(...) lines:
    the first six arguments (columns added after them are not read)."""
    text = open(path).read()
    body = text[text.index("#define SHMESH_OPS(X)"):]
    rows = []
    for m in re.finditer(r'X\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\d)\s*,'
                         r'\s*"([^"]*)"', body):
        rows.append((m.group(1), m.group(2), m.group(3).lower(), m.group(4).lower(),
                     m.group(5) == "1", tuple(m.group(6).split())))
    return rows


def library_ops(lib):
    lib.shmesh_op_count.restype = ctypes.c_int
    lib.shmesh_op_count.argtypes = []
    lib.shmesh_op_get.restype = ctypes.POINTER(OpInfo)
    lib.shmesh_op_get.argtypes = [ctypes.c_int]
    out = []
    for i in range(lib.shmesh_op_count()):
        o = lib.shmesh_op_get(i).contents
        out.append({"name": o.name.decode(), "code": o.code, "scope": SCOPES[o.scope],
                    "sig": SIGS[o.sig], "has_async": bool(o.has_async),
                    "bool_input": bool(o.bool_input), "bus": BUSES[o.bus],
                    "params": tuple(o.params.decode().split())})
    return out


def exported(lib, name):
    try:
        getattr(lib, name)
        return True
    except AttributeError:
        return False


# What the package is asked for, run in the interpreter that has numpy.
PACKAGE_PROBE = r"""
import json, shmesh
mod = vars(shmesh)
def resolves(path):
    obj = shmesh
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return callable(obj)
try:
    exec("from shmesh import *", {})
    star = ""
except Exception as e:
    star = "%s: %s" % (type(e).__name__, e)
print(json.dumps({
    "ops": [list(o) for o in shmesh.ops()],
    "callables": sorted(n for n, v in mod.items() if callable(v) and not n.startswith("_")),
    "world_ops": {k: (v, resolves(v) if v else None) for k, v in shmesh._WORLD_OPS.items()},
    "all": list(shmesh.__all__),
    "star": star,
}))
"""


def check_package(python, src, libpath, ops, errors):
    env = dict(os.environ, PYTHONPATH=src, SHMESH_LIBRARY=libpath)
    env.pop("SHMESH_WORLD_SIZE", None)
    p = subprocess.run([python, "-c", PACKAGE_PROBE], capture_output=True, text=True, env=env)
    if p.returncode:
        errors.append("the Python package did not import: " + p.stderr.strip())
        return
    got = json.loads(p.stdout)
    if got["star"]:
        errors.append("python: 'from shmesh import *' fails: " + got["star"])
    lib_list = [[o["name"], o["code"], o["scope"], o["sig"], o["has_async"], o["bool_input"],
                 o["bus"], list(o["params"])] for o in ops]
    if got["ops"] != lib_list:
        errors.append("python: shmesh.ops() differs from shmesh_op_get's list")
    have = set(got["callables"])
    mesh = [o for o in ops if o["scope"] == "mesh"]
    world = [o for o in ops if o["scope"] == "world"]
    for o in mesh:
        if o["name"] not in have:
            errors.append("python: no wrapper shmesh.%s for the table's mesh op %s"
                          % (o["name"], o["name"]))
    # Every *_async function is the async form of an op that has one.
    want_async = {o["name"] + "_async" for o in mesh if o["has_async"]}
    want_async |= {v + "_async" for o in world if o["has_async"]
                   for v in [got["world_ops"].get(o["name"], [None])[0]] if v}
    have_async = {n for n in have if n.endswith("_async")}
    for n in sorted(want_async - have_async):
        errors.append("python: no %s, the async form the table gives %s" % (n, n[:-6]))
    for n in sorted(have_async - want_async):
        errors.append("python: %s is not the async form of an op of the table" % n)
    # A collective-looking wrapper (a mesh op's name) for no op of the table:
    # any public function named like an op of the library's table but absent
    # from it, through __all__.
    names = {o["name"] for o in ops}
    for n in got["all"]:
        if n.endswith("_async") and n[:-6] not in names:
            errors.append("python: __all__ names %s, the async form of no op" % n)
    listed = set(got["world_ops"])
    for o in world:
        if o["name"] not in listed:
            errors.append("python: the table's world op %s is not in shmesh._WORLD_OPS"
                          % o["name"])
    for n in sorted(listed - {o["name"] for o in world}):
        errors.append("python: shmesh._WORLD_OPS names %s, no world op of the table" % n)
    for n, (v, ok) in got["world_ops"].items():
        if v and not ok:
            errors.append("python: shmesh._WORLD_OPS offers %s as %s, which is not there"
                          % (n, v))
    for o in mesh:
        if o["name"] not in got["all"]:
            errors.append("python: __all__ lacks %s" % o["name"])


def main():
    libpath, bench, optable = sys.argv[1:4]
    python = sys.argv[4] if len(sys.argv) > 4 else ""
    src = sys.argv[5] if len(sys.argv) > 5 else ""
    errors = []
    rows = table_rows(optable)
    if not rows:
        print("%s: no X(...) rows found" % optable)
        return 1
    lib = ctypes.CDLL(libpath)
    ops = library_ops(lib)

    # The library against the table.
    if [o["name"] for o in ops] != [r[1] for r in rows]:
        errors.append("library: shmesh_op_get's names %s, the table's %s"
                      % ([o["name"] for o in ops], [r[1] for r in rows]))
    for i, (o, r) in enumerate(zip(ops, rows)):
        want = {"code": i + 1, "scope": r[2], "bus": r[3], "bool_input": r[4], "params": r[5]}
        for k, v in want.items():
            if o[k] != v:
                errors.append("library: %s's %s is %r, the table says %r" % (o["name"], k, o[k], v))
        if o["scope"] == "mesh" and o["sig"] in ("internal", "world"):
            errors.append("library: mesh op %s has sig %s" % (o["name"], o["sig"]))
        if o["scope"] == "world" and o["sig"] not in ("internal", "world"):
            errors.append("library: world op %s has sig %s" % (o["name"], o["sig"]))
    if lib.shmesh_op_get(len(ops)) or lib.shmesh_op_get(-1):
        errors.append("library: shmesh_op_get out of range is not NULL")

    # The exports against the library's sig and has_async.
    for o in ops:
        fn = exported(lib, "shmesh_" + o["name"])
        if fn != (o["sig"] != "internal"):
            errors.append("exports: shmesh_%s %s, but its sig is %s"
                          % (o["name"], "exported" if fn else "not exported", o["sig"]))
        fa = exported(lib, "shmesh_" + o["name"] + "_async")
        if fa != o["has_async"]:
            errors.append("exports: shmesh_%s_async %s, but has_async is %s"
                          % (o["name"], "exported" if fa else "not exported", o["has_async"]))

    # shmesh-bench's list against the table.
    p = subprocess.run([bench, "--list-ops"], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith("SHMESH_")})
    if p.returncode:
        errors.append("shmesh-bench --list-ops: exit %d: %s" % (p.returncode, p.stderr))
    got = [tuple(line.split()) for line in p.stdout.splitlines()]
    want = [(r[1], r[3], "bool" if r[4] else "nobool") for r in rows if r[3] != "none"]
    if got != want:
        errors.append("shmesh-bench --list-ops differs from the table's timed ops:\n  bench: %s\n"
                      "  table: %s" % (got, want))

    # The Python package.
    if python:
        check_package(python, src, libpath, ops, errors)
    else:
        print("python package: not checked (no python3 that imports numpy)")

    for e in errors:
        print(e)
    print("%d ops in the table, %d timed by the bench: %s"
          % (len(rows), len(want), "FAIL" if errors else "ok"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
