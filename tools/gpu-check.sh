#!/usr/bin/env bash
# The device suite on a real NVIDIA GPU, for a machine that has nvcc, meson
# and ninja but no network and none of Debian's liburing, libnuma, cmocka or
# pkg-config (issue 11).  Two steps, on two machines:
#
#   tools/gpu-check.sh --fetch [DIR]   where apt works: the .deb files of those
#                                      packages into DIR (default .gpu-debs/,
#                                      which git ignores)
#   tools/gpu-check.sh [--build-only] [--keep-going] [DIR] [-- MESON_OPTION...]
#                                      on the GPU machine, in a copy of this
#                                      checkout with DIR in it: unpacks each
#                                      .deb under /tmp, points pkg-config, the
#                                      loader and PATH at them, builds build-gpu/
#                                      with -Dcuda=enabled, runs the device suite
#                                      with SHMESH_TEST_DEVICE=cuda (the real
#                                      backend, not the fake) and then
#                                      shmesh-bench --device (psum, all_gather)
#                                      on 2 ranks, then the Python package's
#                                      DLPack device tensors
#                                      (tools/gpu_dlpack_check.py)
#
# --build-only stops after the build (to check the recipe on any machine);
# --keep-going runs every step after the build even when one fails, and
# lists the failures at the end (a GPU lease is short: one run, every
# finding).
# GPU_CHECK_PREFIX names the folder the packages are unpacked into (default
# /tmp/shmesh-gpu-prefix; emptied first), GPU_CHECK_TIMEOUT the --timeout of
# each shmesh-test-device job (default 300 s).  Exit status: 0 when every step
# passed, else the failed step's.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(liburing-dev liburing2 libnuma-dev libnuma1 libcmocka-dev libcmocka0
          pkgconf pkgconf-bin libpkgconf3 pkg-config)

say() { echo "gpu-check: $*"; }
keep_going=0
failed=()
first_rc=0
# step WHAT COMMAND...: runs it, or stops the script saying what failed
# (with --keep-going: says so, remembers it and goes on).
step() {
    local what=$1 rc=0 t0=$SECONDS
    shift
    say "$what: $*"
    "$@" || rc=$?
    if ((rc != 0)); then
        say "FAILED: $what (exit $rc, $((SECONDS - t0)) s): $*" >&2
        ((keep_going)) || exit "$rc"
        failed+=("$what (exit $rc)")
        ((first_rc)) || first_rc=$rc
    else
        say "passed: $what ($((SECONDS - t0)) s)"
    fi
}

if [ "${1:-}" = "--fetch" ]; then
    dir=${2:-.gpu-debs}
    if ! command -v apt-get >/dev/null; then
        say "--fetch needs apt-get (a Debian or Ubuntu machine)" >&2
        exit 1
    fi
    mkdir -p "$dir"
    (cd "$dir" && step "downloading ${#packages[@]} packages into $dir" \
        apt-get download "${packages[@]}")
    say "fetched into $dir:"
    ls -1 "$dir"/*.deb
    say "now copy this checkout with $dir in it to the GPU machine and run tools/gpu-check.sh there"
    exit 0
fi

build_only=0
while (($#)); do
    case $1 in
    --build-only) build_only=1; shift ;;
    --keep-going) keep_going=1; shift ;;
    *) break ;;
    esac
done
dir=.gpu-debs
if (($#)) && [ "$1" != "--" ]; then
    dir=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
meson_options=("$@")

# 1. The packages, unpacked into a prefix of their own, and 2. pkg-config
# (the unpacked pkgconf) finding the .pc files there with their -I and -L
# under the prefix (sysroot), the loader finding the libraries when the
# tests run: tools/gpu-env.sh.
. tools/gpu-env.sh "$dir"
((gpu_env_ok)) || exit 1
for pc in liburing numa cmocka; do
    step "pkg-config finds $pc" pkg-config --modversion "$pc"
done

# 3. The build, with the CUDA backend required.
if command -v nvidia-smi >/dev/null; then
    say "GPUs: $(nvidia-smi -L 2>/dev/null | paste -sd';' -)"
else
    say "no nvidia-smi here: the suite will say whether the driver is found"
fi
setup=(meson setup)
[ -f build-gpu/build.ninja ] && setup+=(--reconfigure)
# The build is needed by every later step: it stops the script even with
# --keep-going.
keep=$keep_going
keep_going=0
# No link-time optimisation: the H100 machine's gcc (/opt/gcc) could not run
# its lto-wrapper, and the check does not need it.
step "configuring build-gpu" "${setup[@]}" build-gpu -Dcuda=enabled -Dtests=enabled \
    -Db_lto=false "${meson_options[@]}"
step "building build-gpu" meson compile -C build-gpu
keep_going=$keep
if ((build_only)); then
    say "built build-gpu (--build-only: no tests run)"
    exit 0
fi

# 4. The device suite on the GPU, then the benchmark where it exists.
export SHMESH_TEST_DEVICE=cuda
step "device suite on the GPU (SHMESH_TEST_DEVICE=cuda)" \
    meson test -C build-gpu --suite device --print-errorlogs
# Every op on 2, 4 and 8 processes sharing the GPU, against the host path
# bit for bit (the suite above runs 2 and 3), and the handle cache.
for n in 2 4 8; do
    for mode in ops cache realloc async; do
        step "shmesh-test-device $mode on $n ranks" env SHMESH_DEVICE=cuda \
            build-gpu/launcher/shmesh-run -n "$n" --gpus none --timeout "${GPU_CHECK_TIMEOUT:-300}" -- \
            build-gpu/tests/shmesh-test-device "$mode"
    done
done
# Issue 11's figures: psum and all_gather of float32 up to 256 MiB on 2
# processes sharing the GPU (its memory, not a link between GPUs), and the
# 8-byte psum's latency; the tables also land in build-gpu/gpu-check-bench.txt.
bench=build-gpu/tools/shmesh-bench
if [ -x "$bench" ] && "$bench" -h 2>/dev/null | grep -q -- '--device'; then
    : >build-gpu/gpu-check-bench.txt
    keep() { "$@" | tee -a build-gpu/gpu-check-bench.txt; } # pipefail: the bench's status
    for op in psum all_gather; do
        step "shmesh-bench --device -o $op, 2 ranks" keep \
            build-gpu/launcher/shmesh-run -n 2 -- "$bench" --device -o "$op" -b 8 -e 256M -f 4
    done
    say "benchmark tables in build-gpu/gpu-check-bench.txt"
else
    say "skipped shmesh-bench --device: $bench has no --device option"
fi
# The Python package's device path: DLPack device tensors (its own, and
# torch's or JAX's where they import with a GPU), on 2 ranks.
py=$(command -v python3 || true)
if [ -n "$py" ] && "$py" -c 'import numpy' 2>/dev/null; then
    step "Python: DLPack device tensors, 2 ranks" env SHMESH_DEVICE=cuda PYTHONPATH=python \
        SHMESH_LIBRARY=build-gpu/lib/libshmesh.so.0 \
        build-gpu/launcher/shmesh-run -n 2 --gpus none --timeout "${GPU_CHECK_TIMEOUT:-300}" -- \
        "$py" tools/gpu_dlpack_check.py
else
    say "skipped the Python device check: no python3 that imports numpy"
fi
if ((${#failed[@]})); then
    say "${#failed[@]} step(s) failed:"
    for f in "${failed[@]}"; do say "  $f"; done
    exit "$first_rc"
fi
say "all passed"
