"""Real Hugging Face models: early-prediction match rates, per-layer times, real PPD decoding.

Needs the ``measure`` extra (torch, transformers). Public names are imported lazily (PEP 562),
so ``import measure`` works without torch and pays for transformers only when used.
"""

from __future__ import annotations

import importlib

# public name -> defining module
_EXPORTS = {
    "load_model": "measure.hf.loading",
    "resolve_model_dir": "measure.hf.loading",
    "convert_gguf": "measure.hf.gguf",
    "verify_layout": "measure.hf.layer_split",
    "LayerSplitModel": "measure.hf.layer_split",
    "arch_spec": "measure.hf.arch",
    "match_rates": "measure.match.rate",
    "run_match_rate": "measure.match.records",
    "table2": "measure.match.tables",
    "by_position": "measure.match.tables",
    "to_traces": "measure.match.tables",
    "time_layers": "measure.profile.timing",
    "time_greedy": "measure.profile.timing",
    "load_prompts": "measure.datasets",
    "Prompt": "measure.datasets",
    "sample_path": "measure.datasets",
    "TrainedHead": "measure.train.heads",
    "train_head": "measure.train.heads",
    "HeadConfig": "measure.train.heads",
    "TranslatorHead": "measure.train.translator",
    "load_head": "measure.train.head_io",
    "LogitLens": "measure.hf.lens",
    "collect_states": "measure.train.distill",
    "fit_head": "measure.train.distill",
    "new_head": "measure.train.distill",
    "atlas": "measure.match.atlas",
    "plot_atlas": "measure.match.atlas_plot",
    "encode_prompt": "measure.chat",
    "ReferenceModelConfig": "measure.train.reference_model",
    "train_reference_model": "measure.train.reference_model",
    "ppd_generate": "measure.decode.backends",
    "ppd_generate_hf": "measure.decode.hf_generate",
    "custom_generate_dir": "measure.decode.hf_generate",
    "PPDGenerateOutput": "measure.decode.hf_generate",
    "PPDResult": "measure.decode.results",
    "greedy_generate": "measure.decode.greedy",
    "table3": "measure.eval.report",
    "free_generate": "measure.free.decode",
    "FreeResult": "measure.free.decode",
    "AdaptiveThreshold": "measure.free.threshold",
    "rouge_l": "measure.free.quality",
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
