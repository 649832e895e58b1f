# Config loading, target lists and helpers shared by the rules.
import json
from pathlib import Path

import yaml
from snakemake.utils import validate

# The esopt commands read the config FILE; make Snakemake see exactly that file too
# (a --configfile is otherwise merged over config/tiny.yaml, and --config overrides
# would never reach the commands).
if workflow.config_settings.config:
    raise ValueError(
        "esopt takes its settings from a config file: copy config/tiny.yaml, edit it, "
        "and pass it with --configfile instead of --config KEY=VALUE"
    )
CONFIGFILE = str(
    (workflow.config_settings.configfiles or [Path("config/tiny.yaml")])[-1]
)
config.clear()
config.update(yaml.safe_load(open(CONFIGFILE)))


validate(config, "../schemas/config.schema.yaml")

R = "results"
MODEL = config["model"]["name"]
HORIZONS = config["sudoku"]["horizons"]
POPULATIONS = config["es"]["populations"]
SEEDS = config["es"]["seeds"]
LOGS = f"{R}/logs"

# What a single job depends on: the grid lists (horizons, populations, seeds) are
# wildcards, so extending the grid does not rerun the jobs already done.
SUDOKU = {k: v for k, v in config["sudoku"].items() if k != "horizons"}
ES = {k: v for k, v in config["es"].items() if k not in ("populations", "seeds")}

wildcard_constraints:
    horizon=r"\d+",
    eval_horizon=r"\d+",
    population=r"\d+",
    seed=r"\d+",


def code(*parts):
    """Source files a rule depends on: editing one reruns exactly the rules that list it."""
    pkg = Path(workflow.basedir) / "workflow" / "esopt"
    shared = ["__init__.py", "config.py", "io.py", "seeding.py", "cli/common.py", "report/provenance.py"]
    files = [pkg / f for f in shared]
    for part in parts:
        p = pkg / part
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return [str(f) for f in files]


def wildcards_json(wildcards):
    return json.dumps(dict(wildcards)).replace('"', '\\"')


def es_runs():
    """Training directories of the grid: horizons x population sizes x seeds."""
    return expand(
        f"{R}/train/es/{MODEL}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}",
        horizon=HORIZONS, population=POPULATIONS, seed=SEEDS,
    )


def all_evaluations():
    base = expand(f"{R}/eval/{MODEL}/base/h{{eval_horizon}}.json", eval_horizon=HORIZONS)
    es = expand(
        f"{R}/eval/{MODEL}/es/h{{horizon}}_g{{population}}_s{{seed}}/h{{eval_horizon}}.json",
        horizon=HORIZONS, population=POPULATIONS, seed=SEEDS, eval_horizon=HORIZONS,
    )
    return base + es


# ---- Agentic GRPO / PPO baselines (config `rl`) and memory (config `memory`) ----
RL = config.get("rl") or {}
RL_METHODS = RL.get("methods", [])
RL_SEEDS = RL.get("seeds", [])
RL_PARAMS = {k: v for k, v in RL.items() if k not in ("methods", "seeds")}
# method -> `esopt train-rl` options
RL_ALGO = {"grpo": "--algo grpo", "grpo_t1": "--algo grpo --sampling t1", "ppo": "--algo ppo"}
MEMORY = config.get("memory") or {}
MEMORY_METHODS = MEMORY.get("methods", [])
PROBE = f"{MODEL}-probe" if MEMORY.get("probe") else MODEL

wildcard_constraints:
    method="|".join(RL_ALGO),
    mem_method="inference|es|grpo|ppo",


def rl_evaluations():
    """RL models evaluated at the horizon they were trained at."""
    return expand(
        f"{R}/eval/{MODEL}/{{method}}/h{{horizon}}_s{{seed}}/h{{horizon}}.json",
        method=RL_METHODS, horizon=HORIZONS, seed=RL_SEEDS,
    )


def training_budgets():
    es = expand(f"{R}/train/es/{MODEL}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/budget.json",
                horizon=HORIZONS, population=max(POPULATIONS), seed=SEEDS)
    rl = expand(f"{R}/train/{{method}}/{MODEL}/sudoku/h{{horizon}}_s{{seed}}/budget.json",
                method=RL_METHODS, horizon=HORIZONS, seed=RL_SEEDS)
    return es + rl


def reference_json():
    return json.dumps(config.get("reference") or {}).replace('"', '\\"')
