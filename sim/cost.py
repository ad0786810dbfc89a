"""Cost models: how long a block of layers takes on one GPU for a batch of rows.

Every model answers the same four questions, in seconds:

* ``block_seconds(layer_start, layer_end, batch)``: decoder layers ``layer_start..layer_end``
  (1-based, inclusive, as in the paper) for ``batch`` rows decoded together;
* ``embed_seconds(batch)``: the token embedding, charged where a process starts at layer 1;
* ``head_seconds(batch)``: final norm + LM head, charged after layer d_bar (early prediction)
  and after layer d (final prediction);
* ``unit_seconds()``: the length of one "time unit" (one layer, batch 1) used to report
  latency in the paper's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ppdmodel.validation import as_int, as_real, check_columns, check_instance
from sim.formats import LAYER_TIMES_COLUMNS, read_layer_times, validate_layer_times
from sim.hardware import GPUSpec
from sim.shape import ModelShape

MAX_LAYERS = 10**6
"""Largest layer index a block may name (a sanity bound: no model has more layers)."""


def _check_block(layer_start: int, layer_end: int, batch: int) -> tuple[int, int, int]:
    """The block's arguments as Python ints (no numpy wrap-around), or ValueError naming one."""
    layer_start = as_int("layer_start", layer_start, limit=MAX_LAYERS)
    layer_end = as_int("layer_end", layer_end, minimum=0, limit=MAX_LAYERS)
    if layer_end < layer_start - 1:  # an empty block ends at layer_start - 1
        raise ValueError(f"layer_end must be >= layer_start - 1 = {layer_start - 1}, got "
                         f"{layer_end}")  # fmt: skip
    return layer_start, layer_end, _check_batch(batch)


def _check_batch(batch: int) -> int:
    """``batch`` as a Python int >= 1, or ValueError."""
    return as_int("batch", batch)


@dataclass(frozen=True)
class UniformCost:
    """Every layer costs ``seconds_per_layer`` whatever the batch; embed and head are free.

    This is the paper's time-unit model: with it the simulator reproduces Theorem 4.1 exactly.
    """

    seconds_per_layer: float = 1.0
    """Time of one layer, seconds (1.0 makes seconds equal time units)."""

    def __post_init__(self) -> None:
        as_real("seconds_per_layer", self.seconds_per_layer, strict=True)

    def block_seconds(self, layer_start: int, layer_end: int, batch: int = 1) -> float:
        layer_start, layer_end, batch = _check_block(layer_start, layer_end, batch)
        return (layer_end - layer_start + 1) * self.seconds_per_layer

    def embed_seconds(self, batch: int = 1) -> float:
        batch = _check_batch(batch)
        return 0.0

    def head_seconds(self, batch: int = 1) -> float:
        batch = _check_batch(batch)
        return 0.0

    def unit_seconds(self) -> float:
        return self.seconds_per_layer


@dataclass(frozen=True)
class RooflineCost:
    """Roofline time of one decode step: max(FLOPs / effective peak, bytes / effective bandwidth).

    Per layer and per row: 2 FLOPs per weight, plus attention over ``shape.context_len``
    cached tokens (QK^T and AV: 4 * num_attention_heads * head_dim * context_len FLOPs).
    Bytes per layer: the layer's weights once per step (shared by the batch) plus each row's
    KV cache read (``context_len`` tokens; each candidate row reads its own cache, as in
    batched Hugging Face decoding). A batch of k candidates therefore costs almost the same
    as one row while the layer is memory-bound: this is where the simulator departs from the
    paper's "k + 1 compute units".
    """

    shape: ModelShape
    """Model dimensions and context length."""
    gpu: GPUSpec
    """Datasheet peak numbers."""
    flops_efficiency: float = 0.6
    """Fraction of peak FLOP/s reached by decode-sized matmuls (assumption, in (0, 1])."""
    bandwidth_efficiency: float = 0.8
    """Fraction of peak HBM bandwidth reached streaming weights (assumption, in (0, 1])."""
    tensor_parallel: int = 1
    """Devices a layer is split over (Megatron-LM style): the time is one shard's; each holds
    1/n of the weights and of the KV heads (at least one), and of the LM head's rows. The
    all-reduces between shards are the link's (``sim.hardware_costs``), not counted here."""

    def __post_init__(self) -> None:
        check_instance("shape", self.shape, ModelShape, "e.g. ModelShape.from_name(...)")
        check_instance("gpu", self.gpu, GPUSpec, "e.g. GPUSpec.from_name('h100-sxm')")
        for name in ("flops_efficiency", "bandwidth_efficiency"):
            as_real(name, getattr(self, name), strict=True, maximum=1.0)
        object.__setattr__(self, "tensor_parallel", as_int("tensor_parallel", self.tensor_parallel))

    def _kv_share(self) -> float:
        """Fraction of the KV heads one shard holds (whole heads; at least one)."""
        heads = self.shape.num_key_value_heads
        return -(-heads // self.tensor_parallel) / heads

    def _roofline(self, flops: float, nbytes: float) -> float:
        compute_s = flops / (self.gpu.peak_flops_bf16 * self.flops_efficiency)
        memory_s = nbytes / (self.gpu.hbm_bytes_per_s * self.bandwidth_efficiency)
        return max(compute_s, memory_s)

    def layer_flops(self, batch: int = 1) -> float:
        """FLOPs of one decoder layer for ``batch`` rows (one shard's under tensor_parallel)."""
        batch = _check_batch(batch)
        s = self.shape
        attention = 4 * s.num_attention_heads * s.head_dim * s.context_len
        return batch * (2 * s.layer_params() + attention) / self.tensor_parallel

    def layer_bytes(self, batch: int = 1) -> float:
        """Bytes moved by one decoder layer for ``batch`` rows (weights + KV cache reads; one
        shard's under tensor_parallel)."""
        batch = _check_batch(batch)
        s = self.shape
        weights = s.layer_params() * s.dtype_bytes / self.tensor_parallel
        kv = batch * s.context_len * s.kv_bytes_per_token_layer() * self._kv_share()
        return weights + kv

    def block_seconds(self, layer_start: int, layer_end: int, batch: int = 1) -> float:
        layer_start, layer_end, batch = _check_block(layer_start, layer_end, batch)
        n = layer_end - layer_start + 1
        return n * self._roofline(self.layer_flops(batch), self.layer_bytes(batch))

    def embed_seconds(self, batch: int = 1) -> float:
        batch = _check_batch(batch)
        s = self.shape
        return self._roofline(0.0, batch * s.hidden_size * s.dtype_bytes)

    def head_seconds(self, batch: int = 1) -> float:
        batch = _check_batch(batch)
        s = self.shape
        params = s.vocab_size * s.hidden_size / self.tensor_parallel
        return self._roofline(2.0 * batch * params, params * s.dtype_bytes)

    def unit_seconds(self) -> float:
        return self.block_seconds(1, 1, 1)


class MeasuredCost:
    """Per-layer times measured on a real model (the per-layer CSV of ``sim.formats``).

    The table's schema is ``sim.formats.LAYER_TIMES_COLUMNS`` (see that module's docstring):
    ``layer`` rows (0-based decoder-layer index; this model's layer l is row l - 1), ``embed``
    and ``head`` rows (layer -1), and ``token`` rows (one whole greedy step, not used for
    blocks; ``token_overhead_seconds`` reports what it adds beyond the parts).

    A batch that was not measured is linearly interpolated between the nearest measured
    batches of that component and layer, and clamped to the nearest measured batch outside
    that range. A decoder layer with no row takes the mean of the measured layers at that
    batch. A missing ``embed`` or ``head`` component costs 0.
    """

    def __init__(self, df: pd.DataFrame) -> None:
        check_columns("MeasuredCost df", df, LAYER_TIMES_COLUMNS)
        df = validate_layer_times(df.copy(), source="MeasuredCost df")
        layers = df[df["component"] == "layer"]
        if layers.empty:
            raise ValueError("MeasuredCost: the table has no 'layer' rows")
        self.df = df
        self.num_layers = int(layers["layer"].max()) + 1
        self._table: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        grouped = df.groupby(["component", "layer"])
        for (component, layer), rows in grouped:
            rows = rows.groupby("batch")["seconds"].mean()
            self._table[(component, int(layer))] = (
                rows.index.to_numpy(dtype=float),
                rows.to_numpy(dtype=float),
            )
        self._cache: dict[tuple[int, int, int], float] = {}

    @classmethod
    def from_csv(cls, path: str | Path) -> MeasuredCost:
        """Load the per-layer CSV written by ``sim.formats.write_layer_times``."""
        return cls(read_layer_times(path))

    def _lookup(self, component: str, layer: int, batch: int) -> float | None:
        entry = self._table.get((component, layer))
        if entry is None:
            return None
        batches, seconds = entry
        return float(np.interp(batch, batches, seconds))

    def layer_seconds(self, layer: int, batch: int = 1) -> float:
        """Seconds of decoder layer ``layer`` (1-based) for ``batch`` rows."""
        layer = as_int("layer", layer, limit=self.num_layers)
        batch = _check_batch(batch)
        value = self._lookup("layer", layer - 1, batch)
        if value is None:
            measured = [self._lookup("layer", i, batch) for i in range(self.num_layers)]
            value = float(np.mean([v for v in measured if v is not None]))
        return value

    def block_seconds(self, layer_start: int, layer_end: int, batch: int = 1) -> float:
        layer_start, layer_end, batch = _check_block(layer_start, layer_end, batch)
        as_int("layer_end", layer_end, minimum=0, limit=self.num_layers)  # measured layers only
        key = (layer_start, layer_end, batch)
        if key not in self._cache:
            self._cache[key] = sum(
                self.layer_seconds(layer, batch) for layer in range(layer_start, layer_end + 1)
            )
        return self._cache[key]

    def embed_seconds(self, batch: int = 1) -> float:
        batch = _check_batch(batch)
        return self._lookup("embed", -1, batch) or 0.0

    def head_seconds(self, batch: int = 1) -> float:
        batch = _check_batch(batch)
        return self._lookup("head", -1, batch) or 0.0

    def unit_seconds(self) -> float:
        return self.block_seconds(1, self.num_layers, 1) / self.num_layers

    def token_overhead_seconds(self) -> float | None:
        """Measured greedy step minus embed + all layers + head (batch 1); None if no token row."""
        token = self._lookup("token", -1, 1)
        if token is None:
            return None
        parts = self.embed_seconds(1) + self.block_seconds(1, self.num_layers, 1)
        return token - parts - self.head_seconds(1)


CostModel = UniformCost | RooflineCost | MeasuredCost
