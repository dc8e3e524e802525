#!/usr/bin/env bash
# trace-overhead.sh: what `shmesh-run --trace` costs a small collective.
# Runs shmesh-bench with and without tracing, alternating (which goes first
# changes every round), and prints the median time per call of each and
# their ratio.  See bench/README.md.
#   bench/trace-overhead.sh [-n RANKS] [-r ROUNDS] [-o OP] [-s SIZE] [-i ITERS] [-e EVENTS]
# -e sets --trace-events: with a ring larger than a run's events the
# launcher's drain has nothing to copy until the job ends, which leaves the
# ranks' own cost.
set -euo pipefail
ranks=2 rounds=9 op=psum size=8 iters=200000 events=()
while getopts "n:r:o:s:i:e:h" o; do
    case $o in
    n) ranks=$OPTARG ;;
    r) rounds=$OPTARG ;;
    o) op=$OPTARG ;;
    s) size=$OPTARG ;;
    i) iters=$OPTARG ;;
    e) events=(--trace-events "$OPTARG") ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One launch: the time per call (us).
once() {
    per_call -n "$ranks" "$@" -- -o "$op" -b "$size" -e "$size" -w 1000 -n "$iters" -c 0
}

# A traced launch, then its JSON counted and removed: removed before the
# page cache writes it back (hundreds of MB at 2 million calls), which
# would otherwise take a core from the launches after it.
traced_once() {
    once --trace "$tmp/t.json" "${events[@]}"
    slices=$(grep -o '"ph": *"X"' "$tmp/t.json" | wc -l || true)
    json_size=$(du -h "$tmp/t.json" | cut -f1)
    rm -f "$tmp/t.json"
}

plain=() traced=() slices=0 json_size=0
for ((r = 0; r < rounds; r++)); do
    if ((r % 2)); then
        traced_once >"$tmp/us"
        traced+=("$(cat "$tmp/us")")
        plain+=("$(once)")
    else
        plain+=("$(once)")
        traced_once >"$tmp/us"
        traced+=("$(cat "$tmp/us")")
    fi
    echo "round $((r + 1)): plain ${plain[-1]} us, traced ${traced[-1]} us" >&2
done
mp=$(median "${plain[@]}")
mt=$(median "${traced[@]}")
echo "# $op, $size B, $ranks ranks, $iters iterations, $rounds rounds (medians)${events:+, ${events[*]}}"
echo "plain_us=$mp traced_us=$mt ratio=$(awk -v a="$mt" -v b="$mp" 'BEGIN { printf "%.3f", a / b }')"
echo "# the last traced run wrote $slices slices ($json_size of JSON)"
