#!/usr/bin/env bash
# gpu-session.sh: one GPU lease's work, in one command, every log kept
# (issue 25: a lease is short and the machine bare).  On the GPU machine,
# in a copy of this checkout with .gpu-debs/ in it (tools/gpu-check.sh
# --fetch; for the MPI baseline also .gpu-debs/mpi/*.deb, Open MPI's
# runtime closure, and .gpu-debs/bin/{mpi_bench-openmpi,memcpy_bw} built
# where apt works: docs/devices.md, "Measurements"):
#
#   tools/gpu-session.sh OUTDIR [BUDGET_SECONDS]      (default 480)
#
#   1. check.log    tools/gpu-check.sh --keep-going: the build (build-gpu,
#                   -Dcuda=enabled), the device suite on the GPU, every op,
#                   the cache, reallocation and async on 2, 4 and 8 ranks
#   2. measure.log  bench/gpu-measure.sh: docs/devices.md's figures
#   3. tests.log    every other suite of build-gpu on this machine's cores
#                   (meson's testlog.txt beside it)
#   4. mpi.log      bench/compare-mpi.sh against Open MPI, host buffers, 2, 4
#                   and 8 ranks, where .gpu-debs/mpi is there
#   5. sanitize.log ./test.sh's second half: build-sanitize, every suite
#                   under ASan and UBSan
# A step starts only while the budget leaves it room (its own limit);
# steps 4 and 5 are the first to go.  summary.txt says what ran and how it
# ended.  Exit 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu-session.sh OUTDIR [BUDGET_SECONDS]}
budget=${2:-480}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
status=0
note() { echo "gpu-session: $*" | tee -a "$summary"; }
left() { echo $((budget - SECONDS)); }
# phase NAME LOG LIMIT COMMAND...: runs it under `timeout LIMIT` when that
# fits in what is left of the budget (else a shorter limit, down to
# MIN_LIMIT), logs to OUTDIR/LOG.
phase() {
    local name=$1 log=$out/$2 limit=$3 min=${MIN_LIMIT:-60} rc=0 t0=$SECONDS
    shift 3
    local room=$(($(left) - 5))
    ((room < limit)) && limit=$room
    if ((limit < min)); then
        note "$name: skipped ($(left) s left of the budget)"
        return 0
    fi
    note "$name: started, limit $limit s: $*"
    timeout -k 5 "$limit" "$@" >"$log" 2>&1 || rc=$?
    if ((rc == 0)); then
        note "$name: passed ($((SECONDS - t0)) s)"
    else
        note "$name: FAILED, exit $rc$( ((rc == 124)) && echo ' (time limit)') ($((SECONDS - t0)) s)"
        status=1
    fi
    grep -E '^gpu-check: (passed|FAILED)|^gpu-measure: FAILED|^(Ok|Fail|Timeout|Skipped):' \
        "$log" | uniq | head -60 >>"$summary"
}
{
    date -u
    uname -r
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nproc
    command -v nvcc >/dev/null && nvcc --version | tail -2
} >>"$summary" 2>&1

. tools/gpu-env.sh .gpu-debs >"$out/env.log" 2>&1
((gpu_env_ok)) || { note "tools/gpu-env.sh failed: $(tail -1 "$out/env.log")"; exit 1; }

MIN_LIMIT=120 GPU_CHECK_TIMEOUT=90 phase "device check" check.log 300 \
    tools/gpu-check.sh --keep-going -- -Dnvcc_arch=90
[ -x build-gpu/tools/shmesh-bench ] || { note "no build: see check.log"; exit 1; }
phase "measurements" measure.log 240 bench/gpu-measure.sh build-gpu
phase "other suites" tests.log 200 \
    meson test -C build-gpu --no-suite device --print-errorlogs
cp build-gpu/meson-logs/testlog.txt "$out/testlog.txt" 2>/dev/null
if [ -x .gpu-debs/bin/mpi_bench-openmpi ] && command -v mpirun.openmpi >/dev/null; then
    mkdir -p build-gpu/bench-mpi
    cp .gpu-debs/bin/mpi_bench-openmpi .gpu-debs/bin/memcpy_bw build-gpu/bench-mpi/
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mpi() {
        for n in 2 4 8; do
            bench/compare-mpi.sh -B build-gpu --no-build --no-install --no-mpich -n "$n" -r 3 -t 60 \
                -o psum,all_gather,all_to_all 8 4K 256K 16M 64M || return 1
        done
    }
    export -f mpi
    phase "compare-mpi" mpi.log 150 bash -c mpi
else
    note "compare-mpi: skipped (no .gpu-debs/bin/mpi_bench-openmpi or mpirun.openmpi)"
fi
sanitize() {
    meson setup build-sanitize -Db_sanitize=address,undefined -Db_lundef=false -Db_lto=false \
        -Dcuda=enabled -Dnvcc_arch=90 >/dev/null &&
        meson compile -C build-sanitize >/dev/null &&
        meson test -C build-sanitize --setup sanitize --no-suite fuzz --print-errorlogs &&
        ! grep -nE 'runtime error:|ERROR: (Address|Leak)Sanitizer' \
            build-sanitize/meson-logs/testlog-sanitize.txt
}
export -f sanitize
MIN_LIMIT=150 phase "sanitized suites" sanitize.log 240 bash -c sanitize
note "done in $SECONDS s"
exit "$status"
