#!/usr/bin/env bash
# gpu-measure.sh: docs/devices.md's measurements, on a machine with a GPU
# (ranks sharing its one GPU when it has one; build with -Dcuda=enabled,
# tools/gpu-check.sh, first).
#
#   bench/gpu-measure.sh [-n "2 4 8"] [-e 256M] [BUILD]     (default build-gpu)
#
# For each rank count, on device buffers (SHMESH_DEVICE, default cuda):
#   - the 8-byte psum's latency (2000 calls after 200 warm-up);
#   - psum and all_gather from 8 bytes to -e, times 4 per step, each table
#     headed by the same run's references: the device-to-device copy, and
#     for psum the one-shot reduction kernel alone over as many buffers as
#     ranks (shmesh-bench --device);
#   - the handles' costs: first open, cached, reopen after a free
#     (bench/device_handles.c);
# then, on 2 ranks, what host staging costs: psum of bfloat16 (no device
# kernel: staged through host memory) on device buffers against the same
# psum on host buffers, and float32 on both.
# Each step has a time limit (shmesh-run --timeout); a failed step is said
# and the script goes on; exit 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ranks="2 4 8"
max=256M
while (($#)); do
    case $1 in
    -n) ranks=$2; shift 2 ;;
    -e) max=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) break ;;
    esac
done
build=${1:-build-gpu}
run=$build/launcher/shmesh-run
bench=$build/tools/shmesh-bench
handles=$build/bench/device-handles
export SHMESH_DEVICE=${SHMESH_DEVICE:-cuda}
for f in "$run" "$bench" "$handles"; do
    [ -x "$f" ] || { echo "gpu-measure: $f is missing: build $build first" >&2; exit 2; }
done
failed=0
measure() { # LIMIT RANKS COMMAND...
    local limit=$1 n=$2 t0=$SECONDS rc=0
    shift 2
    echo "\$ shmesh-run -n $n --gpus none -- ${*#$build/}"
    "$run" -n "$n" --gpus none --timeout "$limit" -- "$@" || rc=$?
    ((rc == 0)) || { echo "gpu-measure: FAILED (exit $rc): -n $n ${*#$build/}"; failed=1; }
    echo "# ($((SECONDS - t0)) s)"
    echo
}
command -v nvidia-smi >/dev/null && nvidia-smi -L
echo "gpu-measure: SHMESH_DEVICE=$SHMESH_DEVICE, ranks: $ranks, up to $max"
for n in $ranks; do
    echo "## $n ranks sharing the GPU"
    measure 120 "$n" "$bench" --device -o psum -b 8 -e 8 -w 200 -n 2000
    measure 300 "$n" "$bench" --device -o psum -b 8 -e "$max" -f 4
    measure 300 "$n" "$bench" --device -o all_gather -b 8 -e "$max" -f 4
    measure 120 "$n" "$handles" 12
done
echo "## host staging, 2 ranks: bfloat16 (staged) and float32 (device path) on device buffers, then both on host buffers"
for dtype in bfloat16 float32; do
    measure 300 2 "$bench" --device -o psum -d "$dtype" -b 8 -e 64M -f 16
    measure 300 2 "$bench" -o psum -d "$dtype" -b 8 -e 64M -f 16
done
exit "$failed"
