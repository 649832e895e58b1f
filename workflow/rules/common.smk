# Config loading, target lists and helpers shared by the rules.
import json
import os
import re
import sys
from pathlib import Path

import yaml

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

# The package beside this Snakefile (also what `pip install -e .` installs).
sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from esopt.config import all_models, engine_settings, load_config  # noqa: E402
from esopt.provenance import jobs  # noqa: E402
from esopt.provenance.published import PipelineInputs  # noqa: E402

# Validated against workflow/schemas/config.schema.yaml, defaults filled, exactly as the
# commands and `esopt audit` resolve it.
config.clear()
config.update(load_config(CONFIGFILE))

R = "results"
MODEL = config["model"]["name"]  # the main model: every method x horizon
MODELS = {m["name"]: m for m in all_models(config)}  # plus the population study's sizes
HORIZONS = config["sudoku"]["horizons"]
POPULATIONS = config["es"]["populations"]
SEEDS = config["es"]["seeds"]
LOGS = f"{R}/logs"

# Results published into the repository (config `published`, `esopt publish`): what a report
# reads of a job comes from published/NAME/ instead of results/ while the job's settings (and
# its upstream jobs') are what this config asks for, so Snakemake neither needs nor reruns it.
PUBLISHED = PipelineInputs(config)


def result(path):
    """A results/ file a report or check reads, or its published copy when that is fresh."""
    return PUBLISHED(path)

# ES runs: Agentic ESOpt ("es") and its ablations ("es_NAME", config es.variants).
ES_VARIANTS = config["es"].get("variants") or {}
ES_METHODS = {"es": None, **{f"es_{name}": name for name in ES_VARIANTS}}
# the method name ES runs report as (eval meta, budget.json)
ES_REPORTED = {"es": "esopt", **{f"es_{name}": f"es_{name}" for name in ES_VARIANTS}}
STUDY = config.get("population_study") or {}


# How train-es starts: one process, or torchrun with one model replica per rank (the
# results are the same either way, so `distributed` is not a rerun trigger).
DIST = config.get("distributed") or {}
ES_RANKS = DIST.get("ranks", 1)
ES_GPUS = ES_RANKS * DIST.get("gpus_per_rank", 0)
ES_LAUNCH = "esopt" if ES_RANKS == 1 else (
    f"python -m torch.distributed.run --standalone --nproc-per-node {ES_RANKS} -m esopt.cli.main"
)


wildcard_constraints:
    horizon=r"\d+",
    eval_horizon=r"\d+",
    population=r"\d+",
    seed=r"\d+",
    model="|".join(map(re.escape, MODELS)),
    es_method="|".join(ES_METHODS),


# What each job depends on is written once, in esopt.provenance.jobs (`esopt audit` reads
# the same map): a job's `settings` param holds the config sections its command reads, and
# its `code` input the package files the command imports.
# The conda environment of a job whose rollouts run in the benchmark's engine (config: engine)
ENGINE_ENVS = {"hf": "../../envs/esopt.yaml", "population": "../../envs/esopt.yaml", "vllm": "../../envs/vllm.yaml"}


def engine_env(benchmark):
    return ENGINE_ENVS[engine_settings(config, benchmark)["name"]]


def settings(command, **keys):
    """The config sections one job of `command` depends on: a change reruns the job."""
    return jobs.settings(command, config, **keys)


def code(command, benchmarks=()):
    """The package files `esopt COMMAND` imports, with the packages of the agent benchmarks
    the job runs: editing one reruns exactly those jobs."""
    return jobs.code_files(command, benchmarks)


def wildcards_json(wildcards):
    return json.dumps(dict(wildcards), sort_keys=True).replace('"', '\\"')


def es_dir(es_method, model, horizon, population, seed):
    return f"{R}/train/{es_method}/{model}/sudoku/h{horizon}_g{population}_s{seed}"


def es_eval(es_method, model, horizon, population, seed, eval_horizon):
    return f"{R}/eval/{model}/{es_method}/h{horizon}_g{population}_s{seed}/h{eval_horizon}.json"


def variant_horizons(name):
    return ES_VARIANTS[name].get("horizons") or HORIZONS


def main_es_runs(largest_population=False):
    """(es_method, model, H*, G, seed) of the main grid: ESOpt at every horizon and
    population, the ablations at their horizons."""
    pops = [max(POPULATIONS)] if largest_population else POPULATIONS
    runs = [("es", MODEL, h, g, s) for h in HORIZONS for g in pops for s in SEEDS]
    runs += [(f"es_{v}", MODEL, h, g, s) for v in ES_VARIANTS for h in variant_horizons(v) for g in pops for s in SEEDS]
    return runs


def study_runs():
    """(es_method, model, H*, G, seed) of the population study (every model size)."""
    return [("es", m, h, g, s) for m in MODELS for h in STUDY.get("horizons", [])
            for g in STUDY.get("populations", []) for s in SEEDS]


def all_evaluations():
    """Base and Agentic ESOpt of the main grid, each ESOpt model at every horizon."""
    base = expand(f"{R}/eval/{MODEL}/base/h{{eval_horizon}}.json", eval_horizon=HORIZONS)
    es = [es_eval("es", MODEL, h, g, s, e) for h in HORIZONS for g in POPULATIONS for s in SEEDS for e in HORIZONS]
    return [result(p) for p in base + es]


# ---- Agentic GRPO / PPO baselines (config `rl`) and memory (config `memory`) ----
RL = config.get("rl") or {}
RL_METHODS = RL.get("methods", [])
RL_SEEDS = RL.get("seeds", [])
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
    return [result(p) for p in expand(
        f"{R}/eval/{MODEL}/{{method}}/h{{horizon}}_s{{seed}}/h{{horizon}}.json",
        method=RL_METHODS, horizon=HORIZONS, seed=RL_SEEDS,
    )]


def training_budgets():
    """budget.json of the main grid's runs at the largest population, and of RL."""
    es = [f"{es_dir(*run)}/budget.json" for run in main_es_runs(largest_population=True)]
    rl = expand(f"{R}/train/{{method}}/{MODEL}/sudoku/h{{horizon}}_s{{seed}}/budget.json",
                method=RL_METHODS, horizon=HORIZONS, seed=RL_SEEDS)
    return [result(p) for p in es + rl]


def methods_evaluations():
    """Every method of the main grid at its training horizon (ES at the largest population)."""
    base = expand(f"{R}/eval/{MODEL}/base/h{{h}}.json", h=HORIZONS)
    es = [es_eval(m, model, h, g, s, h) for m, model, h, g, s in main_es_runs(largest_population=True)]
    return [result(p) for p in base + es] + rl_evaluations()


def study_evaluations():
    """Population study: each run at its training horizon, and each base model there."""
    es = [es_eval(m, model, h, g, s, h) for m, model, h, g, s in study_runs()]
    base = [f"{R}/eval/{m}/base/h{h}.json" for m in MODELS for h in STUDY.get("horizons", [])]
    return [result(p) for p in base + es]


# The sigma ablation is drawn at the largest horizon an ablation was run at.
ABLATION_HORIZON = max([h for v in ES_VARIANTS for h in variant_horizons(v)] or HORIZONS)


def ablation_evaluations():
    h = ABLATION_HORIZON
    return [result(es_eval(m, model, hh, g, s, h))
            for m, model, hh, g, s in main_es_runs(largest_population=True) if hh == h]


def verdict_evaluations():
    """What the claims' verdicts compare: the main model's methods at their training
    horizons, the sigma ablation, and the main model's population-study runs."""
    study = [result(es_eval(m, model, h, g, s, h)) for m, model, h, g, s in study_runs() if model == MODEL]
    ablation = ablation_evaluations() if ES_VARIANTS else []
    return list(dict.fromkeys(methods_evaluations() + ablation + study))


def reference(section):
    return (config.get("reference") or {}).get(section) or {}


def reference_json():
    return json.dumps(reference("sudoku")).replace('"', '\\"')


# ---- Tool agents (config `tool_agents`): ReAct Math, DocVQA, Trace2Skill ----
TA = config.get("tool_agents") or {}
TOOL_BENCHMARKS = list(TA.get("benchmarks", {}))
# A tiny tool model is built by build_tool_model (esopt build-model --for tools); otherwise the tool agents use `model`.
TOOL_MODEL_BUILT = bool(TA.get("model")) and TA["model"].get("source") == "tiny"
TOOL_MODEL = TA["model"]["name"] if TOOL_MODEL_BUILT else MODEL
TOOL_MODEL_DIR = f"{R}/models/{TOOL_MODEL}"
TOOL_SEEDS = TA.get("seeds", [])
# trained methods (no_skill is the base model as it is)
AGENT_METHODS = {m: m for m in TA.get("methods", []) if m != "no_skill"}
TOOL_DATASETS = sorted({"train"} | {d for spec in TA.get("benchmarks", {}).values() for d in spec.get("eval", {})})

wildcard_constraints:
    agent_method="|".join(AGENT_METHODS) or "none",
    benchmark="|".join(TOOL_BENCHMARKS) or "none",
    dataset="|".join(map(re.escape, TOOL_DATASETS)),


def json_arg(obj):
    return json.dumps(obj).replace('"', '\\"')


def tool_eval_sets():
    """(benchmark, dataset) of every evaluation set, in config order."""
    return [(b, d) for b, spec in TA.get("benchmarks", {}).items() for d in spec.get("eval", {})]


def tool_evaluations():
    base = [f"{R}/eval/{TOOL_MODEL}/tools/no_skill/{b}_{d}.json" for b, d in tool_eval_sets()]
    runs = [f"{R}/eval/{TOOL_MODEL}/tools/{m}/{b}_{d}_s{s}.json"
            for m in AGENT_METHODS for b, d in tool_eval_sets() for s in TOOL_SEEDS]
    return [result(p) for p in base + runs]


# table columns, in config order: [evaluation set, its label (DAPO, AIME, DocVQA)]
TOOL_COLUMNS = [[f"{b}_{d}", TA["benchmarks"][b]["eval"][d].get("label", d)] for b, d in tool_eval_sets()]


# ---- Web agents (config `web`): WebArena-Lite in a real browser ----
WEB = config.get("web") or {}
# web.model (a tiny one, or a hub model of its own) is made by build_web_model (esopt build-model --for web); without it the
# web agent uses `model`.
WEB_MODEL_BUILT = bool(WEB.get("model"))
WEB_MODEL = WEB["model"]["name"] if WEB_MODEL_BUILT else MODEL
WEB_MODEL_DIR = f"{R}/models/{WEB_MODEL}"
WEB_SEEDS = WEB.get("seeds", [])
WEB_METHODS = [m for m in WEB.get("methods", []) if m != "no_skill"]
WEB_SETS = list(WEB.get("eval", {}))
WEB_REPORTED_SET = WEB_SETS[0] if WEB_SETS else None  # the table reports the first evaluation set
WEB_SET_LABEL = WEB["eval"][WEB_REPORTED_SET].get("label", WEB_REPORTED_SET) if WEB_SETS else ""

wildcard_constraints:
    web_method="|".join(WEB_METHODS) or "none",
    web_set="|".join(map(re.escape, ["train", *WEB_SETS])),


def web_evaluations():
    """Every web evaluation the table reads: the base, then each trained run, per set."""
    base = [f"{R}/eval/{WEB_MODEL}/web/no_skill/{d}.json" for d in WEB_SETS if "no_skill" in WEB.get("methods", [])]
    runs = [f"{R}/eval/{WEB_MODEL}/web/{m}/{d}_s{s}.json" for m in WEB_METHODS for d in WEB_SETS for s in WEB_SEEDS]
    return [result(p) for p in base + runs]


def preflight_or_stop(workflow):
    """A cluster run (any executor but local) first checks that everything its jobs need
    is in place (esopt.cluster.preflight, as `esopt preflight`) and prints what the planned
    jobs ask for; while something is missing it stops before submitting a job.
    ESOPT_SKIP_PREFLIGHT=1 skips the checks (the plan is still printed)."""
    if workflow.local_exec or workflow.remote_exec:
        return
    from snakemake.exceptions import WorkflowError

    from esopt.cluster.plan import cost_rows, format_cost, measured_runtimes, request
    from esopt.cluster.preflight import preflight, report

    planned = [request(j.rule.name, dict(j.resources.items()), [str(f) for f in j.input])
               for j in workflow.dag.needrun_jobs()]
    print(f"planned jobs:\n{format_cost(cost_rows(planned, measured_runtimes(R)))}\n",
          file=sys.stderr)
    if os.environ.get("ESOPT_SKIP_PREFLIGHT") == "1":
        print("preflight skipped (ESOPT_SKIP_PREFLIGHT=1)", file=sys.stderr)
        return
    problems = preflight(config, planned, R)
    print(report(problems), file=sys.stderr)
    if problems:
        raise WorkflowError(f"preflight: {len(problems)} thing(s) missing (listed above); no job was submitted. "
                            "Fix them, or set ESOPT_SKIP_PREFLIGHT=1 to start anyway.")


# ---- Helpers of the stage files (snakemake --lint: functions live here, rules in the stages) ----

# baselines.smk
# How a memory job starts: grpo / ppo as train-rl (over rl.ranks > 1: torchrun, sharded, one
# GPU per rank), inference and es as one process on one GPU (ES memory is one replica's).
def memory_sharded(mem_method):
    return mem_method in ("grpo", "ppo") and RL_RANKS > 1


# report.smk
def papermill_params(**params):
    """A notebook's parameters as one shell-quoted YAML argument (papermill -y)."""
    def render(wildcards, input, output):
        values = {k: (v(input, output) if callable(v) else v) for k, v in params.items()}
        return yaml.safe_dump(values, default_flow_style=True, width=1_000_000).strip()
    return render


def notebook(name):
    return str(Path(workflow.basedir) / "notebooks" / f"{name}.ipynb")


# tools.smk
def train_agent_env(wc):
    """A tool training job's conda environment: envs/vllm.yaml when its benchmark's engine is
    vLLM (config: engine.math, engine.docvqa; the evaluation rules follow the engine alone),
    except GRPO, which rolls out in HF whatever the engine."""
    return ENGINE_ENVS["hf"] if AGENT_METHODS[wc.agent_method] == "grpo" else engine_env(wc.benchmark)


# ahd.smk: every run of the heuristic-design grid
def ahd_runs():
    return [f"{R}/ahd/{AHD_MODEL}/{t}/{s}_b{b['samples']}_{v}/r{r}"
            for t in AHD.get("tasks", {}) for s in AHD.get("searches", []) for b in AHD.get("budgets", [])
            for v in AHD_VARIANTS for r in AHD.get("repetitions", [])]
