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
    for h in config["sudoku"]["horizons"]:
        for variant in [None, *es.get("variants", {})]:
            sigma = es_settings(config, h, variant)["sigma"]
            if sigma["schedule"] == "cosine" and "sigmaT" not in sigma:
                where = f"es.variants.{variant}" if variant else "es.sigma"
                raise ConfigError(f"{source}: {where}: sigmaT is required for the cosine schedule (H*={h})")
    for name, variant in es.get("variants", {}).items():
        bad = set(variant.get("horizons") or []) - set(config["sudoku"]["horizons"])
        if bad:
            raise ConfigError(f"{source}: es.variants.{name}.horizons {sorted(bad)} are not in sudoku.horizons")
    bad = set(es.get("by_horizon", {})) - set(config["sudoku"]["horizons"])
    if bad:
        raise ConfigError(f"{source}: es.by_horizon keys {sorted(bad)} are not in sudoku.horizons")
    names = [m["name"] for m in all_models(config)]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: model names must be unique, got {names}")
    for i, m in enumerate(all_models(config)):
        where = "model" if i == 0 else f"population_study.models[{i - 1}]"
        if m["source"] == "tiny" and not {"tiny", "warmstart"} <= set(m):
            raise ConfigError(f"{source}: {where}: source 'tiny' needs tiny and warmstart blocks")
        if m["source"] == "hub" and "hub" not in m:
            raise ConfigError(f"{source}: {where}: source 'hub' needs hub.repo_id and hub.revision")
        if m["source"] == "local" and not m.get("local_path"):
            raise ConfigError(f"{source}: {where}: source 'local' needs local_path")
        _check_expect(m, f"{source}: {where}.expect", {str(h) for h in config["sudoku"]["horizons"]},
                      "H* {bad} are not in sudoku.horizons (the base is evaluated there)")
    ta = config.get("tool_agents") or {}
    if ta.get("model"):
        sets = {f"{b}/{d}" for b, spec in ta["benchmarks"].items() for d in spec.get("eval", {})}
        _check_expect(ta["model"], f"{source}: tool_agents.model.expect", sets,
                      "{bad} are not evaluation sets BENCHMARK/SET of tool_agents.benchmarks")
    ahd = config.get("ahd") or {}
    if ahd.get("model"):
        _check_expect(ahd["model"], f"{source}: ahd.model.expect", set(ahd["tasks"]), "{bad} are not in ahd.tasks")
        if ahd["model"]["expect"] and "sample" not in ahd["searches"]:
            raise ConfigError(f"{source}: ahd.model.expect is checked on the Sample runs of the base writer, "
                              "but ahd.searches has no 'sample'")
    names = [m["name"] for m in all_models(config)] + [m["name"] for m in (ta.get("model"), ahd.get("model")) if m]
    if len(set(names)) != len(names):  # each is a directory results/models/NAME
        raise ConfigError(f"{source}: model names (model, population_study.models, tool_agents.model, ahd.model) "
                          f"must be unique, got {names}")
    return config


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
ES_GRID_KEYS = ("populations", "seeds", "by_horizon", "variants")


def es_settings(config: dict[str, Any], horizon: int, variant: str | None = None) -> dict[str, Any]:
    """The es settings of one run: es, then es.by_horizon[H*], then es.variants[variant]."""
    es = config["es"]
    out = {k: v for k, v in es.items() if k not in ES_GRID_KEYS}
    by_h = {int(k): v for k, v in (es.get("by_horizon") or {}).items()}
    out = deep_merge(out, by_h.get(int(horizon), {}))
    if variant:
        variants = es.get("variants") or {}
        if variant not in variants:
            raise ConfigError(f"es variant {variant!r} is not in the config (es.variants: {sorted(variants)})")
        out = deep_merge(out, {k: v for k, v in variants[variant].items() if k != "horizons"})
    return out


def all_models(config: dict[str, Any]) -> list[dict[str, Any]]:
    """`model` first, then the extra sizes of the population study."""
    return [config["model"], *((config.get("population_study") or {}).get("models") or [])]


def checked_models(config: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every model block the pipeline builds or fetches, by name, with its kind:
    `model` and population_study.models ("sudoku"), tool_agents.model ("tools"),
    ahd.model ("ahd"). Tool agents or a writer without a block of their own use `model`;
    the names are unique (validate_config)."""
    out = {m["name"]: ("sudoku", m) for m in all_models(config)}
    for kind, sec in (("tools", "tool_agents"), ("ahd", "ahd")):
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
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
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
    """{name: hf} or {name: vllm, **engine.vllm}: the engine of a benchmark's ES and evaluation rollouts."""
    e = section(c, "engine")
    name = e.get(benchmark, "hf")
    return {"name": name, **(e.get("vllm") or {})} if name == "vllm" else {"name": name}


def sudoku_max_turns(c: dict[str, Any], horizon: int) -> int:
    """The turn budget of a Sudoku episode at H*: sudoku.max_turns, or turns_per_blank x H*."""
    s = c["sudoku"]
    return s["max_turns"] if s.get("max_turns") else s["turns_per_blank"] * int(horizon)


def sudoku_settings(c: dict[str, Any]) -> dict[str, Any]:
    """sudoku without the grid of horizons (each horizon is a wildcard)."""
    return without(section(c, "sudoku"), ("horizons",))


def rl_settings(c: dict[str, Any]) -> dict[str, Any]:
    """rl without the grid (methods, seeds)."""
    return without(section(c, "rl"), ("methods", "seeds"))


def tool_episode_settings(c: dict[str, Any]) -> dict[str, Any]:
    """What every tool-agent episode depends on: turn and token budgets, sampling, sandbox,
    OCR, and each benchmark's tools."""
    ta = section(c, "tool_agents")
    keys = ("max_turns", "max_tool_calls", "max_new_tokens", "history_turns", "sampling", "sandbox", "ocr")
    return {k: ta[k] for k in keys if k in ta} | {
        "tools": {b: spec.get("tools") for b, spec in (ta.get("benchmarks") or {}).items()}}


def tool_es_settings(c: dict[str, Any], benchmark: str) -> dict[str, Any]:
    """tool_agents.es with the benchmark's own overrides (tool_agents.benchmarks.B.es)."""
    ta = section(c, "tool_agents")
    return deep_merge(ta["es"], ((ta.get("benchmarks") or {}).get(benchmark) or {}).get("es") or {})


def tool_grpo_settings(c: dict[str, Any]) -> dict[str, Any]:
    """rl with tool_agents.grpo merged over it: what Agentic GRPO of a tool agent runs with."""
    g = dict(section(c, "tool_agents")["grpo"])
    group = {"tasks_per_step": g["tasks_per_step"], "group_size": g["group_size"]}
    over = {k: v for k, v in g.items() if k not in group}
    return deep_merge(rl_settings(c), over | {"grpo": group})


def tool_data_spec(c: dict[str, Any], benchmark: str, data_set: str) -> Any:
    """tool_agents.benchmarks.B.train, or .eval[SET]."""
    b = (section(c, "tool_agents").get("benchmarks") or {}).get(benchmark) or {}
    return b.get("train") if data_set == "train" else (b.get("eval") or {}).get(data_set)


def ahd_budget(c: dict[str, Any], samples: int | str) -> Any:
    """The ahd.budgets entry with this many samples."""
    return next((b for b in section(c, "ahd").get("budgets") or [] if str(b.get("samples")) == str(samples)), None)
