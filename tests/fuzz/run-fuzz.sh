#!/usr/bin/env bash
# Builds a fuzz target with clang's libFuzzer (ASan + UBSan) and runs it on
# its seed corpus (docs/internals.md, "Fuzzing").
#   tests/fuzz/run-fuzz.sh BUILD_DIR TARGET [LIBFUZZER_OPTION...]
#   tests/fuzz/run-fuzz.sh BUILD_DIR seeds     (rewrites tests/fuzz/corpus/*/ seeds)
# TARGET: desc (a peer's call description) or segment (seg_validate).
# Without options it runs for 10 seconds (-max_total_time=10).  The binary is
# BUILD_DIR/fuzz/fuzz_TARGET; the corpus it grows, BUILD_DIR/fuzz/TARGET-corpus
# (emptied first unless FUZZ_KEEP_CORPUS=1); a crashing input lands in
# BUILD_DIR/fuzz/TARGET-artifacts/.  CLANG picks the compiler (default clang).
# Exit status: 0 no crash, 1 a crash or a failed build, 77 when clang or its
# libFuzzer runtime is missing (meson reports the test as skipped).
set -euo pipefail
if (($# < 2)); then
    sed -n '2,13p' "$0" >&2
    exit 2
fi
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
target=$2
shift 2
case $target in
desc) sources=(tests/fuzz/fuzz_desc.c lib/engine/desc.c lib/core/dtype.c) ;;
segment) sources=(tests/fuzz/fuzz_segment.c shm/segment.c shm/errtext.c shm/guard.c shm/notify.c shm/numa_place.c shm/proc.c) ;;
seeds) sources=(tests/fuzz/make_seeds.c shm/segment.c shm/errtext.c shm/guard.c shm/notify.c shm/numa_place.c shm/proc.c) ;;
*)
    echo "run-fuzz.sh: unknown target '$target' (desc, segment or seeds)" >&2
    exit 2
    ;;
esac

clang=${CLANG:-clang}
out=$build/fuzz
mkdir -p "$out/include"
fuzz_flags=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
if ! command -v "$clang" >/dev/null 2>&1; then
    echo "run-fuzz.sh: skipped: no $clang (Debian: apt-get install clang libclang-rt-dev)"
    exit 77
fi
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\n%s\n' \
    'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n; }' \
    >"$out/probe.c"
if ! "$clang" "${fuzz_flags[@]}" "$out/probe.c" -o "$out/probe" >"$out/probe.log" 2>&1; then
    echo "run-fuzz.sh: skipped: $clang cannot build with -fsanitize=fuzzer (Debian: apt-get" \
        "install libclang-rt-dev):"
    cat "$out/probe.log"
    exit 77
fi

# Only what the targets compile: no liburing or libnuma.
config=$out/include/shmesh_config.h
printf '%s\n' '#define SHMESH_HAVE_NUMA 0' '#define SHMESH_HAVE_URING 0' \
    '#define SHMESH_VERSION "fuzz"' >"$config.new"
cmp -s "$config.new" "$config" 2>/dev/null && rm "$config.new" || mv "$config.new" "$config"

flags=(-std=gnu11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wno-unused-parameter
       -I"$out/include" -I"$src/lib" -I"$src/lib/include" -I"$src" -I"$src/shm")
bin=$out/fuzz_$target
[ "$target" = seeds ] && fuzz_flags=()
# Rebuilt when any source or header it may read is newer.
if [ ! -x "$bin" ] || [ -n "$(find "$src/lib" "$src/shm" "$src/tests/fuzz" "$config" \
        \( -name '*.c' -o -name '*.h' \) -newer "$bin" -print -quit)" ]; then
    echo "run-fuzz.sh: building $bin"
    if ! "$clang" "${flags[@]}" "${fuzz_flags[@]}" "${sources[@]/#/$src/}" -o "$bin"; then
        echo "run-fuzz.sh: building $bin failed" >&2
        exit 1
    fi
fi

if [ "$target" = seeds ]; then
    mkdir -p "$src/tests/fuzz/corpus/desc" "$src/tests/fuzz/corpus/segment"
    exec "$bin" "$src/tests/fuzz/corpus"
fi

corpus=$out/$target-corpus
artifacts=$out/$target-artifacts
[ "${FUZZ_KEEP_CORPUS:-0}" = 1 ] || rm -rf "$corpus"
mkdir -p "$corpus" "$artifacts"
(($#)) || set -- -max_total_time=10
# libFuzzer's own failure status is 77, which meson reads as "skipped".
rc=0
"$bin" -error_exitcode=1 -timeout_exitcode=1 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$@" "$corpus" "$src/tests/fuzz/corpus/$target" || rc=$?
if ((rc)); then
    echo "run-fuzz.sh: fuzz_$target failed (status $rc); inputs in $artifacts:" >&2
    ls -l "$artifacts" >&2
    exit 1
fi
