#!/usr/bin/env bash
# compare-mpi.sh: shmesh against Open MPI and MPICH on this node, side by side.
# See --help and bench/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: bench/compare-mpi.sh [options] [SIZE...]

Runs shmesh-bench (under shmesh-run), mpi_bench under Open MPI and mpi_bench
under MPICH, alternating, for several rounds, and prints the median of the
rounds per op and size.  Installs Debian's Open MPI and MPICH if missing
(a benchmark baseline only; libshmesh never links MPI).

Options:
  -n RANKS      ranks (default 2)
  -r ROUNDS     rounds (default 5)
  -o OPS        comma-separated ops to run (default all); shmesh or MPI names:
                  psum|allreduce, all_gather|allgather,
                  psum_scatter|reduce_scatter, all_to_all|alltoall,
                  pbroadcast|bcast
  -d DTYPE      float32 (default), float64, int32, int64
  -c 0|1        check results (default 1)
  -W WARMUP     warm-up iterations for every size (default: by size class)
  -I ITERS      timed iterations for every size (default: by size class)
  -t SECONDS    time limit of one benchmark launch (default 300)
  --no-openmpi  skip Open MPI
  --no-mpich    skip MPICH
  --no-build    do not run ./run.sh --build-only or rebuild mpi_bench
  -B BUILD      the build folder holding shmesh-run and shmesh-bench (default
                build; with another one, also --no-build)
  --no-install  do not install Debian's MPI packages: use the mpirun.openmpi
                and mpiexec.mpich on PATH (a machine without apt, where the
                packages were unpacked by hand: bench/gpu-measure.sh)
  -h, --help    this text

Environment (each split on spaces):
  OPENMPI_ARGS       extra mpirun.openmpi arguments, e.g. "--bind-to none"
  MPICH_ARGS         extra mpiexec.mpich arguments
  SHMESH_BENCH_ARGS  extra shmesh-bench arguments (after the common ones)
  SHMESH_RUN_ARGS    extra shmesh-run arguments, e.g.
                     "--bind-to core:overload-allowed"
  SHMESH_* variables (SHMESH_NOTIFY, SHMESH_SPIN_NS, ...) reach the ranks as usual.

SIZE: bytes of the larger buffer per rank, nccl-tests style (K, M, G
suffixes), e.g. "8 4K 1M 64M".  Default: 8 B to 64 MiB, times 4 per step.

Iterations by size class (warm-up + timed, per size):
  size <= 64 KiB        100 + 1000
  64 KiB < size <= 4 MiB  5 + 50
  size > 4 MiB            2 + 10
With more ranks than cores, sizes above 64 KiB run 1 + 5 for everyone, and
MPICH runs 1 + 5 at every size (it busy-polls and never yields, so each of
its calls costs a few scheduler time slices).  -W / -I override all of this.

Output: a table of medians over rounds (time_us, busbw GB/s, and the speed-up
x = MPI time / shmesh time = shmesh busbw / MPI busbw), the one-core memcpy
bandwidth, and the raw CSV of every run in BUILD/bench-mpi/compare-DATE.csv.
Exits 1 if any run failed or reported wrong results.
EOF
}

cd "$(dirname "$0")/.."
build_dir=build

ranks=2
rounds=5
ops_arg=
dtype=float32
check=1
warm_override=
iters_override=
limit=300
use_openmpi=1
use_mpich=1
build=1
install=1
sizes_arg=()

die() { echo "compare-mpi.sh: $*" >&2; exit 2; }
need_int() { [[ $2 =~ ^[0-9]+$ ]] || die "$1 expects a number, got '$2'"; }

while (($#)); do
    case $1 in
    -n) need_int -n "${2-}"; ranks=$2; shift 2 ;;
    -r) need_int -r "${2-}"; rounds=$2; shift 2 ;;
    -o) ops_arg=${2-}; shift 2 ;;
    -d) dtype=${2-}; shift 2 ;;
    -c) [[ ${2-} =~ ^[01]$ ]] || die "-c expects 0 or 1"; check=$2; shift 2 ;;
    -W) need_int -W "${2-}"; warm_override=$2; shift 2 ;;
    -I) need_int -I "${2-}"; iters_override=$2; shift 2 ;;
    -t) need_int -t "${2-}"; limit=$2; shift 2 ;;
    --no-openmpi) use_openmpi=0; shift ;;
    --no-mpich) use_mpich=0; shift ;;
    --no-build) build=0; shift ;;
    --no-install) install=0; shift ;;
    -B) build_dir=${2-}; [ -n "$build_dir" ] || die "-B expects a build folder"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; sizes_arg+=("$@"); break ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) sizes_arg+=("$1"); shift ;;
    esac
done
out_dir=$build_dir/bench-mpi
((build)) && [ "$build_dir" != build ] &&
    die "-B $build_dir: ./run.sh builds build/ only; give --no-build with a prebuilt $build_dir/bench-mpi"
((ranks >= 1)) || die "-n expects at least 1 rank"
((rounds >= 1)) || die "-r expects at least 1 round"
case $dtype in float32 | float64 | int32 | int64) ;; *) die "-d expects float32, float64, int32 or int64" ;; esac

# --- ops -------------------------------------------------------------------
all_pairs=(allreduce:psum allgather:all_gather reduce_scatter:psum_scatter alltoall:all_to_all
           bcast:pbroadcast)
pairs=()
if [ -z "$ops_arg" ]; then
    pairs=("${all_pairs[@]}")
else
    IFS=, read -ra wanted <<<"$ops_arg"
    for w in "${wanted[@]}"; do
        found=
        for p in "${all_pairs[@]}"; do
            if [ "$w" = "${p%%:*}" ] || [ "$w" = "${p#*:}" ]; then found=$p; fi
        done
        [ -n "$found" ] || die "-o: unknown op '$w'"
        pairs+=("$found")
    done
fi

# --- sizes -----------------------------------------------------------------
to_bytes() {
    local s=$1 num mult=1
    [[ $s =~ ^([0-9]+)([KkMmGg]?)[Bb]?$ ]] || die "bad size '$s'"
    num=${BASH_REMATCH[1]}
    case ${BASH_REMATCH[2]} in
    K | k) mult=1024 ;;
    M | m) mult=$((1024 * 1024)) ;;
    G | g) mult=$((1024 * 1024 * 1024)) ;;
    esac
    echo $((num * mult))
}
sizes=()
if ((${#sizes_arg[@]})); then
    for s in "${sizes_arg[@]}"; do sizes+=("$(to_bytes "$s")"); done
    mapfile -t sizes < <(printf '%s\n' "${sizes[@]}" | sort -n -u)
else
    for ((s = 8; s < 64 * 1024 * 1024; s *= 4)); do sizes+=("$s"); done
    sizes+=($((64 * 1024 * 1024)))
fi

cores=$(nproc)
oversubscribed=0
((ranks > cores)) && oversubscribed=1

# Warm-up and timed iterations for one size and side (see --help).
iterations() { # SIZE SIDE -> "W N"
    local size=$1 side=$2 w n
    if ((size <= 64 * 1024)); then w=100 n=1000
    elif ((size <= 4 * 1024 * 1024)); then w=5 n=50
    else w=2 n=10
    fi
    if ((oversubscribed)) && { ((size > 64 * 1024)) || [ "$side" = mpich ]; }; then
        w=1 n=5
    fi
    echo "${warm_override:-$w} ${iters_override:-$n}"
}

# --- install and build -----------------------------------------------------
packages=()
((use_openmpi)) && packages+=(openmpi-bin libopenmpi-dev)
((use_mpich)) && packages+=(mpich libmpich-dev)
if ((install)); then
    tools/install-packages.sh "compare-mpi.sh (benchmark baseline only)" "${packages[@]}"
fi

mkdir -p "$out_dir"
log=$out_dir/compare.log
: >"$log"
if ((build)); then
    if ! ./run.sh --build-only >>"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "compare-mpi.sh: ./run.sh --build-only failed (log: $log)" >&2
        exit 1
    fi
    cflags=(-std=gnu11 -O2 -Wall -Wextra)
    build_one() { # COMPILER SOURCE OUTPUT
        if [ ! -x "$3" ] || [ "$2" -nt "$3" ] || [ "$0" -nt "$3" ]; then
            echo "compare-mpi.sh: $1 ${cflags[*]} -o $3 $2" >>"$log"
            "$1" "${cflags[@]}" -o "$3" "$2"
        fi
    }
    ((use_openmpi)) && build_one mpicc.openmpi bench/mpi_bench.c "$out_dir/mpi_bench-openmpi"
    ((use_mpich)) && build_one mpicc.mpich bench/mpi_bench.c "$out_dir/mpi_bench-mpich"
    build_one cc bench/memcpy_bw.c "$out_dir/memcpy_bw"
fi
shmesh_run=$build_dir/launcher/shmesh-run
shmesh_bench=$build_dir/tools/shmesh-bench
for f in "$shmesh_run" "$shmesh_bench" "$out_dir/memcpy_bw"; do
    [ -x "$f" ] || die "$f is missing (run without --no-build)"
done
((use_openmpi)) && { [ -x "$out_dir/mpi_bench-openmpi" ] || die "$out_dir/mpi_bench-openmpi is missing"; }
((use_mpich)) && { [ -x "$out_dir/mpi_bench-mpich" ] || die "$out_dir/mpi_bench-mpich is missing"; }

# Which shmesh ops does this shmesh-bench know?  (It checks -o before -h.)
declare -A shmesh_has
for p in "${pairs[@]}"; do
    op=${p#*:}
    if "$shmesh_bench" -o "$op" -h >/dev/null 2>&1; then
        shmesh_has[$op]=1
    else
        shmesh_has[$op]=0
        echo "compare-mpi.sh: this shmesh-bench has no -o $op: the shmesh side of ${p%%:*} is skipped"
    fi
done

openmpi_cmd=(mpirun.openmpi --oversubscribe -np "$ranks" --mca pml ob1 --mca btl "self,vader")
[ "$(id -u)" -eq 0 ] && openmpi_cmd+=(--allow-run-as-root)
mpich_cmd=(mpiexec.mpich -n "$ranks")
# Extra launcher arguments, split on spaces (e.g. OPENMPI_ARGS="--bind-to none").
read -ra extra <<<"${OPENMPI_ARGS:-}"
openmpi_cmd+=("${extra[@]}")
read -ra extra <<<"${MPICH_ARGS:-}"
mpich_cmd+=("${extra[@]}")
read -ra shmesh_extra <<<"${SHMESH_BENCH_ARGS:-}"
read -ra shmesh_run_extra <<<"${SHMESH_RUN_ARGS:-}"

# --- the runs --------------------------------------------------------------
stamp=$(date +%Y%m%d-%H%M%S)
csv=$out_dir/compare-$stamp.csv
echo "round,pair,side,op,ranks,impl,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong" >"$csv"
failures=0

# Groups of sizes with the same iterations that shmesh-bench's own stepping
# (-b MIN -e MAX -f F: times F, the last step clamped to MAX) walks exactly
# run in one launch; other sizes run one launch each.  Prints
# "MIN MAX FACTOR W N" lines.
launches() { # SIDE
    local side=$1 i=0 j n=${#sizes[@]} it f
    while ((i < n)); do
        it=$(iterations "${sizes[i]}" "$side")
        j=$i f=2
        if ((i + 1 < n && sizes[i] > 0)) && ((sizes[i + 1] % sizes[i] == 0)) &&
            [ "$(iterations "${sizes[i + 1]}" "$side")" = "$it" ]; then
            f=$((sizes[i + 1] / sizes[i]))
            j=$((i + 1))
            while ((j + 1 < n)) && [ "$(iterations "${sizes[j + 1]}" "$side")" = "$it" ]; do
                if ((sizes[j] * f == sizes[j + 1])); then
                    j=$((j + 1))
                elif ((sizes[j + 1] < sizes[j] * f)); then
                    j=$((j + 1)) # the clamped last step
                    break
                else
                    break
                fi
            done
        fi
        echo "${sizes[i]} ${sizes[j]} $f $it"
        i=$((j + 1))
    done
}

# run_side ROUND PAIR SIDE: every size of one op on one side, rows to $csv.
run_side() {
    local round=$1 pair=$2 side=$3 op cmd b e f w n rc rows
    local tmp=$out_dir/.run-$side.out err=$out_dir/.run-$side.err
    while read -r b e f w n; do
        case $side in
        shmesh) op=${pair#*:}; cmd=("$shmesh_run" -n "$ranks" "${shmesh_run_extra[@]}" -- "$shmesh_bench") ;;
        openmpi) op=${pair%%:*}; cmd=("${openmpi_cmd[@]}" "$out_dir/mpi_bench-openmpi") ;;
        mpich) op=${pair%%:*}; cmd=("${mpich_cmd[@]}" "$out_dir/mpi_bench-mpich") ;;
        esac
        cmd+=(-o "$op" -b "$b" -e "$e" -f "$f" -d "$dtype" -w "$w" -n "$n" -c "$check" --csv)
        [ "$side" = shmesh ] && cmd+=("${shmesh_extra[@]}")
        echo "round $round: ${cmd[*]}" >>"$log"
        rc=0
        timeout "$limit" "${cmd[@]}" </dev/null >"$tmp" 2>"$err" || rc=$?
        cat "$err" >>"$log"
        rows=$(grep -E '^[a-z_]+,[0-9]+,' "$tmp" || true)
        if [ -n "$rows" ]; then
            sed "s/^/$round,${pair%%:*},$side,/" <<<"$rows" >>"$csv"
        fi
        if ((rc)); then
            failures=$((failures + 1))
            echo "compare-mpi.sh: round $round: $side ${pair%%:*} -b $b -e $e failed" \
                "($( ((rc == 124)) && echo "time limit ${limit} s" || echo "exit $rc"))" >&2
            tail -n 5 "$err" >&2
        fi
    done < <(launches "$side")
}

sides=(shmesh)
((use_openmpi)) && sides+=(openmpi)
((use_mpich)) && sides+=(mpich)
echo "compare-mpi.sh: $ranks ranks on $cores cores, $rounds rounds, $dtype, sizes ${sizes[*]}"
echo "compare-mpi.sh: sides ${sides[*]}; ops $(printf '%s ' "${pairs[@]%%:*}")"
if ((oversubscribed)) && [ -z "$iters_override$warm_override" ]; then
    echo "compare-mpi.sh: oversubscribed ($ranks ranks > $cores cores): sizes above 64 KiB run" \
        "1 + 5 iterations on every side$( ((use_mpich)) && echo ", and MPICH runs 1 + 5 at every size (it busy-polls)")"
fi
start=$SECONDS
for ((round = 1; round <= rounds; round++)); do
    t0=$SECONDS
    # memcpy: time_us per copy, algbw = busbw = median GB/s; count = repetitions.
    "$out_dir/memcpy_bw" --csv 1M 16M 64M | grep '^memcpy,' |
        awk -F, -v r="$round" \
            '{ printf "%s,memcpy,memcpy,memcpy,1,libc,%s,%s,-,%.3f,%s,%s,0\n", r, $4, $5, $4 / $6 / 1e3, $6, $6 }' >>"$csv"
    for p in "${pairs[@]}"; do
        for side in "${sides[@]}"; do
            if [ "$side" = shmesh ] && [ "${shmesh_has[${p#*:}]}" = 0 ]; then continue; fi
            run_side "$round" "$p" "$side"
        done
    done
    echo "compare-mpi.sh: round $round/$rounds done ($((SECONDS - t0)) s)"
done

# --- the table -------------------------------------------------------------
openmpi_info=
if ((use_openmpi)); then
    cma=$(ompi_info --param btl vader --level 3 --parsable 2>/dev/null |
        sed -n 's/^mca:btl:vader:param:btl_vader_single_copy_mechanism:value://p' || true)
    openmpi_info="Open MPI $(ompi_info --version 2>/dev/null | sed -n '1s/.*v//p'): pml ob1, btl self,vader, single copy ${cma:-?}"
fi
mpich_info=
if ((use_mpich)); then
    mpich_info="MPICH $(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p') ($(mpichversion 2>/dev/null | sed -n 's/^MPICH Device:[[:space:]]*//p'))"
fi
echo
python3 - "$csv" "$ranks" "$cores" "$rounds" "$openmpi_info" "$mpich_info" <<'EOF'
import csv, math, statistics, sys

path, ranks, cores, rounds, ompi, mpich = sys.argv[1:7]
rows = list(csv.DictReader(open(path)))
pairs = {"allreduce": "psum", "allgather": "all_gather", "reduce_scatter": "psum_scatter",
         "alltoall": "all_to_all", "bcast": "pbroadcast"}
data, notifier, dtype = {}, set(), "?"
for r in rows:
    key = (r["pair"], r["side"], int(r["bytes"]))
    data.setdefault(key, []).append((float(r["time_us"]), float(r["busbw_GBs"])))
    if r["side"] == "shmesh":
        notifier.add(r["impl"])
    if r["side"] != "memcpy":
        dtype = r["dtype"]

def med(key, i):
    v = data.get(key)
    return statistics.median(x[i] for x in v) if v else None

sides = [s for s in ("openmpi", "mpich") if any(k[1] == s for k in data)]
print(f"# shmesh vs MPI: {ranks} ranks on {cores} cores, {dtype}, median of {rounds} rounds")
print(f"# shmesh: shmesh-run + shmesh-bench, notifier {', '.join(sorted(notifier)) or '-'}")
for info in (ompi, mpich):
    if info:
        print("# " + info)
print("# time in us (max over ranks, mean per iteration); busbw in GB/s;"
      " x = MPI time / shmesh time = shmesh busbw / MPI busbw (> 1: shmesh faster)")
hdr = f"{'bytes':>10} | {'shmesh_us':>10} {'busbw':>7}"
for s in sides:
    hdr += f" | {s + '_us':>10} {'busbw':>7} {'x':>6}"
for pair in pairs:
    sizes = sorted({k[2] for k in data if k[0] == pair})
    if not sizes:
        continue
    print(f"\n## {pair} (shmesh {pairs[pair]} vs MPI {pair})")
    print(hdr)
    ratios = {s: [] for s in sides}
    for b in sizes:
        t = med((pair, "shmesh", b), 0)
        line = f"{b:>10} | " + (f"{t:>10.2f} {med((pair, 'shmesh', b), 1):>7.3f}" if t is not None
                                else f"{'-':>10} {'-':>7}")
        for s in sides:
            m = med((pair, s, b), 0)
            if m is None:
                line += f" | {'-':>10} {'-':>7} {'-':>6}"
                continue
            x = m / t if t else None
            if x and b:  # a size that rounds to 0 bytes per rank moves nothing
                ratios[s].append(x)
            line += f" | {m:>10.2f} {med((pair, s, b), 1):>7.3f} " + (f"{x:>6.2f}" if x else f"{'-':>6}")
        n = min(len(data.get((pair, sd, b), [])) for sd in ["shmesh"] + sides
                if (pair, sd, b) in data)
        if n < int(rounds):
            line += f"   ({n} of {rounds} rounds)"
        if not b:
            line += "   (0 bytes: not in the geomean)"
        print(line)
    summary = []
    for s in sides:
        if ratios[s]:
            g = math.exp(sum(map(math.log, ratios[s])) / len(ratios[s]))
            summary.append(f"{s} x geomean {g:.2f} (min {min(ratios[s]):.2f}, max {max(ratios[s]):.2f})")
    if summary:
        print(f"{'':>10}   " + "; ".join(summary))
mem = sorted({k[2] for k in data if k[1] == "memcpy"})
if mem:
    print("\n## memcpy, one core (GB/s, median over rounds of each round's median)")
    print("   " + "   ".join(f"{b >> 20} MiB: {med(('memcpy', 'memcpy', b), 1):.2f}" for b in mem))
EOF
echo
echo "compare-mpi.sh: raw CSV: $csv ($((SECONDS - start)) s; launch log: $log)"

wrong=$(awk -F, 'NR > 1 && $13 != "0" { n++ } END { print n + 0 }' "$csv")
if ((wrong)); then
    echo "compare-mpi.sh: $wrong rows reported wrong results:" >&2
    awk -F, 'NR > 1 && $13 != "0"' "$csv" >&2
fi
if ((failures)); then
    echo "compare-mpi.sh: $failures launches failed (see $log)" >&2
fi
if ((wrong || failures)); then exit 1; fi
