#!/usr/bin/env bash
# The guide's "where PPD wins" figure (docs/validate.md), end to end: bash experiments/where_ppd_wins.sh
#
# 1. a translator head at layer LAYER (default 15 of SmolLM2's 30), fitted on the model's own
#    greedy continuations (NEW_TOKENS each) of the train split of four Spec-Bench categories
#    (translation, summarization, qa, math_reasoning; every 4th question of each is held out),
#    a fixed budget of EPOCHS epochs (default 4) with seed 0 and one torch thread: the same
#    head on every machine (no wall-clock cap);
# 2. a fresh cost profile (the dist backend's figures for k = 1, at the prompts' own context,
#    PROFILE_REPEATS rounds) taken by `ppd validate` just before its rounds;
# 3. greedy and PPD (d_bar = LAYER, k = 1, early head on the candidate side, main and the
#    candidates on two ranks: --backend dist) timed in REPEATS interleaved rounds on the
#    held-out questions HELDOUT (default 164 translation, 244 summarization, 324 qa: the first
#    held-out question of three categories), NEW_TOKENS new tokens, checked exact;
# 4. the figure: p (accepted predictions per predictable token), the measured speed-up with
#    its range over the rounds' quartiles, the predicted one with its 95 % interval (the
#    profile's cost replicates) and whether the measured median fell inside it; then the
#    speed-up judged turn by turn (measure.eval.turn_speedup: each prompt's PPD run against
#    greedy's beside it) with its interval, and the script's whole run time.
# Outputs under OUT (head/, heldout.jsonl, validate/, validate.log).
# A smoke run on a tiny model: MODEL=DIR LAYER=2 EPOCHS=1 NEW_TOKENS=8 HELDOUT="164 244" \
#   TRAIN_LIMIT=4 REPEATS=1 PROFILE_REPEATS=2 bash experiments/where_ppd_wins.sh
set -euo pipefail
MODEL=${MODEL:-smollm2}
SPEC=${SPEC:-../shared/data/spec_bench_questions.jsonl}
OUT=${OUT:-ppd-out/where-ppd-wins}
LAYER=${LAYER:-15}
EPOCHS=${EPOCHS:-4}
NEW_TOKENS=${NEW_TOKENS:-64}
HELDOUT=${HELDOUT:-164 244 324}
TRAIN_LIMIT=${TRAIN_LIMIT:-}
REPEATS=${REPEATS:-6}
PROFILE_REPEATS=${PROFILE_REPEATS:-20}
PPD=${PPD:-python -m ppdmodel}
CATEGORIES=(translation summarization qa math_reasoning)
mkdir -p "$OUT"

limit=()
if [[ -n "$TRAIN_LIMIT" ]]; then limit=(--limit "$TRAIN_LIMIT"); fi
$PPD measure train-head --model "$MODEL" --layer "$LAYER" --kind translator \
  --prompts "$SPEC" --format spec-bench --category "${CATEGORIES[@]}" --split train \
  "${limit[@]}" --new-tokens "$NEW_TOKENS" --epochs "$EPOCHS" --seed 0 --threads 1 \
  --out "$OUT/head" --no-progress

# the held-out questions, by id (each must be on the held-out side of the split)
python - "$SPEC" "$OUT/heldout.jsonl" $HELDOUT <<'PY'
import json, sys
from measure.datasets import load_prompts
spec, dest, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3:])
held = {p.id for p in load_prompts(spec, "spec-bench", split="heldout")}
if not wanted <= held:
    sys.exit(f"HELDOUT: {sorted(wanted - held)} are not held out from the head's training")
with open(spec, encoding="utf-8") as src, open(dest, "w", encoding="utf-8") as out:
    for line in src:
        if str(json.loads(line)["question_id"]) in wanted:
            out.write(line)
PY

$PPD validate --model "$MODEL" --prompts "$OUT/heldout.jsonl" --format spec-bench \
  --head-dir "$OUT/head" --d-bar "$LAYER" --k 1 --early-head candidates --backend dist \
  --max-new-tokens "$NEW_TOKENS" --repeats "$REPEATS" --profile-repeats "$PROFILE_REPEATS" \
  --threads 1 --no-progress --out "$OUT/validate" | tee "$OUT/validate.log"

python - "$OUT/validate/validation.csv" <<'PY'
import sys
import pandas as pd
t = pd.read_csv(sys.argv[1])
g, r = t.iloc[0], t.iloc[1]
low = g["measured_q1_s"] / r["measured_q3_s"]
high = g["measured_q3_s"] / r["measured_q1_s"]
print(f"p = {r['p_hat']:.3f} over {int(r['tokens'])} tokens; measured {r['speedup_measured']:.3f}x "
      f"greedy (rounds' quartiles {low:.3f}-{high:.3f}x), predicted {r['speedup_predicted']:.3f}x"
      f"; PPD predicted {r['predicted_s']:.3g} s [{r['predicted_low_s']:.3g}, "
      f"{r['predicted_high_s']:.3g}], measured {r['measured_s']:.3g} s "
      f"({'inside' if r['inside'] else 'OUTSIDE'} the interval); exact: {bool(r['exact'])}")
if "speedup_turns" in t and pd.notna(r["speedup_turns"]):  # measure.eval.turn_speedup
    inside = r["speedup_turns_low"] <= r["speedup_predicted"] <= r["speedup_turns_high"]
    print(f"judged turn by turn: measured {r['speedup_turns']:.3f}x "
          f"[{r['speedup_turns_low']:.3f}, {r['speedup_turns_high']:.3f}] "
          f"({100 * r['speedup_turns_coverage']:.0f} % interval), predicted "
          f"{r['speedup_predicted']:.3f}x [{r['speedup_predicted_low']:.3f}, "
          f"{r['speedup_predicted_high']:.3f}] ({'inside' if inside else 'OUTSIDE'} the "
          "measured interval)")
PY
echo "where_ppd_wins: $SECONDS s in all"
