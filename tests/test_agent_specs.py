"""The agent jobs' typed settings (esopt.spec.agents): web episodes are WebEnv's arguments and
WebRuntime's, every field comes from a schema key with a default, and the specs give the
settings the rerun map has always held."""

import inspect
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from esopt.config import load_config, load_schema
from esopt.spec.agents import (
    AgentES,
    AgentGRPO,
    AgentTraining,
    ToolEpisodes,
    WebEpisodes,
    WebJob,
    WebSites,
    agent_episodes,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["smoke", "tiny_full", "paper"]  # the configs with tool and web blocks


def keyword_parameters(fn) -> set[str]:
    return {p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"}


def test_web_episodes_are_exactly_webenvs_keyword_arguments():
    from esopt.envs.web import WebEnv

    assert {f.name for f in fields(WebEpisodes)} == keyword_parameters(WebEnv.__init__) - {"runtime"}


def test_web_sites_give_webruntimes_keyword_arguments():
    from esopt.envs.web import WebRuntime

    kwargs = set(WebSites.RUNTIME_ONLY) | {"seed"}
    assert kwargs <= keyword_parameters(WebRuntime.__init__)
    assert keyword_parameters(WebRuntime.__init__) - kwargs == {"sites", "headless", "block_external"}


def test_every_web_field_is_a_web_key_with_a_schema_default_or_required():
    web = load_schema()["properties"]["web"]
    names = {f.name for f in fields(WebEpisodes)} | {f.name for f in fields(WebSites)}
    names |= {f.name for f in fields(WebJob)} - {"episodes", "sites"}
    missing = sorted(n for n in names if n not in web["properties"])
    assert missing == []
    no_default = sorted(n for n in names if "default" not in web["properties"][n] and n not in web["required"])
    assert no_default == []


@pytest.mark.parametrize("name", CONFIGS)
def test_the_web_settings_hold_every_episode_key_and_no_runtime_only_one(name):
    cfg = load_config(ROOT / f"config/{name}.yaml")
    s = WebJob.from_config(cfg).settings()
    assert not set(WebSites.RUNTIME_ONLY) & set(s)
    assert {f.name for f in fields(WebEpisodes)} <= set(s)
    assert s == {k: cfg["web"][k] for k in s}  # as the config gives them


@pytest.mark.parametrize("name", CONFIGS)
def test_a_benchmarks_own_es_keys_override_the_blocks(name):
    cfg = load_config(ROOT / f"config/{name}.yaml")
    for b, own in cfg["tool_agents"]["benchmarks"].items():
        es = AgentES.from_config(cfg, b)
        assert es.settings() == {**cfg["tool_agents"]["es"], **(own.get("es") or {})}
    assert AgentES.from_config(cfg, "web").settings() == cfg["web"]["es"]


def test_grpo_runs_the_rl_block_with_the_tool_agents_grpo_over_it():
    cfg = load_config(ROOT / "config/smoke.yaml")
    g = AgentGRPO.from_config(cfg).settings()
    ta = cfg["tool_agents"]["grpo"]
    assert (g["steps"], g["lr"], g["grpo"]) == (ta["steps"], ta["lr"], {"tasks_per_step": ta["tasks_per_step"],
                                                                        "group_size": ta["group_size"]})
    assert list(g) == [k for k in cfg["rl"] if k not in ("methods", "seeds")]  # the rl block's order


def test_training_settings_leave_out_revert_and_name_trace2skill_only_for_its_methods():
    cfg = load_config(ROOT / "config/smoke.yaml")
    es = AgentTraining.from_config(cfg, "esopt", "math").settings()
    assert "revert" not in es["es"] and "trace2skill" not in es and "engine" not in es
    assert AgentTraining.from_config(cfg, "esopt_trace2skill", "web").settings()["trace2skill"] == cfg["web"]["trace2skill"]
    assert set(AgentTraining.from_config(cfg, "grpo", "math").settings()) == {"rl", "episode"}


def test_a_tool_block_without_sandbox_or_ocr_has_neither_in_its_settings():
    raw = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    del raw["tool_agents"]["sandbox"], raw["tool_agents"]["ocr"]
    from esopt.config import validate_config

    episodes = agent_episodes(validate_config(raw), "math")
    assert isinstance(episodes, ToolEpisodes) and episodes.sandbox is None
    assert not {"sandbox", "ocr"} & set(episodes.settings())
