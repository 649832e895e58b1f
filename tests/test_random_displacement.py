"""benchmarks/random_displacement.py: its random moves have the run's displacement norm tensor
by tensor and depend on the seed only, its scaled moves go part of the way; end to end, a
run that did not move measures as the base (difference exactly 0), and so does any move
scaled by 0, and a moved run reports the size of its move."""

import importlib.util
import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import ROOT, SMOKE


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("random_displacement", ROOT / "benchmarks" / "random_displacement.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_scaled_move_goes_part_of_the_way(script):
    base, run = {"w": torch.zeros(3)}, {"w": torch.tensor([2.0, -4.0, 0.0])}
    assert torch.equal(script.scaled_move(base, run, 0.25)["w"], torch.tensor([0.5, -1.0, 0.0]))
    assert torch.equal(script.scaled_move(base, run, 1.0)["w"], run["w"])


def test_a_random_move_has_the_runs_norm_per_tensor_and_its_seeds_draw(script):
    g = torch.Generator().manual_seed(0)
    base = {"a.weight": torch.randn(8, 4, generator=g), "b.bias": torch.randn(4, generator=g), "c.norm": torch.ones(4)}
    run = {"a.weight": base["a.weight"] + 0.01, "b.bias": base["b.bias"] - 0.2, "c.norm": base["c.norm"].clone()}
    norms = script.displacement_norms(base, run)
    assert norms["a.weight"] == pytest.approx(0.01 * math.sqrt(32)) and norms["c.norm"] == 0.0
    moved = script.random_move(base, norms, seed=3)
    for k in base:
        assert float((moved[k].double() - base[k].double()).norm()) == pytest.approx(norms[k], rel=1e-5, abs=1e-12)
    assert torch.equal(moved["c.norm"], base["c.norm"])  # a tensor the run left alone stays
    again, other = script.random_move(base, norms, seed=3), script.random_move(base, norms, seed=4)
    assert all(torch.equal(moved[k], again[k]) for k in base)
    assert not torch.equal(moved["a.weight"], other["a.weight"])
    assert script.rms(norms, base) == pytest.approx(math.sqrt(sum(n * n for n in norms.values()) / 40))  # 32 + 4 + 4 weights
    with pytest.raises(SystemExit, match="not the base's"):
        script.displacement_norms(base, {"a.weight": run["a.weight"]})


def test_end_to_end_an_unmoved_run_measures_as_the_base(script, smoke_model, tmp_path):
    evaluation = tmp_path / "base" / "h2.json"
    subprocess.run([sys.executable, "-m", "esopt.cli.main", "evaluate", "--config", str(SMOKE), "--model", str(smoke_model),
                    "--horizon", "2", "--out", str(evaluation), "--threads", "1"], check=True, capture_output=True)
    moved = tmp_path / "moved"  # a "trained" model: the base moved by a known amount
    shutil.copytree(smoke_model, moved)
    base = load_file(smoke_model / "model.safetensors")
    norms = {k: 0.05 * math.sqrt(w.numel()) for k, w in base.items()}  # rms 0.05 in every tensor
    save_file(script.random_move(base, norms, seed=11), str(moved / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "rd.json"
    script.main(["--config", str(SMOKE), "--horizon", "2", "--base", str(smoke_model), "--base-eval", str(evaluation),
                 "--run", f"{smoke_model}={evaluation}", "--run", f"{moved}={evaluation}", "--draws", "1", "--scales", "0",
                 "--threads", "1", "--out", str(out)])
    unmoved, run = json.loads(out.read_text())["runs"]
    assert unmoved["rms_displacement"] == 0.0
    assert unmoved["run_vs_base"]["difference_points"] == 0.0
    assert unmoved["random"][0]["difference_points"] == 0.0  # a move of size 0 is the base, same episodes
    assert run["rms_displacement"] == pytest.approx(0.05, rel=1e-4)
    assert [r["seed"] for r in run["random"]] == [1000] and run["random"][0]["episodes"] == 16
    assert [s["scale"] for s in run["scaled"]] == [0.0] and run["scaled"][0]["difference_points"] == 0.0  # x 0: the base
