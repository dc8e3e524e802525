#!/usr/bin/env bash
# Quick start, step 2: the same set-up as run.sh, then every test suite.
# Extra arguments go to `meson test` (e.g. --suite launcher).
set -euo pipefail
cd "$(dirname "$0")"
./run.sh --build-only
meson test -C build --print-errorlogs "$@"
