"""Prompt loaders for the paper's datasets (SQuAD 1.1, WMT15 en-fr, CNN/DM), Spec-Bench and JSONL.

Every loader of the paper's datasets reads a local file in the dataset's usual distribution
format and applies the prompt template of the paper's Table 1, so a run on the real test sets
builds exactly the prompts the paper used. Spec-Bench (Xia et al., 2024) questions are used as
written (first turn), by category. Instruct models get each prompt text as the user turn of
their chat template (``measure.chat``). Small made-up sample files ship in ``measure/data``.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ppdmodel.validation import MissingPath, as_path, check_choice, items_of, reading
from sim.formats import read_jsonl

DATA_DIR = Path(__file__).resolve().parent / "data"

# The paper's Table 1, laid out line by line (the PDF's "rug by" is "rugby").
TEMPLATES: dict[str, str] = {
    "squad": (
        "We have provided context information below.\n"
        "{context}\n"
        "### Given this information, please answer the question: {question}\n"
        "### Assistant:"
    ),
    "wmt": (
        "### Instruction: Translate English sentence into French.\n"
        "English: Sounds like a typical rugby club to me.\n"
        "French: Ça m'a l'air d'être un club de rugby typique. #\n"
        "English: At an English university, perhaps\n"
        "French: Dans une université anglaise, peut-être #\n"
        "English: {source_sentence}\n"
        "French:"
    ),
    "cnndm": "# Article\n{context}\n\n# Summarize the article\n### Assistant:",
}

FORMATS = ("squad", "wmt", "cnndm", "jsonl", "spec-bench")

SPLITS = ("all", "train", "heldout")
"""Which prompts ``load_prompts`` keeps: all, or one side of the deterministic held-out split."""
HOLDOUT_EVERY = 4
"""Default held-out split: every 4th prompt of each category (25 %), in file order."""

# Shipped sample files; the plain format names are the ones `sample_path` documents.
SAMPLE_FILES: dict[str, str] = {
    "squad": "squad_sample.json",
    "wmt": "wmt_sample.en-fr.tsv",
    "wmt-sgm": "wmt_sample-src.en.sgm",
    "wmt-plain": "wmt_sample.en",
    "cnndm": "cnndm_sample.csv",
    "cnndm-jsonl": "cnndm_sample.jsonl",
    "jsonl": "prompts_sample.jsonl",
    "spec-bench": "spec_bench_sample.jsonl",
}

_SEG_RE = re.compile(r"<seg\s+id\s*=\s*\"?([^\">\s]+)\"?\s*>(.*?)</seg>", re.IGNORECASE)
_DOC_RE = re.compile(r"<doc\b[^>]*\bdocid\s*=\s*\"([^\"]*)\"", re.IGNORECASE)


@dataclass(frozen=True)
class Prompt:
    """One prompt to generate from."""

    id: str
    """Identifier from the source file (SQuAD question id, "docid:segid", CSV id, ...)."""
    text: str
    """The full prompt text, template applied."""
    reference: str | None = None
    """The dataset's reference output (answer, translation, summary), if the file has one."""
    category: str | None = None
    """The prompt's category where the format has them (Spec-Bench: translation, qa, ...)."""


def sample_path(fmt: str) -> Path:
    """Path of the shipped sample file for ``fmt`` (one of `SAMPLE_FILES`)."""
    check_choice("fmt", fmt, tuple(sorted(SAMPLE_FILES)))
    return DATA_DIR / SAMPLE_FILES[fmt]


def prompts_hash(path: str | Path) -> str:
    """Hex sha256 of the prompts file's bytes, for run metadata."""
    digest = hashlib.sha256()
    with open(_existing(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_prompts(
    path: str | Path,
    fmt: str = "auto",
    *,
    limit: int | None = None,
    category: str | Iterable[str] | None = None,
    split: str = "all",
    holdout_every: int = HOLDOUT_EVERY,
) -> list[Prompt]:
    """Read prompts from a local dataset file and apply the paper's Table 1 template.

    fmt: "squad" (SQuAD v1.1 JSON), "wmt" (tab-separated en/fr lines, a plain ``.en`` file
    with an optional sibling ``.fr``, or WMT ``.sgm``), "cnndm" (CSV or JSONL with id,
    article, highlights), "jsonl" ({"id", "prompt"} per line, no template), "spec-bench"
    (Spec-Bench's question.jsonl: {"question_id", "category", "turns"}; the first turn, no
    template) or "auto" (sniffed from the extension and first record). category: keep only
    prompts of these categories (formats with categories only). split: "all", or "train" /
    "heldout" for the deterministic split of `split_prompts`. limit: then keep only the first
    ``limit`` prompts.
    """
    path = _existing(path)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be None or an integer >= 1, got {limit!r}")
    check_choice("fmt", fmt, ("auto", *FORMATS))
    check_choice("split", split, SPLITS)
    if category is not None and not isinstance(category, str):
        items = items_of(category)
        if items is None or not all(isinstance(c, str) for c in items):
            raise ValueError(f"category must be None, a string or a list of them, got "
                             f"{category!r:.80}")  # fmt: skip
    with reading("path", path):
        if fmt == "auto":
            fmt = detect_format(path)
        prompts = list(READERS[fmt](path))
    if category is not None:
        prompts = _by_category(prompts, category, path)
    prompts = split_prompts(prompts, split, holdout_every=holdout_every)
    return prompts if limit is None else prompts[:limit]


def split_prompts(
    prompts: list[Prompt], split: str = "all", *, holdout_every: int = HOLDOUT_EVERY
) -> list[Prompt]:
    """One side of a deterministic train / held-out split of ``prompts``.

    Within each category (all prompts when they have none), in the given order, every
    ``holdout_every``-th prompt (the 4th, 8th, ... by default) is held out; "train" keeps the
    others and "all" keeps every prompt. Head training uses "train", its evaluation "heldout".
    """
    check_choice("split", split, SPLITS)
    if isinstance(holdout_every, bool) or not isinstance(holdout_every, int) or holdout_every < 2:
        raise ValueError(f"holdout_every must be an integer >= 2, got {holdout_every!r}")
    if split == "all":
        return list(prompts)
    seen: dict[str | None, int] = {}
    out = []
    for prompt in prompts:
        index = seen.get(prompt.category, 0)
        seen[prompt.category] = index + 1
        if (index % holdout_every == holdout_every - 1) == (split == "heldout"):
            out.append(prompt)
    return out


def _by_category(prompts: list[Prompt], category, path: Path) -> list[Prompt]:
    wanted = {category} if isinstance(category, str) else set(category)
    found = {p.category for p in prompts if p.category is not None}
    if not found:
        raise ValueError(f"category: {path} has no categories (only the spec-bench format has)")
    unknown = sorted(wanted - found)
    if unknown or not wanted:
        raise ValueError(f"category must be among {sorted(found)} in {path}, got {unknown}")
    return [p for p in prompts if p.category in wanted]


def detect_format(path: str | Path) -> str:
    """Guess the dataset format of ``path`` from its extension and first record."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "squad"
    if suffix in (".sgm", ".tsv", ".en"):
        return "wmt"
    if suffix == ".csv":
        return "cnndm"
    if suffix == ".jsonl":
        first = _first_json_line(path)
        if "article" in first:
            return "cnndm"
        if "prompt" in first:
            return "jsonl"
        if "turns" in first:
            return "spec-bench"
        raise ValueError(
            f"{path}: cannot tell the JSONL format; expected a 'prompt' key (plain prompts), "
            f"'article' (CNN/DM) or 'turns' (Spec-Bench) in the first record, got keys "
            f"{sorted(first)}"
        )
    raise ValueError(
        f"{path}: cannot guess the format from extension {suffix!r}; pass fmt= one of "
        f"{list(FORMATS)} (.json squad, .tsv/.en/.sgm wmt, .csv cnndm, .jsonl jsonl/spec-bench)"
    )


def _existing(path: str | Path) -> Path:
    path = as_path("path", path)
    if not path.is_file():
        raise MissingPath(f"path {str(path)!r}: prompts file not found")
    return path


def _first_json_line(path: Path) -> dict:
    for _number, record in _jsonl_records(path):
        return record
    raise ValueError(f"{path}: empty JSONL file; expected one JSON object per line")


def _jsonl_records(path: Path) -> Iterator[tuple[int, dict]]:
    return read_jsonl(path)


def _read_squad(path: Path) -> Iterator[Prompt]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)["data"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(
            f"{path}: not a SQuAD v1.1 file; expected JSON {{'data': [{{'paragraphs': "
            f"[{{'context', 'qas': [{{'id', 'question', 'answers'}}]}}]}}]}}"
        ) from None
    for article in data:
        for paragraph in _field(path, article, "paragraphs"):
            context = _field(path, paragraph, "context")
            for qa in _field(path, paragraph, "qas"):
                answers = qa.get("answers") or []
                yield Prompt(
                    id=str(_field(path, qa, "id")),
                    text=TEMPLATES["squad"].format(
                        context=context, question=_field(path, qa, "question")
                    ),
                    reference=answers[0].get("text") if answers else None,
                )


def _field(path: Path, record: object, key: str):
    if not isinstance(record, dict) or key not in record:
        raise ValueError(f"{path}: expected a {key!r} field in every SQuAD record")
    return record[key]


def _wmt_prompt(pid: str, source: str, reference: str | None) -> Prompt:
    text = TEMPLATES["wmt"].format(source_sentence=source.strip())
    return Prompt(id=pid, text=text, reference=None if reference is None else reference.strip())


def _read_wmt(path: Path) -> Iterator[Prompt]:
    if path.suffix.lower() == ".sgm":
        yield from _read_wmt_sgm(path)
    elif path.suffix.lower() == ".tsv":
        yield from _read_wmt_tsv(path)
    else:
        yield from _read_wmt_plain(path)


def _read_wmt_tsv(path: Path) -> Iterator[Prompt]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 2:
                raise ValueError(
                    f"{path}:{number}: expected 'english<TAB>french' (2 fields), got {len(fields)}"
                )
            yield _wmt_prompt(str(number), fields[0], fields[1])


def _read_wmt_plain(path: Path) -> Iterator[Prompt]:
    sources = path.read_text(encoding="utf-8").splitlines()
    ref_path = path.with_suffix(".fr")
    references = ref_path.read_text(encoding="utf-8").splitlines() if ref_path.is_file() else None
    if references is not None and len(references) != len(sources):
        raise ValueError(
            f"{path}: expected as many lines as {ref_path} ({len(sources)} != {len(references)})"
        )
    for i, source in enumerate(sources):
        yield _wmt_prompt(str(i + 1), source, None if references is None else references[i])


def _sgm_segments(path: Path) -> list[tuple[str, str]]:
    """(docid:segid, text) for every <seg> of an sgm file, in order."""
    segments, docid = [], ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            doc = _DOC_RE.search(line)
            docid = doc.group(1) if doc else docid
            seg = _SEG_RE.search(line)
            if seg:
                segments.append((f"{docid}:{seg.group(1)}", html.unescape(seg.group(2))))
    if not segments:
        raise ValueError(f'{path}: no <seg id="..">text</seg> lines; expected a WMT sgm file')
    return segments


def _read_wmt_sgm(path: Path) -> Iterator[Prompt]:
    sources = _sgm_segments(path)
    ref_path = path.with_name(path.name.replace("-src.en.", "-ref.fr."))
    references = None
    if ref_path != path and ref_path.is_file():
        references = dict(_sgm_segments(ref_path))
    for pid, source in sources:
        yield _wmt_prompt(pid, source, None if references is None else references.get(pid))


def _cnndm_prompt(path: Path, where: str, record: dict) -> Prompt:
    missing = {k for k in ("id", "article") if not isinstance(record.get(k), (str, int))}
    if missing or not isinstance(record["article"], str):
        raise ValueError(
            f"{path}{where}: expected CNN/DM columns id, article, highlights; "
            f"missing {sorted(missing)}"
        )
    return Prompt(
        id=str(record["id"]),
        text=TEMPLATES["cnndm"].format(context=record["article"].strip()),
        reference=record.get("highlights"),
    )


def _read_cnndm(path: Path) -> Iterator[Prompt]:
    if path.suffix.lower() == ".jsonl":
        for number, record in _jsonl_records(path):
            yield _cnndm_prompt(path, f":{number}", record)
        return
    csv.field_size_limit(1 << 30)  # news articles can exceed the 128 KiB default
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            yield _cnndm_prompt(path, "", row)


def _read_jsonl(path: Path) -> Iterator[Prompt]:
    for number, record in _jsonl_records(path):
        if not isinstance(record.get("prompt"), str):
            raise ValueError(f"{path}:{number}: expected a string 'prompt' field")
        reference = record.get("reference")
        yield Prompt(
            id=str(record.get("id", number)),
            text=record["prompt"],
            reference=None if reference is None else str(reference),
        )


def _read_spec_bench(path: Path) -> Iterator[Prompt]:
    for number, record in _jsonl_records(path):
        turns = record.get("turns")
        if (
            "question_id" not in record
            or not isinstance(record.get("category"), str)
            or not isinstance(turns, list)
            or not turns
            or not isinstance(turns[0], str)
        ):
            raise ValueError(
                f"{path}:{number}: expected a Spec-Bench question {{'question_id', 'category', "
                f"'turns': [first user turn, ...]}}"
            )
        yield Prompt(id=str(record["question_id"]), text=turns[0], category=record["category"])


READERS = {
    "squad": _read_squad,
    "wmt": _read_wmt,
    "cnndm": _read_cnndm,
    "jsonl": _read_jsonl,
    "spec-bench": _read_spec_bench,
}
"""The reader of each of ``FORMATS``: path -> prompts."""
