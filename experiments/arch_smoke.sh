#!/usr/bin/env bash
# Every architecture end to end: `ppd validate` (a fresh profile with both backends and the pair
# probe, then greedy and PPD at d_bar 2, k 1 and 2, both early-head placements, both backends,
# with --interleave-probes) on a tiny random model of each layout the tests build
# (tests/measure/tiny_models.py), with prompts longer than Gemma's 4-token sliding window. Not
# a timing: it checks that every path runs and that every run equals greedy decoding (a held-out
# Gemma 3 once failed in the profile's probe, which no unit test had run past its window).
# About 95 s per architecture on 2 CPU cores.
#
# Usage: experiments/arch_smoke.sh OUT [ARCH ...]   (default: every architecture)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { sed -n '10p' "$0"; exit 2; }
out=$1; shift
archs=("$@")
if [[ ${#archs[@]} -eq 0 ]]; then
    line=$(python -c 'from tests.measure.tiny_models import ALL_ARCHS; print(*ALL_ARCHS)')
    read -r -a archs <<< "$line"
fi
[[ ${#archs[@]} -gt 0 ]] || { echo "no architectures to run" >&2; exit 2; }
mkdir -p "$out"
failed=0
for arch in "${archs[@]}"; do
    dest="$out/$arch"
    mkdir -p "$dest"
    if ! python -c "import sys; from tests.measure.tiny_models import save_tiny_model_dir; \
save_tiny_model_dir(sys.argv[1], arch=sys.argv[2])" "$dest/model" "$arch" > "$dest/build.txt" 2>&1
    then
        echo "$arch: FAILED to build its model: $(tail -1 "$dest/build.txt")"; failed=1; continue
    fi
    printf '%s\n' \
        '{"prompt": "Translate to French: the quick brown fox jumps over the lazy dog by the river."}' \
        '{"prompt": "Summarize: def add(a, b): return a + b. class Point: x: int. The house is blue."}' \
        > "$dest/prompts.jsonl"
    start=$SECONDS
    if python -m ppdmodel validate --model "$dest/model" --prompts "$dest/prompts.jsonl" \
        --format jsonl --d-bar 2 --k 1 2 --early-head main candidates --backend single dist \
        --max-new-tokens 12 --repeats 1 --profile-repeats 3 --interleave-probes --threads 1 \
        --no-progress --out "$dest/val" > "$dest/log.txt" 2>&1; then
        if python -c "import sys, pandas as pd; v = pd.read_csv(sys.argv[1]); \
print(f'{int(v.exact.sum())} of {len(v)} rows exact', end=''); sys.exit(not v.exact.all())" \
            "$dest/val/validation.csv" > "$dest/exact.txt"; then
            echo "$arch: ok in $((SECONDS - start)) s, $(cat "$dest/exact.txt")"
        else
            echo "$arch: NOT EXACT: $(cat "$dest/exact.txt")"; failed=1
        fi
    else
        echo "$arch: FAILED after $((SECONDS - start)) s: $(tail -1 "$dest/log.txt")"
        failed=1
    fi
done
exit "$failed"
