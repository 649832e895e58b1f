"""Peak memory of inference, ES and RL training steps (files from `esopt memory`): the
table, and a figure with the peaks and our ratios beside the paper's. A sharded RL step's
file (rl.ranks > 1) holds every rank's peak and, as peak_bytes, the largest: memory per GPU."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from esopt.report.files import save_figure

log = logging.getLogger("esopt.report")

METHODS = ["inference", "es", "grpo", "ppo"]
LABELS = {"inference": "inference", "es": "Agentic ESOpt", "grpo": "Agentic GRPO", "ppo": "Agentic PPO"}
COLORS = {"inference": "0.55", "es": "tab:blue", "grpo": "tab:green", "ppo": "tab:orange"}
GIB = 2 ** 30
# The paper (Qwen3.5-4B): ESOpt 8.41 GB, the same as inference; GRPO 58.88 GB.
PAPER = {"es_gb": 8.41, "grpo_gb": 58.88}

FILE_COLUMNS = ["method", "model", "params", "dtype", "device", "ranks", "measure", "model_state_bytes",
                "peak_above_load_bytes", "peak_bytes", "step_wall_s", "source"]
TABLE_COLUMNS = ["method", "model", "params", "dtype", "device", "ranks", "measure", "model_state_bytes",
                 "peak_above_load_bytes", "peak_bytes", "peak_gib", "ratio_to_inference", "ratio_to_es", "step_wall_s"]


def _order(methods) -> list[str]:
    methods = list(dict.fromkeys(methods))
    return [m for m in METHODS if m in methods] + sorted(m for m in methods if m not in METHODS)


def load_memory(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """One row per memory file; peak_bytes = model_state_bytes + peak_above_load_bytes
    when the file leaves it out; ranks 1 when it does not say. Two files for one method is an error."""
    rows = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        if not rec.get("method"):
            raise ValueError(f"{p}: memory file has no method")
        state, above = rec.get("model_state_bytes"), rec.get("peak_above_load_bytes")
        peak = rec.get("peak_bytes")
        if peak is None and state is not None and above is not None:
            peak = state + above
        if peak is None:
            raise ValueError(f"{p}: memory file has neither peak_bytes nor model_state_bytes + peak_above_load_bytes")
        rows.append({**{k: rec.get(k) for k in ["method", "model", "params", "dtype", "device", "measure"]}, "model_state_bytes": state,
                     "peak_above_load_bytes": above, "peak_bytes": peak, "step_wall_s": rec.get("step_wall_s"),
                     "ranks": rec.get("ranks", 1), "source": str(p)})
    df = pd.DataFrame(rows, columns=FILE_COLUMNS)
    dup = df.method[df.method.duplicated()].unique().tolist()
    if dup:
        raise ValueError(f"more than one memory file for {dup}: "
                         f"{df.source[df.method.isin(dup)].tolist()}")
    for c in ["params", "ranks", "model_state_bytes", "peak_above_load_bytes", "peak_bytes"]:  # exact in the CSV
        df[c] = pd.to_numeric(df[c], errors="coerce").round().astype("Int64")
    df["step_wall_s"] = pd.to_numeric(df["step_wall_s"], errors="coerce").astype(float)
    order = {m: i for i, m in enumerate(_order(df.method))}
    return df.sort_values("method", key=lambda s: s.map(order)).reset_index(drop=True)


def memory_table(df: pd.DataFrame) -> pd.DataFrame:
    """load_memory's frame -> one row per method with peak_gib and the peak's ratio to
    inference's and to ES's (NaN where that method was not measured)."""
    out = df.copy()
    peaks = dict(zip(out.method, out.peak_bytes.astype(float)))
    out["peak_gib"] = out.peak_bytes.astype(float) / GIB
    for ref, col in [("inference", "ratio_to_inference"), ("es", "ratio_to_es")]:
        out[col] = out.peak_bytes.astype(float) / peaks[ref] if peaks.get(ref) else float("nan")
    measures = out.measure.dropna().unique().tolist()
    if len(measures) > 1:
        log.warning("memory files measure different things (%s): the ratios compare unlike numbers", measures)
    return out[TABLE_COLUMNS].reset_index(drop=True)


def parse_paper(text: str | Mapping | None) -> dict[str, float]:
    """`{"es_gb": 8.41, "grpo_gb": 58.88}` (optionally "inference_gb", which defaults to
    es_gb: the paper reports ES at the memory of inference) -> dict; None or "" -> PAPER."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return dict(PAPER)
    paper = json.loads(text) if isinstance(text, str) else dict(text)
    if not isinstance(paper, Mapping):
        raise ValueError('--paper must be a JSON object like {"es_gb": 8.41, "grpo_gb": 58.88}')  # noqa: TRY004 (a user error: one clear line)
    return {k: float(v) for k, v in paper.items() if v is not None}


def paper_ratios(paper: Mapping[str, float]) -> dict[str, float]:
    es, grpo = paper.get("es_gb"), paper.get("grpo_gb")
    inf = paper.get("inference_gb", es)
    nan = float("nan")
    return {"ES / inference": es / inf if es and inf else nan, "GRPO / ES": grpo / es if grpo and es else nan}


def our_ratios(table: pd.DataFrame) -> dict[str, float]:
    peaks = dict(zip(table.method, table.peak_bytes.astype(float)))
    nan = float("nan")
    es, inf, grpo = peaks.get("es"), peaks.get("inference"), peaks.get("grpo")
    return {"ES / inference": es / inf if es and inf else nan, "GRPO / ES": grpo / es if grpo and es else nan}


def plot_memory(table: pd.DataFrame, path: str | os.PathLike, paper: Mapping[str, float] | str | None = None,
                title: str = "") -> None:
    """Left: peak memory per method (memory_table's frame), each bar annotated with its
    ratio to inference. Right: our ES/inference and GRPO/ES beside the paper's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paper = parse_paper(paper)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 4), gridspec_kw={"width_ratios": [1.3, 1]})

    # peaks, in GiB or (tiny models) MiB
    t = table.reset_index(drop=True)
    peak = t.peak_bytes.astype(float)
    unit, scale = ("GiB", GIB) if len(t) and peak.max() >= GIB else ("MiB", 2 ** 20)
    x = range(len(t))
    vals = peak / scale
    ax.bar(x, vals, color=[COLORS.get(m, "0.3") for m in t.method])
    state = t.model_state_bytes.astype(float) / scale
    if state.notna().any():  # the part that is the loaded model itself
        ax.bar(x, state.fillna(0), facecolor="none", edgecolor="k", hatch="//", lw=0, label="model state at load")
        ax.legend(fontsize=8, loc="upper left")
    for i, r in t.iterrows():
        note = f"{vals[i]:.3g} {unit}"
        if not math.isnan(r.ratio_to_inference):
            note += f"\n×{r.ratio_to_inference:.2f} inference"
        ax.annotate(note, (i, vals[i]), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                    fontsize=8)
    ranks = t.ranks.fillna(1).astype(int) if "ranks" in t else [1] * len(t)  # sharded RL: per GPU
    labels = [LABELS.get(m, m) + (f"\n{n} ranks, per GPU" if n > 1 else "") for m, n in zip(t.method, ranks)]
    ax.set_xticks(list(x), labels, fontsize=8)
    measures = ", ".join(t.measure.dropna().unique())
    ax.set_ylabel(f"peak memory ({unit}{'; ' + measures if measures else ''})")
    ax.set_ylim(0, (vals.max() if len(t) else 1) * 1.3)
    ax.set_title("peak memory of one step", fontsize=9)
    if not len(t):
        ax.text(0.5, 0.5, "no measurements", transform=ax.transAxes, ha="center", va="center")

    # ratios: ours vs the paper's
    ours, theirs = our_ratios(t), paper_ratios(paper)
    names = list(ours)
    w = 0.38
    for j, (lab, vals_, color) in enumerate([("ours", ours, "tab:purple"), ("paper (Qwen3.5-4B)", theirs, "0.7")]):
        xs = [k + (j - 0.5) * w for k in range(len(names))]
        ys = [vals_[n] for n in names]
        bx.bar(xs, [0 if math.isnan(y) else y for y in ys], width=w, color=color, label=lab)
        for xx, y in zip(xs, ys):
            bx.annotate("n/a" if math.isnan(y) else f"{y:.2f}", (xx, 0 if math.isnan(y) else y), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)
    bx.axhline(1, color="k", lw=0.8, ls=":")
    bx.set_xticks(range(len(names)), names, fontsize=8)
    bx.set_ylabel("ratio of peak memory")
    finite = [v for v in [*ours.values(), *theirs.values()] if not math.isnan(v)]
    bx.set_ylim(0, max([1.0, *finite]) * 1.25)
    bx.legend(fontsize=8, loc="upper left")
    bx.set_title("ratios: ours vs the paper", fontsize=9)
    for a in (ax, bx):
        a.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=130, tight=False)
