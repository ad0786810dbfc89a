#!/usr/bin/env bash
# Regenerate the README's figures from the `ppd` commands: bash docs/make_figures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/figures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Figure 3 from the paper's Table 2 (layer 20 of 40), with the greedy reference point
ppd tradeoff --out "$tmp" > /dev/null
cp "$tmp/fig3_latency_vs_compute_per_time.png" "$out/tradeoff_fig3.png"
# One simulated PPD sequence (Algorithm 2) at SQuAD's trained-head k=3 match rate
ppd simulate --p 0.6837 --k 3 --ell 12 --seed 1 --gantt "$out/gantt.png" > /dev/null
echo "wrote $out/tradeoff_fig3.png and $out/gantt.png"
