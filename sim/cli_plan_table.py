"""``ppd plan``'s p-table and profile helpers: which table, whose model, what it covers, and
the ``ppd validate`` command that settles a close call (argparse handlers only: the fuzz test
leaves ``cli*`` modules to tests/test_cli_errors.py)."""

from __future__ import annotations

import json
import shlex
from contextlib import suppress
from pathlib import Path

from sim.cli_settings import PlanSettings


def profile_entry(path) -> dict:
    """The ``model`` entry of a cost profile ({} for a bare DecodeCosts file)."""
    with suppress(ValueError, OSError):
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        model = data.get("model") if isinstance(data, dict) else None
        if isinstance(model, dict):
            return {key: str(value) for key, value in model.items()
                    if key in ("name", "path") and value}  # fmt: skip
    return {}


def read_ptable(settings: PlanSettings, model_name: str = "", d: int = 0):
    """The p-table (--table, or the profiled model's shipped atlas, or Table 2), refused when
    it was measured on another model than the profiled one (``check_table_model``)."""
    from sim.ptable import PTable

    given = settings.table
    if given.table is None:  # the model's own shipped atlas when there is one, else Table 2
        try:
            table = PTable.builtin(model_name) if model_name else PTable.paper()
        except ValueError:
            table = PTable.paper()
    elif Path(given.table).is_dir() or Path(given.table).suffix == ".jsonl":
        table = PTable.from_run(given.table)
    elif Path(given.table).suffix in (".csv", ".parquet") or Path(given.table).exists():
        table = PTable.read(given.table, d=given.table_d)
    else:
        table = PTable.builtin(given.table)
    check_table_model(settings, table, model_name, d)
    return table


def check_table_model(settings: PlanSettings, table, model_name: str, d: int) -> None:
    """Refuse (ValueError) a p-table of another model than the profile's (another name, or a
    measured folder of another depth) unless --allow-other-model-table."""
    from sim.ptable import same_model

    given = settings.table
    if not settings.hardware.profile or given.allow_other_model_table:
        return
    measured = given.table is not None and Path(given.table).exists() and Path(
        given.table).suffix not in (".csv", ".parquet")  # fmt: skip
    table_model = table.model or ("" if not measured else f"a {table.d}-layer model")
    other = not same_model(table.model, model_name) or (measured and table.d != d)
    if other:
        where = "no --table was given and " if given.table is None else ""
        raise ValueError(
            f"{where}p-table '{table.name}' was measured on {table_model!r}, the profile on "
            f"{model_name or f'a {d}-layer model'!r}: give --table with this model's rates (a "
            "ppd measure match-rate or ppd validate folder) or --allow-other-model-table"
        )


def replicates_of(settings: PlanSettings, hardware):
    """Per hardware model, its profile's bootstrap replicates (None without a profile)."""
    from ppdmodel.cost_profile import PROFILE_FORMAT, parse_cost_profile
    from sim.plan_intervals import profile_replicates

    profile = settings.hardware.profile
    if not profile:
        return None
    data = json.loads(Path(profile).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        return None  # a bare DecodeCosts file keeps no samples
    return profile_replicates(parse_cost_profile(data), hardware)


def settle_command(settings: PlanSettings, verdict, ptable, decision=None) -> str:
    """The command that settles an open call: for p, ``ppd measure match-rate`` at the
    layer and k in question; for the engine, ``ppd measure profile --device cuda``; else the
    ``ppd validate`` command that times the recommendation and its close rivals ("" where the
    call is clear, or one command cannot time them)."""
    from sim.plan_intervals import validate_command
    from sim.ptable import run_metadata

    if verdict.kind == "clear":
        return ""
    prompts = "PROMPTS"
    profile, table = settings.hardware.profile, settings.table.table
    entry = profile_entry(profile) if profile else {}
    model = entry.get("path") or entry.get("name") or "MODEL"
    if table is not None and Path(table).exists():
        folder = Path(table) if Path(table).is_dir() else Path(table).parent
        with suppress(ValueError):
            prompts = run_metadata(folder).get("prompts") or prompts
    out = Path(settings.output.out)
    source = verdict.dominant or "p"
    if source == "p":
        layers = ["--layers", str(decision.d_bar), "--ks", str(decision.k)] if (
            decision is not None and decision.d_bar) else []  # fmt: skip
        return shlex.join(["ppd", "measure", "match-rate", "--model", model, "--prompts",
                           prompts, *layers, "--out", str(out / "p")])  # fmt: skip
    if source == "engine":
        return shlex.join(["ppd", "measure", "profile", "--model", model, "--device", "cuda",
                           "--out", str(out / "profile.json")])  # fmt: skip
    if verdict.validate_flags is None:
        return ""
    return validate_command(verdict.validate_flags, model=model, prompts=prompts,
                            profile=profile, ell=settings.confirmation.ell,
                            out=str(out / "settle"))  # fmt: skip


def coverage_note(ptable, screened, d: int) -> str:
    """Which screened d_bar the p-table did not measure (their p is interpolated)."""
    if ptable.d != d:  # mapped by relative depth: _depth_note says so
        return ""
    measured = set(ptable.df.layer.astype(int))
    missing = sorted(set(screened.d_bar[screened.method == "ppd"].astype(int)) - measured)
    if not missing or len(measured) > 8:
        return ""
    return (f"p-table '{ptable.name}' measured layers {sorted(measured)} only: p at the other "
            f"d_bar ({len(missing)} of them) is interpolated, and its intervals draw it anywhere "
            "between the measured neighbours (toward p = 1 beyond the deepest)")  # fmt: skip


def sharing_note(hardware, screened) -> str:
    """The sharing factors that priced each screened k of a profile backend with pair factors
    (``ProfileHardware.device_slowdowns``: main's and the batch's at k or the nearest measured
    k; with the early head on the candidate side, that placement's own where the profile
    measured them), as ``ppd validate`` applies them; "" where no backend has them."""
    from sim.hardware_costs import ProfileHardware

    parts = []
    for i, hw in enumerate(hardware):
        if not isinstance(hw, ProfileHardware) or hw.entry is None:
            continue
        rows = (screened.method == "ppd") & (screened.hardware == i) & (screened.tp_candidates > 0)
        each = _factors_note(hw, sorted(set(screened.k[rows])), None, "batch")
        if each:
            probe = f"pair probe at d_bar={hw.entry.pair_d_bar}"
            note = (f"{hw.name} shares the machine with the profile's pair factors "
                    f"({probe}), as ppd validate: {each}")  # fmt: skip
            cand = rows & (screened.early_head == "candidates")
            if hw.entry.pair_slowdowns_candidates and cand.any():
                ks = sorted(set(screened.k[cand]))
                note += (" (early head on main); early head on the candidate side: "
                         + _factors_note(hw, ks, "candidates", "early head + batch"))  # fmt: skip
            parts.append(note)
    return "; ".join(parts)


def _factors_note(hw, ks, early_head, side: str) -> str:
    """``k=..: x.. main / x.. <side>`` for each k of ``ks`` priced by pair factors."""
    factors = {int(k): hw.entry.sharing(int(k), early_head) for k in ks}
    return ", ".join(
        f"k={k}: x{s.main:.3f} main / x{s.candidate:.3f} {side}"
        + ("" if s.measured_k == k else f" (k={s.measured_k}'s, the nearest measured)")
        for k, s in factors.items()
        if s.source == "pair"
    )


def other_model_note(settings: PlanSettings, ptable, model_name: str) -> str:
    from sim.ptable import same_model

    allowed = settings.table.allow_other_model_table
    if settings.hardware.profile and allowed and not same_model(ptable.model, model_name):
        return (f"p-table '{ptable.name}' measured on {ptable.model!r}, used for "
                f"{model_name!r} (--allow-other-model-table)")  # fmt: skip
    return ""


def depth_note(ptable, shape) -> str:
    if ptable.d == shape.num_layers:
        return ""
    return (f"p-table '{ptable.name}' was measured on a {ptable.d}-layer model; mapped to "
            f"{shape.num_layers} layers by relative depth")  # fmt: skip
