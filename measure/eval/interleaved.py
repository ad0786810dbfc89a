"""Cost probes interleaved with the judged rounds: a second profile measured under the runs' load.

A profile taken before a validation prices the machine as it was then; when the load changes
(other jobs start, a clock steps down), the judged runs and the profile see different
machines. ``ppd validate --interleave-probes`` runs, before every judged round, a few rounds
(``PROBE_ROUNDS``) of the same probes as ``ppd measure profile``
(``measure.profile.profile.probe_samples`` on a ``measure.profile.probes.DecodeProbe``: a
greedy step's pieces, the early head, the k-row candidate batch for each k the configurations
use, the hand-off) at the profile's context length and at each compared backend's thread
count. Nothing is taken from
the judged runs. After the rounds, the samples of every gap replace the compute figures of the
profile taken beforehand (``measure.profile.profile.reprice``); the figures that need ranks
(the ``dist`` link, the two-stream slowdown and host time on real ``dist`` runs) are kept
from it. Each configuration is then predicted from both profiles.

Cost: one probe round is about one greedy step, one candidate batch per k and a few small
pieces, i.e. a few decode steps; a gap of ``PROBE_ROUNDS`` rounds is a small fraction of a
judged round, which decodes every prompt's tokens once per method (``share`` reports it).
"""

from __future__ import annotations

import time

import torch

from measure.profile.probes import DecodeProbe
from measure.profile.profile import DIST_THREADS, probe_samples, reprice
from measure.profile.stats import spreads
from ppdmodel.cost_profile import CostProfile

PROBE_ROUNDS = 2
"""Probe rounds in each gap before a judged round (the first gap adds one warm-up round)."""


class InterleavedProbes:
    """Call it before every judged round; ``profile()`` afterwards builds the second profile.

    model: the loaded model the runs decode with; profile: the profile taken beforehand (its
    context length and thread counts are reused); configs: the judged ``PPDConfig``s (their
    backends and k are probed).
    """

    def __init__(self, model, profile: CostProfile, configs, *, rounds: int = PROBE_ROUNDS):
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
        context = profile.data.get("model", {}).get("context_tokens")
        if not isinstance(context, int):
            raise ValueError("the profile records no context_tokens to probe at")
        self.before, self.rounds = profile, rounds
        self.ks: dict[str, list[int]] = {}
        for c in configs:
            if c.backend not in profile.backends:
                raise ValueError(f"configs: the profile has no backend {c.backend!r}")
            self.ks[c.backend] = sorted({*self.ks.get(c.backend, ()), c.k})
        self.backends = list(self.ks)
        self.device = next(model.parameters()).device
        self.probe = DecodeProbe(model, context_tokens=context)
        self.samples: dict[str, dict[str, list[float]]] = {b: {} for b in self.backends}
        self.gaps = 0
        self.seconds = 0.0
        """Wall seconds spent probing, over every gap."""

    def _threads(self, backend: str) -> int:
        threads = self.before.data["backends"][backend].get("threads")
        return threads if isinstance(threads, int) else (DIST_THREADS if backend == "dist" else 1)

    def __call__(self) -> None:
        """One gap: ``rounds`` probe rounds per backend, at that backend's threads."""
        start, previous = time.perf_counter(), torch.get_num_threads()
        try:
            for backend in self.backends:
                torch.set_num_threads(self._threads(backend))
                got = probe_samples(
                    self.probe, self.ks[backend], repeats=self.rounds, warmup=int(not self.gaps)
                )
                for name, values in got.items():
                    self.samples[backend].setdefault(name, []).extend(values)
        finally:
            torch.set_num_threads(previous)
        self.gaps += 1
        self.seconds += time.perf_counter() - start

    def profile(self) -> CostProfile:
        """The profile taken beforehand, its compute figures re-measured between the rounds."""
        if not self.gaps:
            raise ValueError("no probes were run between rounds")
        return reprice(
            self.before,
            {b: spreads(s) for b, s in self.samples.items()},
            shapes=self.probe.shapes(),
            device=self.device,
            note=f"compute figures probed between the judged rounds ({self.gaps} gaps of "
            f"{self.rounds} rounds)",
        )

    def describe(self, judged_s: float) -> str:
        """'interleaved probes: 3 gaps of 2 rounds, 1.2 s (4.1 % of the judged runs' 29 s)'."""
        share = self.seconds / judged_s if judged_s > 0 else float("nan")
        return (
            f"interleaved probes: {self.gaps} gaps of {self.rounds} rounds, {self.seconds:.3g} s "
            f"({100 * share:.1f} % of the judged runs' {judged_s:.3g} s)"
        )
