#!/usr/bin/env bash
# Quick start, step 2: the same set-up as run.sh, then every test suite; then
# every suite again, built with AddressSanitizer and UndefinedBehaviorSanitizer
# into build-sanitize/ (README, "Tests": what the sanitized run covers).
# Extra arguments go to both `meson test` runs (e.g. --suite launcher).
set -euo pipefail
cd "$(dirname "$0")"
./run.sh --build-only
meson test -C build --print-errorlogs "$@"

# ASan + UBSan: the library, the launcher, the ranks and the test programs.
# No LTO (it only slows the build here); -Db_lundef=false as meson advises
# for sanitized shared libraries.
sanitize=(-Db_sanitize=address,undefined -Db_lundef=false -Db_lto=false)
if [ -f build-sanitize/build.ninja ]; then
    meson setup --reconfigure build-sanitize "${sanitize[@]}" >/dev/null
else
    meson setup build-sanitize "${sanitize[@]}" >/dev/null
fi
meson compile -C build-sanitize
# The fuzz targets carry their own ASan and UBSan (tests/fuzz/run-fuzz.sh):
# once, in the normal run, is enough.
meson test -C build-sanitize --setup sanitize --no-suite fuzz --print-errorlogs "$@"
# A report from a process whose exit status no test looks at still fails the
# run: every test's output is in the log.
log=build-sanitize/meson-logs/testlog-sanitize.txt
if grep -nE 'runtime error:|ERROR: (Address|Leak)Sanitizer' "$log"; then
    echo "test.sh: sanitizer reports above, in $log" >&2
    exit 1
fi
