"""Dataset loaders: Table 1 templates, every shipped sample format, sniffing and bad files."""

from __future__ import annotations

import hashlib
import json

import pytest

from measure.datasets import (
    SAMPLE_FILES,
    TEMPLATES,
    Prompt,
    detect_format,
    load_prompts,
    prompts_hash,
    sample_path,
)


def test_templates_match_paper_table_1():
    squad = TEMPLATES["squad"].format(context="C", question="Q?")
    assert squad == (
        "We have provided context information below.\nC\n"
        "### Given this information, please answer the question: Q?\n### Assistant:"
    )
    wmt = TEMPLATES["wmt"].format(source_sentence="Hello.")
    assert wmt.splitlines() == [
        "### Instruction: Translate English sentence into French.",
        "English: Sounds like a typical rugby club to me.",
        "French: Ça m'a l'air d'être un club de rugby typique. #",
        "English: At an English university, perhaps",
        "French: Dans une université anglaise, peut-être #",
        "English: Hello.",
        "French:",
    ]
    cnndm = TEMPLATES["cnndm"].format(context="A.")
    assert cnndm == "# Article\nA.\n\n# Summarize the article\n### Assistant:"


def test_every_sample_file_ships_and_loads():
    for fmt in SAMPLE_FILES:
        path = sample_path(fmt)
        assert path.is_file(), path
        prompts = load_prompts(path)
        assert len(prompts) >= 3, fmt
        assert all(isinstance(p, Prompt) and p.text for p in prompts)
        assert len({p.id for p in prompts}) == len(prompts), f"ids not unique in {fmt}"


def test_squad_sample():
    prompts = load_prompts(sample_path("squad"), "squad")
    assert [p.id for p in prompts] == ["s0001", "s0002", "s0003", "s0004"]
    first = prompts[0]
    assert first.text.startswith("We have provided context information below.\nThe lighthouse")
    assert first.text.endswith(
        "please answer the question: When was the lighthouse on Gull Point built?\n### Assistant:"
    )
    assert first.reference == "1871"


def test_wmt_formats_agree():
    tsv = load_prompts(sample_path("wmt"))
    plain = load_prompts(sample_path("wmt-plain"))
    sgm = load_prompts(sample_path("wmt-sgm"))
    assert [p.text for p in tsv] == [p.text for p in plain]
    assert [p.reference for p in tsv] == [p.reference for p in plain]
    assert tsv[0].text.endswith("English: The train leaves at seven in the morning.\nFrench:")
    assert tsv[0].reference == "Le train part à sept heures du matin."
    assert [p.id for p in sgm] == ["doc-a:1", "doc-a:2", "doc-b:1", "doc-b:2"]
    # sgm entities are unescaped and the -ref.fr.sgm sibling provides references
    assert "English: Fish & chips are closed on Mondays.\nFrench:" in sgm[2].text
    assert sgm[2].reference == "Le fish & chips est fermé le lundi."


def test_cnndm_csv_and_jsonl_agree():
    csv_prompts = load_prompts(sample_path("cnndm"))
    jsonl_prompts = load_prompts(sample_path("cnndm-jsonl"))
    assert csv_prompts == jsonl_prompts
    assert csv_prompts[0].text.startswith("# Article\nA small town")
    assert csv_prompts[0].text.endswith("\n\n# Summarize the article\n### Assistant:")
    assert '"puffins"' in csv_prompts[1].text  # CSV quoting round-trips


def test_plain_jsonl_has_no_template():
    prompts = load_prompts(sample_path("jsonl"), limit=2)
    assert len(prompts) == 2
    assert prompts[0] == Prompt(
        id="p1", text='def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    )


def test_detect_format():
    expected = {
        "squad": "squad",
        "wmt": "wmt",
        "wmt-sgm": "wmt",
        "wmt-plain": "wmt",
        "cnndm": "cnndm",
        "cnndm-jsonl": "cnndm",
        "jsonl": "jsonl",
        "spec-bench": "spec-bench",
    }
    assert {k: detect_format(sample_path(k)) for k in SAMPLE_FILES} == expected


def test_prompts_hash_is_sha256_of_bytes():
    path = sample_path("squad")
    assert prompts_hash(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="prompts file not found"):
        load_prompts(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="limit must be"):
        load_prompts(sample_path("jsonl"), limit=0)
    with pytest.raises(ValueError, match="fmt must be"):
        load_prompts(sample_path("jsonl"), "xml")
    with pytest.raises(ValueError, match="fmt must be one of"):
        sample_path("xml")
    bad_squad = tmp_path / "bad.json"
    bad_squad.write_text(json.dumps({"version": "1.1"}))
    with pytest.raises(ValueError, match=r"bad\.json: not a SQuAD v1\.1 file"):
        load_prompts(bad_squad)
    bad_tsv = tmp_path / "bad.tsv"
    bad_tsv.write_text("only english\n")
    with pytest.raises(ValueError, match=r"bad\.tsv:1: expected 'english<TAB>french'"):
        load_prompts(bad_tsv)
    bad_jsonl = tmp_path / "bad.jsonl"
    bad_jsonl.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: expected a string 'prompt'"):
        load_prompts(bad_jsonl)
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("id,text\n1,hello\n")
    with pytest.raises(ValueError, match=r"bad\.csv: expected CNN/DM columns"):
        load_prompts(bad_csv)
    unknown = tmp_path / "x.xml"
    unknown.write_text("<xml/>")
    with pytest.raises(ValueError, match="cannot guess the format"):
        load_prompts(unknown)


def test_spec_bench_sample_by_category_and_split():
    path = sample_path("spec-bench")
    everything = load_prompts(path)
    assert [p.category for p in everything[:2]] == ["translation", "translation"]
    assert everything[0].text.startswith("Translate German to English:")  # no template
    assert everything[8].text.endswith("Explain step by step.")  # the first turn only
    translation = load_prompts(path, "spec-bench", category="translation")
    assert [p.id for p in translation] == ["1", "2", "3", "4"]
    two = load_prompts(path, category=["qa", "summarization"])
    assert [p.id for p in two] == ["5", "6", "7", "8"]
    held = load_prompts(path, split="heldout")
    train = load_prompts(path, split="train")
    assert [p.id for p in held] == ["4"]  # every 4th of each category
    assert sorted(p.id for p in held + train) == sorted(p.id for p in everything)
    assert [p.id for p in load_prompts(path, split="heldout", holdout_every=2)] == [
        "2",
        "4",
        "6",
        "8",
    ]
    assert [p.id for p in load_prompts(path, category="translation", limit=2)] == ["1", "2"]


def test_spec_bench_bad_input(tmp_path):
    path = sample_path("spec-bench")
    with pytest.raises(ValueError, match=r"category must be among .*'translation'.*\['poetry'\]"):
        load_prompts(path, category="poetry")
    with pytest.raises(ValueError, match="split must be one of"):
        load_prompts(path, split="test")
    with pytest.raises(ValueError, match="holdout_every must be an integer >= 2"):
        load_prompts(path, split="train", holdout_every=1)
    with pytest.raises(ValueError, match="only the spec-bench format has"):
        load_prompts(sample_path("jsonl"), category="qa")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": []}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: expected a Spec-Bench question"):
        load_prompts(bad, "spec-bench")


@pytest.mark.skipif(
    not __import__("pathlib").Path("../shared/data/spec_bench_questions.jsonl").is_file(),
    reason="Spec-Bench questions not beside the checkout",
)
def test_real_spec_bench_questions():
    path = "../shared/data/spec_bench_questions.jsonl"
    prompts = load_prompts(path)  # format sniffed from the first record
    assert len(prompts) == 480
    assert len(load_prompts(path, category="translation")) == 80
    assert len(load_prompts(path, category="translation", split="heldout")) == 20
