"""The docs cannot drift from the code: every `ppd ...` command the README and the guide quote
parses against the live command-line parser (without running), every figure table of a guide
page names the command that reproduces it, every script and link they name exists, and the
guide's headline figures say what their scripts run."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ppdmodel.cli import build_parser, iter_parsers

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RECORD = DOCS / "record"
GUIDE = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
"""The pages a user reads: the README and the guide (one page per task)."""
INDEXES = [ROOT / "experiments" / "README.md", ROOT / "benchmarks" / "README.md"]
RECORD_PAGES = sorted(RECORD.glob("*.md"))
PAGES = GUIDE + INDEXES + RECORD_PAGES
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
"""Their markdown cells quote commands too (notebook 05 names its place on the path)."""

RETIRED: dict[str, str] = {}
"""Options the dated record (docs/record/) quotes as they were run and that have since been
removed, each with its reason: the record keeps its commands as run, since rewriting them would
misstate what was measured. Only these, and only in the record, are excused; every other option
there must still exist. (None today: `--interleave-probes`, which much of the record passes,
became the default but remains an option.)"""

PATH_TYPES = {"existing_file", "existing_dir", "existing_path", "output_file", "output_dir"}
"""argparse types that look at the file system: a quoted command names files of the reader's
machine (ppd-out/profile.json, path/to/hf-model), so these are not checked."""

PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
"""A value written as a placeholder (FILE, OUT, N, L_S): any value of the option's kind."""


# ---------------------------------------------------------------------------- extraction


@dataclass(frozen=True)
class Quoted:
    """A `ppd` command quoted on a page: its arguments after `ppd`, and whether it is a whole
    command (a line of a code block) or a fragment in running text."""

    page: Path
    line: int
    argv: tuple[str, ...]
    whole: bool
    elided: bool  # "..." stood for options left out
    any_command: bool = False  # "..." stood for the sub-command: `ppd ... --model smollm2`

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: ppd {' '.join(self.argv)}"


def _blank_comments(text: str) -> str:
    """HTML comments (placeholders for text still to come) blanked, line numbers kept."""
    return re.sub(r"<!--.*?-->", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)


def _fences(text: str):
    """(first line number, body) of every fenced code block but Python's (shell lines and
    program output, where a line that starts with `ppd` is a command)."""
    for match in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        if match.group(1) != "python":
            yield text.count("\n", 0, match.start(2)) + 1, match.group(2)


def _ppd_argv(words: list[str]) -> list[str] | None:
    """The arguments after `ppd` (or `python -m ppdmodel`, `torchrun ... -m ppdmodel`) in one
    shell command, or None when it runs something else."""
    while words and (re.fullmatch(r"[A-Za-z_]+=\S*", words[0]) or words[0] in ("$", "nice")):
        words = words[1:]
    if not words:
        return None
    if words[0] == "ppd":
        return words[1:]
    if "-m" in words and words[0].startswith(("python", "torchrun")):
        at = words.index("-m")
        if words[at + 1 : at + 2] == ["ppdmodel"]:
            return words[at + 2 :]
    return None


def _commands(page: Path, line: int, text: str, whole: bool) -> list[Quoted]:
    """The ppd commands in one shell line (split at &&, ;, | and &)."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # unbalanced quotes in prose: not a command
        return []
    found, segment = [], []
    for word in [*words, ";"]:
        if word in ("&&", "||", ";", "|", "&"):
            argv = _ppd_argv(segment)
            if argv is not None:
                elided, any_command = "..." in argv, argv[:1] == ["..."]
                argv = [w.strip("[]") for w in argv if w.strip("[].")]
                found.append(Quoted(page, line, tuple(argv), whole, elided, any_command))
            segment = []
        else:
            segment.append(word)
    return found


def _markdown(page: Path) -> str:
    """A page's markdown; a notebook's markdown cells, one after another."""
    if page.suffix == ".ipynb":
        cells = json.loads(page.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return page.read_text(encoding="utf-8")


def quoted_commands(page: Path) -> list[Quoted]:
    """Every ppd command a page quotes: the lines of its code blocks (a trailing backslash
    continues a line) and the inline code spans of its text."""
    text = _blank_comments(_markdown(page))
    found = []
    for first, body in _fences(text):
        lines = body.split("\n")
        i = 0
        while i < len(lines):
            start, joined = i, lines[i]
            while joined.endswith("\\") and i + 1 < len(lines):
                i += 1
                joined = joined[:-1] + " " + lines[i]
            found += _commands(page, first + start, joined, whole=True)
            i += 1
    prose = re.sub(r"^```.*?^```", lambda m: "\n" * m.group().count("\n"), text,
                   flags=re.S | re.M)  # fmt: skip
    for match in re.finditer(r"`([^`]+)`", prose):
        span = " ".join(match.group(1).split())
        if re.match(r"(ppd|python -m ppdmodel|torchrun .*-m ppdmodel) ", span + " "):
            line = prose.count("\n", 0, match.start()) + 1
            found += _commands(page, line, span, whole=False)
    return found


ALL_COMMANDS = [q for page in PAGES + NOTEBOOKS for q in quoted_commands(page)]


# ---------------------------------------------------------------------------- the parser


class _Choices(list):
    """An option's choices, plus any placeholder."""

    def __contains__(self, value) -> bool:
        placeholder = isinstance(value, str) and bool(PLACEHOLDER.fullmatch(value))
        return placeholder or super().__contains__(value)


def _lenient_type(original):
    def convert(value: str):
        if PLACEHOLDER.fullmatch(value):
            return value
        return value if original is None else original(value)

    return convert


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    """Today's `ppd` parser, as `ppd` builds it, with the checks that read the reader's file
    system switched off, placeholders accepted and abbreviations refused."""
    root = build_parser()
    for _, sub in iter_parsers(root):
        sub.allow_abbrev = False
        for action in sub._actions:
            kind = action.type
            if getattr(kind, "__name__", "") in PATH_TYPES:
                kind = None
            if action.option_strings and action.nargs != 0:
                action.type = _lenient_type(kind)
            if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
                action.choices = _Choices(action.choices)
    return root


def _walk(parser: argparse.ArgumentParser, argv: list[str]):
    """(the sub-command's parser, its prog, the arguments left) for argv's command path."""
    current, argv = parser, list(argv)
    while True:
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not argv or argv[0].startswith("-"):
            return current, argv
        if argv[0] not in subs[0].choices:
            raise AssertionError(f"no sub-command {argv[0]!r} of {current.prog!r}")
        current, argv = subs[0].choices[argv[0]], argv[1:]


def check_fragment(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A command in running text: its sub-command and every option exist, every value given is
    one the option accepts (a fragment may name an option without its value)."""
    sub, rest = _walk(parser, argv)
    action = None
    for word in rest:
        if word.startswith("-") and not re.fullmatch(r"-\d.*", word):
            action = sub._option_string_actions.get(word)
            assert action is not None, f"{sub.prog} has no option {word}"
            continue
        assert action is not None and action.nargs != 0, f"{sub.prog}: stray value {word!r}"
        try:
            value = action.type(word) if action.type else word
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise AssertionError(f"{sub.prog} {action.option_strings[-1]} {word}: {exc}") from exc
        if action.choices is not None:
            assert value in action.choices, f"{sub.prog} {action.option_strings[-1]} {word}"


def check_whole(parser: argparse.ArgumentParser, argv: list[str], elided: bool) -> None:
    """A command on a code line: argparse parses it as `ppd` would (required options too,
    unless "..." left some out)."""
    sub, _ = _walk(parser, argv)
    relaxed = [*sub._actions, *sub._mutually_exclusive_groups] if elided else []
    relaxed = [item for item in relaxed if item.required]
    for item in relaxed:
        item.required = False
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(err.getvalue().strip() or f"exit {exc.code}") from None
    finally:
        for item in relaxed:
            item.required = True


def _check_presets(argv: list[str]) -> None:
    """`ppd plan`'s preset names are choices too, held in the preset tables."""
    if argv[:1] != ["plan"]:
        return
    from sim.hardware import GPUSpec, Link
    from sim.shape import ModelShape

    lookups = {"--shape": ModelShape.from_name, "--gpu": GPUSpec.from_name,
               "--link": Link.from_name}  # fmt: skip
    option = None
    for word in argv[1:]:
        if word.startswith("--"):
            option = word
        elif option in lookups and not PLACEHOLDER.fullmatch(word):
            lookups[option](word)  # ValueError naming the unknown preset


def test_the_pages_quote_the_main_commands():
    found = {q.argv[:2] for q in ALL_COMMANDS if q.page in GUIDE}
    for command in (("plan",), ("measure", "match-rate"), ("measure", "profile"), ("validate",)):
        assert any(argv[: len(command)] == command for argv in found), command
    assert len(ALL_COMMANDS) > 100  # the extraction found the pages' commands


@pytest.mark.parametrize("quoted", ALL_COMMANDS, ids=str)
def test_every_quoted_command_parses(parser, quoted):
    argv = list(quoted.argv)
    if quoted.page in RECORD_PAGES:
        argv = [w for w in argv if w not in RETIRED]
    if quoted.any_command:  # each option is one of some sub-command's
        options = {o for _, sub in iter_parsers(parser) for o in sub._option_string_actions}
        assert {w for w in argv if w.startswith("--")} <= options, quoted
        return
    if quoted.whole:
        check_whole(parser, argv, quoted.elided)
    else:
        check_fragment(parser, argv)
    _check_presets(argv)


def test_retired_options_are_gone_and_only_the_record_quotes_them(parser):
    names = {o for _, sub in iter_parsers(parser) for o in sub._option_string_actions}
    for option in RETIRED:
        assert option not in names, f"{option} exists again: take it out of RETIRED"
    for quoted in ALL_COMMANDS:
        if quoted.page not in RECORD_PAGES:
            assert not set(quoted.argv) & set(RETIRED), quoted


def test_a_bad_command_fails_the_check(parser):
    """The checks catch what they are for: an option that does not exist, a choice that is not
    one, a value of the wrong kind, a missing required option, an unknown preset."""
    with pytest.raises(AssertionError, match="no-such-option"):
        check_whole(parser, ["plan", "--no-such-option"], elided=False)
    with pytest.raises(AssertionError, match="invalid choice"):
        check_whole(parser, ["plan", "--engine", "vllm"], elided=False)
    with pytest.raises(AssertionError, match="--engine vllm"):
        check_fragment(parser, ["plan", "--engine", "vllm"])
    with pytest.raises(AssertionError, match="--devices two"):
        check_fragment(parser, ["plan", "--devices", "two"])
    with pytest.raises(AssertionError, match="required"):
        check_whole(parser, ["validate", "--d-bar", "15"], elided=False)
    check_whole(parser, ["validate", "--d-bar", "15"], elided=True)  # "..." left them out
    with pytest.raises(AssertionError, match="required"):  # and they are required again
        check_whole(parser, ["validate", "--d-bar", "15"], elided=False)
    with pytest.raises(AssertionError, match="no sub-command"):
        check_fragment(parser, ["meausre", "profile"])
    with pytest.raises(ValueError):
        _check_presets(["plan", "--gpu", "b200-nonexistent"])
    check_fragment(parser, ["plan", "--engine", "NAME", "--devices"])  # a placeholder, no value


# ---------------------------------------------------------------------------- figures


def _sections(page: Path):
    """(heading, body) of a page's sections, HTML comments blanked."""
    text = _blank_comments(page.read_text(encoding="utf-8"))
    parts = re.split(r"(?m)^(#{1,6} .*)$", text)
    yield "(top)", parts[0]
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        yield heading.strip("# "), body


def _figure_tables(body: str) -> list[str]:
    """Markdown tables that state figures: at least two cells with a decimal number."""
    tables = re.findall(r"(?m)(?:^\|.*\|[ \t]*\n?)+", body)
    return [t for t in tables if len(re.findall(r"\|[^|]*\d\.\d[^|]*(?=\|)", t)) >= 2]


REPRODUCER = re.compile(r"`(?:[A-Z_]+=\S+ )*(?:ppd |python |bash |experiments/|benchmarks/)")


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_table_names_its_command(page):
    """A guide page that states figures in a table names, in the same section, the command
    that reproduces them (a `ppd` command, or an experiment or benchmark script)."""
    for heading, body in _sections(page):
        if _figure_tables(body):
            stripped = re.sub(r"(?m)^```.*$", "`", body)  # code blocks count as quoted commands
            assert REPRODUCER.search(stripped), f"{page.name}, {heading!r}: no command names it"


# ---------------------------------------------------------------------------- files and links


def test_every_script_the_pages_name_exists_and_parses():
    named = set()
    for page in PAGES:
        named |= set(re.findall(r"(?:benchmarks|experiments|docs)/[\w./-]+\.(?:sh|py)",
                                page.read_text(encoding="utf-8")))  # fmt: skip
    assert "experiments/where_ppd_wins.sh" in named and "experiments/cpu_validate.sh" in named
    for path in sorted(named):
        assert (ROOT / path).is_file(), path
        if path.endswith(".sh"):
            subprocess.run(["bash", "-n", str(ROOT / path)], check=True)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    slugs = set()
    for heading in re.findall(r"(?m)^#{1,6} (.*)$", text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in _anchors(resolved), f"{page.name}: {target}"


def test_the_guide_links_every_page_and_the_record_once():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        if page.name != "index.md":
            assert f"]({page.name}" in index, f"docs/index.md does not link {page.name}"
    links = [
        (page.name, target)
        for page in GUIDE
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
        if "record/" in target
    ]
    assert links == [("index.md", "record/README.md")], links


# ---------------------------------------------------------------------------- headline figures

VALIDATE = DOCS / "validate.md"


def headline_defaults() -> dict[str, str]:
    """The settings experiments/where_ppd_wins.sh runs with unless told otherwise."""
    script = (ROOT / "experiments" / "where_ppd_wins.sh").read_text(encoding="utf-8")
    return dict(re.findall(r"^([A-Z_]+)=\$\{\1:-([^}]*)\}$", script, flags=re.M))


def test_the_headline_figure_states_what_its_script_runs():
    """The guide's "where PPD wins" figure says what experiments/where_ppd_wins.sh does (p,
    prompts, head budget) and what it measured, with the interval."""
    defaults = headline_defaults()
    assert (defaults["LAYER"], defaults["EPOCHS"], defaults["NEW_TOKENS"]) == ("15", "4", "64")
    text = " ".join(VALIDATE.read_text(encoding="utf-8").split())
    start = text.index("Where PPD wins on this CPU")
    section = text[start : text.index("Early exit, predicted then measured", start)]
    assert "bash experiments/where_ppd_wins.sh" in section
    assert "Run in full on the project's shared 2-vCPU virtual machine, 2026-11-27" in section
    assert "1.04x faster than greedy, 95 % interval [1.00, 1.09]" in section
    assert "**1.01x [0.98, 1.06]**" in section  # the repeat, with a fresh profile
    assert "p = 0.33 over 141 tokens" in section
    held = defaults["HELDOUT"].split()
    assert f"held-out questions {held[0]}, {held[1]} and {held[2]}" in section
    assert f"head at layer {defaults['LAYER']}" in section
    assert f"a fixed budget of {defaults['EPOCHS']} epochs" in section
    assert f"{defaults['NEW_TOKENS']} new tokens" in section
    assert f"{defaults['REPEATS']} interleaved rounds" in section
    assert f"({defaults['PROFILE_REPEATS']} rounds)" in section
    assert "p = 0.30" in section  # the newcomer's reproduction, with its p
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "1.04x faster than greedy, 95 % interval [1.00, 1.09]" in readme


def test_the_headline_questions_are_held_out_from_the_head():
    pytest.importorskip("torch")
    import measure

    spec = ROOT.parent / "shared" / "data" / "spec_bench_questions.jsonl"
    if not spec.is_file():
        pytest.skip(f"{spec} is not present")
    held = {p.id for p in measure.load_prompts(spec, "spec-bench", split="heldout")}
    assert set(headline_defaults()["HELDOUT"].split()) <= held
    assert not {"161", "241", "321"} & held  # the 2026-11-22 figure's questions were not


def test_the_prediction_formula_is_what_predict_computes():
    """T_pred = sum_runs (ell B - M S - c (B - G)), c = 1 for a run that reached the limit."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from measure.eval.predict import predict_ppd
    from measure.eval.repeat import PPDConfig
    from ppdmodel.cost_profile import parse_cost_profile
    from ppdmodel.passes import pass_times
    from tests.ppdmodel.profiles import minimal_profile

    assert "T_pred = sum_runs ( ell B - M S - c (B - G) )" in VALIDATE.read_text(encoding="utf-8")
    profile = parse_cost_profile(minimal_profile(d=30, serial=True))
    runs = [SimpleNamespace(m=[1, 0, 1, 1, 0, 0, 1], tokens=list(range(8))),
            SimpleNamespace(m=[0, 0, 1], tokens=list(range(4)))]  # fmt: skip
    for config in (PPDConfig(15, 3), PPDConfig(20, 1)):
        costs = profile.costs("single", d_bar=config.d_bar)
        shape = dict(d=30, d_bar=config.d_bar, k=config.k, costs=costs, early_head="main")
        times = pass_times(**shape)
        b, s, g = times.miss_only_s, times.saving_s, costs.greedy_token_seconds(30)
        expected = sum(
            (len(r.m) + 1) * b - sum(r.m) * s - (len(r.m) + 1 == 8) * (b - g) for r in runs
        )
        got = predict_ppd(profile, runs, config, max_new_tokens=8).closed_form_s
        assert got == pytest.approx(float(expected), rel=1e-12)


def test_the_plan_page_lists_every_preset():
    """docs/plan.md names the shape, GPU and link presets `ppd plan` knows, and no others."""
    from sim.hardware import GPU_PRESETS, LINK_PRESETS
    from sim.shape import SHAPE_PRESETS

    text = " ".join((DOCS / "plan.md").read_text(encoding="utf-8").split())
    lists = {
        "`--shape` a model shape preset (": set(SHAPE_PRESETS),
        "`--gpu` one or more GPU presets (": set(GPU_PRESETS),
        "`--link` the interconnect (": set(LINK_PRESETS),
    }
    for lead, presets in lists.items():
        named = text[text.index(lead) + len(lead) :].split(")")[0].split(";")[0]
        assert {word.split(":")[0] for word in named.split(", ")} == presets, lead
