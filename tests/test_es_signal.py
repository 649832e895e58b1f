"""benchmarks/es_signal.py, the signal diagnostic: its members are the trainer's, its Gram
matrix is the perturber's noise, and its statistics mean what they say (σ = 0: no spread)."""

import importlib.util
import json

import pytest
import torch

from esopt.es.perturb import Perturber
from esopt.es.signal import gram_cosine, gram_norm, noise_gram, reward_spread

from conftest import ROOT, SMOKE

TINY = ["--config", str(SMOKE), "--horizon", "2", "--population", "4", "--tasks", "4", "--directions", "8",
        "--batches", "2", "--shuffles", "10", "--sigma-directions", "4"]


def load_script():
    spec = importlib.util.spec_from_file_location("es_signal", ROOT / "benchmarks" / "es_signal.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return load_script()


@pytest.fixture(scope="module")
def measured(script, smoke_model, tmp_path_factory):
    """One run at generation 1 (σ from the schedule), σ 0.5x and 1x in the sweep."""
    out = tmp_path_factory.mktemp("es_signal") / "signal.json"
    result = script.main(["--model", str(smoke_model), *TINY, "--generation", "1", "--sigmas", "0.5,1",
                          "--out", str(out)])
    return result, json.loads(out.read_text())


def test_the_json_holds_every_number(measured):
    result, written = measured
    assert written["base_weights_sha256"] == result["base_weights_sha256"] and len(written["base_weights_sha256"]) == 64
    for key in ("command", "commit", "wall_s", "sigma", "spread", "noise", "direction", "finite_difference",
                "sigma_sweep", "member_seeds", "task_seed"):
        assert key in written
    assert len(written["spread"]["plus"]) == len(written["spread"]["minus"]) == 8
    assert written["noise"]["batches"] == 2 and len(written["noise"]["rewards"]) == 2
    assert {"member_std", "frac_pairs_unequal", "frac_generations_tied", "snr"} <= set(written["spread"])
    assert [w["multiple"] for w in written["sigma_sweep"]] == [0.5, 1.0]
    assert written["sigma_sweep"][1]["plus"] == written["spread"]["plus"][:4]  # 1x reuses measurement 1
    fd = written["finite_difference"]
    assert fd["eta"] > 0 and fd["difference"]["n"] == 2 and fd["base"]["mean"] == written["noise"]["mean"]
    assert fd["difference"]["ci_low"] <= fd["difference"]["mean"] <= fd["difference"]["ci_high"]


def test_a_direction_is_the_trainers_member_with_its_seed(measured, smoke_model):
    """Generation 1 of an ES run with the smoke config's settings and 2K members, evaluated
    member by member by the trainer on the model perturbed in place: its members are the
    script's K pairs, in the trainer's order, with the same rewards, and its update is g_N."""
    from esopt.agent.population import PopulationEngine
    from esopt.config import load_config
    from esopt.es import ESConfig, ESTrainer
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.episodes import EpisodeSpec, run_episodes, summarize, train_tasks
    from esopt.spec.sudoku import EsRun, SudokuEpisodes

    result, _ = measured
    cfg = load_config(SMOKE)
    es, episodes = EsRun.from_config(cfg, 2), SudokuEpisodes.from_config(cfg)
    es_cfg = ESConfig.from_settings(es.settings(), 16, seed=0)
    spec = EpisodeSpec.from_specs(episodes, 2, es.member_decoding)
    model, tok = load_model_and_tokenizer(smoke_model, device="cpu")
    engine = PopulationEngine(model, tok, slots=1, context=cfg["engine"]["population"]["context"])

    def fitness(member):
        trajs = run_episodes(engine, tok, spec, 4, seed=member.task_seed, split="train",
                             tasks=train_tasks(episodes, 2, 4, member.task_seed))
        return summarize(trajs)["mean_reward"], {}

    rec = ESTrainer(model, es_cfg, fitness, progress=False, revert=es.revert).step(1)
    s = result["spread"]
    assert rec.sigma == result["sigma"] and rec.task_seed == result["task_seed"]
    assert rec.seeds[0::2] == result["member_seeds"]
    assert rec.rewards == [r for pair in zip(s["plus"], s["minus"]) for r in pair]
    assert len(set(rec.rewards)) > 1  # the members did differ
    c = rec.coefficients()
    assert result["direction"]["g_N_coefficients"] == pytest.approx([c[2 * k] + c[2 * k + 1] for k in range(8)])


def test_cosines_are_cosines(measured):
    d = measured[0]["direction"]
    assert d["cosine_self"] == pytest.approx(1.0)
    assert d["generations"] == 4
    for c in d["cosine_values"] + d["cosine_heldout_values"]:
        assert -1.0 <= c <= 1.0
    assert len(d["cosine_values"]) == d["generations_updated"]


def test_at_sigma_zero_every_member_is_the_base(script, smoke_model):
    r = script.main(["--model", str(smoke_model), *TINY, "--sigma", "0", "--sigmas", ""])
    s = r["spread"]
    assert s["plus"] == s["minus"] == [s["base_on_batch"]] * 8
    assert s["member_std"] == 0.0 and s["frac_pairs_unequal"] == 0.0 and s["frac_generations_tied"] == 1.0
    assert r["direction"]["generations_updated"] == 0 and "skipped" in r["finite_difference"]


def test_a_step_sweep_measures_every_length_on_the_same_batches(script, smoke_model):
    """--step 0,η: a zero step is the base on every fresh batch (nothing moved, so the pairing
    with the base is exact), and the first length is the one the single-step fields report."""
    r = script.main(["--model", str(smoke_model), *TINY, "--generation", "1", "--sigmas", "", "--step", "0,2.5"])
    zero, long = r["step_sweep"]
    assert r["finite_difference"] is zero and (zero["eta"], long["eta"]) == (0.0, 2.5)
    assert "skipped" not in zero  # generation 1's members differ (as in `measured`)
    assert zero["rewards_plus"] == zero["rewards_minus"] == r["noise"]["rewards"]
    assert zero["plus_minus_base"]["mean"] == 0.0 and long["base"] == zero["base"]


def test_the_gram_matrix_is_the_perturbers_noise():
    """Γ from esopt.es.signal equals the dot products of the perturbations the perturber
    actually writes (fp32 weights, σ 1: θ' − θ = ε up to rounding), tensors of several chunks included."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Linear(30, 5))
    p = Perturber(module, chunk=256)
    seeds = [11, 12, 13]
    deltas = []
    for s in seeds:
        before = torch.cat([q.detach().flatten().clone() for q in module.parameters()])
        p.apply(s, 1.0)
        deltas.append(torch.cat([q.detach().flatten() for q in module.parameters()]) - before)
        p.revert()
    dense = torch.stack(deltas).double()
    gram = noise_gram(p, seeds)
    torch.testing.assert_close(gram, dense @ dense.T, rtol=1e-5, atol=1e-3)
    a, b = [1.0, -2.0, 0.5], [0.0, 1.0, 1.0]
    u, v = torch.tensor(a).double() @ dense, torch.tensor(b).double() @ dense
    assert gram_norm(a, gram) == pytest.approx(float(u.norm()), rel=1e-5)
    assert gram_cosine(a, b, gram) == pytest.approx(float(u @ v / (u.norm() * v.norm())), rel=1e-5)
    assert gram_cosine(a, [0.0, 0.0, 0.0], gram) is None


def test_spread_counts_tied_generations():
    s = reward_spread([1, 1, 0, 0.5], [1, 1, 0.5, 0.5], population=4)
    assert s["generations"] == 2 and s["frac_generations_tied"] == 0.5
    assert s["frac_pairs_unequal"] == 0.25
