#!/usr/bin/env bash
# The device suite on a real NVIDIA GPU, for a machine that has nvcc, meson
# and ninja but no network and none of Debian's liburing, libnuma, cmocka or
# pkg-config (issue 11).  Two steps, on two machines:
#
#   tools/gpu-check.sh --fetch [DIR]   where apt works: the .deb files of those
#                                      packages into DIR (default .gpu-debs/,
#                                      which git ignores)
#   tools/gpu-check.sh [--build-only] [DIR] [-- MESON_OPTION...]
#                                      on the GPU machine, in a copy of this
#                                      checkout with DIR in it: unpacks each
#                                      .deb under /tmp, points pkg-config, the
#                                      loader and PATH at them, builds build-gpu/
#                                      with -Dcuda=enabled, runs the device suite
#                                      with SHMESH_TEST_DEVICE=cuda (the real
#                                      backend, not the fake) and then
#                                      shmesh-bench --device (psum, all_gather)
#                                      on 2 ranks
#
# --build-only stops after the build (to check the recipe on any machine).
# GPU_CHECK_PREFIX names the folder the packages are unpacked into (default
# /tmp/shmesh-gpu-prefix; emptied first).  Exit status: 0 when every step
# passed, else the failed step's.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(liburing-dev liburing2 libnuma-dev libnuma1 libcmocka-dev libcmocka0
          pkgconf pkgconf-bin libpkgconf3 pkg-config)

say() { echo "gpu-check: $*"; }
# step WHAT COMMAND...: runs it, or stops the script saying what failed.
step() {
    local what=$1 rc=0
    shift
    say "$what: $*"
    "$@" || rc=$?
    if ((rc != 0)); then
        say "FAILED: $what (exit $rc): $*" >&2
        exit "$rc"
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
if [ "${1:-}" = "--build-only" ]; then
    build_only=1
    shift
fi
dir=.gpu-debs
if (($#)) && [ "$1" != "--" ]; then
    dir=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
meson_options=("$@")

# 1. The packages, unpacked into a prefix of their own.
debs=("$dir"/*.deb)
if [ ! -e "${debs[0]}" ]; then
    say "no .deb files in $dir: run 'tools/gpu-check.sh --fetch $dir' where apt works first" >&2
    exit 1
fi
command -v dpkg >/dev/null || { say "dpkg is needed to unpack $dir/*.deb" >&2; exit 1; }
prefix=${GPU_CHECK_PREFIX:-/tmp/shmesh-gpu-prefix}
rm -rf "$prefix"
mkdir -p "$prefix"
say "unpacking ${#debs[@]} packages from $dir into $prefix"
for deb in "${debs[@]}"; do
    step "unpacking $(basename "$deb")" dpkg -x "$deb" "$prefix"
done

# 2. pkg-config (the unpacked pkgconf) finds the .pc files there, and gives
# their -I and -L under the prefix (sysroot); the loader finds the libraries
# when the tests run.
libdirs=$(find "$prefix" -maxdepth 3 -type d -path '*/lib/*-linux-gnu' | paste -sd: -)
pcdirs=$(find "$prefix" -maxdepth 5 -type d -name pkgconfig | paste -sd: -)
export PKG_CONFIG_SYSROOT_DIR=$prefix
export PKG_CONFIG_PATH=$pcdirs
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$prefix/usr/bin${PATH:+:$PATH}
say "PKG_CONFIG_SYSROOT_DIR=$PKG_CONFIG_SYSROOT_DIR"
say "PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
say "PATH=$PATH"
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
step "configuring build-gpu" "${setup[@]}" build-gpu -Dcuda=enabled -Dtests=enabled \
    "${meson_options[@]}"
step "building build-gpu" meson compile -C build-gpu
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
            build-gpu/launcher/shmesh-run -n "$n" --gpus none --timeout 300 -- \
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
say "all passed"
