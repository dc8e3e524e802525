#!/usr/bin/env bash
# Quick start, step 1: install what is missing (Debian), build into build/,
# and run the demo job with 4 ranks.
#   ./run.sh               set up, build, run the demo, the trainer and the metrics example
#   ./run.sh --build-only  set up and build (test.sh uses this)
set -euo pipefail
cd "$(dirname "$0")"

packages=(gcc g++ libc6-dev pkg-config meson ninja-build libnuma-dev liburing-dev libcmocka-dev
          clang libclang-rt-dev hipcc libamdhip64-dev python3-numpy python3-pytest python3-dev
          python3-torch openmpi-bin libopenmpi-dev)

tools/install-packages.sh run.sh "${packages[@]}"

if [ -f build/build.ninja ]; then
    meson setup --reconfigure build >/dev/null
else
    meson setup build
fi
meson compile -C build

if [ "${1:-}" = "--build-only" ]; then
    exit 0
fi
echo
echo "run.sh: build/launcher/shmesh-run -n 4 -- build/examples/shmesh-demo"
build/launcher/shmesh-run -n 4 -- build/examples/shmesh-demo
echo
echo "run.sh: build/launcher/shmesh-run -n 4 -- build/examples/shmesh-train"
build/launcher/shmesh-run -n 4 -- build/examples/shmesh-train
echo
echo "run.sh: build/launcher/shmesh-run -n 4 -- build/examples/metrics"
exec build/launcher/shmesh-run -n 4 -- build/examples/metrics
