# bench/lib.sh: what the bench scripts built on shmesh-bench share.
# Sourced, after the script has parsed its options:
#   . "$(dirname "$0")/lib.sh"
# It finds the build's shmesh-run and shmesh-bench (or says to build first
# and exits), and gives:
#   per_call RUN_OPTION... -- BENCH_OPTION...   one launch; prints the time
#                                               per call (us) from the CSV line
#   median VALUE...                             prints their median

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run=$bench_root/build/launcher/shmesh-run
bench=$bench_root/build/tools/shmesh-bench
[ -x "$run" ] && [ -x "$bench" ] ||
    { echo "$(basename "$0"): build first (./run.sh --build-only)" >&2; exit 1; }

per_call() {
    local opts=()
    while [ "$1" != -- ]; do
        opts+=("$1")
        shift
    done
    shift
    "$run" "${opts[@]}" -- "$bench" "$@" --csv | awk -F, 'NR == 2 { print $7 }'
}

median() {
    printf '%s\n' "$@" | sort -g |
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
