"""provenance.json: which code, config, inputs, seeds and machine made a result."""

from __future__ import annotations

import datetime as dt
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from esopt.config import config_sha256
from esopt.io import sha256_file, write_json_atomic

PACKAGES = ("esopt", "torch", "transformers", "tokenizers", "snakemake", "huggingface_hub", "accelerate")


RECORD_VERSION = 2  # 2: every file a command writes is an output (trajectories too); git lists the changed files
MAX_CHANGES = 200  # changed files a record lists with their content hash; more are counted, not listed


def git_state(cwd: str | os.PathLike | None = None) -> dict[str, Any]:
    """The commit the code was checked out at and how the tree differed from it: every
    modified, added, deleted or untracked (not ignored) file, by its path from the
    repository root, with the git blob hash of its content (null: deleted), so that an
    audit can tell which files of another checkout differ from the tree that ran."""
    def run(*args: str, root: str | os.PathLike | None = cwd) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout

    try:
        commit = run("rev-parse", "HEAD").strip()
        top = run("rev-parse", "--show-toplevel").strip()
        # untracked files count: a new module nobody committed yet makes the tree dirty
        status = run("status", "--porcelain", "-z", "--untracked-files=all", root=top).split("\0")
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    changed: dict[str, bool] = {}  # path -> still exists
    i = 0
    while i < len(status):
        entry = status[i]
        i += 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2], entry[3:]
        if "R" in xy or "C" in xy:  # -z: "R  new\0old\0"
            if "R" in xy and i < len(status):
                changed[status[i]] = False
            i += 1
        changed[path] = "D" not in xy
    listed = sorted(changed)[:MAX_CHANGES]
    present = [p for p in listed if changed[p] and (Path(top) / p).is_file()]
    blobs = run("hash-object", "--", *present, root=top).split() if present else []
    out: dict[str, Any] = {"commit": commit, "dirty": bool(changed),
                           "changes": {p: None for p in listed} | dict(zip(present, blobs))}
    if len(changed) > MAX_CHANGES:
        out["changes_not_listed"] = len(changed) - MAX_CHANGES
    return out


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo on Linux, else the platform's), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "host": platform.node(), "platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),  # floating-point results (a warm start, an ES run) can differ across CPU types
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info


def hash_inputs(paths: list[str | os.PathLike]) -> dict[str, str]:
    """sha256 of every file under each input path (directories are walked)."""
    out: dict[str, str] = {}
    for p in map(Path, paths):
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if not any(part.startswith(".") for part in f.parts[len(p.parts) - (0 if p.is_dir() else 1):]):
                out[str(f)] = sha256_file(f)
    return out


@dataclass
class Provenance:
    """Start one when a command starts; `write` it beside the results when it ends."""

    command: str
    config: dict[str, Any]
    config_path: str | None = None
    rule: str | None = None
    wildcards: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    # The code as the command started: a commit made while a long job runs is not the code it ran.
    git: dict[str, Any] = field(default_factory=lambda: git_state(Path(__file__).parent))

    def __post_init__(self) -> None:
        # The config file as the command read it (at the start, as `config`): an edit while a
        # long job runs is not what it ran, and hashed at the end it would contradict `config`.
        read = self.config_path is not None and Path(self.config_path).is_file()
        self._config_file = hash_inputs([self.config_path]) if read else {}

    def record(self, outputs: list[str | os.PathLike] = (), extra: dict[str, Any] | None = None) -> dict[str, Any]:
        import torch

        end = time.time()
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
        inputs = hash_inputs(self.inputs)
        inputs.update((k, v) for k, v in self._config_file.items() if k in inputs)  # as it was read
        rec = {
            "record_version": RECORD_VERSION,
            "command": self.command,
            "argv": sys.argv,
            "rule": self.rule,
            "wildcards": self.wildcards,
            "git": self.git,
            "config_path": self.config_path,
            "config": self.config,
            "config_sha256": config_sha256(self.config),
            "inputs": inputs,
            "outputs": hash_inputs([o for o in outputs if Path(o).exists()]),
            "seeds": self.seeds,
            "packages": package_versions(),
            "device": device_info(),
            "start": dt.datetime.fromtimestamp(self.started, dt.UTC).isoformat(),
            "end": dt.datetime.fromtimestamp(end, dt.UTC).isoformat(),
            "wall_s": round(end - self.started, 3),
            "peak_rss_bytes": peak_rss,
            "peak_cuda_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        }
        if extra:
            rec.update(extra)
        return rec

    def write(self, path: str | os.PathLike, outputs: list[str | os.PathLike] = (), extra: dict[str, Any] | None = None) -> None:
        write_json_atomic(path, self.record(outputs, extra))
