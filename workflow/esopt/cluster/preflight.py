"""Is everything a run needs in place? Checked on the login node, before any job starts.

`preflight(config, jobs, results)` returns one Problem per missing thing, each with how to
fix it; an empty list means the run can start. What is checked:

- models: every model block of the config that is not built by the pipeline (source hub
  or local) is staged: its `local_path` a loadable directory, or the pinned revision's
  snapshot in the Hugging Face cache; the revision pinned to a commit; the weight files'
  sha256 equal to the hashes the download recorded (the hub's LFS sha256: a cache blob's
  name, or `hf download --local-dir`'s metadata), each file read once (`sha256_verified`);
- data: every task set read from a file (`path`) exists, every one read from the hub
  (`hub_id`) loads from the local cache with the network off, as the job will load it;
- extras: vLLM where an engine is vllm; Flask, Playwright and chromium where there is a
  web benchmark; the real WebArena sites answering and the judge's API key set;
- SLURM: every partition, account and GPU type the jobs ask for exists (sinfo, sacctmgr),
  and some node of the partition has as many GPUs as one job asks;
- disk: the results' filesystem has room for the checkpoints the training jobs write.

The Hugging Face cache checked is this process's (HF_HOME / HF_HUB_CACHE): run it with the
environment the jobs get, on a filesystem the compute nodes share.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esopt.cluster.plan import JobRequest
from esopt.config import checked_models, engine_settings
from esopt.io import sha256_file, write_json_atomic
from esopt.models.hub import WEIGHT_SUFFIXES, staged_source

COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# bytes a training job writes per byte of its base model's weights: the trained model;
# RL also keeps its optimizer checkpoint (fp32 master + AdamW moments: 12 bytes per bf16 parameter)
CHECKPOINT_FACTOR = {"train_es": 1, "train_agent": 7, "train_web": 1, "train_rl": 7, "search_heuristics": 1}


@dataclass(frozen=True)
class Problem:
    what: str  # what is missing or wrong
    fix: str  # how to put it right

    def __str__(self) -> str:
        return f"- {self.what}\n    fix: {self.fix}"


# ---- models ------------------------------------------------------------------------


def _recorded_hashes(model_dir: Path) -> dict[str, str]:
    """sha256 of each weight file as its download recorded it: the LFS blob a cache snapshot's
    file links to, or the etag in `hf download --local-dir`'s .cache/huggingface/download/*.metadata."""
    out = {}
    for f in sorted(model_dir.iterdir()):
        if not f.name.endswith(WEIGHT_SUFFIXES):
            continue
        blob = Path(os.path.realpath(f)).name
        meta = model_dir / ".cache" / "huggingface" / "download" / f"{f.name}.metadata"
        if SHA256.fullmatch(blob):
            out[f.name] = blob
        elif meta.is_file():
            lines = [ln.strip().strip('"') for ln in meta.read_text().splitlines()]
            if len(lines) >= 2 and SHA256.fullmatch(lines[1]):
                out[f.name] = lines[1]
    return out


def _verified_file() -> Path:
    return Path(os.environ.get("ESOPT_CACHE", "~/.cache/esopt")).expanduser() / "verified_sha256.json"


def sha256_verified(path: Path) -> str:
    """sha256 of a weight file, computed once per (real path, size, mtime): every cluster run
    checks its models' hashes at the start, and a 27B model is 54 GB to read. The hashes
    computed are kept in $ESOPT_CACHE/verified_sha256.json (~/.cache/esopt)."""
    st = path.stat()
    key = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}"
    store = _verified_file()
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = sha256_file(path)
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(store, known)
        except OSError:  # a read-only home: the hash is still checked, only not remembered
            pass
    return known[key]


def _recorded_commit(model_dir: Path) -> str | None:
    """The commit `hf download --local-dir` recorded for the directory (first line of a metadata file)."""
    metas = sorted((model_dir / ".cache" / "huggingface" / "download").glob("*.metadata"))
    return metas[0].read_text().splitlines()[0].strip() if metas else None


def check_models(config: dict[str, Any], hashes: bool = True) -> list[Problem]:
    from esopt.models.load import ModelDirError, check_model_dir

    problems = []
    for name, (kind, spec) in checked_models(config).items():
        if spec.get("source") == "tiny":
            continue  # built by the pipeline itself
        hub = spec.get("hub") or {}
        repo, rev = hub.get("repo_id"), hub.get("revision")
        where = f"model {name} ({kind})"
        if repo and rev and not COMMIT.fullmatch(str(rev)):
            problems.append(Problem(f"{where}: hub.revision {rev!r} is not pinned to a commit",
                                    f"set hub.revision to the 40-character commit you stage (`hf download {repo}` "
                                    f"prints it; `hf download {repo} --revision {rev} --dry-run` too)"))
        src = staged_source(spec)
        hint = (f"on a node with network: `hf download {repo} --revision {rev}` (into the HF_HOME the compute nodes "
                f"read), or `hf download {repo} --revision {rev} --local-dir DIR` and set local_path: DIR"
                if repo else "set local_path to a directory with config.json, the tokenizer and *.safetensors")
        if src is None:
            problems.append(Problem(f"{where}: not staged (no local_path, and {repo}@{rev} is not in the "
                                    f"Hugging Face cache {os.environ.get('HF_HUB_CACHE') or os.environ.get('HF_HOME') or '~/.cache/huggingface'})",
                                    hint))
            continue
        try:
            check_model_dir(src)
        except ModelDirError as e:
            problems.append(Problem(f"{where}: {e}", hint))
            continue
        recorded = _recorded_commit(src)
        if spec.get("local_path") and rev and recorded and recorded != rev:
            problems.append(Problem(f"{where}: {src} was downloaded at commit {recorded}, the config pins {rev}",
                                    f"download the pinned revision (`hf download {repo} --revision {rev} --local-dir "
                                    f"{src}`) or pin the one staged"))
        if hashes:
            for fname, want in _recorded_hashes(src).items():
                got = sha256_verified(src / fname)
                if got != want:
                    problems.append(Problem(f"{where}: {src / fname} has sha256 {got[:12]}..., its download "
                                            f"recorded {want[:12]}... (corrupt or partial copy)", hint))
    return problems


# ---- data --------------------------------------------------------------------------


def task_sets(config: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where, spec) of every task set the config reads from outside: a `path` or a `hub_id`."""
    sets = []
    for bench, b in ((config.get("tool_agents") or {}).get("benchmarks") or {}).items():
        sets += [(f"tool_agents.benchmarks.{bench}.train", b.get("train") or {})]
        sets += [(f"tool_agents.benchmarks.{bench}.eval.{k}", v) for k, v in (b.get("eval") or {}).items()]
    web = config.get("web") or {}
    if web:
        sets += [("web.train", web.get("train") or {})]
        sets += [(f"web.eval.{k}", v) for k, v in (web.get("eval") or {}).items()]
    return [(w, s) for w, s in sets if s.get("path") or s.get("hub_id")]


def check_data(config: dict[str, Any]) -> list[Problem]:
    from esopt.envs.hub_data import offline_mode

    problems, loaded = [], {}
    for where, spec in task_sets(config):
        if spec.get("path"):
            if not Path(spec["path"]).expanduser().exists():
                problems.append(Problem(f"{where}: {spec['path']} does not exist",
                                        "download the task file (docs/cluster.md, staging) to that path, or fix `path`"))
            continue
        key = (spec["hub_id"], spec.get("split"))
        if key not in loaded:
            loaded[key] = None
            if importlib.util.find_spec("datasets") is None:
                loaded[key] = 'the `datasets` package is not installed: pip install -e ".[data]"'
            else:
                import datasets

                try:  # exactly as the job will load it when the hub is out of reach
                    with offline_mode(True):
                        datasets.load_dataset_builder(spec["hub_id"])
                except Exception as e:  # whatever datasets raises for "not in the cache"
                    loaded[key] = f"not in the local Hugging Face cache ({type(e).__name__})"
        if loaded[key]:
            problems.append(Problem(f"{where}: data set {spec['hub_id']}: {loaded[key]}",
                                    f"on a node with network, with the HF_HOME the jobs use: python -c \"import "
                                    f"datasets; datasets.load_dataset('{spec['hub_id']}')\" (or download it and set "
                                    f"`path` to the file)"))
    return problems


# ---- extras --------------------------------------------------------------------------


def check_extras(config: dict[str, Any]) -> list[Problem]:
    problems = []
    engines = {b: engine_settings(config, b)["name"] for b in (config.get("engine") or {})
               if b not in ("vllm", "population")}
    if "vllm" in engines.values() and importlib.util.find_spec("vllm") is None:
        uses = ", ".join(f"engine.{b}" for b, e in engines.items() if e == "vllm")
        problems.append(Problem(f"engine vllm ({uses}) but vLLM is not importable here",
                                'pip install -e ".[vllm]" in the jobs\' environment (or run with --sdm conda: envs/vllm.yaml)'))
    web = config.get("web") or {}
    if web:
        from esopt.envs.web.deps import missing

        problems += [Problem(f"web benchmark: {m}", 'pip install -e ".[web]" and Debian\'s chromium in the jobs\' '
                             "environment (docs/web.md)") for m in missing()]
        sites = web.get("sites")
        if isinstance(sites, dict):
            from esopt.envs.web.webarena import SitesUnreachableError, check_sites

            try:
                check_sites(_web_sites_needed(web), timeout_s=5)
            except ValueError as e:  # a site some task uses has no URL
                problems.append(Problem(f"web.sites: {e}", "add the site's URL to web.sites (docs/web.md, the real suite)"))
            except SitesUnreachableError as e:
                problems.append(Problem(f"web.sites: {e}".splitlines()[0] + " " + " ".join(
                    ln.strip() for ln in str(e).splitlines()[1:-1]),
                    "start the WebArena sites (docs/web.md, the real suite) where the compute nodes reach them"))
        judge = web.get("judge") or {}
        if isinstance(judge, dict) and judge.get("kind") == "openai":
            env = judge.get("api_key_env") or "OPENAI_API_KEY"
            if not os.environ.get(env):
                problems.append(Problem(f"web.judge: ${env} is not set (the fuzzy-match judge's API key)",
                                        f"export {env}=... in the environment snakemake starts the jobs from"))
    return problems


def _web_sites_needed(web: dict[str, Any]) -> dict[str, str]:
    """The real sites the config's WebArena task sets use (a run requires no other site, e.g.
    homepage); every configured site but homepage when a task file is not staged yet (no
    WebArena task uses homepage: esopt.envs.web.webarena.sites_used)."""
    from esopt.envs.web.webarena import SuiteNotFoundError, load_suite, needed_site_urls

    sets = [web.get("train") or {}, *(web.get("eval") or {}).values()]
    try:
        tasks = [t for spec in sets if str(spec.get("source", "")).startswith("webarena_")
                 for t in load_suite(spec.get("path"), subset=spec["source"].removeprefix("webarena_"))]
    except (SuiteNotFoundError, OSError, ValueError):
        tasks = None
    if tasks:
        return needed_site_urls(web["sites"], tasks)
    return {k: v for k, v in web["sites"].items() if k != "homepage"}


# ---- SLURM ---------------------------------------------------------------------------


def _run(*args: str) -> str | None:
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


def slurm_partitions() -> dict[str, list[tuple[str, int]]] | None:
    """Partition -> [(GPU type or "", GPUs per node)] of its nodes, from sinfo; None without sinfo."""
    out = _run("sinfo", "-h", "-N", "-o", "%R|%G")
    if out is None:
        return None
    parts: dict[str, list[tuple[str, int]]] = {}
    for line in out.splitlines():
        if "|" not in line:
            continue
        part, gres = line.split("|", 1)
        gpus = []
        for g in gres.split(","):
            m = re.match(r"gpu(?::([^:(]+))?:(\d+)", g.strip())  # gpu:2, gpu:h100:4(S:0-1)
            if m:
                gpus.append((m.group(1) or "", int(m.group(2))))
        parts.setdefault(part.strip(), []).extend(gpus or [("", 0)])
    return parts


def slurm_accounts() -> set[str] | None:
    """The accounts this user may charge (sacctmgr); None where there is no accounting database."""
    out = _run("sacctmgr", "-nP", "show", "assoc", f"user={os.environ.get('USER', '')}", "format=account")
    return None if out is None else {a.strip() for a in out.splitlines() if a.strip()}


def check_slurm(jobs: Iterable[JobRequest]) -> list[Problem]:
    jobs = list(jobs)
    asked = [j for j in jobs if j.partition or j.account or j.gpus]
    if not asked:
        return []
    parts = slurm_partitions()
    if parts is None:
        return [Problem("the jobs ask SLURM for partitions or GPUs, but `sinfo` does not answer here",
                        "run on the cluster's login node, with the SLURM client tools on PATH")]
    problems = []
    for p in sorted({j.partition for j in asked if j.partition} - set(parts)):
        rules = sorted({j.rule for j in asked if j.partition == p})
        problems.append(Problem(f"partition {p!r} (asked by {', '.join(rules)}) does not exist; sinfo lists "
                                f"{', '.join(sorted(parts)) or 'none'}",
                                "set slurm_partition in the profile (profiles/slurm/config.v9+.yaml) to one of those"))
    seen = set()
    for j in asked:
        if not j.gpus or (j.partition and j.partition not in parts):
            continue
        nodes = parts.get(j.partition) if j.partition else [g for gs in parts.values() for g in gs]
        fits = [n for t, n in nodes if n >= j.gpus and (not j.gpu_model or t == j.gpu_model)]
        key = (j.rule, j.partition, j.gpus, j.gpu_model)
        if not fits and key not in seen:
            seen.add(key)
            have = sorted({f"{t or 'gpu'}:{n}" for t, n in nodes})
            problems.append(Problem(f"{j.rule} asks for {j.gpus} GPU(s){' of type ' + j.gpu_model if j.gpu_model else ''} "
                                    f"on one node of partition {j.partition or '(default)'}, whose nodes have "
                                    f"{', '.join(have) or 'no GPUs'}",
                                    "pick the GPU partition and type in the profile (sinfo -o '%P %G')"))
    wanted = {j.account for j in asked if j.account}
    if wanted:
        accounts = slurm_accounts()
        if accounts is not None:
            for a in sorted(wanted - accounts):
                problems.append(Problem(f"account {a!r} is not one of yours (sacctmgr lists "
                                        f"{', '.join(sorted(accounts)) or 'none'})",
                                        "set slurm_account in the profile to one of those"))
    return problems


# ---- disk ----------------------------------------------------------------------------


def _weights_bytes(d: Path | None) -> int:
    if d is None or not d.is_dir():
        return 0
    return sum(f.stat().st_size for f in d.iterdir() if f.name.endswith(WEIGHT_SUFFIXES) and f.exists())


def planned_bytes(config: dict[str, Any], jobs: Iterable[JobRequest], results: Path) -> int:
    """What the training jobs will write: each writes CHECKPOINT_FACTOR x its base's weights
    (the staged weights, or the built model under results/models when there is one)."""
    models = checked_models(config)
    size: dict[str, int] = {}
    total = 0
    for j in jobs:
        factor = CHECKPOINT_FACTOR.get(j.rule, 0)
        for name in j.models:
            if name not in size:
                built = results / "models" / name
                spec = models.get(name, (None, {}))[1]
                size[name] = _weights_bytes(built) or (
                    _weights_bytes(staged_source(spec)) if spec.get("source") in ("hub", "local") else 0)
            total += factor * size[name]
    return total


def check_disk(config: dict[str, Any], jobs: Iterable[JobRequest], results: str | Path) -> list[Problem]:
    results = Path(results).resolve()
    need = planned_bytes(config, jobs, results)
    probe = results
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need > free:
        return [Problem(f"{probe}: {free / 2**30:.1f} GiB free, the planned checkpoints need about "
                        f"{need / 2**30:.1f} GiB", "free space there, or run from a directory on a larger "
                        "filesystem (results/ is relative to the working directory)")]
    return []


# ---- all -----------------------------------------------------------------------------


def preflight(config: dict[str, Any], jobs: Iterable[JobRequest], results: str | Path = "results",
              hashes: bool = True) -> list[Problem]:
    """Every Problem of the run, in the order a user fixes them: models, data, extras, SLURM, disk."""
    jobs = list(jobs)
    return [*check_models(config, hashes), *check_data(config), *check_extras(config), *check_slurm(jobs),
            *check_disk(config, jobs, results)]


def report(problems: list[Problem]) -> str:
    if not problems:
        return "preflight: everything the run needs is in place."
    return f"preflight: {len(problems)} thing(s) missing:\n" + "\n".join(str(p) for p in problems)

