#!/usr/bin/env bash
# Regenerate the README's and the guide's figures from the `ppd` commands: bash docs/make_figures.sh
# (add --validation to also re-measure the validation figures on SmolLM2: about 10 minutes on
# 2 CPU cores; needs the smollm2 extra and ../shared/data beside the repository; add --app for
# the what-if page's screenshot: a minute, needs Chromium)
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
if [[ "${1:-}" == "--app" ]]; then
  # The what-if page (ppd app) in Debian's chromium, on the README's step-1 inputs (needs the
  # app extra, Playwright from the dev extra and apt-get install chromium)
  python - "$out/app.png" <<'PY'
import sys
from tests.sim.app_browser import browser_page, choose, served_page, type_number, wait_drawn
with served_page() as url, browser_page(url) as page:
    page.set_viewport_size({"width": 1440, "height": 1750})
    choose(page, "shape", "llama2-13b")
    wait_drawn(page)
    choose(page, "GPU", "a100-80gb")
    wait_drawn(page)
    type_number(page, "devices", 2)
    wait_drawn(page)
    choose(page, "engine", "hf-eager")
    wait_drawn(page)
    page.screenshot(path=sys.argv[1])
PY
  echo "wrote $out/app.png"
fi
if [[ "${1:-}" == "--validation" ]]; then
  # Predict, then measure: SmolLM2 on this CPU, 3 Spec-Bench questions (translation,
  # summarization, qa), 64 new tokens, PPD at d_bar 26 with k 1 and 3, one process
  questions=../shared/data/spec_bench_questions.jsonl
  python - "$questions" "$tmp/questions.jsonl" <<'PY'
import json, sys
wanted = {("translation", 161), ("summarization", 241), ("qa", 321)}
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as dst:
    for line in src:
        row = json.loads(line)
        if (row["category"], row["question_id"]) in wanted:
            dst.write(line)
PY
  ppd validate --model smollm2 --prompts "$tmp/questions.jsonl" --format spec-bench \
    --max-new-tokens 64 --d-bar 26 --k 1 3 --threads 1 --repeats 3 --profile-repeats 10 \
    --no-progress --out "$tmp/validate" > "$tmp/validate.log"
  cp "$tmp/validate/waterfall.png" "$out/validation_waterfall.png"
  cp "$tmp/validate/predicted_vs_measured.png" "$out/validation_predicted_vs_measured.png"
  grep "predicted vs measured:" "$tmp/validate.log"
  echo "wrote $out/validation_waterfall.png and $out/validation_predicted_vs_measured.png"
fi
