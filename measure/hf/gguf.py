"""Convert a GGUF file once into a cached safetensors model directory (float32, with tokenizer).

transformers reads GGUF files (``from_pretrained(dir, gguf_file=...)``, needs the ``gguf``
package) by dequantizing every tensor to float32, which takes tens of seconds, and refuses to
``save_pretrained`` the result. ``convert_gguf`` does that once per file: it copies the weights
into a plain model of the same config, saves it with its tokenizer as safetensors under the
user cache directory, keyed by the file's sha256, and later calls return that directory. The
conversion is written to a temporary directory and renamed into place, so an interrupted run
never leaves a half-written cache entry.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ppdmodel.validation import MissingPath, as_path, check_output_dir

CACHE_ENV = "PPD_CACHE_DIR"
"""Environment variable that overrides the cache directory."""
SOURCE_NAME = "ppd_source.json"
"""Provenance file written last into a converted directory (its presence marks it complete)."""
GGUF_SUFFIX = ".gguf"


def cache_root() -> Path:
    """``$PPD_CACHE_DIR``, else ``$XDG_CACHE_HOME/ppd-toolkit``, else ``~/.cache/ppd-toolkit``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "ppd-toolkit"


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (about 0.3 s per 100 MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def expand_user(name: str, path) -> Path:
    """``as_path(name, path)`` with a leading ``~`` expanded; ValueError naming ``name`` for a
    ``~user`` that names no user here."""
    path = as_path(name, path)
    try:
        return path.expanduser()
    except RuntimeError:  # Path.expanduser: "Could not determine home directory"
        raise ValueError(f"{name} {str(path)!r}: no home folder for its '~' here") from None


def gguf_path(path: str | Path, gguf_file: str | None = None) -> Path:
    """The GGUF file given as a path, or as a directory plus a file name; checked to exist
    (``MissingPath`` naming the argument otherwise)."""
    path = expand_user("path", path)
    name = "path"
    if gguf_file is not None:
        if not isinstance(gguf_file, str) or Path(gguf_file).name != gguf_file:
            raise ValueError(f"gguf_file must be a file name inside {path}, got {gguf_file!r}")
        path, name = path / gguf_file, "gguf_file"
    if path.suffix.lower() != GGUF_SUFFIX:
        raise ValueError(f"{name}: a GGUF file must end in {GGUF_SUFFIX}, got {path.name!r}")
    if not path.is_file():
        raise MissingPath(f"{name} {str(path)!r}: GGUF file not found (nothing is downloaded)")
    return path.resolve()


def converted_dir(path: str | Path, root: str | Path | None = None) -> Path:
    """Where the conversion of GGUF file `path` lives: ``<cache>/gguf/<sha256 of the file>``."""
    return Path(root or cache_root()) / "gguf" / file_sha256(path)


def is_converted(directory: Path) -> bool:
    """Whether `directory` is a complete conversion (its provenance file is written last)."""
    return (directory / SOURCE_NAME).is_file() and (directory / "config.json").is_file()


def convert_gguf(path: str | Path, root: str | Path | None = None) -> Path:
    """The cached safetensors directory of GGUF file `path`, converting it on first use.

    Returns ``<root>/gguf/<sha256>`` (root: ``cache_root()``) holding ``config.json``,
    ``model.safetensors`` (float32), the tokenizer files and ``ppd_source.json``.
    """
    source = gguf_path(path)
    target = converted_dir(source, None if root is None else check_output_dir("root", root))
    if is_converted(target):
        return target
    if target.exists():
        raise FileExistsError(
            f"{target} exists but is not a complete conversion of {source}; remove it to convert"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name[:16]}-", dir=target.parent))
    try:
        try:
            write_conversion(source, tmp, sha256=target.name)
        except Exception as exc:  # noqa: BLE001 - a malformed file, whatever the reader says
            raise ValueError(f"path {str(source)!r}: not a GGUF model transformers can "
                             f"read ({type(exc).__name__}: {exc})") from exc  # fmt: skip
        try:
            tmp.rename(target)  # atomic; refused if another process got there first
        except OSError:
            if not is_converted(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def write_conversion(source: Path, out: Path, *, sha256: str) -> None:
    """Dequantize GGUF file `source` to float32 and save model + tokenizer + provenance in `out`."""
    start = time.perf_counter()
    options = dict(gguf_file=source.name, local_files_only=True, trust_remote_code=False)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, dtype=torch.float32, **options)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain float32
    with torch.device("meta"):  # no random init: every weight comes from the GGUF file
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()
    model.generation_config = copy.deepcopy(loaded.generation_config)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source.parent, **options).save_pretrained(out)
    record = {
        "gguf_file": str(source),
        "sha256": sha256,
        "size_bytes": source.stat().st_size,
        "dtype": "float32",
        "convert_s": round(time.perf_counter() - start, 3),
        "transformers": _version("transformers"),
        "gguf": _version("gguf"),
    }
    (out / SOURCE_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None
