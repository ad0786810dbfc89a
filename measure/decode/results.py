"""What a PPD or greedy decode returns: tokens, match outcomes, timings and the replay trace."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.formats import MatchTrace


@dataclass
class PPDResult:
    """One PPD generation: the tokens, the match outcomes and the timed trace."""

    tokens: list[int]
    """Generated token ids (prompt excluded); equal to greedy decoding's (sampled: to seeded
    ``generate(do_sample=True)``'s)."""
    m: list[int]
    """m_t for t = 2..ell: 1 if pass t started from a handed-off candidate."""
    n_runs: int
    """N = 1 + sum(1 - m_t)."""
    trace: MatchTrace
    """Replay-format trace (source ``ppd_run``) with timed events (``sim.formats.EVENT_KEYS``)."""
    wall_s: float
    """Wall-clock seconds of the decode passes (prefill excluded)."""
    token_times_s: list[float]
    """Seconds from the start of decoding until each generated token was known."""
    prefill_s: float = 0.0
    """Wall-clock seconds of the prefill (prompt minus its last token)."""
    backend: str = "single"
    """``single`` or ``dist``."""
    handoff_bytes: int = 0
    """Bytes of one hand-off message (hidden state + KV entries of layers [0, e))."""
    link_samples: list[tuple[int, float]] = field(default_factory=list)
    """(bytes, one-way seconds) of link probes between ranks (``dist`` only)."""
    early_head: str = "main"
    """Where the early head ran: ``main`` (on main's critical path) or ``candidates``."""
    decoding: str = "greedy"
    """Main's rule: ``greedy`` or ``sample ...`` (``measure.decode.sampling.Decoding.label``)."""

    @property
    def ell(self) -> int:
        """Number of generated tokens."""
        return len(self.tokens)

    def __repr__(self) -> str:
        return (
            f"PPDResult(ell={self.ell}, n_runs={self.n_runs}, matches={sum(self.m)}, "
            f"backend={self.backend!r}, early_head={self.early_head!r}, "
            f"decoding={self.decoding!r}, wall_s={self.wall_s:.4g})"
        )


@dataclass
class GreedyResult:
    """A plain greedy decode (the reference PPD must reproduce), timed the same way."""

    tokens: list[int]
    """Generated token ids (prompt excluded)."""
    wall_s: float
    """Wall-clock seconds of the decode steps (prefill excluded)."""
    token_times_s: list[float]
    """Seconds from the start of decoding until each token was known."""
    prefill_s: float = 0.0
    """Wall-clock seconds of the prefill."""

    def __repr__(self) -> str:
        return f"GreedyResult(ell={len(self.tokens)}, wall_s={self.wall_s:.4g})"


def handoff_nbytes(lsm, cache, e: int) -> int:
    """Bytes of one hand-off: hidden state [H] plus one position's K and V in layers [0, e)."""
    size = cache.layers[0].keys.element_size()
    hidden_size = lsm.model.config.get_text_config().hidden_size
    per_layer = [
        2 * cache.layers[i].keys.shape[1] * cache.layers[i].keys.shape[3] for i in range(e)
    ]
    return size * (hidden_size + sum(per_layer))


def build_result(
    fields: dict, *, d, d_bar, k, sequence, backend, head_name, nbytes=0, link=(), decoding="greedy"
):
    """Assemble a PPDResult (and its MatchTrace) from ``run_main``'s fields."""
    m = fields["m"]
    trace = MatchTrace(
        sequence=sequence,
        d=d,
        d_bar=d_bar,
        k=k,
        m=m,
        head=head_name,
        source="ppd_run",
        tokens=fields["tokens"],
        events=fields["events"],
        backend=backend,
        early_head=fields.get("early_head", "main"),
    )
    return PPDResult(
        tokens=fields["tokens"],
        m=m,
        n_runs=1 + sum(1 - x for x in m),
        trace=trace,
        wall_s=fields["wall_s"],
        token_times_s=fields["token_times_s"],
        prefill_s=fields["prefill_s"],
        backend=backend,
        handoff_bytes=nbytes,
        link_samples=list(link),
        early_head=fields.get("early_head", "main"),
        decoding=decoding,
    )
