"""FREE on SmolLM2: quality against predicted speed over thresholds (the paper's Figure 5
analog, sync and state copying: Table 5), and the adaptive threshold against the number of
calibration sentences (Table 6 analog).

    PYTHONPATH=$PWD nice python experiments/free_smollm2.py --profile profile.json \
        --exit-layers 20 24 --thresholds 0.3 0.5 0.7 0.9 --prompts 4 --max-new-tokens 48

Speed is predicted from the profile (``ppdmodel.free_trace_latency_seconds`` on each run's
exit sequence) against greedy's ell G; ``ppd validate --free`` measures it. Quality: token
agreement with greedy and ROUGE-L of the decoded text against greedy's text. Writes CSVs:
sweep.csv, calibration.csv and free_table.csv (sync rows in the planner's FREE table format,
``sim.formats``; ``ppd plan --free-table``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

import measure
from measure.chat import encode_prompts
from measure.eval.free_eval import free_costs
from measure.free.decode import free_generate
from measure.free.quality import rouge_l, token_agreement
from measure.free.threshold import AdaptiveThreshold
from measure.profile.profile import load_profile
from ppdmodel import free_trace_latency_seconds
from sim.formats import write_free_table

SPEC_BENCH = Path("/work/shared/data/spec_bench_questions.jsonl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--exit-layers", type=int, nargs="+", default=[20])
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.5, 0.7, 0.9])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--calibration-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default="free_smollm2")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = measure.load_model("smollm2")
    lsm = measure.LayerSplitModel(model)
    profile = load_profile(args.profile, model=model)
    costs, d = free_costs(profile), profile.d
    n_all = max(args.prompts, args.calibration_prompts)
    prompts = measure.load_prompts(SPEC_BENCH, limit=n_all)
    ids = encode_prompts(tok, [p.text for p in prompts])
    eos = tok.eos_token_id
    new = args.max_new_tokens
    greedy = [measure.greedy_generate(lsm, x, max_new_tokens=new, eos_token_id=eos) for x in ids]
    greedy_s = sum(len(g.tokens) for g in greedy[: args.prompts]) * costs.greedy_token_seconds(d)
    rows = []
    for L in args.exit_layers:
        for mode in ("sync", "copy", "oracle"):
            for thr in args.thresholds if mode != "oracle" else [0.0]:
                kw = dict(exit_layer=L, threshold=thr, mode=mode, eos_token_id=eos)
                runs = [free_generate(lsm, x, max_new_tokens=new, **kw)
                        for x in ids[: args.prompts]]  # fmt: skip
                pred = sum(free_trace_latency_seconds(d=d, exit_layer=L, exits=r.exits,
                                                      costs=costs) for r in runs)  # fmt: skip
                pairs = list(zip(runs, greedy, strict=False))
                rows.append(dict(
                    exit_layer=L, mode=mode, threshold=thr if mode != "oracle" else None,
                    exit_rate=sum(sum(r.exits) for r in runs) / sum(len(r.exits) for r in runs),
                    speedup_predicted=greedy_s / pred,
                    quality_tokens=sum(token_agreement(r.tokens, g.tokens) for r, g in pairs)
                    / len(pairs),
                    rouge_l_text=sum(rouge_l(tok.decode(r.tokens), tok.decode(g.tokens))
                                     for r, g in pairs) / len(pairs),
                ))  # fmt: skip
                print(rows[-1], flush=True)
    sweep = pd.DataFrame(rows)
    sweep.to_csv(out / "sweep.csv", index=False)
    sync = sweep[sweep["mode"] == "sync"]
    write_free_table(out / "free_table.csv", sync.assign(
        quality=sync.rouge_l_text, quality_metric="rouge_l_text_vs_greedy"))  # fmt: skip
    cal = []
    for L in args.exit_layers:
        for n in sorted({1, 2, 4, args.calibration_prompts}):
            if n > args.calibration_prompts:
                continue
            est = AdaptiveThreshold(calibration_sentences=n)
            for x in ids[:n]:
                free_generate(lsm, x, exit_layer=L, threshold="auto", estimator=est,
                              max_new_tokens=new, eos_token_id=eos)  # fmt: skip
            agree = sum(est.agree)
            cal.append(dict(exit_layer=L, calibration_sentences=n, threshold=est.threshold,
                            pairs=len(est.agree), agree_pairs=agree,
                            history=" ".join(f"{t:.3f}" for t in est.history)))  # fmt: skip
            print(cal[-1], flush=True)
    pd.DataFrame(cal).to_csv(out / "calibration.csv", index=False)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
