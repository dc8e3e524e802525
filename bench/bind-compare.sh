#!/usr/bin/env bash
# bind-compare.sh: shmesh-run's --bind-to policies side by side, quiet or
# with the machine loaded.  For each round it runs shmesh-bench's psum at
# one size under each policy in turn (the order alternates every round) and
# prints every round's time per call and the median per policy.
#   bench/bind-compare.sh [-n RANKS] [-s SIZE] [-i ITERS] [-r ROUNDS] [-l LOADERS] [-p POLICIES]
# -l starts LOADERS busy processes (`yes > /dev/null`) for the whole run,
# another job competing for the cores; -p is a comma-separated list of
# policies (default core,numa: core needs a CPU per rank).  See
# bench/README.md and docs/shmesh-run.1 (--bind-to).
set -euo pipefail
ranks=2 size=8 iters=20000 rounds=9 loaders=0 policies=core,numa
while getopts "n:s:i:r:l:p:h" o; do
    case $o in
    n) ranks=$OPTARG ;;
    s) size=$OPTARG ;;
    i) iters=$OPTARG ;;
    r) rounds=$OPTARG ;;
    l) loaders=$OPTARG ;;
    p) policies=$OPTARG ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
IFS=, read -r -a pol <<< "$policies"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for ((l = 0; l < loaders; l++)); do
    yes > /dev/null &
    pids+=($!)
done

# One launch under policy $1: the time per call (us).
once() {
    per_call -n "$ranks" --bind-to "$1" -- -o psum -b "$size" -e "$size" -w 200 -n "$iters" -c 0
}

declare -A times
for ((r = 0; r < rounds; r++)); do
    order=("${pol[@]}")
    if ((r % 2)); then
        order=()
        for ((i = ${#pol[@]} - 1; i >= 0; i--)); do order+=("${pol[i]}"); done
    fi
    line="round $((r + 1)):"
    for p in "${order[@]}"; do
        t=$(once "$p")
        times[$p]="${times[$p]:-} $t"
        line="$line $p $t us"
    done
    echo "$line"
done
echo "# psum, $size B, $ranks ranks, $iters iterations, $rounds rounds, $loaders busy processes (medians)"
for p in "${pol[@]}"; do
    # shellcheck disable=SC2086
    printf '%s_us=%s\n' "$p" "$(median ${times[$p]})"
done
