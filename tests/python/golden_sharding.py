"""tests/golden/sharding-101.txt (600 NamedSharding cases recorded from JAX)
replayed through the Python package, on meshes of 8 devices: run under
shmesh-run with 8 devices in all (test_global_arrays.py starts it as
`shmesh-run -n 2 --devices-per-rank 4` and `-n 1 --devices-per-rank 8`):

    shmesh-run -n 2 --devices-per-rank 4 -- python3 golden_sharding.py FILE

Per case: an error case must be refused with InvalidArgument whose sentence
names JAX's exception type ("IndivisibleError", ...); any other must give
the recorded shard shape, full replication, and every device's block and
replica id; then make_array_from_callback of an arange of the shape must
hold g[index] in each local shard, and np.asarray of it (a gather, so
collective: every rank replays every case in order) must be g.  Prints
"golden sharding: N cases, P passed, F failed" (and each failure) and exits
1 when any failed."""
import sys

import numpy as np

import shmesh
from shmesh import NamedSharding, PartitionSpec


def read(path):
    cases, c = [], None
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words or words[0] == "shmesh-golden":
                continue
            key, rest = words[0], words[1:]
            if key == "case":
                c = {"name": " ".join(words), "devices": {}}
            elif key == "mesh":
                c["mesh"] = [(w.split("=")[0], int(w.split("=")[1])) for w in rest]
            elif key == "spec":
                c["spec"] = PartitionSpec(*[
                    None if w == "-" else tuple(w[1:-1].split(",")) if w.startswith("(") else w
                    for w in rest])
            elif key == "shape":
                c["shape"] = tuple(int(w) for w in rest)
            elif key == "shard_shape":
                c["shard_shape"] = tuple(int(w) for w in rest)
            elif key == "fully_replicated":
                c["full"] = rest[0] == "1"
            elif key == "device":  # device D replica R index a:b c:d ...
                c["devices"][int(rest[0])] = (int(rest[2]), tuple(
                    tuple(int(x) for x in w.split(":")) for w in rest[4:]))
            elif key == "error":
                c["error"] = rest[0].rstrip(":")
            elif key == "end":
                cases.append(c)
    return cases


def check(c, rank):
    names = tuple(n for n, _ in c["mesh"])
    sizes = tuple(s for _, s in c["mesh"])
    mesh = shmesh.Mesh(np.arange(int(np.prod(sizes))).reshape(sizes), names)
    try:
        shape = c["shape"]
        try:
            s = NamedSharding(mesh, c["spec"])
            sshape = s.shard_shape(shape)
            full = s.is_fully_replicated_for(shape)
            imap = s.devices_indices_map(shape)
            rids = s.replica_ids(shape)
        except shmesh.InvalidArgument as e:
            if c.get("error") and (c["error"] + ":") in str(e):
                return None
            return "refused (%s), JAX %s" % (e, c.get("error") or "accepted")
        if c.get("error"):
            return "accepted, JAX raised %s" % c["error"]
        if sshape != c["shard_shape"] or full != c["full"]:
            return "shard shape %s full %s, JAX %s %s" % (sshape, full, c["shard_shape"],
                                                          c["full"])
        got = {d: (rids[d], tuple(sl.indices(n)[:2] for sl, n in zip(imap[d], shape)))
               for d in imap}
        if got != c["devices"]:
            return "blocks %s, JAX %s" % (got, c["devices"])
        g = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
        a = shmesh.make_array_from_callback(shape, s, lambda index: g[index])
        shards = a.addressable_shards
        if len(shards) != shmesh._context._local_devices:
            return "%d local shards, not %d" % (len(shards), shmesh._context._local_devices)
        for sh in shards:
            if sh.index != imap[sh.device] or not np.array_equal(sh.data, g[sh.index]):
                return "device %d's shard %r, not g%r" % (sh.device, sh.data, sh.index)
        if not np.array_equal(np.asarray(a), g):
            return "the gather is not the array"
        return None
    finally:
        mesh.close()


def main(path):
    rank = shmesh.rank()
    cases = read(path)
    failed = 0
    for c in cases:
        why = check(c, rank)
        if why:
            failed += 1
            print("rank %d: %s: %s" % (rank, c["name"], why))
    print("golden sharding: %d cases, %d passed, %d failed" % (len(cases), len(cases) - failed,
                                                                failed), flush=True)
    shmesh.finalize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
