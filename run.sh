#!/usr/bin/env bash
# Quick start, step 1: install what is missing (Debian), build into build/,
# and run the demo job with 4 ranks.
#   ./run.sh               set up, build, run the demo
#   ./run.sh --build-only  set up and build (test.sh uses this)
set -euo pipefail
cd "$(dirname "$0")"

packages=(gcc libc6-dev pkg-config meson ninja-build libnuma-dev liburing-dev libcmocka-dev)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    install=(apt-get install -y --no-install-recommends "${missing[@]}")
    if [ "$(id -u)" -eq 0 ]; then
        echo "run.sh: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        "${install[@]}"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        echo "run.sh: installing ${missing[*]} with sudo"
        sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq
        sudo DEBIAN_FRONTEND=noninteractive "${install[@]}"
    else
        echo "run.sh: missing packages: ${missing[*]}" >&2
        echo "run.sh: install them with:  sudo apt-get update && sudo ${install[*]}" >&2
        exit 1
    fi
fi

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
exec build/launcher/shmesh-run -n 4 -- build/examples/shmesh-demo
