"""Pipeline configuration: YAML validated against workflow/schemas/config.schema.yaml.

The Snakefile validates the same file with the same schema; the CLI validates again
so that `esopt ...` run by hand stops on a bad config with a message naming the key.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"

# The most blanks a Sudoku puzzle of each board size may have: what the generator
# (esopt.envs.sudoku) reaches. It blanks the cells of a random full grid in random order,
# keeping a blank only while the solution stays unique, so it stops short of the fewest
# clues a unique puzzle can have (4x4: 4, 6x6: 8, 9x9: 17). How often grids reach each
# bound, measured: docs/sudoku_and_models.md.
SUDOKU_MAX_BLANKS = {4: 12, 6: 27, 9: 57}


class ConfigError(ValueError):
    pass


def _with_defaults(validator_cls):
    # jsonschema's documented recipe: fill "default" values while validating.
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


def load_schema() -> dict[str, Any]:
    if not SCHEMA_PATH.exists():
        raise ConfigError(f"config schema not found at {SCHEMA_PATH}; install esopt from a checkout with `pip install -e .`")
    return yaml.safe_load(SCHEMA_PATH.read_text())


def validate_config(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Validate (and fill defaults in) a copy of `config`; errors name the offending key."""
    config = copy.deepcopy(config)
    validator = _with_defaults(jsonschema.Draft7Validator)(load_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:10]:
            where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
            lines.append(f"  {where}: {e.message}")
        raise ConfigError(f"{source} is not a valid esopt config:\n" + "\n".join(lines))
    s = config["sudoku"]
    if (s["max_turns"] is None) == (s["turns_per_blank"] is None):
        raise ConfigError(f"{source}: sudoku: set exactly one of max_turns and turns_per_blank")
    es = config["es"]
    study = config.get("population_study") or {}
    trained = [*s["horizons"], *(h for h in study.get("horizons", []) if h not in s["horizons"])]
    runs = [(h, None) for h in trained] + [(h, name) for name, v in es.get("variants", {}).items()
                                           for h in (v.get("horizons") or s["horizons"])]
    for h, variant in runs:
        sigma = es_block(config, h, variant)["sigma"]
        if sigma["schedule"] == "cosine" and "sigmaT" not in sigma:
            where = f"es.variants.{variant}" if variant else "es.sigma"
            raise ConfigError(f"{source}: {where}: sigmaT is required for the cosine schedule (H*={h})")
    for name, variant in es.get("variants", {}).items():
        bad = set(variant.get("horizons") or []) - set(config["sudoku"]["horizons"])
        if bad:
            raise ConfigError(f"{source}: es.variants.{name}.horizons {sorted(bad)} are not in sudoku.horizons")
        bad = {str(k) for k in variant.get("by_horizon") or {}} - {str(h) for h in variant.get("horizons") or s["horizons"]}
        if bad:
            raise ConfigError(f"{source}: es.variants.{name}.by_horizon keys {sorted(bad)} are not horizons the variant "
                              "runs at (its horizons, or sudoku.horizons)")
    pool = s["train_pool"]
    if es["eval_train"] and not es["eval_every"]:
        raise ConfigError(f"{source}: es.eval_train evaluates during training: set es.eval_every too")
    if es["eval_train"] and pool is None:
        raise ConfigError(f"{source}: es.eval_train evaluates on the fixed training puzzles: set sudoku.train_pool")
    if s["prompt"] == "authors" and s["observation"] != "board":
        raise ConfigError(f"{source}: sudoku.observation {s['observation']!r} is ours only; the authors' prompt "
                          "(sudoku.prompt: authors) shows its own board: leave observation at board")
    bad = {str(k) for k in es.get("by_horizon", {})} - {str(h) for h in trained}
    if bad:
        raise ConfigError(f"{source}: es.by_horizon keys {sorted(bad)} are not in sudoku.horizons "
                          "or population_study.horizons")
    _check_runs(config, source)
    names = [m["name"] for m in all_models(config)]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: model names must be unique, got {names}")
    for i, m in enumerate(all_models(config)):
        where = "model" if i == 0 else f"population_study.models[{i - 1}]"
        _check_source(m, f"{source}: {where}")
        _check_expect(m, f"{source}: {where}.expect", {str(h) for h in config["sudoku"]["horizons"]},
                      "H* {bad} are not in sudoku.horizons (the base is evaluated there)")
    ta = config.get("tool_agents") or {}
    if ta.get("model"):
        sets = {f"{b}/{d}" for b, spec in ta["benchmarks"].items() for d in spec.get("eval", {})}
        _check_expect(ta["model"], f"{source}: tool_agents.model.expect", sets,
                      "{bad} are not evaluation sets BENCHMARK/SET of tool_agents.benchmarks")
    web = config.get("web") or {}
    if web.get("model"):
        _check_source(web["model"], f"{source}: web.model", local_for_hub=True)
        _check_expect(web["model"], f"{source}: web.model.expect", {f"web/{d}" for d in web["eval"]},
                      "{bad} are not evaluation sets web/SET of web.eval")
    ahd = config.get("ahd") or {}
    if ahd.get("model"):
        _check_expect(ahd["model"], f"{source}: ahd.model.expect", set(ahd["tasks"]), "{bad} are not in ahd.tasks")
        if ahd["model"]["expect"] and "sample" not in ahd["searches"]:
            raise ConfigError(f"{source}: ahd.model.expect is checked on the Sample runs of the base writer, "
                              "but ahd.searches has no 'sample'")
    names = [m["name"] for m in all_models(config)] + [m["name"] for m in (ta.get("model"), web.get("model"),
                                                                            ahd.get("model")) if m]
    if len(set(names)) != len(names):  # each is a directory results/models/NAME
        raise ConfigError(f"{source}: model names (model, population_study.models, tool_agents.model, web.model, ahd.model) "
                          f"must be unique, got {names}")
    return config


def check_horizon(config: dict[str, Any], horizon: int, where: str) -> None:
    """H* is a blank count the puzzle generator reaches on the config's board (else ConfigError)."""
    size = config["sudoku"]["size"]
    if not 1 <= int(horizon) <= SUDOKU_MAX_BLANKS[size]:
        raise ConfigError(f"{where}: {horizon} blanks on a {size}x{size} board: the puzzle generator makes "
                          f"1 to {SUDOKU_MAX_BLANKS[size]}")


def check_run_args(config: dict[str, Any], horizon: int | None = None, population: int | None = None,
                   variant: str | None = None) -> None:
    """A command's --horizon, --population and --variant against the config, before the run
    starts: blanks the generator reaches, an even G under es.antithetic, a variant it has."""
    if horizon is not None:
        check_horizon(config, horizon, "--horizon")
    variants = config["es"].get("variants") or {}
    if variant is not None and variant not in variants:
        raise ConfigError(f"--variant {variant!r} is not in the config (es.variants: {sorted(variants)})")
    if population is not None:
        check_even_population(population, config["es"]["antithetic"], "--population")


def _check_runs(config: dict[str, Any], source: str) -> None:
    """What a job would otherwise find out only when it runs: blank counts the generator
    cannot reach, odd populations under antithetic sampling, a tiny architecture that does
    not build, a method whose settings block is missing."""
    sudoku_models = all_models(config)
    study, memory = config.get("population_study") or {}, config.get("memory") or {}
    blanks = {"sudoku.horizons": config["sudoku"]["horizons"], "population_study.horizons": study.get("horizons", [])}
    for i, m in enumerate(sudoku_models):
        where = "model" if i == 0 else f"population_study.models[{i - 1}]"
        blanks[f"{where}.warmstart.blanks"] = (m.get("warmstart") or {}).get("blanks", [])
        blanks[f"{where}.warmstart.select.horizons"] = ((m.get("warmstart") or {}).get("select") or {}).get("horizons", [])
    if memory:
        blanks["memory.horizon"] = [memory["horizon"]]
    for where, hs in blanks.items():
        for h in hs:
            check_horizon(config, h, f"{source}: {where}")

    es = config["es"]
    if es["antithetic"]:  # members come in ±ε pairs (variants cannot change it)
        pops = {"es.populations": es["populations"], "population_study.populations": study.get("populations", [])}
        if "es" in memory.get("methods", []):
            pops["memory.population"] = [memory["population"]]
        for where, gs in pops.items():
            for g in gs:
                check_even_population(g, True, f"{source}: {where}")

    ta, ahd = config.get("tool_agents") or {}, config.get("ahd") or {}
    tiny = {("model" if i == 0 else f"population_study.models[{i - 1}]"): m.get("tiny")
            for i, m in enumerate(sudoku_models)}
    tiny |= {"tool_agents.model": (ta.get("model") or {}).get("tiny"),
             "web.model": ((config.get("web") or {}).get("model") or {}).get("tiny"), "ahd.model": (ahd.get("model") or {}).get("tiny"),
             "memory.probe": memory.get("probe")}
    for where, t in tiny.items():
        if not t:
            continue
        if t.get("architecture") == "qwen3" and set(t["layer_types"]) != {"full_attention"}:
            raise ConfigError(f"{source}: {where}.tiny: architecture qwen3 has full attention only, "
                              f"got layer_types {t['layer_types']}")
        if t["num_attention_heads"] % t["num_key_value_heads"]:
            raise ConfigError(f"{source}: {where}.tiny: num_attention_heads {t['num_attention_heads']} must be a "
                              f"multiple of num_key_value_heads {t['num_key_value_heads']} (grouped-query attention)")

    if "rl" not in config:
        rl_memory = sorted(set(memory.get("methods", [])) & {"grpo", "ppo"})
        if rl_memory:
            raise ConfigError(f"{source}: memory.methods {rl_memory} measure RL steps, which need an rl block")
    for sec in ("tool_agents", "web"):
        if config.get(sec):
            _check_agent_block(config, sec, source)
    web = config.get("web") or {}
    if web:
        _check_web(web, source)
    writer = ahd.get("model") or {}
    if writer.get("source") == "hub" and not (writer.get("hub") or writer.get("local_path")):
        raise ConfigError(f"{source}: ahd.model: source 'hub' needs hub.repo_id and hub.revision, or local_path")


def _check_agent_block(config: dict[str, Any], sec: str, source: str) -> None:
    """An agent block's (tool_agents, web) methods against its settings blocks."""
    ta = config[sec]
    methods = set(ta["methods"])
    if "grpo" in methods and "grpo" not in ta:
        raise ConfigError(f"{source}: {sec}.methods has grpo but there is no {sec}.grpo block")
    t2s = ta.get("trace2skill")
    if methods & {"trace2skill", "esopt_trace2skill"} and not t2s:
        raise ConfigError(f"{source}: {sec}.methods has {sorted(methods & {'trace2skill', 'esopt_trace2skill'})} "
                          f"but there is no {sec}.trace2skill block")
    if "trace2skill" in methods and "rollouts_per_generation" not in t2s:
        raise ConfigError(f"{source}: {sec}.trace2skill.rollouts_per_generation is required by method trace2skill")
    analyst = (t2s or {}).get("analyst") or {}
    missing = [k for k in ("base_url", "model") if analyst.get("kind") == "openai" and not analyst.get(k)]  # api_key_env: optional (a local server needs no key)
    if missing:
        raise ConfigError(f"{source}: {sec}.trace2skill.analyst of kind openai needs {missing}")
    if methods & {"esopt", "esopt_trace2skill"}:
        es = ta["es"]
        for b, own in (ta.get("benchmarks") or {"web": {}}).items():  # a benchmark's es may set its own population
            g = (own.get("es") or {}).get("population", es["population"])  # as esopt.spec.agents.AgentES merges it
            check_even_population(g, es["antithetic"], f"{source}: {b}: {sec} es population", f"{sec}.es.antithetic")


def _check_web(web: dict[str, Any], source: str) -> None:
    """Task sources that fit the sites: generated tasks need the local sites, the real
    suite needs the real sites' URLs and its task file."""
    sets = {"web.train": web["train"], **{f"web.eval.{k}": v for k, v in web["eval"].items()}}
    local = web.get("sites", "local") == "local"
    for where, spec in sets.items():
        if spec["source"] == "generated" and not local:
            raise ConfigError(f"{source}: {where}: generated tasks run on the local sites, but web.sites gives URLs")
        if spec["source"] != "generated":
            if local:
                raise ConfigError(f"{source}: {where}: source {spec['source']} needs the real WebArena sites: "
                                  "set web.sites to their URLs ({shopping: http://HOST:7770, ...})")
            if not spec.get("path"):
                raise ConfigError(f"{source}: {where}: source {spec['source']} needs `path` (WebArena's "
                                  "test.raw.json or a folder of config_files/N.json)")
    judge = web.get("judge") or {}
    need = {"openai": ("base_url", "model"), "callable": ("target",)}.get(judge.get("kind"), ())
    missing = [k for k in need if not judge.get(k)]
    if missing:
        raise ConfigError(f"{source}: web.judge of kind {judge['kind']} needs {missing}")


def _check_source(m: dict[str, Any], where: str, local_for_hub: bool = False) -> None:
    """The blocks a model's source needs: tiny and warmstart; hub (or, with local_for_hub, a
    pre-staged local_path instead); local_path."""
    if m["source"] == "tiny" and not {"tiny", "warmstart"} <= set(m):
        raise ConfigError(f"{where}: source 'tiny' needs tiny and warmstart blocks")
    if m["source"] == "hub" and not ("hub" in m or (local_for_hub and m.get("local_path"))):
        raise ConfigError(f"{where}: source 'hub' needs hub.repo_id and hub.revision"
                          + (", or local_path" if local_for_hub else ""))
    if m["source"] == "local" and not m.get("local_path"):
        raise ConfigError(f"{where}: source 'local' needs local_path")


def _check_expect(m: dict[str, Any], where: str, keys: set[str], unknown: str) -> None:
    """A model's expect block with string keys (the form they take in every JSON record),
    each one the config evaluates the base at, each interval [low, high]."""
    m["expect"] = {str(k): v for k, v in (m.get("expect") or {}).items()} or None
    bad = sorted(set(m["expect"] or {}) - keys)
    if bad:
        raise ConfigError(f"{where}: " + unknown.format(bad=bad))
    if any(lo > hi for lo, hi in (m["expect"] or {}).values()):
        raise ConfigError(f"{where}: an interval is [low, high] with low <= high")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A copy of `base` with `over` merged in, recursively for nested mappings."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


# es keys that describe the grid, not one run
_ES_GRID_KEYS = ("populations", "seeds", "by_horizon", "variants")


def es_block(config: dict[str, Any], horizon: int | None = None, variant: str | None = None) -> dict[str, Any]:
    """The es block of one run as the config writes it: es without the grid, then
    es.by_horizon[H*], then es.variants[variant], then that variant's by_horizon[H*]
    (horizon None: no H* overrides). esopt.spec.sudoku.EsRun types it."""
    es = config["es"]
    out = {k: v for k, v in es.items() if k not in _ES_GRID_KEYS}

    def at(by_horizon: dict | None) -> dict[str, Any]:
        if horizon is None:
            return {}
        return {int(k): v for k, v in (by_horizon or {}).items()}.get(int(horizon), {})

    out = deep_merge(out, at(es.get("by_horizon")))
    if variant:
        variants = es.get("variants") or {}
        if variant not in variants:
            raise ConfigError(f"es variant {variant!r} is not in the config (es.variants: {sorted(variants)})")
        v = variants[variant]
        out = deep_merge(out, {k: x for k, x in v.items() if k not in ("horizons", "by_horizon")})
        out = deep_merge(out, at(v.get("by_horizon")))
    return out


def check_even_population(population: int, antithetic: bool, where: str, antithetic_key: str = "es.antithetic") -> None:
    """Antithetic sampling pairs the members (±ε), so its population must be even (else ConfigError)."""
    if antithetic and population % 2:
        raise ConfigError(f"{where} {population}: {antithetic_key} pairs the members, so the population must be even")


def all_models(config: dict[str, Any]) -> list[dict[str, Any]]:
    """`model` first, then the extra sizes of the population study."""
    return [config["model"], *((config.get("population_study") or {}).get("models") or [])]


def checked_models(config: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every model block the pipeline builds or fetches, by name, with its kind:
    `model` and population_study.models ("sudoku"), tool_agents.model ("tools"), web.model ("web"),
    ahd.model ("ahd"). Tool agents or a writer without a block of their own use `model`;
    the names are unique (validate_config)."""
    out = {m["name"]: ("sudoku", m) for m in all_models(config)}
    for kind, sec in (("tools", "tool_agents"), ("web", "web"), ("ahd", "ahd")):
        m = (config.get(sec) or {}).get("model")
        if m:
            out[m["name"]] = (kind, m)
    return out


def named_model(config: dict[str, Any], name: str | None = None) -> tuple[str, dict[str, Any]]:
    """(kind, block) of the model called `name` among checked_models (None: the main model)."""
    if name is None:
        return "sudoku", config["model"]
    models = checked_models(config)
    if name not in models:
        raise ConfigError(f"model {name!r} is not in the config (models: {sorted(models)})")
    return models[name]


def model_spec(config: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """The model block called `name` (None: the main model)."""
    if name is None:
        return config["model"]
    for m in all_models(config):
        if m["name"] == name:
            return m
    raise ConfigError(f"model {name!r} is not in the config (models: {[m['name'] for m in all_models(config)]})")


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} " + ("is a directory" if path.is_dir() else "does not exist"))
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping, got {type(raw).__name__}")
    return validate_config(raw, str(path))


def config_sha256(config: dict[str, Any]) -> str:
    """Hash of the resolved config (defaults filled, keys sorted)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


# ---- the settings of one run, built from the config (the rules, the commands and the
# audit all read them here)


def section(c: dict[str, Any], key: str) -> Any:
    return (c.get(key) if isinstance(c, dict) else None) or {}


def without(d: Any, keys: tuple[str, ...]) -> Any:
    return {k: v for k, v in d.items() if k not in keys} if isinstance(d, dict) else d


def engine_settings(c: dict[str, Any], benchmark: str) -> dict[str, Any]:
    """{name: hf}, {name: population, **engine.population} or {name: vllm, **engine.vllm}: the
    engine of a benchmark's ES and evaluation rollouts."""
    e = section(c, "engine")
    name = e.get(benchmark, "hf")
    return {"name": name, **(e.get(name) or {})} if name in ("vllm", "population") else {"name": name}


def rl_engine_settings(c: dict[str, Any]) -> dict[str, Any]:
    """The engine of the RL baselines' rollouts: the population engine where Sudoku's is
    (its log-probs are the full softmax the losses need), else {name: hf} (vLLM returns
    filtered log-probs, docs/engine.md)."""
    e = engine_settings(c, "sudoku")
    return e if e["name"] == "population" else {"name": "hf"}


def rl_settings(c: dict[str, Any]) -> dict[str, Any]:
    """rl without the grid (methods, seeds); {} without an rl block (esopt.spec.sudoku.RlRun types it)."""
    return without(section(c, "rl"), ("methods", "seeds"))


def benchmark_block(c: dict[str, Any], benchmark: str) -> dict[str, Any]:
    """A benchmark's tools and task sets: tool_agents.benchmarks.B, or for web
    {tools: [], train: web.train, eval: web.eval}."""
    if benchmark == "web":
        w = section(c, "web")
        return {"tools": [], "train": w.get("train"), "eval": w.get("eval") or {}} if w else {}
    return (section(c, "tool_agents").get("benchmarks") or {}).get(benchmark) or {}


def tool_data_spec(c: dict[str, Any], benchmark: str, data_set: str) -> Any:
    """tool_agents.benchmarks.B.train, or .eval[SET] (web.train, web.eval[SET])."""
    b = benchmark_block(c, benchmark)
    return b.get("train") if data_set == "train" else (b.get("eval") or {}).get(data_set)


def ahd_budget(c: dict[str, Any], samples: int | str) -> Any:
    """The ahd.budgets entry with this many samples."""
    return next((b for b in section(c, "ahd").get("budgets") or [] if str(b.get("samples")) == str(samples)), None)
