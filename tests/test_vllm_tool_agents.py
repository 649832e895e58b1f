"""Tool agents (ReAct Math with the real Python sandbox) in vLLM, on a tiny Qwen3 tool model
on CPU: esopt evaluate writes the same agent summary through vLLM as through HF; a
conversation's prompts grow turn by turn while the prefix cache serves the earlier turns
(greedy replies equal those of re-encoding every turn); esopt train-agent's ES inside the
engine ends at weights HF replays from its history, with and without Trace2Skill.

Runs where vLLM is installed (as tests/test_vllm_engine.py: .ci/run's engine environment
sets ESOPT_VLLM_REQUIRED, so a broken install fails instead of skipping). One engine serves
the module (an engine start takes about a minute on 2 cores): the commands run in this
process, the first opens its engine through the real esopt.agent.engines.open_engine, and the
later ones get the same engine, kept open. The ES runs come last: they move its weights.
"""

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from esopt.cli import build_model, evaluate, prepare_data, train_agent

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
if os.environ.get("ESOPT_VLLM_REQUIRED") and not HAS_VLLM:  # .ci/run's engine environment
    raise RuntimeError("ESOPT_VLLM_REQUIRED is set but vllm does not import")
pytestmark = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (the engine environment of docs/engine.md)")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Math-only smoke config whose tool model is a Qwen3ForCausalLM with 32-dim heads (vLLM's
    CPU attention has no kernel for smaller ones); its data sets and model; ES at G 4 on 4
    tasks. Two configs: engine.math vllm and hf."""
    d = tmp_path_factory.mktemp("vllm_tools")
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    ta = cfg["tool_agents"]
    del ta["benchmarks"]["docvqa"]
    ta["model"]["name"] = "smoke-qwen3-tools"
    ta["model"]["tiny"].update(architecture="qwen3", hidden_size=64, intermediate_size=128, num_attention_heads=2,
                               num_key_value_heads=1, head_dim=32)
    # G 4 and sigma 0.05 (smoke: 0.01): the members must act differently for rewards to differ and
    # the weights to move; at G 2, sigma 0.01 and 4 tasks the members of an Intel-built model tied
    # in both generations of seeds 0-3 (the warm start differs by CPU type)
    ta["es"].update(population=4, generations=2, tasks_per_member=4,
                    sigma={"schedule": "cosine", "sigma0": 0.05, "sigmaT": 0.02})
    paths = {}
    for name in ("vllm", "hf"):
        cfg["engine"] = {"math": name, "vllm": {"gpu_memory_utilization": 0.1, "max_model_len": 1024}}
        paths[name] = d / f"cfg_{name}.yaml"
        paths[name].write_text(yaml.safe_dump(cfg))
    for name in ("train", "dapo"):
        assert prepare_data.main(["--config", str(paths["hf"]), "--benchmark", "math", "--set", name,
                                  "--out", str(d / name)]) == 0
    assert build_model.main(["--for", "tools", "--config", str(paths["hf"]), "--data", f"math={d / 'train'}",
                             "--out", str(d / "model")]) == 0
    return {"vllm": str(paths["vllm"]), "hf": str(paths["hf"]), "model": str(d / "model"), "train": str(d / "train"),
            "dapo": str(d / "dapo")}


class KeptOpen:
    """The module's engine as a job sees it: everything but close()."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def close(self):
        pass


@pytest.fixture(scope="module")
def engine(setup):
    """esopt.agent.engines.open_engine, run once for vLLM: every later job gets that engine."""
    from esopt.agent import engines as engine_mod

    real, held = engine_mod.open_engine, {}

    def once(settings, model, tokenizer, model_dir, seed=0):
        if settings["name"] != "vllm":
            return real(settings, model, tokenizer, model_dir, seed=seed)
        assert Path(model_dir) == Path(setup["model"]), "the module's engine serves one model"
        if "engine" not in held:
            held["engine"], held["record"] = real(settings, model, tokenizer, model_dir, seed=seed)
        return KeptOpen(held["engine"]), held["record"]

    patch = pytest.MonkeyPatch()
    patch.setattr(engine_mod, "open_engine", once)
    yield held
    patch.undo()
    if "engine" in held:
        held["engine"].close()


def open_shared(setup, engine):
    """The module's engine (opened here if no job has opened it yet) and the tokenizer."""
    from esopt.config import engine_settings, load_config
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.tool_episodes import rollout_policy

    model, tok = load_model_and_tokenizer(setup["model"], device="cpu")
    with rollout_policy(engine_settings(load_config(setup["vllm"]), "math"), model, tok, setup["model"], 0):
        pass
    return engine["engine"], tok


def test_evaluate_writes_the_same_agent_summary_through_vllm_and_hf(setup, engine, tmp_path):
    out = {}
    for name in ("vllm", "hf"):
        out[name] = tmp_path / f"{name}.json"
        assert evaluate.main(["--config", setup[name], "--benchmark", "math", "--model", setup["model"],
                              "--data", setup["dapo"], "--out", str(out[name]),
                              "--meta", json.dumps({"method": "no_skill", "benchmark": "math"})]) == 0
    s = {n: json.loads(p.read_text()) for n, p in out.items()}
    assert {k: type(v) for k, v in s["vllm"].items()} == {k: type(v) for k, v in s["hf"].items()}
    assert s["vllm"]["k"] == s["hf"]["k"] == 2 and s["vllm"]["tasks"] == s["hf"]["tasks"] == 4
    assert s["vllm"]["mean_at_k"] == pytest.approx(sum(s["vllm"]["scores"]) / 2)
    assert s["vllm"]["all_tool_calls_per_episode"] > 0  # the engine's replies drove the sandbox
    trajs = {n: [json.loads(x) for x in p.with_suffix(".trajectories.jsonl").read_text().splitlines()]
             for n, p in out.items()}
    assert len(trajs["vllm"]) == len(trajs["hf"]) == 2 * 4
    assert [t.keys() for t in trajs["vllm"]] == [t.keys() for t in trajs["hf"]]
    prov = {n: json.loads(p.with_suffix(".provenance.json").read_text()) for n, p in out.items()}
    assert prov["vllm"]["engine"]["name"] == "vllm" and prov["vllm"]["engine"]["version"]
    assert prov["hf"]["engine"]["name"] == "hf"
    assert prov["vllm"]["model_device"] == "cpu"  # the HF copy stays off the accelerator


def test_prompts_grow_over_turns_and_the_prefix_cache_gives_the_re_encoded_replies(setup, engine):
    """history_turns null: each turn's prompt is the previous one plus the reply and the tool's
    output, so the prefix cache serves all but the new tokens; greedy replies are those of
    re-encoding the whole conversation every turn (vllm_engine.ReEncoding)."""
    from esopt.agent.vllm_engine import ReEncoding
    from esopt.config import load_config
    from esopt.runs.tool_episodes import ToolEpisodeSpec, load_tasks, make_tools, run_tool_episodes
    from esopt.spec.agents import ToolEpisodes

    eng, tok = open_shared(setup, engine)
    episodes = ToolEpisodes.from_config(load_config(setup["vllm"]))
    assert episodes.history_turns is None
    spec = ToolEpisodeSpec.from_episodes(episodes, "math", "greedy")
    tools = make_tools(episodes, "math", setup["train"])
    tasks = load_tasks(setup["train"], "math")[:6]

    class Recording:
        def __init__(self, inner):
            self.inner, self.calls = inner, []

        def generate(self, prompts, sampling, seed, *, keys=None, **kw):
            self.calls.append(dict(zip(keys, map(list, prompts))))
            return self.inner.generate(prompts, sampling, seed, keys=keys, **kw)

    def run(policy):
        rec, counters = Recording(policy), {}
        trajs = run_tool_episodes(rec, tok, spec, tools, tasks, seed=0, counters=counters)
        return [[t.action for t in tr.turns] for tr in trajs], counters, rec.calls

    cached, c1, calls = run(eng)
    again, c2, _ = run(ReEncoding(eng))
    assert cached == again and c1 == c2
    assert len(calls) >= 2 and any("<python>" in a for acts in cached for a in acts)  # tool calls, then answers
    block = eng.llm.llm_engine.vllm_config.cache_config.block_size
    assert min(len(p) for p in calls[0].values()) >= block  # the first turn fills whole cache blocks
    for before, after in zip(calls, calls[1:]):
        for key, prompt in after.items():
            assert len(prompt) > len(before[key]) and prompt[: len(before[key])] == before[key]


def test_es_inside_vllm_ends_at_the_weights_hf_replays(setup, engine, tmp_path):
    """train-agent --method esopt_trace2skill with engine.math vllm: ES runs in the engine's
    workers, the Trace2Skill analyst (kind policy) generates with the host model, which holds
    the base weights until the final ones come back from the engine and are saved; HF replays
    the history to them. Last in the module: the update leaves the engine off its base weights
    (one run only, for that reason: a second would start from the first one's weights)."""
    from esopt.cli.replay import replay
    from esopt.hashing import weights_sha256
    from esopt.models.load import load_model_and_tokenizer

    base_model, _ = load_model_and_tokenizer(setup["model"], device="cpu")
    base = weights_sha256(base_model)
    # The tool model's warm start differs by CPU type, and so whether a seed's members tie
    # on 4 tasks (seed 0 did in both generations on an Intel-built model). A run whose members
    # tie in every generation leaves the engine at the base weights, so the next seed starts
    # where the first did.
    for seed in range(4):
        out = tmp_path / f"run_s{seed}"
        assert train_agent.main(["--config", setup["vllm"], "--method", "esopt_trace2skill", "--benchmark", "math",
                                 "--seed", str(seed), "--model", setup["model"], "--data", setup["train"],
                                 "--out", str(out)]) == 0
        history = json.loads((out / "history.json").read_text())
        if any(g["updated"] for g in history["generations"]):
            break
        assert history["final"]["weights_sha256"] == base
        got = engine["engine"].state_dict()  # nor did the engine's weights
        assert all(torch.equal(got[n], p) for n, p in base_model.named_parameters())
    else:
        pytest.fail("members tied in every generation of seeds 0-3: the weights never moved, nothing to compare")
    saved, _ = load_model_and_tokenizer(out / "model", device="cpu")
    final = history["final"]["weights_sha256"]
    assert weights_sha256(saved) == final != base
    got = engine["engine"].state_dict()  # the engine ended where the saved model is, tensor by tensor
    assert all(torch.equal(got[n], p) for n, p in saved.named_parameters())
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["engine"]["name"] == "vllm" and prov["model_device"] == "cpu"
    lines = [json.loads(ln) for ln in (out / "skill_history.jsonl").read_text().splitlines()]
    assert [ln["generation"] for ln in lines] == [0, 1] and all(ln["traces"] > 0 for ln in lines)
    res = replay(setup["model"], str(out / "history.json"), None)  # the HF path, from seeds and rewards
    assert res["match"] and res["weights_sha256"] == final and not res["problems"]
