"""Cost probes interleaved with the judged rounds: a second profile measured under the runs' load.

A profile taken before a validation prices the machine as it was then; when the load changes
(other jobs start, a clock steps down), the judged runs and the profile see different machines.
``ppd validate`` (by default; not with ``--no-interleave-probes``) runs, before every judged
round, a few rounds (``PROBE_ROUNDS``) of the same probes as ``ppd measure profile``
(``measure.profile.profile.probe_samples`` on a ``measure.profile.probes.DecodeProbe``: a
greedy step's pieces, the early head, the k-row candidate batch for each k the configurations
use, the hand-off) at the profile's context length and at each compared backend's thread count.
Nothing is taken from the judged runs. Where the profile prices ``dist`` with pair factors (a
CPU: the two ranks share its cores) and the validation runs a rank group, each gap also runs
the profile's pair probe (``measure.profile.ranks.pair_samples_on``: main's suffix beside the
k-row batch, each alone and both at once) on the group's first two ranks, for the measured k
nearest to each judged k and the early-head placements the judged configurations use
(``candidates``: the candidate side runs the early head, then the batch, where the profile
measured that placement): how much the two sides slow each other changes with the machine's
load as much as the layers do. Before every judged run, one more probe round times the backend
that run is priced on (both for greedy): a judged round lasts tens of seconds on a CPU, longer
than a slow spell of a shared machine, so three gaps alone would sample the machine at three
moments while the runs average over all of it. (Turning by prompt, ``RunSettings.turns``, a
method's run is spread over the round; its probe round sits at the prompt turn of its place in
the rotation, so these probes spread over the round as well.) After the rounds, the samples of
every gap replace those figures of the profile taken beforehand
(``measure.profile.profile.reprice``); the rest (the ``dist`` link, the two-stream slowdown,
host time on real ``dist`` runs) is kept from it. The profile's sentinel
(``measure.profile.drift.DriftWatch``) is also timed before every gap, before every prompt of a
judged run (``before_prompt``) and once after the last (``finish``): those windows are the
machine's speed over the runs; their spread scales the second profile's replicates, as the
profile's windows do the first's, and each run's neighbours pair it with the machine it met
(``measure.eval.paired``). Each configuration is then predicted from both profiles.

Cost: one probe round is about one greedy step, one candidate batch per k and a few small
pieces, i.e. a few decode steps; the pair probe adds at least 3 x ``RankProbe.pair_window_s``
per pair k and round, and each sentinel window ``SENTINEL_STEPS`` greedy steps (one before
every gap and every prompt). ``describe`` reports the share of the judged runs' time: 19-29 %
on the 2-vCPU VM with 3 prompts of 32 tokens without the sentinel's windows (most of it the
pair probe), 42-46 % with them.
"""

from __future__ import annotations

import time

import torch

from measure.decode.settings import PROBE_ROUNDS
from measure.eval.paired import SentinelTimeline
from measure.eval.ppd_config import PPDConfig
from measure.eval.profile_check import probe_threads
from measure.profile.drift import DriftWatch, MachineDrift
from measure.profile.probes import DecodeProbe
from measure.profile.profile import probe_samples, reprice
from measure.profile.ranks import pair_samples_on
from measure.profile.stats import spreads
from ppdmodel.cost_profile import CostProfile


def probe_context(profile: CostProfile) -> int | None:
    """The context length the profile was timed at, which the probes re-time at; None for a
    profile that records none (written before the probes), which cannot be probed."""
    context = profile.data.get("model", {}).get("context_tokens")
    return context if isinstance(context, int) and not isinstance(context, bool) else None


class InterleavedProbes:
    """Call it before every judged round; ``profile()`` afterwards builds the second profile.

    model: the loaded model the runs decode with; profile: the profile taken beforehand (its
    context length and thread counts are reused); configs: the judged ``PPDConfig``s (their
    backends and k are probed).
    """

    def __init__(self, model, profile: CostProfile, configs, *, rounds: int = PROBE_ROUNDS):
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
        context = probe_context(profile)
        if context is None:
            raise ValueError("the profile records no context_tokens to probe at")
        self.before, self.rounds = profile, rounds
        self.ks: dict[str, list[int]] = {}
        configs = list(configs)
        for c in configs:
            if c.backend not in profile.backends:
                raise ValueError(f"configs: the profile has no backend {c.backend!r}")
            self.ks[c.backend] = sorted({*self.ks.get(c.backend, ()), c.k})
        self.backends = list(self.ks)
        self.device = next(model.parameters()).device
        self.probe = DecodeProbe(model, context_tokens=context)
        self.samples: dict[str, dict[str, list[float]]] = {b: {} for b in self.backends}
        self.startup = {b: self._priced_startup(profile, b) for b in self.backends}
        """Backends whose batch start-up the profile taken beforehand priced: only those re-time
        it, so both predictions price the same terms (a dist profile before 21969f7 did not)."""
        self.context = context
        self.pair_ks, self.pair_d_bar = self._pair_plan(profile)
        self.pair_placements = self._pair_placements(profile, configs)
        self.pair_gaps = 0
        self.gaps = 0
        self.run_gaps = 0
        """Single probe rounds run before a judged run (``before_run``)."""
        machine = MachineDrift.from_dict(profile.data.get("machine"))
        threads = machine.threads if machine else probe_threads(self.before, self.backends[0])
        self.watch = DriftWatch(model, context_tokens=context, threads=threads)
        self.timeline = SentinelTimeline(threads)
        """The sentinel's windows and the judged runs, in order (``measure.eval.paired``)."""
        self.seconds = 0.0
        """Wall seconds spent probing, over every gap."""

    @staticmethod
    def _priced_startup(profile: CostProfile, backend: str) -> bool:
        figures = profile.data.get("figures", {}).get(backend, {})
        return any(name.startswith("batch_after_head_s[") for name in figures)

    def _pair_plan(self, profile: CostProfile) -> tuple[tuple[int, ...], int | None]:
        """The pair ks to probe (the profile's measured k nearest to each judged ``dist`` k)
        and the split layer, or ((), None) where the profile has no pair factors."""
        entry = profile.backends.get("dist")
        if "dist" not in self.ks or entry is None or not entry.pair_slowdowns:
            return (), None
        measured = [row[0] for row in entry.pair_slowdowns]
        nearest = {min(measured, key=lambda m: (abs(m - k), m)) for k in self.ks["dist"]}
        return tuple(sorted(nearest)), entry.pair_d_bar

    @staticmethod
    def _pair_placements(profile: CostProfile, configs) -> tuple[str, ...]:
        """The pair probe's placements whose factors price the judged ``dist`` configurations:
        ``candidates`` for an early head on the candidate side where the profile measured that
        placement (``pair_slowdowns_candidates``), else ``main`` (main's placement, and the
        rows a profile without them prices both placements with)."""
        entry = profile.backends.get("dist")
        with_cands = entry is not None and bool(entry.pair_slowdowns_candidates)
        used = {"candidates" if c.early_head == "candidates" and with_cands else "main"
                for c in configs if c.backend == "dist"}  # fmt: skip
        return tuple(p for p in ("main", "candidates") if p in used) or ("main",)

    def __call__(self, ranks=None) -> None:
        """One gap before a judged round: ``rounds`` probe rounds per backend, at that
        backend's threads, and the pair probe on ``ranks`` (the validation's ``RankGroup``, or
        None: not probed)."""
        start = time.perf_counter()
        self._window()
        self._compute(self.backends, self.rounds)
        if ranks is not None and self.pair_ks:
            got = pair_samples_on(
                ranks, ks=self.pair_ks, d_bar=self.pair_d_bar, context_tokens=self.context,
                repeats=self.rounds, warmup=int(not self.pair_gaps),
                placements=self.pair_placements,
            )  # fmt: skip
            self._add("dist", got)
            self.pair_gaps += 1
        self.gaps += 1
        self.seconds += time.perf_counter() - start

    def before_run(self, config) -> None:
        """One probe round before a judged run, for the backend that run is priced on: its
        ``backend`` for a PPD configuration, every probed backend for greedy (``None``), none
        for other methods. A round of the judged runs lasts tens of seconds on a CPU, longer
        than a slow spell of a shared machine; probing beside each run samples the machine as
        often as the runs do. A method that is not decoded prompt by prompt (early exit, FREE)
        gets the sentinel's window here (``before_prompt`` for the others)."""
        start = time.perf_counter()
        if config is None:
            backends = self.backends
        else:
            backend = getattr(config, "backend", None)
            backends = [backend] if isinstance(config, PPDConfig) and backend in self.ks else []
        if backends:
            self._compute(backends, 1)
            self.run_gaps += 1
        if not (config is None or isinstance(config, PPDConfig)):
            self._window()
            self.timeline.run(config)
        self.seconds += time.perf_counter() - start

    def before_prompt(self, config, index: int) -> None:
        """The sentinel's window right before prompt ``index`` of a judged run of ``config``
        (None: greedy) (``measure.eval.paired``)."""
        start = time.perf_counter()
        self._window()
        self.timeline.run((config, index))
        self.seconds += time.perf_counter() - start

    def finish(self) -> None:
        """The sentinel's window after the last judged run (its "after" neighbour)."""
        start = time.perf_counter()
        self._window()
        self.seconds += time.perf_counter() - start

    def _window(self) -> None:
        """One sentinel window, now, into the timeline."""
        self.timeline.window(self.watch.window())

    def _compute(self, backends, rounds: int) -> None:
        """``rounds`` probe rounds of each backend at its threads (the first call adds a
        warm-up round). The later calls are timed cold on purpose: a round timed right after a
        judged run meets the state that run left (right after a ``dist`` run a greedy step's
        layers took 1.01-1.45x those of the gaps on the 2-vCPU VM), and so does the judged run
        that follows it. With a warm-up round before every call, five of six fresh validations
        read 2-6 % below their runs on average (``docs/record/cpu_validation.md``, "Probes right
        after
        a `dist` run")."""
        previous = torch.get_num_threads()
        try:
            for backend in backends:
                torch.set_num_threads(probe_threads(self.before, backend))
                warmup = int(not self.samples[backend])
                got = probe_samples(self.probe, self.ks[backend], repeats=rounds, warmup=warmup,
                                    startup=self.startup[backend])  # fmt: skip
                self._add(backend, got)
        finally:
            torch.set_num_threads(previous)

    def _add(self, backend: str, got: dict[str, list[float]]) -> None:
        for name, values in got.items():
            self.samples[backend].setdefault(name, []).extend(values)

    def profile(self) -> CostProfile:
        """The profile taken beforehand, its compute figures re-measured between the rounds."""
        if not self.gaps:
            raise ValueError("no probes were run between rounds")
        return reprice(
            self.before,
            {b: spreads(s) for b, s in self.samples.items()},
            shapes=self.probe.shapes(),
            device=self.device,
            note=f"compute figures probed between the judged rounds ({self._gaps_note()})",
            drift=MachineDrift(tuple(self.timeline.windows_s), self.watch.threads),
        )

    def _pair_note(self) -> str:
        if not self.pair_gaps:
            return ""
        ks = ", ".join(map(str, self.pair_ks))
        where = ""
        if self.pair_placements != ("main",):
            where = f" (early head on {' and '.join(self.pair_placements)})"
        return f"; the dist pair probe at k {ks}{where} in {self.pair_gaps} of them"

    def _gaps_note(self) -> str:
        runs = f" and {self.run_gaps} single rounds before judged runs" if self.run_gaps else ""
        return f"{self.gaps} gaps of {self.rounds} rounds{runs}{self._pair_note()}"

    def describe(self, judged_s: float) -> str:
        """'interleaved probes: 3 gaps of 2 rounds and 9 single rounds before judged runs; 13
        sentinel windows of 8 greedy steps; 1.2 s (4.1 % of the judged runs' 29 s)'."""
        share = self.seconds / judged_s if judged_s > 0 else float("nan")
        return (
            f"interleaved probes: {self._gaps_note()}; {len(self.timeline.windows_s)} sentinel "
            f"windows of {self.watch.steps} greedy steps; {self.seconds:.3g} s "
            f"({100 * share:.1f} % of the judged runs' {judged_s:.3g} s)"
        )
