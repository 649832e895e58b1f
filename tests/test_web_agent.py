"""The web benchmark as a pipeline stage: its config block, the jobs' settings, the
commands (prepare-data, build-model --for web, train-agent, evaluate) in a real browser,
the per-site summary and the WebArena-Lite table."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from esopt.config import ConfigError, load_config, validate_config
from esopt.provenance import jobs
from esopt.spec.agents import ToolEpisodes, WebJob

ROOT = Path(__file__).resolve().parents[1]


def smoke() -> dict:
    return yaml.safe_load((ROOT / "config/smoke.yaml").read_text())


@pytest.mark.parametrize("change, message", [
    (lambda w: w.update(sites={"shopping": "http://10.0.0.1:7770"}), "generated tasks run on the local sites"),
    (lambda w: w["eval"]["lite"].update(source="webarena_lite"), "needs the real WebArena sites"),
    (lambda w: (w.update(sites={"shopping": "http://h:7770"}), w["train"].update(source="webarena_train"),
                w["eval"]["lite"].update(source="webarena_lite")), "needs `path`"),
    (lambda w: w.update(judge={"kind": "openai", "model": "m"}), "web.judge of kind openai needs ['base_url']"),
    (lambda w: w["es"].update(population=3), "antithetic pairs the members"),
    (lambda w: w.pop("trace2skill"), "no web.trace2skill block"),
    (lambda w: w["model"].update(expect={"web/nope": [0, 1]}), "not evaluation sets web/SET"),
])
def test_web_block_errors_name_the_setting(change, message):
    raw = smoke()
    change(raw["web"])
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate_config(raw, "smoke.yaml")


def test_web_model_name_must_differ_from_the_others():
    raw = smoke()
    raw["web"]["model"]["name"] = raw["tool_agents"]["model"]["name"]
    with pytest.raises(ConfigError, match="model names .* must be unique"):
        validate_config(raw, "smoke.yaml")


def test_web_jobs_depend_on_the_web_block_and_tool_jobs_do_not_change():
    cfg = load_config(ROOT / "config/smoke.yaml")
    tools = jobs.settings("evaluate", cfg, block="tool_agents")
    assert tools == jobs.settings("evaluate", cfg, benchmark="math")  # the tool rules' view: the whole block
    assert tools["evaluate"] == cfg["tool_agents"]["evaluate"] and "tools" in tools["episode"]
    web = jobs.settings("evaluate", cfg, benchmark="web")
    assert web["evaluate"] == cfg["web"]["evaluate"]
    assert web["episode"] == WebJob.from_config(cfg).settings()
    assert web["episode"]["sites"] == "local" and web["episode"]["observation"] == "axtree"
    assert "browsers" not in web["episode"]  # how many browsers changes no result
    assert "site_seed" in jobs.settings("prepare-data", cfg, benchmark="web", set="train")
    assert "site_seed" not in jobs.settings("prepare-data", cfg, benchmark="math", set="train")
    train = jobs.settings("train-agent", cfg, method="esopt_trace2skill", benchmark="web")
    assert train["es"]["population"] == cfg["web"]["es"]["population"] and train["trace2skill"] == cfg["web"]["trace2skill"]
    # a change of web's observation reruns the web jobs only
    other = copy.deepcopy(cfg)
    other["web"]["max_obs_chars"] = 999
    assert jobs.settings("evaluate", other, benchmark="web") != web
    assert jobs.settings("evaluate", other, block="tool_agents") == tools
    assert jobs.settings("evaluate", other) == jobs.settings("evaluate", cfg)  # nor Sudoku's
    assert jobs.settings("train-agent", other, method="esopt", benchmark="math") == \
        jobs.settings("train-agent", cfg, method="esopt", benchmark="math")


def test_by_site_counts_every_site_of_a_task():
    from esopt.agent.rollout import Trajectory
    from esopt.envs.benchmarks import get
    from esopt.envs.web import WebTask, generate_tasks

    tasks = generate_tasks(0, "eval", per_template=1)
    shop = next(t for t in tasks if t.sites == ["shopping"])
    forum = next(t for t in tasks if t.sites == ["reddit"])
    both = WebTask({**shop.config, "task_id": 999, "sites": ["shopping", "reddit"]})
    trajs = [Trajectory(shop.id, "", "", info={"success": True}), Trajectory(shop.id, "", "", info={"success": False}),
             Trajectory(forum.id, "", "", info={"success": True}), Trajectory(both.id, "", "", info={"success": True})]
    got = get("web").summary([shop, forum, both], trajs)["by_site"]  # web's own keys of an evaluation summary
    assert got["all"] == {"episodes": 4, "success": 0.75}
    assert got["shopping"] == {"episodes": 3, "success": 2 / 3}
    assert got["reddit"] == {"episodes": 2, "success": 1.0}


def _summary(path: Path, method: str, seed, by_site: dict) -> str:
    meta = {"method": method, "benchmark": "web", "dataset": "lite"} | ({"seed": seed} if seed is not None else {})
    path.write_text(json.dumps({"meta": meta, "k": 2, "by_site": {
        s: {"episodes": 10, "success": v} for s, v in by_site.items()}}))
    return str(path)


def test_webarena_table_means_seeds_per_site_and_sets_the_paper_beside(tmp_path):
    from esopt.report.webarena import load_web_evals, plot_webarena, webarena_table

    paths = [_summary(tmp_path / "b.json", "no_skill", None, {"all": 0.2, "shopping": 0.1, "reddit": 0.3}),
             _summary(tmp_path / "e0.json", "esopt", 0, {"all": 0.3, "shopping": 0.2, "reddit": 0.4}),
             _summary(tmp_path / "e1.json", "esopt", 1, {"all": 0.5, "shopping": 0.4, "reddit": 0.6})]
    ev = load_web_evals(paths)
    tab = webarena_table(ev, "lite", {"no_skill": 29.47, "esopt": 36.16})
    assert list(tab.method) == ["no_skill", "esopt"]
    es = tab[tab.method == "esopt"].iloc[0]
    assert es["all mean"] == pytest.approx(40.0) and es["all std"] == pytest.approx(14.142, abs=1e-3)
    assert es["all"] == "40.0 ± 14.1" and es["seeds"] == 2
    assert es["Δ all"] == pytest.approx(20.0)
    assert es["paper"] == 36.16 and es["paper Δ"] == pytest.approx(36.16 - 29.47)
    assert tab[tab.method == "no_skill"].iloc[0]["shopping"] == "10.0"
    plot_webarena(tab, tmp_path / "fig.png", title="t")
    assert (tmp_path / "fig.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="two evaluations of the same run"):
        load_web_evals(paths + [_summary(tmp_path / "e1b.json", "esopt", 1, {"all": 0.1})])


def test_demonstrations_on_other_site_seeds_never_phrase_a_held_out_intent():
    from esopt.envs.web.templates import generate_tasks
    from esopt.models.demonstrations.web import demonstration_sets

    raw = smoke()
    raw["web"]["model"]["warmstart"].update(tasks=None, site_seeds=[0, 1, 2])
    own = generate_tasks(seed=0, split="train")
    sets = demonstration_sets(raw, own)
    assert [s for s, _, _ in sets] == [0, 1, 2] and sets[0][1] is own
    assert len({d for _, _, d in sets}) == 3  # each copy of the sites has its own mistakes
    held_out = {t.intent for t in generate_tasks(seed=0, split="eval")}
    for site_seed, tasks, _ in sets[1:]:
        assert tasks and {t.config["site_seed"] for t in tasks} == {site_seed}
        assert not held_out & {t.intent for t in tasks}
    assert {t.intent for t in sets[1][1]} != {t.intent for t in own}  # other names, other tasks
    raw["web"]["sites"] = {"shopping": "http://127.0.0.1:7770"}
    with pytest.raises(ValueError, match="needs web.sites: local"):
        demonstration_sets(raw, own)


def test_name_swaps_give_each_episode_again_with_names_no_site_has_consistently():
    from tests.conftest import require_web

    require_web()
    from esopt.envs.web import WebEnv, WebRuntime
    from esopt.envs.web.templates import generate_tasks, split_of
    from esopt.models.demonstrations.web import demonstrations, name_pool, names_of

    tasks = {t.config["template"]: t for t in generate_tasks(seed=0, split="train")}
    tasks = [tasks["shop_price"], tasks["forum_post_author"], tasks["code_new_issue"]]
    pool = name_pool({"web": {}}, site_seeds=[1, 2])
    with WebRuntime(seed=0) as rt:
        def run(swaps):
            return list(demonstrations(tasks, lambda: WebEnv(rt, max_turns=8, restate_objective=True), "sys",
                                       0.0, seed=0, progress=False, name_swaps=swaps, pool=pool))
        plain, swapped = run(0), run(2)
    objective = lambda t: t[1]["content"].splitlines()[0].removeprefix("Objective: ")
    intents = {t.intent for t in tasks}
    copies = [t for t in swapped if objective(t) not in intents]
    assert len(swapped) == 3 * len(plain) and len(copies) == 2 * len(plain)
    assert [t[2] for t in swapped if t not in copies] == [t[2] for t in plain]  # the same expert actions first
    for task in tasks:
        names = names_of(task)
        mine = [t for t in copies if objective(t) != task.intent and any(
            objective(t).startswith(task.intent.split(v)[0]) for v in names.values())]
        assert mine
        for t in mine:  # the old names are gone from prompt and action; the intent stays a training intent
            text = t[1]["content"] + t[2]["content"]
            assert not any(v in text for v in names.values()), text[:300]
            assert split_of(objective(t)) == "train" and t[1]["content"].endswith(f"Objective: {objective(t)}")
    typed = [t for t in copies if t[2]["content"].startswith("type [")]  # the search box gets the new name
    assert typed and all(re.match(r"type \[\d+\] \[([^]]*)\]", t[2]["content"]).group(1) in objective(t) for t in typed)
    with pytest.raises(ValueError, match="needs web.sites: local"):
        name_pool({"web": {"sites": {"shopping": "http://127.0.0.1:7770"}}})


# ---------------------------------------------------------------- the commands, in a real browser
def esopt(*args, cwd):
    res = subprocess.run([sys.executable, "-m", "esopt.cli.main", *map(str, args)], cwd=cwd, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    return res


@pytest.fixture(scope="module")
def web_run(tmp_path_factory):
    """The smoke web stage by hand: data, a 40-step web model, a base evaluation and an
    ES run of one generation."""
    from tests.conftest import require_web

    require_web()
    wd = tmp_path_factory.mktemp("web")
    raw = smoke()
    raw["web"]["model"]["warmstart"].update(tasks=4, steps=40, site_seeds=[0, 5])
    raw["web"]["eval"]["lite"].update(n=3)
    raw["web"]["es"].update(generations=1)
    cfg = wd / "web.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    esopt("prepare-data", "--config", cfg, "--benchmark", "web", "--set", "train", "--out", "data/train", cwd=wd)
    esopt("prepare-data", "--config", cfg, "--benchmark", "web", "--set", "lite", "--out", "data/lite", cwd=wd)
    esopt("build-model", "--for", "web", "--config", cfg, "--data", "web=data/train", "--out", "models/web", cwd=wd)
    meta = json.dumps({"method": "no_skill", "benchmark": "web", "dataset": "lite"})
    esopt("evaluate", "--config", cfg, "--benchmark", "web", "--model", "models/web", "--data", "data/lite",
          "--out", "eval/base.json", "--meta", meta, cwd=wd)
    esopt("train-agent", "--config", cfg, "--method", "esopt_trace2skill", "--benchmark", "web", "--seed", 0,
          "--model", "models/web", "--data", "data/train", "--out", "train/e2s", cwd=wd)
    return wd


def test_web_commands_record_the_browser_and_pass_the_audit(web_run):
    wd = web_run
    tasks = [json.loads(x) for x in (wd / "data/train/tasks.jsonl").read_text().splitlines()]
    assert len(tasks) == 6 and all(t["config"]["split"] == "train" for t in tasks)  # web.train.n
    model_rec = json.loads((wd / "models/web/provenance.json").read_text())
    assert model_rec["model"]["demonstration_turns"] > 4  # several turns per demonstrated task
    per_seed = model_rec["model"]["demonstrations_per_site_seed"]  # warmstart.site_seeds [0, 5]
    assert set(per_seed) == {"0", "5"} and all(v["tasks"] == 4 and v["turns"] >= 4 for v in per_seed.values())
    summary = json.loads((wd / "eval/base.json").read_text())
    assert summary["tasks"] == 3 and summary["by_site"]["all"]["episodes"] == 3
    rows = [json.loads(x) for x in (wd / "eval/base.trajectories.jsonl").read_text().splitlines()]
    assert all(r["first_observation"].startswith("Objective: ") for r in rows)
    assert all(r["info"]["ended_by"] in ("stop", "turns") and r["info"]["failure"] is None for r in rows), \
        [r["info"] for r in rows]
    rec = json.loads((wd / "eval/base.provenance.json").read_text())
    assert rec["web"]["chromium"].startswith("Chromium") and rec["web"]["playwright"] and rec["web"]["sites"] == "local"
    hist = json.loads((wd / "train/e2s/history.json").read_text())
    assert len(hist["generations"]) == 1 and hist["run"]["benchmark"] == "web"
    assert (wd / "train/e2s/skill.md").exists()
    res = subprocess.run([sys.executable, "-m", "esopt.cli.main", "audit", ".", "--replay",
                          "always", "--json", "audit.json"], cwd=wd, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    checks = json.loads((wd / "audit.json").read_text())["checks"]
    assert not [c for c in checks if c["status"] == "fail"]
    assert any(c["name"] == "replay" and c["status"] == "ok" for c in checks)


def test_real_sites_reset_before_every_generation_when_asked(tmp_path):
    import http.server
    import threading

    from esopt.runs.tool_episodes import generation_reset

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        counter = tmp_path / "resets"
        cfg = load_config(ROOT / "config/smoke.yaml")
        local = WebJob.from_config(cfg)
        job = replace(local, sites=replace(local.sites, sites={"shopping": url}, reset=f"echo x >> {counter}",
                                           reset_every="generation"))
        assert generation_reset(replace(job, sites=replace(job.sites, reset_every="job"))) is None
        assert generation_reset(replace(job, sites=replace(job.sites, sites="local"))) is None
        assert generation_reset(ToolEpisodes.from_config(cfg)) is None
        reset = generation_reset(job)
        reset()
        reset()
        assert counter.read_text().count("x") == 2  # the command ran, then the sites answered
        failing = generation_reset(replace(job, sites=replace(job.sites, reset="echo broken >&2; exit 3")))
        with pytest.raises(RuntimeError, match="broken"):
            failing()
    finally:
        server.shutdown()
