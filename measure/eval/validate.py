"""Predict, then measure: judge real PPD runs against a cost profile measured beforehand.

``validate`` times greedy and every PPD configuration over repeated, interleaved rounds
(``measure.eval.repeat``), predicts each from the profile and the runs' own match outcomes
(``measure.eval.predict``: closed form and simulator; nothing is fitted on the judged runs),
and reports per configuration the predicted seconds, the measured median with its quartiles,
the relative error, the agreement band and a waterfall from Theorem 4.1's ideal to the
prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from measure.decode.settings import DEFAULT_SETTINGS, RunSettings
from measure.eval.free_eval import FreeConfig
from measure.eval.hf_early_exit import EarlyExitConfig, HFBookkeeping
from measure.eval.interleaved import InterleavedProbes
from measure.eval.judged import JudgedResult
from measure.eval.methods.base import JudgeInputs
from measure.eval.methods.free import Free
from measure.eval.methods.hf_early_exit import HFEarlyExit
from measure.eval.methods.ppd import PPD, check_config
from measure.eval.paired import SentinelTimeline, paired_rel_err
from measure.eval.ppd_config import PPDConfig
from measure.eval.predict import Prediction, predict_greedy, predicted_ratios
from measure.eval.repeat import RepeatedTiming, time_repeated
from measure.eval.run_to_run import correlation_of, log_sd_of, noise_allowance, turn_noise
from measure.eval.turn_speedup import TURN_COLUMNS, rounds_for, turn_columns
from measure.eval.verdict import agreement
from measure.profile.drift import MachineDrift
from measure.profile.stats import Spread
from ppdmodel.cost_profile import CostProfile
from ppdmodel.intervals import Interval

TABLE_COLUMNS = (
    "method",
    "backend",
    "d_bar",
    "k",
    "early_head",
    "tokens",
    "p_hat",
    "predicted_s",
    "simulated_s",
    "measured_s",
    "measured_q1_s",
    "measured_q3_s",
    "rounds",
    "noisy",
    "rel_err",
    "simulated_rel_err",
    "agreement",
    "speedup_measured",
    "speedup_predicted",
    "exact",
    "exit_layer",
    "draft_tokens",
    "iid_s",
    "steps_agree",
    "threshold",
    "exit_rate",
    "quality_tokens",
    "quality_rouge_l",
    "predicted_low_s",
    "predicted_high_s",
    "inside",
    "interleaved_predicted_s",
    "interleaved_low_s",
    "interleaved_high_s",
    "interleaved_rel_err",
    "interleaved_inside",
    "paired_rel_err",
    "interleaved_paired_rel_err",
    "sharing",
    *TURN_COLUMNS,
    "speedup_predicted_low",
    "speedup_predicted_high",
)
"""Columns of ``ProfileValidation.table`` (one row for greedy, one per PPD configuration, one
per early-exit method). Early-exit rows: ``predicted_s`` is the exact step accounting on the
realized layer-L match sequences, ``iid_s`` the i.i.d. closed form, ``simulated_s`` empty,
``p_hat`` the layer-L top-1 match rate; their seconds, tokens and speed-ups cover the tokens
after each run's first step (the prefill step; ``measure.eval.early_exit``). FREE rows
(``measure.eval.free_eval``): ``predicted_s`` exact on each run's exit sequence, ``iid_s`` at
the pooled exit rate, the threshold used, the exit rate and the quality against greedy
(``quality_tokens``: share of equal tokens; ``quality_rouge_l``: ROUGE-L on token ids).
``predicted_low_s`` / ``predicted_high_s``: the closed form's 95 % interval over the
profile's cost replicates (``ppdmodel.intervals``; empty for a profile without samples) and
``inside``: whether the measured median lies in it. ``interleaved_*`` (``--interleave-probes``,
``measure.eval.interleaved``; empty otherwise): the same closed form, interval, error and
in/out from the profile whose compute figures were probed between the judged rounds.
``paired_rel_err`` / ``interleaved_paired_rel_err`` (``--interleave-probes``; empty otherwise,
on early-exit and FREE rows, and where the profile recorded no sentinel windows at the
validation's sentinel threads): each prediction's error against the runs' seconds, each
prompt's moved to the machine speed it was priced at by the sentinel read around it
(``measure.eval.paired``).
``sharing``: the shared-device factors a PPD row's prediction applied and their source
(``ppdmodel.cost_profile.SharingFactors.describe``: on a ``dist`` profile with pair factors,
main's and the batch's own at the row's k, or the nearest measured k).
``speedup_turns`` (PPD rows; empty elsewhere): the measured speed-up judged turn by turn, each
prompt's run against greedy's of the same round and against that prompt's own prediction
(``measure.eval.turn_speedup``: speedup_predicted x the turns' measured / predicted ratio), with
its interval (``_low`` / ``_high``, covering ``speedup_turns_coverage``: 95 % from 6 turns on)
and ``speedup_turns_rel_err``: speedup_predicted / it - 1. ``speedup_predicted_low`` /
``_high`` (PPD rows): the predicted speed-up's 95 % interval, greedy's closed form over the
configuration's within each cost replicate (``measure.eval.predict.speedup_interval``)."""


@dataclass
class ProfileValidation:
    """Everything ``validate`` found: per-configuration results, the timing and the profile."""

    results: list[JudgedResult]
    timing: RepeatedTiming
    profile: CostProfile
    others: list[JudgedResult] = field(default_factory=list)
    """Every other method timed in the same rounds (HF early exit, FREE, speculative
    decoding, ...), judged (``Bound.judge``), in the order given."""
    interleaved_profile: CostProfile | None = None
    """The profile re-measured between the rounds (``measure.eval.interleaved``), or None."""
    probe_note: str = ""
    """How many probes ran between the rounds and what share of the runs' time they took."""
    sentinel: SentinelTimeline | None = None
    """The sentinel's windows around the judged runs (``--interleave-probes``), or None."""

    @property
    def early_exit(self) -> list[JudgedResult]:
        """HF self-speculative early exit, timed in the same rounds (``--early-exit``)."""
        return [o for o in self.others if isinstance(o.config, EarlyExitConfig)]

    @property
    def free(self) -> list[JudgedResult]:
        """FREE, timed in the same rounds (``--free``; ``measure.eval.free_eval``)."""
        return [o for o in self.others if isinstance(o.config, FreeConfig)]

    @property
    def bookkeeping(self) -> HFBookkeeping | None:
        """HF generate's host time outside the forwards, measured before the rounds."""
        return next((o.details.bookkeeping for o in self.early_exit), None)

    @property
    def greedy_rel_err(self) -> float:
        """Greedy's error priced on the first configuration's backend."""
        r = self.results[0]
        return r.greedy_predicted.closed_form_s / r.greedy_measured.median - 1

    def greedy_predictions(self) -> dict[str, Prediction]:
        """Greedy's prediction per backend it was priced on (the configurations' backends)."""
        return {r.config.backend: r.greedy_predicted for r in self.results}

    @property
    def table(self) -> pd.DataFrame:
        """One greedy row per backend it was priced on (``backend`` says which), then one per
        configuration (``TABLE_COLUMNS``)."""
        g = self.results[0].greedy_measured
        greedy = {r.config.backend: r for r in self.results}
        rows = [
            _row("greedy", backend, None, None, None, gp, g, gp.closed_form_s / g.median - 1,
                 gp.simulated_s / g.median - 1, 1.0, 1.0, True, greedy[backend].interleaved_greedy)
            | self._paired(gp, greedy[backend].interleaved_greedy, None)
            for backend, gp in self.greedy_predictions().items()
        ]  # fmt: skip
        for r in self.results:
            c = r.config
            rows.append(
                _row(c.label, c.backend, c.d_bar, c.k, c.early_head, r.predicted, r.measured,
                     r.rel_err, r.simulated_rel_err, r.speedup_measured, r.speedup_predicted,
                     r.exact, r.interleaved)
                | self._paired(r.predicted, r.interleaved, c)
                | turn_columns(r.turns, r.speedup_predicted)
                | _speedup_band(r.speedup_band)
            )  # fmt: skip
        rows += [o.table_row(TABLE_COLUMNS) for o in self.others]
        return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))

    def _paired(self, pred: Prediction, interleaved: Prediction | None, config) -> dict:
        """The row's paired errors: each prediction against the runs of ``config`` (None:
        greedy), each prompt moved to the machine the sentinel read around it
        (``measure.eval.paired``); None without the sentinel."""
        if self.sentinel is None:
            return dict(paired_rel_err=None, interleaved_paired_rel_err=None)
        method = self.timing.greedy if config is None else self.timing.ppd[config]
        prompts = len(method.results[0])
        speeds = [self.sentinel.speeds_s((method.config, i)) for i in range(prompts)]
        rounds = len(method.results)
        runs = None
        if all(len(s) == rounds for s in speeds):  # every prompt of every run had its window
            runs = [[(res.wall_s, speeds[i][r]) for i, res in enumerate(results)]
                    for r, results in enumerate(method.results)]  # fmt: skip

        def err(p: Prediction | None, profile) -> float | None:
            if p is None or profile is None or runs is None or self.sentinel.level_s is None:
                return None
            reference = _sentinel_reference(profile, self.sentinel.threads)
            return paired_rel_err(p.closed_form_s, runs, reference, level_s=self.sentinel.level_s,
                                  weight=self.sentinel.weight)  # fmt: skip

        return dict(
            paired_rel_err=err(pred, self.profile),
            interleaved_paired_rel_err=err(interleaved, self.interleaved_profile),
        )

    def turn_table(self) -> pd.DataFrame:
        """Every turn of every PPD configuration (``turns.csv``): ``method``, ``round``,
        ``prompt``, ``seconds`` and ``greedy_seconds`` (the two runs of that turn) and
        ``predicted_ratio`` (that prompt's predicted greedy seconds over the method's): what
        ``measure.eval.turn_speedup`` judges, kept so a reading can be recomputed."""
        rows = []
        greedy = self.timing.greedy.results
        for r in self.results:
            ratios = predicted_ratios(r.greedy_predicted, r.predicted)
            for round_, runs in enumerate(self.timing.ppd[r.config].results):
                for i, run in enumerate(runs):
                    rows.append(dict(method=r.config.label, round=round_, prompt=i,
                                     seconds=run.wall_s, greedy_seconds=greedy[round_][i].wall_s,
                                     predicted_ratio=ratios[i]))  # fmt: skip
        columns = ["method", "round", "prompt", "seconds", "greedy_seconds", "predicted_ratio"]
        return pd.DataFrame(rows, columns=columns)

    def sentinel_table(self) -> pd.DataFrame:
        """The sentinel's timeline (``--interleave-probes``; empty otherwise): in order, each
        window (``kind`` "window", ``seconds`` its median step layers) and each judged piece
        (``kind`` "run": ``method``, ``round``, ``prompt``, ``seconds`` its decode time; a
        method not decoded prompt by prompt has one piece per run, ``prompt`` empty and the
        run's seconds) (``measure.eval.paired``)."""
        columns = ["kind", "seconds", "method", "round", "prompt"]
        if self.sentinel is None:
            return pd.DataFrame(columns=columns)
        t = self.timing
        methods = {None: t.greedy, **t.methods}
        seen: dict = {}
        rows = []
        for kind, value in self.sentinel.events:
            if kind == "window":
                rows.append(dict(kind=kind, seconds=value))
                continue
            config, prompt = value if isinstance(value, tuple) else (value, None)
            method = methods.get(config)
            r = seen[value] = seen.get(value, -1) + 1
            seconds = None
            if method is not None and r < len(method.results):
                runs = method.results[r]
                seconds = sum(x.wall_s for x in runs) if prompt is None else runs[prompt].wall_s
            label = method.label if method is not None else str(config)
            rows.append(dict(kind=kind, seconds=seconds, method=label, round=r, prompt=prompt))
        return pd.DataFrame(rows, columns=columns).astype({"round": "Int64", "prompt": "Int64"})

    @property
    def terms(self) -> pd.DataFrame:
        """Long table: method plus ``measure.eval.terms.TERM_COLUMNS`` for every config."""
        frames = [r.terms.assign(method=r.config.label) for r in self.results
                  if r.terms is not None]  # fmt: skip
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def passes(self) -> pd.DataFrame:
        """Long table: method plus ``measure.eval.pass_check.PASS_COLUMNS`` and ``priced_by``
        for every config."""
        frames = [r.passes.assign(method=r.config.label) for r in self.results
                  if r.passes is not None]  # fmt: skip
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def waterfalls(self) -> pd.DataFrame:
        """Long table: method, term, seconds_per_token (terms, then ``measured``)."""
        return pd.DataFrame([row for r in self.results for row in r.waterfall_rows()])

    def verdicts(self) -> list[str]:
        """One verdict line per judged method (PPD, then the others)."""
        return [r.verdict(self.timing.load) for r in self.results + self.others]

    def summary(self) -> dict:
        """Median and worst |relative error| over configurations (PPD rows) and greedy's."""
        errors = sorted(abs(r.rel_err) for r in self.results)
        return {
            "configurations": len(errors),
            "median_abs_rel_err": float(pd.Series(errors).median()),
            "worst_abs_rel_err": errors[-1],
            "greedy_rel_err": self.greedy_rel_err,
            "greedy_rel_err_by_backend": {
                b: gp.closed_form_s / self.results[0].greedy_measured.median - 1
                for b, gp in self.greedy_predictions().items()
            },
            "fitted_parameters": 0,
            "prediction_of_record": (
                "profile" if self.interleaved_profile is None else "interleaved"
            ),  # ppd validate's headline: the interleaved probes' where they ran
            "inside_interval": sum(bool(r.predicted.interval and
                                        r.predicted.interval.contains(r.measured.median))
                                   for r in self.results),
            "with_interval": sum(r.predicted.interval is not None for r in self.results),
            "machine_drift_log_sd": _drift_log_sd(self.profile),
            "machine_drift_floor_log_sd": _drift_floor(self.profile),
            **self._speedup_summary(),
            **self._interleaved_summary(),
        }  # fmt: skip

    def _speedup_summary(self) -> dict:
        """Median and worst |error| of the predicted speed-ups over greedy (predicted / measured
        - 1): a drift of the whole machine between profile and runs moves greedy and PPD alike
        and leaves them, where it moves every seconds figure (docs/gpu_validation.md)."""
        errors = [r.speedup_predicted / r.speedup_measured - 1 for r in self.results]
        return {
            **_error_summary(pd.Series(errors, dtype=float), "speedup_"),  # the PPD rows
            **self._turn_summary(),
        }

    def _turn_summary(self) -> dict:
        """The speed-ups judged turn by turn (``measure.eval.turn_speedup``): their errors, how
        many predicted speed-ups fall inside the measured interval, the interval's coverage,
        the widest one's relative half-width and the rounds that would narrow every one to
        +-2.5 % (None with too few turns for an interval)."""
        read = [r.turns for r in self.results if r.turns is not None]
        if not read:
            return {}
        errors = pd.Series([1 / t.ratio - 1 for t in read], dtype=float)
        rounds = [rounds_for(t, self.timing.greedy.spread.n) for t in read]
        return {
            **_error_summary(errors, "speedup_turns_"),
            "speedup_turns_inside": sum(bool(t.low <= 1 <= t.high) for t in read),
            "speedup_intervals_overlap": sum(
                bool(
                    r.speedup_band is not None
                    and r.speedup_band.overlaps(
                        Interval(
                            r.speedup_predicted * r.turns.low, r.speedup_predicted * r.turns.high
                        )
                    )
                )
                for r in self.results
                if r.turns is not None
            ),  # fmt: skip
            "speedup_turns_with_interval": len(read),
            "speedup_turns_coverage": min(t.coverage for t in read),
            "speedup_turns_half_width_max": max(t.half_width for t in read),
            "speedup_turns_rounds_for_target": None if None in rounds else max(rounds),
            "speedup_turns_repeat_bound": self._repeat_bound(),
        }

    def _repeat_bound(self) -> float | None:
        """The most a repeat of this validation (same prompts, a fresh profile) would move one
        configuration's turn-judged error by chance alone, in points (95 %, the worst row;
        ``measure.eval.run_to_run``): this run's within-prompt turn noise and profile
        replicates, twice. None with a row of one round or no predicted interval."""
        rows = [r for r in self.results if r.turns is not None]
        bands = [r.speedup_band for r in rows]
        if not rows or None in bands:
            return None
        sd, corr = turn_noise(self.turn_table())
        labels = [r.config.label for r in rows]
        measured = sd.reindex(labels).to_numpy()
        if not np.all(np.isfinite(measured)):
            return None
        predicted = log_sd_of([b.low for b in bands], [b.high for b in bands],
                              [b.level for b in bands])  # fmt: skip
        if not np.all(np.isfinite(predicted)):
            return None
        errors = np.log([1 / r.turns.ratio for r in rows])
        allow = noise_allowance(
            np.repeat(errors[:, None], 2, axis=1),
            measured[:, None],
            predicted[:, None],
            correlation=correlation_of(corr, labels),
        )
        return float(allow.rows.max())

    def _interleaved_summary(self) -> dict:
        """The same figures from the interleaved probes' profile, and both predictions' paired
        errors over the PPD rows (``measure.eval.paired``) (empty without the probes)."""
        if self.interleaved_profile is None:
            return {}
        table = self.table[self.table["method"] != "greedy"]
        errors = table["interleaved_rel_err"].abs()
        greedy = self.table[self.table["method"] == "greedy"]
        return {
            "interleaved_median_abs_rel_err": float(errors.median()),
            "interleaved_worst_abs_rel_err": float(errors.max()),
            "interleaved_greedy_rel_err_by_backend": dict(
                zip(greedy["backend"], greedy["interleaved_rel_err"].astype(float), strict=True)
            ),
            "interleaved_inside_interval": int((table["interleaved_inside"] == True).sum()),  # noqa: E712
            "interleaved_machine_drift_log_sd": _drift_log_sd(self.interleaved_profile),
            "probes": self.probe_note,
            **_error_summary(table["paired_rel_err"], "paired_"),
            **_error_summary(table["interleaved_paired_rel_err"], "interleaved_paired_"),
            **self._sentinel_summary(),
        }

    def _sentinel_summary(self) -> dict:
        """The sentinel's reading of the runs (``measure.eval.paired``): its level over the
        runs against the profile's windows (the machine's speed during the runs relative to
        the profile's; > 1: slower) and the weight of each prompt's own windows."""
        if self.sentinel is None or self.sentinel.level_s is None:
            return {}
        reference = _sentinel_reference(self.profile, self.sentinel.threads)
        return {
            "sentinel_windows": len(self.sentinel.windows_s),
            "sentinel_level_over_profile": None if reference is None
            else self.sentinel.level_s / reference,
            "sentinel_weight": self.sentinel.weight,
        }  # fmt: skip


def _error_summary(errors: pd.Series, prefix: str) -> dict:
    """``{prefix}median_abs_rel_err`` and ``{prefix}worst_abs_rel_err`` over the rows that
    have an error (empty for none)."""
    errors = pd.to_numeric(errors, errors="coerce").abs().dropna()
    if errors.empty:
        return {}
    return {f"{prefix}median_abs_rel_err": float(errors.median()),
            f"{prefix}worst_abs_rel_err": float(errors.max())}  # fmt: skip


def _row(method, backend, d_bar, k, early_head, pred, meas, err, sim_err, s_meas, s_pred, exact,
         interleaved=None):  # fmt: skip
    band = pred.interval
    return dict(
        **_interleaved_columns(interleaved, meas),
        predicted_low_s=band.low if band else float("nan"),
        predicted_high_s=band.high if band else float("nan"),
        inside=band.contains(meas.median) if band else None,
        method=method,
        backend=backend,
        d_bar=d_bar,
        k=k,
        early_head=early_head,
        tokens=pred.tokens,
        p_hat=pred.p_hat if d_bar is not None else float("nan"),
        predicted_s=pred.closed_form_s,
        simulated_s=pred.simulated_s,
        measured_s=meas.median,
        measured_q1_s=meas.q1,
        measured_q3_s=meas.q3,
        rounds=meas.n,
        noisy=meas.noisy,
        rel_err=err,
        simulated_rel_err=sim_err,
        agreement=agreement(err),
        speedup_measured=s_meas,
        speedup_predicted=s_pred,
        exact=exact,
        sharing=pred.sharing.describe() if pred.sharing is not None else "",
    )


def _drift_log_sd(profile: CostProfile) -> float | None:
    """The log-spread of the machine's speed while ``profile`` was timed, from its own windows
    (its intervals carry it, or the floor where larger: ``_drift_floor``,
    ``measure.profile.drift``), or None for a profile that did not record it."""
    drift = MachineDrift.from_dict(profile.data.get("machine"))
    return None if drift is None else drift.log_sd


def _drift_floor(profile: CostProfile) -> float | None:
    """The machine's drift floor ``profile`` was measured with, or None without one."""
    drift = MachineDrift.from_dict(profile.data.get("machine"))
    return drift.floor_log_sd if drift is not None and drift.floor_log_sd > 0 else None


def _sentinel_reference(profile: CostProfile, threads: int) -> float | None:
    """The median of the sentinel windows ``profile`` recorded at ``threads`` torch threads
    (the machine's speed its prices were timed at), or None for a profile without them or
    timed at other threads (another sentinel)."""
    drift = MachineDrift.from_dict(profile.data.get("machine"))
    return drift.median_s if drift is not None and drift.threads == threads else None


def _speedup_band(band) -> dict:
    """``speedup_predicted_low`` / ``_high`` (NaN without replicates)."""
    nan = float("nan")
    return dict(speedup_predicted_low=band.low if band else nan,
                speedup_predicted_high=band.high if band else nan)  # fmt: skip


def _interleaved_columns(pred: Prediction | None, meas: Spread) -> dict:
    """The ``interleaved_*`` columns of a row (NaN / None without that prediction)."""
    if pred is None:
        return dict(interleaved_predicted_s=float("nan"), interleaved_low_s=float("nan"),
                    interleaved_high_s=float("nan"), interleaved_rel_err=float("nan"),
                    interleaved_inside=None)  # fmt: skip
    band = pred.interval
    return dict(
        interleaved_predicted_s=pred.closed_form_s,
        interleaved_low_s=band.low if band else float("nan"),
        interleaved_high_s=band.high if band else float("nan"),
        interleaved_rel_err=pred.closed_form_s / meas.median - 1,
        interleaved_inside=band.contains(meas.median) if band else None,
    )


def check_configs(profile: CostProfile, configs) -> list[PPDConfig]:
    """The configurations, each checked against the profile (backend and k measured)."""
    configs = list(dict.fromkeys(configs))
    if not configs:
        raise ValueError("configs must hold at least one PPD configuration")
    for c in configs:
        check_config(profile, c)
    return configs


def validate(
    model,
    prompts,
    *,
    profile: CostProfile,
    configs,
    early_exit=(),
    free=(),
    methods=(),
    max_new_tokens: int,
    settings: RunSettings = DEFAULT_SETTINGS,
    head=None,
    names=None,
    seeds=None,
    interleave_probes: int = 0,
) -> ProfileValidation:
    """Measure greedy and every method ``settings.repeats`` times; predict each from
    ``profile`` and judge it.

    ``profile`` must have been measured beforehand on this model (its depth is checked).
    ``methods``: ``measure.eval.methods.base.Method``s; ``configs`` (``PPDConfig``s, at least
    one), ``early_exit`` (``EarlyExitConfig``s: HF self-speculative early exit, constant draft
    length, predicted from the profile and the layer match sequences measured separately on the
    same prompts) and ``free`` (``FreeConfig``s, predicted from each run's exit sequence; "auto"
    thresholds calibrated first, untimed) are methods too, in that order. Each is checked
    against the model's depth and the profile, bound (its untimed preparation), timed in the
    same interleaved rounds (``time_repeated``, whose arguments the others are: ``head``: a
    trained early head or None; ``settings``: stop tokens, decoding, rounds, ``dist`` and
    progress; ``settings.decoding`` and ``seeds``: sampled decoding, whose baseline samples
    alike), then judged (``Bound.judge``: predicted from the profile and the runs' own traces,
    nothing fitted on them). ``interleave_probes``: probe rounds run before every judged round
    (0: none), plus one before every judged run (turning by prompt, at the turn of its place
    in the rotation); their samples build a second profile and every PPD configuration is
    also predicted from it (``measure.eval.interleaved``).
    """
    rounds = interleave_probes
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"interleave_probes must be an integer >= 0, got {interleave_probes!r}")
    d = model.config.get_text_config().num_hidden_layers
    if profile.d != d:
        raise ValueError(f"the profile's depth d = {profile.d} does not match the model's d = {d}")
    configs = check_configs(profile, configs)
    methods = [*map(PPD, configs), *map(HFEarlyExit, dict.fromkeys(early_exit)),
               *map(Free, dict.fromkeys(free)), *methods]  # fmt: skip
    methods = list({m.label: m for m in methods}.values())  # each method once
    for m in methods:
        m.check(d, profile)
    probes = None
    if interleave_probes:
        probes = InterleavedProbes(model, profile, configs, rounds=interleave_probes)
    timing = time_repeated(
        model, prompts, methods=methods, max_new_tokens=max_new_tokens, settings=settings,
        head=head, names=names, seeds=seeds, between_rounds=probes,
        before_run=probes and probes.before_run, before_prompt=probes and probes.before_prompt,
    )  # fmt: skip
    if probes is not None:
        probes.finish()
    probed = probes.profile() if probes is not None else None
    backends = dict.fromkeys(m.backend for m in methods)  # greedy priced on each one's figures
    inputs = JudgeInputs(
        profile=profile, greedy=timing.greedy, exact=timing.exact, max_new_tokens=max_new_tokens,
        greedy_predicted={b: predict_greedy(profile, timing.greedy.runs, backend=b)
                          for b in backends},
        probed=probed,
        probed_greedy={} if probed is None else {
            b: predict_greedy(probed, timing.greedy.runs, b) for b in backends},
    )  # fmt: skip
    judged = [timing.bound[m.label].judge(timing.methods[m.config], inputs) for m in methods]
    results = [j for j in judged if isinstance(j.config, PPDConfig)]
    others = [j for j in judged if not isinstance(j.config, PPDConfig)]
    note = ""
    if probes is not None:
        note = probes.describe(
            sum(sum(m.totals_s) for m in [timing.greedy, *timing.methods.values()])
        )
    return ProfileValidation(results, timing, profile, others, probed, note,
                             probes.timeline if probes is not None else None)  # fmt: skip
