#!/usr/bin/env bash
# Predict, then measure, on whatever GPU is present: for each run and model, `ppd validate`
# measures a cost profile on the GPU first (context = the prompts' mean + half the new tokens),
# then times greedy and PPD (single backend: main and candidates on two CUDA streams of one
# process; dist: one rank per GPU over NCCL, when there are two GPUs or more) in interleaved
# rounds, predicts every run from the profile and the run's own match sequence (nothing
# fitted) and writes validation.csv with predicted against measured and the 95 % interval.
# A second run repeats everything, profile included (the run-to-run spread of the procedure).
# experiments/gpu_report.py turns OUT into a Markdown report (docs/record/gpu_validation.md holds the
# reports committed).
#
# Usage: experiments/gpu_validate.sh OUT MODEL [MODEL ...]
#   MODEL: a local Hugging Face directory, a .gguf file, smollm2, or random:SHAPE (a model with
#   random weights and a published shape, built on the GPU by experiments/random_model.py).
# Settings (environment): PROMPTS (measure/data/prompts_sample.jsonl), LIMIT (3 prompts),
#   NEW_TOKENS (64), REPEATS (3), KS ("1 3"), DTYPE (bfloat16), HEADS ("main candidates"),
#   D_BARS (default: (d + 1) // 2 and (3d + 3) // 4), RUNS (1), EXTRA (more
#   `ppd validate` options, e.g. --accept-wide-prices). Output: OUT/runN/MODEL/ (the layout of
#   experiments/cpu_validate.sh, so experiments/validate_summary.py reads it too).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { sed -n '12,19p' "$0"; exit 2; }
out=$1; shift
py=${PYTHON:-python3}
prompts=${PROMPTS:-measure/data/prompts_sample.jsonl}
limit=${LIMIT:-3}; new_tokens=${NEW_TOKENS:-64}; repeats=${REPEATS:-3}; runs=${RUNS:-1}
read -r -a ks <<< "${KS:-1 3}"; read -r -a heads <<< "${HEADS:-main candidates}"
read -r -a extra <<< "${EXTRA:-}"
dtype=${DTYPE:-bfloat16}
gpus=$("$py" -c "import torch; print(torch.cuda.device_count())")
[[ $gpus -ge 1 ]] || { echo "gpu_validate: no CUDA device" >&2; exit 2; }
backends=(single); [[ $gpus -ge 2 ]] && backends+=(dist)
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm \
    --format=csv > "$out/gpu.csv" || true
"$py" -m ppdmodel doctor > "$out/doctor.txt" 2>&1 || true
for run in $(seq 1 "$runs"); do
    for model in "$@"; do
        name=${model##*/}; name=${name%.gguf}; name=${name/random:/random-}
        path=$model
        if [[ $model == random:* ]]; then
            path="$out/models/$name-$dtype"
            [[ -d $path ]] || "$py" experiments/random_model.py --shape "${model#random:}" \
                --device cuda --dtype "$dtype" --out "$path" > /dev/null
        fi
        d=$("$py" -c "import sys; from transformers import AutoConfig; \
from measure.hf.loading import resolve_model_dir; \
print(AutoConfig.from_pretrained(resolve_model_dir(sys.argv[1])).get_text_config().num_hidden_layers)" "$path")
        d_bars=(${D_BARS:-$(( (d + 1) / 2 )) $(( (3 * d + 3) / 4 ))})
        dest="$out/run$run/$name"
        mkdir -p "$dest"
        echo "== run $run, $name: d = $d, d_bar ${d_bars[*]}, k ${ks[*]}, ${backends[*]}, $gpus GPU(s)"
        echo "start $(date -u +%FT%TZ) $(uptime)" > "$dest.load"
        start=$SECONDS
        "$py" -m ppdmodel validate --model "$path" --device cuda --dtype "$dtype" \
            --prompts "$prompts" --limit "$limit" --max-new-tokens "$new_tokens" \
            --d-bar "${d_bars[@]}" --k "${ks[@]}" --early-head "${heads[@]}" \
            --backend "${backends[@]}" --repeats "$repeats" --no-progress "${extra[@]}" \
            --out "$dest" 2>&1 | tee "$dest.log"
        { echo "end $(date -u +%FT%TZ) $(uptime)"; echo "seconds $((SECONDS - start))"; } \
            >> "$dest.load"
    done
done
"$py" experiments/gpu_report.py "$out" > "$out/report.md"
echo "wrote $out/report.md"
