#!/usr/bin/env bash
# A/B of two `ppd validate` settings on this machine, interleaved in time: A, B, A, B, ... (N
# pairs), each one `RUNS=1 experiments/cpu_validate.sh` run (a fresh profile, then the judged
# runs) with its own options appended to EXTRA. A machine that drifts over an hour falls on both
# settings alike, which two back-to-back batches would not give. Compare with
#   python experiments/validate_summary.py OUT/a-* (and OUT/b-*; or all together).
#
# Usage: experiments/ab_validate.sh OUT N "A OPTIONS" "B OPTIONS" MODEL [MODEL ...]
#   e.g. experiments/ab_validate.sh ab 4 "--turns runs" "--turns prompts" smollm2 random:small-wide-vocab
# Settings (environment): those of experiments/cpu_validate.sh (EXTRA: options both share).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 5 ]] || { sed -n '8,10p' "$0"; exit 2; }
out=$1; pairs=$2; a=$3; b=$4; shift 4
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "N must be an integer >= 1, got '$pairs'" >&2; exit 2; }
mkdir -p "$out"
for n in $(seq 1 "$pairs"); do
    for side in a b; do
        options=$a; [[ $side == b ]] && options=$b
        dest="$out/$side-$n"
        echo "== $side $n ($options): $(date -u +%FT%TZ) $(uptime)" | tee -a "$out/ab.log"
        RUNS=1 EXTRA="${EXTRA:-} $options" bash experiments/cpu_validate.sh "$dest" "$@" \
            > "$dest.log" 2>&1
    done
done
echo "done $(date -u +%FT%TZ)" | tee -a "$out/ab.log"
