"""What the measure notebooks read and where they write, resolved from the source tree.

The notebooks run with any working directory (the tests start their kernels in a temporary
one), so nothing here is relative to the current directory: the repository root is the
directory that holds the ``measure`` package, outputs go under its git-ignored ``out/``, and
the default prompts are the Spec-Bench questions (the full set in ``../shared/data`` beside
the repository when present, else the small sample shipped in ``measure/data``).
"""

from __future__ import annotations

from pathlib import Path

from measure.datasets import Prompt, sample_path
from measure.hf.loading import KNOWN_MODELS
from ppdmodel.validation import as_int

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The source tree that holds the ``measure`` package (the repository root when installed
editable, as the README's ``pip install -e`` does)."""
NOTEBOOK_OUT = Path("out") / "notebooks"
"""Default output directory of the notebooks, under REPO_ROOT (``/out/`` is git-ignored)."""
SHARED_SPEC_BENCH = Path("..") / "shared" / "data" / "spec_bench_questions.jsonl"
"""Spec-Bench's full question file, relative to REPO_ROOT, where a checkout has one."""


def notebook_out_dir(name: str, out_dir=None) -> Path:
    """``out_dir``, or ``REPO_ROOT/out/notebooks/<name>``; created if absent."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"name must be a plain directory name, got {name!r}")
    path = Path(out_dir).expanduser() if out_dir is not None else REPO_ROOT / NOTEBOOK_OUT / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def repo_path(value) -> Path | None:
    """A path parameter of a notebook: absolute as given, relative ones under REPO_ROOT (the
    kernel's working directory is anywhere); None stays None."""
    if value is None:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def model_argument(model) -> str | Path:
    """What ``load_model`` gets for a notebook's MODEL: a known name (``"smollm2"``, as the
    CLI's ``--model smollm2``) unless REPO_ROOT holds a path of that name, else `repo_path`."""
    if not isinstance(model, str | Path) or not str(model):
        raise ValueError(
            f"MODEL must be a known name {sorted(KNOWN_MODELS)} or a path, got {model!r}"
        )
    path = repo_path(model)
    if str(model) in KNOWN_MODELS and not path.exists():
        return str(model)
    return path


def spec_bench_file(root=None) -> Path:
    """The full Spec-Bench questions beside the repository (``SHARED_SPEC_BENCH``) if there,
    else the shipped sample ``measure/data/spec_bench_sample.jsonl``."""
    shared = Path(root or REPO_ROOT) / SHARED_SPEC_BENCH
    return shared.resolve() if shared.is_file() else sample_path("spec-bench")


def interleave_categories(prompts: list[Prompt], n: int) -> list[Prompt]:
    """The first ``n`` prompts taken in turn from each category (in order of first
    appearance), so a few prompts cover every category instead of the file's first one."""
    n = as_int("n", n)
    queues: dict[str | None, list[Prompt]] = {}
    for prompt in prompts:
        queues.setdefault(prompt.category, []).append(prompt)
    out: list[Prompt] = []
    while len(out) < n and any(queues.values()):
        for queue in queues.values():
            if queue and len(out) < n:
                out.append(queue.pop(0))
    return out
