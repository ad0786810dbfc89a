#!/usr/bin/env bash
# Predict, then measure, on this CPU, twice: issue 24's check of accuracy and run-to-run
# reproducibility. For each run and each model, `ppd validate` measures a fresh cost profile
# (both backends, at the prompts' context) and then times greedy and every PPD configuration
# (d_bar x k x early-head placement x backend) in interleaved rounds, predicting each run from
# the profile and the run's own match sequence (nothing fitted). A run's second pass repeats
# everything, profile included, so the two give the run-to-run spread of the whole procedure.
# experiments/validate_summary.py OUT prints the error tables, the intervals' hits and the
# differences between runs.
#
# Usage: experiments/cpu_validate.sh OUT MODEL [MODEL ...]
#   MODEL: a local Hugging Face directory, a .gguf file, smollm2, or random:SHAPE (random
#   weights, a shape of experiments/random_model.py, built here in float32).
# Settings (environment): PROMPTS (../shared/data/spec_bench_questions.jsonl), FORMAT
#   (spec-bench), SPLIT (heldout), CATEGORY ("translation summarization qa"), LIMIT (3 prompts),
#   NEW_TOKENS (32), REPEATS (3), PROFILE_REPEATS (20), KS ("1 3"), HEADS ("main candidates"),
#   BACKENDS ("single dist"), D_BARS (default: the smallest layer >= d/2), RUNS (2), THREADS (1),
#   EXTRA (more `ppd validate` options, e.g. --no-interleave-probes: the profile's prediction
#   alone; the interleaved probes, whose prediction is the one of record, are on by default).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { sed -n '11,20p' "$0"; exit 2; }
out=$1; shift
prompts=${PROMPTS:-../shared/data/spec_bench_questions.jsonl}
format=${FORMAT:-spec-bench}; split=${SPLIT:-heldout}
read -r -a category <<< "${CATEGORY:-translation summarization qa}"
limit=${LIMIT:-3}; new_tokens=${NEW_TOKENS:-32}; repeats=${REPEATS:-3}
profile_repeats=${PROFILE_REPEATS:-20}; runs=${RUNS:-2}; threads=${THREADS:-1}
read -r -a ks <<< "${KS:-1 3}"; read -r -a heads <<< "${HEADS:-main candidates}"
read -r -a backends <<< "${BACKENDS:-single dist}"; read -r -a extra <<< "${EXTRA:-}"
ppd=(python -m ppdmodel)
mkdir -p "$out"
"${ppd[@]}" doctor --no-self-check > "$out/doctor.txt" 2>&1 || true
paths=(); names=()
for model in "$@"; do
    path=$model
    name=${model##*/}; name=${name%.gguf}; names+=("${name/random:/random-}")
    if [[ $model == random:* ]]; then
        path="$out/models/${model#random:}"
        [[ -d $path ]] || python experiments/random_model.py --shape "${model#random:}" \
            --device cpu --dtype float32 --out "$path" > /dev/null
    fi
    paths+=("$path")
done
cats=(); [[ $format == spec-bench ]] && cats=(--category "${category[@]}" --split "$split")
for run in $(seq 1 "$runs"); do
    for i in "${!paths[@]}"; do
        path=${paths[$i]}; name=${names[$i]}
        d_bars=(${D_BARS:-})
        if [[ ${#d_bars[@]} -eq 0 ]]; then
            d_bars=($(python -c "import sys; from transformers import AutoConfig; \
from measure.hf.loading import resolve_model_dir; \
print((AutoConfig.from_pretrained(resolve_model_dir(sys.argv[1])).get_text_config().num_hidden_layers + 1) // 2)" "$path"))
        fi
        dest="$out/run$run/$name"
        mkdir -p "$dest"
        echo "== run $run, $name: d_bar ${d_bars[*]}, k ${ks[*]}, ${heads[*]}, ${backends[*]}"
        { echo "start $(date -u +%FT%TZ) $(uptime)"; } > "$dest.load"
        start=$SECONDS
        "${ppd[@]}" validate --model "$path" --prompts "$prompts" --format "$format" \
            "${cats[@]}" --limit "$limit" --max-new-tokens "$new_tokens" \
            --d-bar "${d_bars[@]}" --k "${ks[@]}" --early-head "${heads[@]}" \
            --backend "${backends[@]}" --repeats "$repeats" --profile-repeats "$profile_repeats" \
            --threads "$threads" --no-progress "${extra[@]}" --out "$dest" 2>&1 | tee "$dest.log"
        { echo "end $(date -u +%FT%TZ) $(uptime)"; echo "seconds $((SECONDS - start))"; } \
            >> "$dest.load"
    done
done
python experiments/validate_summary.py "$out" | tee "$out/summary.md"
