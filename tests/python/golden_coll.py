"""The golden collective cases (tests/golden/README.md) replayed through the
Python binding, as tests/golden_coll.c replays them through the C API.

    shmesh-run -n 8 -- python3 tests/python/golden_coll.py tests/golden/coll-101.txt

Every rank reads the whole file.  For each case, in file order, every rank
makes the case's mesh (once per distinct mesh line: shmesh.Mesh over
np.arange(8) reshaped to the line's sizes, so rank r is the device at
row-major position r), calls the shmesh function of the case's op with its
axes, axis_index_groups and parameters as JAX's keywords, and compares the
array it returns (shape, dtype, then every element's bits) with its
`expect`.  A case JAX refused must raise shmesh.InvalidArgument with JAX's
sentence inside the message.  The ranks pool one report each (a psum over
a mesh of the whole world) and rank 0 prints, as the C reader does, a line
for every failed case, every known difference and every skipped case, and

    N passed, M failed, K known differences (...), S skipped

The known differences are the C reader's (docs/semantics.md): a NaN among
the group's inputs of pmax/pmin/pargmax/pargmin, which shmesh propagates
and JAX on CPU skips; a NaN sum with other bits than JAX's.

bfloat16: numpy has it only through ml_dtypes.  Where that is missing, the
bfloat16 cases still run, with their elements held as 2-byte opaque values
(numpy's 'V2') that the binding is told are bfloat16 (its dtype table gets
that one entry, here only); the summary says so.

Exit status: 0 when no case failed, 1 otherwise, 2 for a malformed file or
a wrong number of ranks.
"""
import sys

import numpy as np

import shmesh

OPS = ("psum", "pmean", "pmax", "pmin", "pargmax", "pargmin", "all_gather", "psum_scatter",
       "all_to_all", "pswapaxes", "ppermute", "pshuffle", "pbroadcast", "axis_index")

BF16_MODE = "ml_dtypes"
if shmesh._arrays._BF16 is None:
    # No ml_dtypes: bfloat16 elements as opaque 2-byte values, the binding's
    # table told they are bfloat16 (code 10), psum keeping them, pmean too
    # (set in shmesh._arrays, the one module the package reads _BF16 from).
    BF16_MODE = "2-byte opaque values (no ml_dtypes)"
    shmesh._arrays._BF16 = np.dtype("V2")
    shmesh._CODES[shmesh._arrays._BF16] = 10

DTYPES = {
    "bool": np.dtype(np.bool_), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64), "float16": np.dtype(np.float16),
    "bfloat16": shmesh._arrays._BF16, "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class Malformed(Exception):
    pass


class Case:
    def __init__(self, cid, op, line):
        self.id, self.op, self.line = cid, op, line
        self.mesh = None            # the mesh line's text
        self.names, self.sizes = [], []
        self.batched = False
        self.axes = ""
        self.groups = None
        self.params = {}
        self.error = None
        self.inp, self.expect = {}, {}


def parse_arr(w, lineno):
    rank, ndim = int(w[1]), int(w[4])
    dt = DTYPES.get(w[3])
    if dt is None:
        raise Malformed("line %d: unknown dtype %r" % (lineno, w[3]))
    shape = tuple(int(d) for d in w[5:5 + ndim])
    if w[5 + ndim] != ":":
        raise Malformed("line %d: ':' expected after the shape" % lineno)
    vals = [int(v, 16) for v in w[6 + ndim:]]
    if len(vals) != int(np.prod(shape, dtype=np.int64)):
        raise Malformed("line %d: %d values for shape %s" % (lineno, len(vals), shape))
    bits = np.array(vals, dtype=UINT[dt.itemsize])
    return rank, w[2], w[3], bits.view(dt).reshape(shape)


def read_cases(path):
    cases, c = [], None
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if lineno == 1:
                if not line.startswith("shmesh-golden 1"):
                    raise Malformed("not a golden file of format 1")
                continue
            w = line.split()
            if not w:
                continue
            key = w[0]
            if key == "case":
                c = Case(int(w[1]), w[2], lineno)
            elif key == "mesh":
                c.mesh = " ".join(w[1:])
                for e in w[1:]:
                    name, size = e.split("=")
                    if size.endswith("(batched)"):
                        c.batched, size = True, size[:-len("(batched)")]
                    c.names.append(name)
                    c.sizes.append(int(size))
            elif key == "axes":
                c.axes = w[1] if len(w) > 1 else ""
            elif key == "groups":
                if w[1] != "-":
                    c.groups = [[int(i) for i in g.split(",")] for g in w[1].split(";")]
            elif key == "param":
                for kv in w[1:]:
                    k, v = kv.split("=", 1)
                    c.params[k] = v
            elif key == "arr":
                rank, which, _, a = parse_arr(w, lineno)
                (c.inp if which == "in" else c.expect)[rank] = a
            elif key == "error":
                c.error = line.split(None, 1)[1].rstrip("\r\n")
            elif key == "note":
                pass
            elif key == "end":
                cases.append(c)
                c = None
            else:
                raise Malformed("line %d: unknown record %r" % (lineno, key))
    return cases


def skip_reason(c):
    if c.op not in OPS:
        return "an op this reader does not run"
    if c.batched:
        return "batched (vmapped) axes are not built in shmesh yet"
    if c.error and not c.error.startswith(("ValueError:", "TypeError:", "NameError:")):
        return "JAX's error is not about the arguments"
    return None


def axis_name(c):
    names = c.axes.split(",") if c.axes else []
    return names[0] if len(names) == 1 else tuple(names)


def run_op(c, mesh, x):
    """The case's call through the Python API."""
    ax, p, g = axis_name(c), c.params, c.groups
    tiled = p.get("tiled") == "1"
    if c.op == "axis_index":
        return np.asarray(shmesh.axis_index(ax, mesh=mesh))
    if c.op in ("psum", "pmean", "pmax", "pmin"):
        return getattr(shmesh, c.op)(x, ax, axis_index_groups=g, mesh=mesh)
    if c.op in ("pargmax", "pargmin"):
        if g is not None:  # the Python functions take no groups, as JAX's
            raise NotImplementedError("%s with axis_index_groups" % c.op)
        return getattr(shmesh, c.op)(x, ax, mesh=mesh)
    if c.op == "all_gather":
        return shmesh.all_gather(x, ax, axis_index_groups=g, axis=int(p["axis"]), tiled=tiled,
                                 mesh=mesh)
    if c.op == "psum_scatter":
        return shmesh.psum_scatter(x, ax, scatter_dimension=int(p["scatter_dimension"]),
                                   axis_index_groups=g, tiled=tiled, mesh=mesh)
    if c.op == "all_to_all":
        return shmesh.all_to_all(x, ax, int(p["split_axis"]), int(p["concat_axis"]),
                                 axis_index_groups=g, tiled=tiled, mesh=mesh)
    if c.op == "pswapaxes":
        return shmesh.pswapaxes(x, ax, int(p["axis"]), axis_index_groups=g, mesh=mesh)
    if c.op == "ppermute":
        perm = [] if p["perm"] == "-" else [tuple(int(i) for i in e.split(">"))
                                            for e in p["perm"].split(",")]
        return shmesh.ppermute(x, ax, perm, mesh=mesh)
    if c.op == "pshuffle":
        return shmesh.pshuffle(x, ax, [int(i) for i in p["perm"].split(",")], mesh=mesh)
    if c.op == "pbroadcast":
        return shmesh.pbroadcast(x, ax, int(p["source"]), mesh=mesh)
    raise NotImplementedError(c.op)


def group_of(c, rank):
    """The ranks of rank's (sub)group, in index order (golden_coll.c's)."""
    ax = [c.names.index(n) for n in c.axes.split(",")]
    coord = list(np.unravel_index(rank, c.sizes))
    n, me = 1, 0
    for k in ax:
        n *= c.sizes[k]
        me = me * c.sizes[k] + int(coord[k])
    full = []
    for i in range(n):
        cc, rest = list(coord), i
        for k in reversed(ax):
            cc[k], rest = rest % c.sizes[k], rest // c.sizes[k]
        full.append(int(np.ravel_multi_index(cc, c.sizes)))
    if c.groups is None:
        return full
    for grp in c.groups:
        if me in grp:
            return [full[i] if 0 <= i < n else 0 for i in grp]
    return []


def is_nan_bits(dt, bits):
    """Element-wise: is the element (its bits, unsigned) a NaN of dt?"""
    name = "bfloat16" if dt == shmesh._arrays._BF16 else dt.name
    b = bits.astype(np.uint64)
    if name == "float16":
        return ((b & 0x7c00) == 0x7c00) & ((b & 0x3ff) != 0)
    if name == "bfloat16":
        return ((b & 0x7f80) == 0x7f80) & ((b & 0x7f) != 0)
    if name == "float32":
        return ((b & 0x7f800000) == 0x7f800000) & ((b & 0x7fffff) != 0)
    if name == "float64":
        return ((b >> np.uint64(52) & np.uint64(0x7ff)) == 0x7ff) & \
               ((b & np.uint64((1 << 52) - 1)) != 0)
    return np.zeros(b.shape, bool)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(UINT[a.dtype.itemsize])


def signed(u):
    """An element's bits as the int64 a report holds."""
    u = int(u)
    return u - (1 << 64) if u >= 1 << 63 else u


PASS, KNOWN_EXTREME, KNOWN_SUM_NAN, FAIL = 0, 1, 2, 3
# one rank's report: status, error kind, element, wanted bits, got bits
R_STATUS, R_ERR, R_ELEM, R_WANT, R_GOT, R_WORDS = range(6)
ERR_NONE, ERR_INVALID, ERR_SHAPE, ERR_PYTHON = 0, 1, 2, 3


def judge(c, rank, got, rep):
    e = c.expect[rank]
    if got.dtype != e.dtype or got.shape != e.shape:
        rep[R_STATUS], rep[R_ERR] = FAIL, ERR_SHAPE
        return "%s %s returned, %s %s expected" % (got.dtype, got.shape, e.dtype, e.shape)
    gb, eb = bits(got), bits(e)
    diff = np.nonzero(gb != eb)[0]
    rep[R_STATUS], rep[R_ELEM] = PASS, -1
    if not diff.size:
        return None
    nan_op = c.op in ("pmax", "pmin", "pargmax", "pargmin")
    sum_op = c.op in ("psum", "pmean", "psum_scatter")
    arg = c.op in ("pargmax", "pargmin")
    if nan_op:
        members = group_of(c, rank)
        group_nan = np.zeros(eb.shape, bool)
        for m in members:
            ib = bits(c.inp[m])
            k = min(ib.size, eb.size)
            group_nan[:k] |= is_nan_bits(c.inp[m].dtype, ib[:k])
    for i in diff:
        status = FAIL
        if nan_op:
            ok = gb[i] == 0x7fffffff if arg else is_nan_bits(e.dtype, gb[i:i + 1])[0]
            if group_nan[i] and ok:
                status = KNOWN_EXTREME
        elif sum_op and is_nan_bits(e.dtype, gb[i:i + 1])[0] and \
                is_nan_bits(e.dtype, eb[i:i + 1])[0]:
            status = KNOWN_SUM_NAN
        if rep[R_ELEM] < 0 or (status == FAIL and rep[R_STATUS] != FAIL):
            rep[R_ELEM], rep[R_WANT], rep[R_GOT] = int(i), signed(eb[i]), signed(gb[i])
        rep[R_STATUS] = max(rep[R_STATUS], status)
        if status == FAIL:
            break
    return None


def main(argv):
    if len(argv) != 2:
        print("usage: shmesh-run -n 8 -- python3 golden_coll.py FILE", file=sys.stderr)
        return 2
    path = argv[1]
    shmesh.init()
    rank, world = shmesh.rank(), shmesh.world_size()
    try:
        cases = read_cases(path)
    except (Malformed, ValueError, IndexError, KeyError) as e:
        if rank == 0:
            print("golden_coll.py: %s: %s" % (path, e), file=sys.stderr)
        return 2
    nfile = len(cases[0].inp)
    if world != nfile:
        if rank == 0:
            print("golden_coll.py: %s was recorded on %d devices: run it with shmesh-run -n %d "
                  "(this job has %d ranks)" % (path, nfile, nfile, world), file=sys.stderr)
        return 2
    pool = shmesh.Mesh(np.arange(world), ("golden_world",))  # pooling the reports
    meshes = {}
    passed = failed = known_extreme = known_sum_nan = skipped = 0
    for c in cases:
        why = skip_reason(c)
        if why:
            skipped += 1
            if rank == 0:
                print("skipped: case %d %s (line %d): %s" % (c.id, c.op, c.line, why))
            continue
        mesh = meshes.get(c.mesh)
        if mesh is None:
            mesh = meshes[c.mesh] = shmesh.Mesh(np.arange(world).reshape(c.sizes), c.names)
        reps = np.zeros((world, R_WORDS), np.int64)
        rep = reps[rank]
        detail = None
        try:
            got = run_op(c, mesh, c.inp[rank])
        except shmesh.InvalidArgument as e:
            got, detail = None, str(e)
            rep[R_ERR] = ERR_INVALID
        except shmesh.Error:
            raise  # the job cannot go on, as in the C reader
        except Exception as e:  # the binding itself failed: no C call was made
            got, detail = None, "%s: %s" % (type(e).__name__, e)
            rep[R_ERR] = ERR_PYTHON
        if c.error:
            jax = c.error.split(":", 1)[1].strip()
            ok = rep[R_ERR] == ERR_INVALID and jax in detail
            rep[R_STATUS] = PASS if ok else FAIL
        elif got is None:
            rep[R_STATUS] = FAIL
        else:
            detail = judge(c, rank, got, rep)
        reps = shmesh.psum(reps, "golden_world", mesh=pool)
        status = int(reps[:, R_STATUS].max())
        if status == PASS:
            passed += 1
            continue
        first = int(np.nonzero(reps[:, R_STATUS] == status)[0][0])
        ranks = ",".join(str(r) for r in np.nonzero(reps[:, R_STATUS] == status)[0])
        p = reps[first]
        dt = c.expect[first].dtype if c.expect else c.inp[first].dtype
        hexw = 2 * dt.itemsize
        want, gotb = int(p[R_WANT]) & (2 ** 64 - 1), int(p[R_GOT]) & (2 ** 64 - 1)
        head = "case %d %s (line %d), ranks %s:" % (c.id, c.op, c.line, ranks)
        if status == KNOWN_EXTREME:
            known_extreme += 1
            msg = ("known difference: %s a NaN among the group's inputs; rank %d element %d: "
                   "JAX ignores it: 0x%0*x, shmesh propagates it: 0x%0*x"
                   % (head, first, p[R_ELEM], hexw, want, hexw, gotb))
        elif status == KNOWN_SUM_NAN:
            known_sum_nan += 1
            msg = ("known difference: %s a NaN sum with other bits; rank %d element %d: "
                   "JAX 0x%0*x, shmesh 0x%0*x" % (head, first, p[R_ELEM], hexw, want, hexw, gotb))
        else:
            failed += 1
            kind = {ERR_NONE: "returned", ERR_INVALID: "raised InvalidArgument",
                    ERR_SHAPE: "returned an array of the wrong shape or dtype",
                    ERR_PYTHON: "raised in the binding"}[int(p[R_ERR])]
            if c.error:
                msg = "FAIL %s rank %d %s; JAX refused it (%s)" % (head, first, kind, c.error)
            elif p[R_ERR]:
                msg = "FAIL %s rank %d %s" % (head, first, kind)
            else:
                msg = ("FAIL %s rank %d element %d (%s): expected 0x%0*x, got 0x%0*x"
                       % (head, first, p[R_ELEM], dt, hexw, want, hexw, gotb))
            if first == rank and detail:
                msg += "; rank %d says: %s" % (rank, detail)
        if rank == 0:
            print(msg)
    if rank == 0:
        print("%s: %d cases: %d passed, %d failed, %d known differences (%d NaN in "
              "pmax/pmin/pargmax/pargmin, %d NaN sums with other bits), %d skipped "
              "[from Python; bfloat16 as %s]"
              % (path, len(cases), passed, failed, known_extreme + known_sum_nan, known_extreme,
                 known_sum_nan, skipped, BF16_MODE))
        sys.stdout.flush()
    for m in meshes.values():
        m.close()
    pool.close()
    shmesh.finalize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
