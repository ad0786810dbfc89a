"""Real Hugging Face models: early-prediction match rates, per-layer times, real PPD decoding.

Needs the ``measure`` extra (torch, transformers). Public names are imported lazily (PEP 562),
so ``import measure`` works without torch and pays for transformers only when used.
"""

from __future__ import annotations

import importlib

# public name -> defining module
_EXPORTS = {
    "load_model": "measure.loading",
    "LayerSplitModel": "measure.layer_split",
    "arch_spec": "measure.arch",
    "match_rates": "measure.match_rate",
    "run_match_rate": "measure.match_records",
    "table2": "measure.match_tables",
    "by_position": "measure.match_tables",
    "to_traces": "measure.match_tables",
    "time_layers": "measure.timing",
    "time_greedy": "measure.timing",
    "load_prompts": "measure.datasets",
    "Prompt": "measure.datasets",
    "sample_path": "measure.datasets",
    "TrainedHead": "measure.heads",
    "train_head": "measure.heads",
    "HeadConfig": "measure.heads",
    "ReferenceModelConfig": "measure.reference_model",
    "train_reference_model": "measure.reference_model",
    "ppd_generate": "measure.ppd_decode",
    "PPDResult": "measure.ppd_decode",
    "greedy_generate": "measure.ppd_decode",
    "table3": "measure.ppd_report",
    "validate_results": "measure.validate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:  # a submodule, e.g. ``measure.datasets``
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'measure' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
