"""The Sudoku jobs' specs (esopt.spec.sudoku): built from a validated config, typed, the rerun
map's settings; esopt.spec and esopt.provenance.jobs import no torch (the Snakefile imports them)."""

import json
import subprocess
import sys
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from esopt.config import load_config
from esopt.provenance import jobs
from esopt.spec.sudoku import EsRun, RlRun, Sigma, SudokuEpisodes, SudokuEvaluation

ROOT = Path(__file__).resolve().parents[1]


def test_importing_the_specs_and_the_rerun_map_imports_no_torch():
    code = ("import pkgutil, sys, esopt.spec\n"
            "for m in pkgutil.iter_modules(esopt.spec.__path__): __import__('esopt.spec.' + m.name)\n"
            "import esopt.provenance.jobs\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ["tiny", "tiny_full", "paper"])
def test_every_run_of_a_config_has_typed_specs(name):
    cfg = load_config(ROOT / "config" / f"{name}.yaml")
    episodes = SudokuEpisodes.from_config(cfg)
    assert episodes.size == cfg["sudoku"]["size"] and episodes.agent.sampling.top_k == cfg["agent"]["sampling"]["top_k"]
    for h in cfg["sudoku"]["horizons"]:
        for variant in [None, *cfg["es"].get("variants", {})]:
            es = EsRun.from_config(cfg, h, variant)
            assert (es.horizon, es.variant) == (h, variant)
            assert isinstance(es.sigma, Sigma) and es.method == (f"es_{variant}" if variant else "esopt")
            assert es.settings()["generations"] == cfg["es"]["generations"]
        assert episodes.turn_budget(h) == (cfg["sudoku"]["max_turns"] or cfg["sudoku"]["turns_per_blank"] * h)
    rl = RlRun.from_config(cfg)
    assert rl.tasks_per_step(1) == cfg["rl"]["ppo"]["tasks_per_step"]
    assert rl.tasks_per_step(rl.grpo.group_size) == cfg["rl"]["grpo"]["tasks_per_step"]
    assert SudokuEvaluation.from_config(cfg).repeats == cfg["evaluate"]["repeats"]
    with pytest.raises(FrozenInstanceError):
        rl.steps = 1


def test_the_horizon_and_the_variant_merge_over_es_in_order():
    cfg = load_config(ROOT / "config" / "paper.yaml")  # es.by_horizon[15] and variants.vanilla.by_horizon[15]
    assert EsRun.from_config(cfg, 5).sigma == Sigma(**cfg["es"]["sigma"])
    assert EsRun.from_config(cfg, 15).sigma == Sigma("cosine", 0.0007, 0.0005)
    assert EsRun.from_config(cfg, 15, "vanilla").sigma == Sigma("constant", 0.0005, 0.0005)
    assert EsRun.from_config(cfg).sigma == Sigma(**cfg["es"]["sigma"])  # no H*: the es block itself


def test_the_train_es_settings_of_the_tiny_config_are_pinned():
    cfg = load_config(ROOT / "config" / "tiny.yaml")
    h = cfg["sudoku"]["horizons"][0]
    got = jobs.settings("train-es", cfg, horizon=h, variant=None)
    # perturbation full (the paper's), its unused rank and units absolute stay out, so runs read as before
    es = {k: v for k, v in cfg["es"].items()
          if k not in ("populations", "seeds", "by_horizon", "variants", "revert", "perturbation", "rank", "units")}
    want = {"es": es, "sudoku": {k: v for k, v in cfg["sudoku"].items() if k != "horizons"}, "agent": cfg["agent"],
            "engine": {"name": "population", "context": 96}} | ({"evaluate": cfg["evaluate"]} if cfg["es"]["eval_every"] else {})
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


def test_a_command_reads_its_config_file_once(monkeypatch):
    import argparse

    from esopt.cli import common

    read = []
    monkeypatch.setattr(common, "load_config", lambda path: read.append(path) or load_config(path))
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    p.add_argument("--population", type=int)
    smoke = str(ROOT / "config" / "smoke.yaml")
    assert common.run_main(lambda args: 0 if common.setup(args.config)["es"] else 1, p, ["--config", smoke]) == 0
    assert read == [smoke]
    assert common.run_main(lambda args: 0, p, ["--config", smoke, "--population", "3"]) == 2  # checked before it runs


def test_es_units_of_the_weights_scale_resolve_against_the_base():
    import torch

    from esopt.es.settings import resolve_units

    cfg = load_config(ROOT / "config" / "tiny.yaml")
    absolute = EsRun.from_config(cfg, 4)
    assert "units" not in absolute.settings()  # the default leaves the records as they were
    cfg["es"]["units"] = "weight_scale"
    relative = EsRun.from_config(cfg, 4).settings()
    assert relative["units"] == "weight_scale"
    module = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        module.weight.copy_(torch.tensor([[0.5, -0.5], [1.0, -2.0]]))  # mean |θ| = 1.0
        module.weight.mul_(0.02)
    resolved, scale = resolve_units(relative, module)
    assert scale == pytest.approx(0.02)
    assert resolved["alpha"] == pytest.approx(relative["alpha"] * 0.02)
    assert resolved["sigma"]["sigma0"] == pytest.approx(relative["sigma"]["sigma0"] * 0.02)
    assert resolved["sigma"]["sigmaT"] == pytest.approx(relative["sigma"]["sigmaT"] * 0.02)
    assert resolve_units(absolute.settings(), module) == (absolute.settings(), None)


def test_the_audit_checks_weight_scale_settings_at_the_scale_the_run_recorded():
    from esopt.es.history import History
    from esopt.es.settings import ESConfig, scaled_units
    from esopt.provenance.derived import DerivedChecks

    cfg = load_config(ROOT / "config" / "ladder.yaml")
    es = EsRun.from_config(cfg, 5)
    rec = {"config": cfg, "command": "train-es", "argv": ["--horizon", "5", "--population", "16", "--seed", "0"]}

    def history(run_scale, recorded_scale):
        run = {"es": ESConfig.from_settings(scaled_units(es.settings(), run_scale), 16, 0).as_record(),
               "tasks_per_member": es.tasks_per_member, "weight_scale": recorded_scale}
        return History(run=json.loads(json.dumps(run)))

    assert DerivedChecks._es_settings(rec, history(0.0675, 0.0675))[0] == "ok"  # as train-es writes it
    status, why = DerivedChecks._es_settings(rec, history(0.0675 * 2, 0.0675))  # steps twice the recorded scale
    assert status == "fail" and why.startswith("the run's settings are not the record's: alpha")


def test_the_audit_holds_the_recorded_weight_scale_to_the_base():
    import torch

    from esopt.es.history import History
    from esopt.provenance.weights import WeightChecks

    base = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        base.weight.copy_(torch.tensor([[0.5, -0.5], [1.0, -2.0]]) * 0.02)  # mean |θ| = 0.02
    status, why = WeightChecks._weight_scale(History(run={"weight_scale": 0.02}), base)
    assert status == "ok" and "0.02" in why
    status, why = WeightChecks._weight_scale(History(run={"weight_scale": 0.04}), base)  # another base's scale
    assert status == "fail" and "mean |θ| is 0.02" in why
