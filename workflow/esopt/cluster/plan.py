"""The planned jobs of a run with the resources the profile asks for, and what they cost.

A JobRequest is one job as SLURM will be asked for it: GPUs, runtime (minutes), CPUs,
memory, partition, account, GPU type. `cost_rows` sums them per rule into GPU-hours and
CPU-hours; requested runtimes are the profile's estimates, so the wall times that finished jobs
measured (`measured_runtimes`: the rule and wall_s of each provenance record under
results/) are shown beside them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_INPUT = re.compile(r"(?:^|/)results/models/([^/]+)/?$")


@dataclass(frozen=True)
class JobRequest:
    rule: str
    gpus: int = 0
    runtime_min: float = 0.0
    cpus: int = 1
    mem_mb: int | None = None
    partition: str | None = None
    account: str | None = None
    gpu_model: str | None = None
    models: tuple[str, ...] = field(default=())  # names of the model directories it reads


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


def gpus_of(res: Mapping[str, Any]) -> tuple[int, str | None]:
    """(GPU count, GPU type) from the SLURM executor's resource names: gpu / gpus (+ gpu_model),
    or gres "gpu:2" / "gpu:h100:2"."""
    n, model = _int(res.get("gpu") or res.get("gpus")), res.get("gpu_model") or None
    gres = str(res.get("gres") or "")
    m = re.fullmatch(r"gpu(?::([^:,]+))?(?::(\d+))?", gres.strip())
    if gres and m:
        if m.group(2):
            n, model = int(m.group(2)), m.group(1) or model
        elif m.group(1) and m.group(1).isdigit():
            n = int(m.group(1))
        else:
            n, model = max(n, 1), m.group(1) or model
    return n, (str(model) if model else None)


def request(rule: str, res: Mapping[str, Any], inputs: Iterable[str] = ()) -> JobRequest:
    """One job's request from its evaluated resources (a Snakemake job's `resources`)."""
    gpus, gpu_model = gpus_of(res)
    cpus = _int(res.get("cpus_per_task"), 0) or (gpus * _int(res.get("cpus_per_gpu"), 0)) or _int(res.get("_cores"), 1) or 1
    models = tuple(sorted({m.group(1) for f in inputs if (m := MODEL_INPUT.search(str(f)))}))
    return JobRequest(rule=rule, gpus=gpus, runtime_min=float(_int(res.get("runtime"), 0)), cpus=cpus,
                      mem_mb=_int(res.get("mem_mb"), 0) or None, partition=res.get("slurm_partition") or None,
                      account=res.get("slurm_account") or None, gpu_model=gpu_model, models=models)


def parse_dry_run(text: str) -> list[JobRequest]:
    """The jobs of `snakemake --dry-run` output: each block's `rule NAME:` (or `localrule`),
    `input:` and `resources: k=v, ...` lines."""
    jobs: list[JobRequest] = []
    rule, inputs, res = None, [], None

    def flush():
        if rule is not None and res is not None:
            jobs.append(request(rule, res, inputs))

    for line in text.splitlines():
        m = re.match(r"^(?:local)?rule (\w+):\s*$", line)
        if m:
            flush()
            rule, inputs, res = m.group(1), [], None
        elif rule and line.startswith("    input: "):
            inputs = [s.strip() for s in line[len("    input: "):].split(",")]
        elif rule and line.startswith("    resources: "):
            res = dict(kv.split("=", 1) for kv in line[len("    resources: "):].split(", ") if "=" in kv)
    flush()
    return jobs


def measured_runtimes(results: str | Path) -> dict[str, float]:
    """Mean measured wall time per rule, in minutes, from the provenance records of the jobs
    that finished under `results` (each records its rule and wall_s)."""
    walls: dict[str, list[float]] = {}
    for p in sorted(Path(results).rglob("*provenance.json")) if Path(results).is_dir() else []:
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("rule") and isinstance(rec.get("wall_s"), (int, float)):
            walls.setdefault(rec["rule"], []).append(rec["wall_s"] / 60)
    return {rule: sum(w) / len(w) for rule, w in walls.items()}


@dataclass(frozen=True)
class CostRow:
    rule: str
    jobs: int
    gpus_per_job: int
    runtime_min: float  # requested, per job (the largest among the rule's jobs)
    gpu_hours: float
    cpu_hours: float
    measured_min: float | None = None


def cost_rows(jobs: Iterable[JobRequest], measured: Mapping[str, float] | None = None) -> list[CostRow]:
    """Per rule: jobs, GPUs and requested runtime per job, GPU-hours (GPUs x runtime) and
    CPU-hours (CPUs x runtime), the costliest first."""
    by_rule: dict[str, list[JobRequest]] = {}
    for j in jobs:
        by_rule.setdefault(j.rule, []).append(j)
    rows = [CostRow(rule, len(js), max(j.gpus for j in js), max(j.runtime_min for j in js),
                    sum(j.gpus * j.runtime_min for j in js) / 60, sum(j.cpus * j.runtime_min for j in js) / 60,
                    (measured or {}).get(rule))
            for rule, js in by_rule.items() if rule != "all"]
    return sorted(rows, key=lambda r: (-r.gpu_hours, -r.cpu_hours, r.rule))


def format_cost(rows: list[CostRow]) -> str:
    """The plan as a table, with the total GPU-hours and CPU-hours, and where jobs of a rule
    have finished, their mean wall time and that times the rule's jobs (job-hours)."""
    head = (f"{'rule':24s} {'jobs':>5s} {'GPUs/job':>8s} {'runtime/job':>11s} {'GPU-h':>9s} {'CPU-h':>9s} "
            f"{'measured/job':>12s} {'job-h':>7s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        meas = f"{r.measured_min:.1f} min" if r.measured_min is not None else "-"
        job_h = f"{r.jobs * r.measured_min / 60:7.2f}" if r.measured_min is not None else f"{'-':>7s}"
        lines.append(f"{r.rule:24s} {r.jobs:5d} {r.gpus_per_job:8d} {r.runtime_min:7.0f} min {r.gpu_hours:9.1f} "
                     f"{r.cpu_hours:9.1f} {meas:>12s} {job_h}")
    lines.append("-" * len(head))
    measured = [r for r in rows if r.measured_min is not None]
    job_h = f"{sum(r.jobs * r.measured_min for r in measured) / 60:7.2f}" if measured else f"{'-':>7s}"
    lines.append(f"{'total':24s} {sum(r.jobs for r in rows):5d} {'':8s} {'':11s} {sum(r.gpu_hours for r in rows):9.1f} "
                 f"{sum(r.cpu_hours for r in rows):9.1f} {f'{len(measured)} of {len(rows)} rules':>12s} {job_h}")
    lines.append("GPU-h and CPU-h are requested runtime x GPUs (CPUs): the profile's estimates, an upper bound "
                 "per attempt (retries can repeat a job); 'measured' is the mean wall time of the rule's finished "
                 "jobs (their provenance records under results/), where there are any, and job-h that mean times "
                 "the rule's jobs.")
    return "\n".join(lines)
