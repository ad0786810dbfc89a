"""``ppd app``'s page (a Streamlit script): widgets -> ``PageInputs`` -> ``page_view`` -> drawn.

It prices nothing: every figure comes from ``sim.cli_app_view.page_view``, which plans through
``ppd plan``'s parser and ``sim.plan``. A bad input is a message naming the field, never a
traceback, and the page stays usable. Run by ``ppd app`` (``sim.cli_app``); tests drive it
with Streamlit's AppTest and in Chromium.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st
from matplotlib.colors import to_hex

from sim.cli_app_view import (
    PAGE_DRAWS,
    WHAT_IF_RULE,
    InputError,
    PageInputs,
    command_line,
    page_view,
    plan_argv,
)
from sim.hardware import ENGINE_PRESETS, GPU_PRESETS, LINK_PRESETS
from sim.plan_intervals import PLAN_DRAWS
from sim.plan_plot import METHOD_STYLE
from sim.plan_summary import HEAD_WORDS
from sim.ptable import REFERENCE_TABLES, PTable
from sim.shape import SHAPE_PRESETS

# The engine choice that gives no --engine.
IDEAL = "ideal (roofline, no host time)"
# Interval draws the page offers (fewer: faster).
DRAW_CHOICES = (PAGE_DRAWS, 24, PLAN_DRAWS)
# Largest device count the page's widget takes.
MAX_DEVICES = 64
# Largest microseconds a host or launch figure may be on the page.
MAX_US = 1e6


@st.cache_resource
def _work_dir() -> Path:
    """Where uploads and p tables set by hand are kept while the server runs."""
    return Path(tempfile.mkdtemp(prefix="ppd-app-"))


@st.cache_resource(max_entries=32, show_spinner="planning ...")
def _view(inputs: PageInputs):
    """``page_view``, kept per inputs: a widget set back re-renders at once."""
    started = time.perf_counter()
    view = page_view(inputs, _work_dir() / "what-if")
    return view, time.perf_counter() - started


@st.cache_resource(max_entries=64, show_spinner=False)
def _specs(inputs: PageInputs, workload: str) -> dict:
    """The Vega-Lite specs of one view's figures for ``workload``, built once (Altair checks a
    chart against its schema each time it is drawn: a few tenths of a second)."""
    view = _view(inputs)[0]
    points = view.pareto[view.pareto.workload == workload]
    curve = view.p_curve[view.p_curve.workload == workload] if len(view.p_curve) else None
    terms = view.waterfall[view.waterfall.workload == workload] if len(view.waterfall) else None
    specs = {"pareto": _pareto_chart(points).to_dict()}
    if curve is not None and len(curve):
        specs["p"] = _p_chart(curve).to_dict()
    if terms is not None and len(terms):
        specs["waterfall"] = _waterfall_chart(terms).to_dict()
    return specs


def _saved(upload) -> str:
    """An uploaded file saved under the work folder (by content), its path."""
    data = upload.getvalue()
    folder = _work_dir() / hashlib.sha1(data).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(upload.name).name
    path.write_bytes(data)
    return str(path)


@st.cache_data(max_entries=64, show_spinner=False)
def _table_choices(table: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(workloads, heads) of a p-table, or empty where it cannot be read here (the plan then
    says why)."""
    try:
        if table in REFERENCE_TABLES:
            found = PTable.builtin(table)
        elif Path(table).is_dir() or table.endswith(".jsonl"):
            found = PTable.from_run(table)
        else:
            found = PTable.read(table)
        return tuple(found.workloads), tuple(found.heads)
    except (ValueError, OSError):
        return (), ()


def _model(shown: dict) -> dict:
    st.sidebar.header("Model")
    sources = ["shape preset", "config.json upload", "local folder or config.json path"]
    source = st.sidebar.radio("model from", sources, key="model_from")
    if source == "shape preset":
        shapes = sorted(SHAPE_PRESETS)
        shape = st.sidebar.selectbox("shape", shapes, index=shapes.index("vicuna-13b"), key="shape")
        return {"shape": shape}
    if source == "config.json upload":
        upload = st.sidebar.file_uploader("config.json", type=["json"], key="config_upload")
        if upload is None:
            st.sidebar.caption("upload a Hugging Face config.json")
            return {"shape": "vicuna-13b"}
        path = _saved(upload)
        shown[path] = upload.name
        return {"config": path}
    path = st.sidebar.text_input("folder or config.json path", key="config_path").strip()
    return {"config": path} if path else {}


def _hardware() -> dict:
    st.sidebar.header("Hardware")
    gpus, links = sorted(GPU_PRESETS), sorted(LINK_PRESETS)
    values = {
        "gpu": st.sidebar.selectbox("GPU", gpus, index=gpus.index("h100-sxm"), key="gpu"),
        "link": st.sidebar.selectbox("link", links, index=links.index("nvlink4"), key="link"),
        "devices": int(st.sidebar.number_input("devices", 1, MAX_DEVICES, 8, key="devices")),
    }
    engine = st.sidebar.selectbox("engine", [IDEAL, *sorted(ENGINE_PRESETS)], key="engine")
    values["engine"] = None if engine == IDEAL else engine
    with st.sidebar.expander("your own host and launch numbers (us)"):
        own = st.checkbox("use my numbers", key="own_numbers")
        names = (("host_us", "host us per token"), ("host_us_per_layer", "host us per layer"),
                 ("launch_us", "us per extra launch"),
                 ("message_us", "us per PPD message"))  # fmt: skip
        for name, text in names:
            value = st.number_input(text, 0.0, MAX_US, 0.0, key=name, disabled=not own)
            if own and (name == "host_us" or values["engine"]):
                values[name] = float(value)
    return values


def _workload(shown: dict) -> dict:
    st.sidebar.header("Workload and p")
    source = st.sidebar.radio("p from", ["a p-table", "set p by hand"], key="p_from")
    if source == "set p by hand":
        p = st.sidebar.slider("p (match rate at d_bar)", 0.0, 1.0, 0.6, 0.01, key="p")
        st.sidebar.caption(WHAT_IF_RULE)
        return {"p": float(p), "table": "paper"}
    kinds = [*REFERENCE_TABLES, "upload a CSV/Parquet table", "local folder or file path"]
    kind = st.sidebar.selectbox("p-table", kinds, key="table_kind")
    values: dict = {"table": kind}
    if kind == kinds[-2]:
        upload = st.sidebar.file_uploader("p-table file", type=["csv", "parquet"],
                                          key="table_upload")  # fmt: skip
        if upload is None:
            st.sidebar.caption("upload a table with workload, head, layer, k, p_correct")
            values["table"] = "paper"
        else:
            values["table"] = _saved(upload)
            shown[values["table"]] = upload.name
    elif kind == kinds[-1]:
        values["table"] = st.sidebar.text_input("match-rate / validate folder or table file",
                                                key="table_path").strip() or "paper"  # fmt: skip
    if values["table"] not in REFERENCE_TABLES:
        layers = st.sidebar.number_input("layers of the table's model (0: its d column)", 0,
                                         100_000, 0, key="table_d")  # fmt: skip
        values["table_d"] = int(layers) or None
    workloads, _ = _table_choices(values["table"])
    if workloads:
        picked = st.sidebar.selectbox("workload", ["all", *workloads], index=1, key="workload")
        values["workload"] = None if picked == "all" else picked
    return values


def read_inputs() -> tuple[PageInputs, dict]:
    """The sidebar's widgets as ``PageInputs``, and the names of uploaded files' copies."""
    shown: dict[str, str] = {}
    values = {**_model(shown), **_hardware(), **_workload(shown)}
    st.sidebar.header("Heads, quality, intervals")
    heads = st.sidebar.multiselect("head kinds (none: every head of the table)",
                                   sorted(HEAD_WORDS), key="heads")  # fmt: skip
    values["heads"] = tuple(heads) or None
    values["min_quality"] = float(st.sidebar.slider("minimum quality", 0.0, 1.0, 1.0, 0.01,
                                                    key="min_quality"))  # fmt: skip
    values["draws"] = int(st.sidebar.selectbox("interval draws", DRAW_CHOICES, key="draws"))
    return PageInputs(**values), shown


def _pareto_chart(points: pd.DataFrame):
    methods = [m for m in METHOD_STYLE if m in set(points.method)]
    colour = alt.Color("method:N", scale=alt.Scale(
        domain=methods, range=[to_hex(METHOD_STYLE[m][0]) for m in methods]))  # fmt: skip
    base = alt.Chart(points).encode(
        x=alt.X("compute_ratio:Q", title="compute per token (x greedy on one device)",
                scale=alt.Scale(type="log", nice=False, domain=[
                    float(points.compute_ratio.min()) / 1.25,
                    float(points.compute_ratio.max()) * 1.25])),
        y=alt.Y("speedup:Q", title="speed-up over greedy on one device"), color=colour,
        tooltip=["config", "speedup", "speedup_low", "speedup_high", "compute_ratio"],
    )  # fmt: skip
    chart = base.mark_line(point=True) + base.mark_errorbar(opacity=0.35).encode(
        y=alt.Y("speedup_low:Q", title="speed-up over greedy on one device"),
        y2="speedup_high:Q")  # fmt: skip
    star = alt.Chart(points[points.recommended]).mark_point(
        shape="diamond", size=260, filled=True, color="gold", stroke="black").encode(
        x="compute_ratio:Q", y="speedup:Q", tooltip=["config", "speedup"])  # fmt: skip
    return (chart + star).properties(height=320)


def _p_chart(curve: pd.DataFrame):
    lines = curve.melt(id_vars=["p"], value_vars=["ppd_speedup", "alternative_speedup"],
                       var_name="what", value_name="speedup").dropna()  # fmt: skip
    lines["what"] = lines.what.map(
        {
            "ppd_speedup": "PPD",
            "alternative_speedup": "best other method",
        }
    )
    colours = alt.Scale(domain=["PPD", "best other method"],
                        range=[to_hex("tab:blue"), to_hex("tab:orange")])  # fmt: skip
    chart = alt.Chart(lines).mark_line().encode(
        x=alt.X("p:Q", title="p (match rate)"), y=alt.Y("speedup:Q", title="speed-up"),
        color=alt.Color("what:N", legend=alt.Legend(orient="bottom", title=None),
                        scale=colours))  # fmt: skip
    first = curve.iloc[0]
    marks = pd.DataFrame([{"p": first.break_even_p, "mark": "break-even"},
                          {"p": first.assumed_p, "mark": "p assumed"}])  # fmt: skip
    marks = marks[marks.p.between(0, 1)]
    rules = alt.Chart(marks).mark_rule(strokeDash=[4, 3]).encode(
        x="p:Q", color=alt.value("black"), tooltip=["mark", "p"])  # fmt: skip
    labels = alt.Chart(marks).mark_text(align="left", dx=4, baseline="top").encode(
        x="p:Q", y=alt.value(4), text="mark:N")  # fmt: skip
    return (chart + rules + labels).properties(height=320)


def _waterfall_chart(terms: pd.DataFrame):
    first = terms.iloc[0]
    total = {"label": "= PPD, predicted", "start": 0.0, "end": first.total_s,
             "seconds": first.total_s, "kind": "prediction"}  # fmt: skip
    greedy = {"label": "greedy on main's devices", "start": 0.0, "end": first.greedy_s,
              "seconds": first.greedy_s, "kind": "greedy"}  # fmt: skip
    terms = pd.concat([terms.assign(kind="term"), pd.DataFrame([total, greedy])])
    terms = terms.assign(start_ms=terms.start * 1e3, end_ms=terms.end * 1e3,
                         ms=terms.seconds * 1e3)  # fmt: skip
    order = list(terms.label)
    kinds = {"term": "tab:blue", "prediction": "tab:green", "greedy": "tab:gray"}
    colour = alt.Color("kind:N", legend=None, scale=alt.Scale(
        domain=list(kinds), range=[to_hex(c) for c in kinds.values()]))  # fmt: skip
    bars = alt.Chart(terms).mark_bar().encode(
        y=alt.Y("label:N", sort=order, title=None,
                axis=alt.Axis(labelLimit=260, labelOverlap=False)),
        x=alt.X("start_ms:Q", title="ms per token"), x2="end_ms:Q", color=colour,
        tooltip=["label", alt.Tooltip("ms:Q", format=".4f")])  # fmt: skip
    return bars.properties(height=26 * len(terms))


def _figures(view, workload: str) -> None:
    specs = _specs(view.inputs, workload)
    points = view.pareto[view.pareto.workload == workload]
    best = points[points.recommended].iloc[0]
    left, right = st.columns(2)
    with left:
        st.subheader("Every method: speed-up against compute")
        words = (f"pareto chart: recommended {best.config}, {best.speedup:.3f}x at "
                 f"{best.compute_ratio:.2f}x compute; bars: 95 % intervals")  # fmt: skip
        st.vega_lite_chart(spec=specs["pareto"], width="stretch", alt=words)
        st.caption(words)
    with right:
        st.subheader("PPD against p")
        if "p" not in specs:
            st.info("no PPD configuration was screened for this workload")
        else:
            first = view.p_curve[view.p_curve.workload == workload].iloc[0]
            words = (f"p chart: break-even p {first.break_even_p:.3f} against the best other "
                     f"method on the same devices; p assumed {first.assumed_p:.3f}")  # fmt: skip
            st.vega_lite_chart(spec=specs["p"], width="stretch", alt=words)
            st.caption(words)
    if "waterfall" in specs:
        st.subheader("Where PPD's time per token goes")
        first = view.waterfall[view.waterfall.workload == workload].iloc[0]
        words = (f"waterfall: {first.config}: Theorem 4.1's ideal {first.seconds * 1e3:.3f} ms "
                 f"to the prediction {first.total_s * 1e3:.3f} ms per token; greedy on main's "
                 f"devices {first.greedy_s * 1e3:.3f} ms")  # fmt: skip
        st.vega_lite_chart(spec=specs["waterfall"], width="stretch", alt=words)
        st.caption(words)


def _decision(view, shown: dict, seconds: float) -> None:
    st.subheader("Decision")
    st.code("\n".join(view.summary), language=None)
    st.markdown("**What it rests on**")
    st.markdown("\n".join(f"- {source}: {words}" for source, words in view.sources))
    open_calls = {w: c for w, c in view.settle.items() if c}
    if open_calls:
        st.markdown("**Settle it (one measurement each)**")
        for workload, command in open_calls.items():
            st.code(f"{command}  # {workload}", language="bash")
    for note in view.notes:
        st.caption(f"note: {note}")
    st.subheader("The command that reproduces this view")
    st.code(command_line(view.argv, shown), language="bash", wrap_lines=True)
    if view.inputs.p is not None:
        table = next(a for a in view.argv if a.endswith(".csv"))
        st.download_button("download the p-table this p stands for", Path(table).read_bytes(),
                           file_name=Path(table).name, mime="text/csv")  # fmt: skip
    st.caption(f"planned in {seconds:.2f} s; intervals from {view.inputs.draws} draws "
               f"(ppd plan's default: {PLAN_DRAWS}); the frontier is not simulated "
               "(--confirm-n 0)")  # fmt: skip


def _basis(view) -> None:
    st.subheader("Regime of each tensor-parallel degree (greedy)")
    if len(view.regimes):
        st.dataframe(view.regimes, hide_index=True, width="stretch")
    else:
        st.info("the ideal engine has no host time, so no regime: pick an engine preset")
    st.subheader("Evidence behind the engine preset")
    st.write(view.preset)
    st.dataframe(view.evidence, hide_index=True, width="stretch")


def main() -> None:
    st.set_page_config(page_title="PPD what-if", layout="wide")
    st.title("PPD what-if: the planner in a browser")
    inputs, shown = read_inputs()
    try:
        view, seconds = _view(inputs)
    except InputError as exc:
        st.error(str(exc))
        return
    except ValueError as exc:  # the planner's own, naming its parameter
        st.error(f"plan: {exc}")
        return
    except Exception as exc:  # never a traceback on the page
        first = (str(exc).splitlines() or [""])[0]
        st.error(f"unexpected failure ({type(exc).__name__}): {first}; this command with "
                 "--debug shows where:")  # fmt: skip
        st.code(command_line(plan_argv(inputs), shown), language="bash", wrap_lines=True)
        return
    _decision(view, shown, seconds)
    workloads = list(dict.fromkeys(view.pareto.workload))
    workload = workloads[0]
    if len(workloads) > 1:
        workload = st.selectbox("figures for workload", workloads, key="figure_workload")
    _figures(view, workload)
    _basis(view)


if __name__ == "__main__":
    main()
