"""One heuristic-design run (esopt.ahd.run): exact budgets, ES generations on
the right batches, matched baselines, and a killed run resuming to the same end.

The task, the sandboxed evaluator, the searches and the ES machinery are the real
ones; only the writer is a toy (a seeded choice among expressions that depends on
the weights of a small torch module, so perturbations and updates change what it
writes), which keeps the test fast and independent of any language model."""

from __future__ import annotations

import json
import random

import pytest
import torch

from esopt.ahd import InstanceSpec, make_task
from esopt.ahd.evaluate import HeuristicEvaluator
from esopt.ahd.prompts import TaskPrompt
from esopt.ahd.run import ESSettings, HeuristicSearchRun, batch_plan, es_rewards, planned_es_generations
from esopt.ahd.search import EoH, Sample
from esopt.es.run import ESRun
from esopt.hashing import weights_sha256

EXPRESSIONS = ["d", "e", "m", "d+e", "d-m", "d*e", "2*d+e", "d/m", "m-d", "1", "d+0.5*e", "3*d-m", "d**2", "e-d"]


class ToyWriter:
    """Replies drawn with the request's seed and the module's current weights."""

    def __init__(self, model: torch.nn.Module, fail_after: int | None = None):
        self.model, self.calls, self.fail_after = model, 0, fail_after

    def complete(self, prompts, seed):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed")  # what a SIGINT looks like to the run
        self.calls += 1
        w = float(self.model.weight.detach().sum())
        return [random.Random(f"{seed}|{w:.9f}|{p}").choice(EXPRESSIONS) for p in prompts]


@pytest.fixture(scope="module")
def task():
    return make_task("construct_tsp")


@pytest.fixture(scope="module")
def evaluator(task):
    return HeuristicEvaluator(task, task.instances("search", InstanceSpec(2, 8), 0), timeout_s=5, cpu_s=5)


def make_run(task, evaluator, tmp_path, search: str, budget: int, es: bool, writer_fail_after=None, seed=7,
             rounding="nearest"):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4).to(torch.bfloat16 if rounding != "nearest" else torch.float32)
    tp = TaskPrompt.from_task(task, "expression")
    s = EoH(tp, pop_size=3, parents_e=2, k=2, seed=seed) if search == "eoh" else Sample(tp, batch_size=4, seed=seed)
    settings = ESSettings(alpha=0.5, sigma0=0.1, operators=("m1", "m2") if search == "eoh" else ("i1",),
                          update_rounding=rounding) if es else None
    run = HeuristicSearchRun(task=task, task_prompt=tp, search=s, evaluator=evaluator,
                             writer=ToyWriter(model, writer_fail_after), budget=budget, seed=seed,
                             checkpoint=tmp_path / "checkpoint.json", weights=ESRun(model, rounding, "exact"), es=settings,
                             run_info={"task": task.name, "search": search}, progress=False)
    return run, model


@pytest.mark.parametrize("search", ["eoh", "sample"])
@pytest.mark.parametrize("es", [False, True])
def test_budget_is_exact_and_es_runs_on_the_right_batches(task, evaluator, tmp_path, search, es):
    run, model = make_run(task, evaluator, tmp_path, search, budget=23, es=es)
    before = weights_sha256(model)
    summary = run.run()
    assert summary["samples"] == len(run.samples) == 23  # the last batch was cut to what was left
    assert [s["id"] for s in run.samples] == list(range(23))
    ops = {}
    for s in run.samples:
        ops.setdefault(s["batch"], []).append(s["operator"])
    if search == "eoh":  # init (3), then e1 3, e2 3, m1 6, m2 6 per generation (k=2)
        assert [len(v) for v in ops.values()][:5] == [3, 3, 3, 6, 6]
    es_batches = [b for b, v in ops.items() if v[0] in (("m1", "m2") if search == "eoh" else ("i1",)) and len(v) >= 2]
    assert summary["es_generations"] == (len(es_batches) if es else 0)
    assert [s["es_generation"] is not None for s in run.samples] == [es and s["batch"] in es_batches for s in run.samples]
    if es:
        gens = run.history.generations
        assert [len(g.seeds) for g in gens] == [len(ops[b]) for b in es_batches]  # one member per sample
        assert gens[0].sigma == pytest.approx(0.1) and all(a.sigma >= b.sigma for a, b in zip(gens, gens[1:]))
        assert weights_sha256(model) != before
    else:
        assert weights_sha256(model) == before
    best = summary["best"]
    assert best["objective"] == min(s["objective"] for s in run.samples if s["objective"] is not None)
    assert summary["best_so_far"][-1] == best["objective"]


def test_the_matched_baseline_answers_the_same_requests_until_es_first_moves(task, evaluator, tmp_path):
    base, _ = make_run(task, evaluator, tmp_path / "base", "eoh", budget=30, es=False)
    es, _ = make_run(task, evaluator, tmp_path / "es", "eoh", budget=30, es=True)
    base.run(), es.run()
    first_es = min(s["batch"] for s in es.samples if s["es_generation"] is not None)
    shared = [(s["prompt"] if "prompt" in s else s["reply"], s["code"]) for s in base.samples if s["batch"] < first_es]
    assert shared and shared == [(s["prompt"] if "prompt" in s else s["reply"], s["code"])
                                 for s in es.samples if s["batch"] < first_es]
    assert len(base.samples) == len(es.samples) == 30  # the same number of samples and evaluations


@pytest.mark.parametrize("rounding", ["nearest", "stochastic", "fp32_master"])
def test_a_killed_run_resumes_to_the_same_samples_and_weights(task, evaluator, tmp_path, rounding):
    whole, whole_model = make_run(task, evaluator, tmp_path / "whole", "eoh", budget=27, es=True, rounding=rounding)
    whole.run()
    assert whole.history.update_rounding == rounding  # the replay on resume rounds as the run did
    killed, _ = make_run(task, evaluator, tmp_path / "killed", "eoh", budget=27, es=True, writer_fail_after=14,
                         rounding=rounding)
    with pytest.raises(KeyboardInterrupt):
        killed.run()
    saved = json.loads((tmp_path / "killed/checkpoint.json").read_text())
    assert 0 < saved["used"] < 27
    resumed, resumed_model = make_run(task, evaluator, tmp_path / "killed", "eoh", budget=27, es=True,
                                      rounding=rounding)
    resumed.run()
    assert json.dumps(resumed.samples) == json.dumps(whole.samples)
    assert weights_sha256(resumed_model) == weights_sha256(whole_model)
    assert [g.rewards for g in resumed.history.generations] == [g.rewards for g in whole.history.generations]


def test_a_checkpoint_of_another_run_is_refused(task, evaluator, tmp_path):
    run, _ = make_run(task, evaluator, tmp_path, "sample", budget=8, es=True)
    run.run()
    other, _ = make_run(task, evaluator, tmp_path, "sample", budget=8, es=True, seed=8)
    with pytest.raises(ValueError, match="different run"):
        other.run()


def test_es_rewards_relative_absolute_and_the_invalid_penalty():
    # EoH: parent − child; an invalid child gets min(valid) − std(valid)
    r = es_rewards([1.0, None, 3.0], [2.0, 2.0, 2.0], relative=True, penalty=None)
    assert r[0] == 1.0 and r[2] == -1.0 and r[1] == pytest.approx(-1.0 - 1.0)
    assert es_rewards([1.0, 2.0], [None, None], relative=True, penalty=None) == [-1.0, -2.0]  # no parent: −objective
    assert es_rewards([None, None], [1.0, 1.0], relative=True, penalty=None) == [-1.0, -1.0]  # all invalid: no signal
    assert es_rewards([4.0, None], [None, None], relative=False, penalty=-100.0) == [-4.0, -100.0]


def test_planned_es_generations_follow_the_batch_plan(task):
    tp = TaskPrompt.from_task(task, "expression")
    eoh = EoH(tp, pop_size=10, parents_e=2, k=1)
    plan = batch_plan(eoh, 1000)
    assert plan[:5] == [("i1", 10), ("e1", 10), ("e2", 10), ("m1", 10), ("m2", 10)]
    # 1000 samples: init 10, then 24 full generations of 40 and a partial one (e1, e2, m1 of 10, m2 cut to 0)
    assert planned_es_generations(plan, 1000, ("m1", "m2")) == 2 * 24 + 1
    assert planned_es_generations(batch_plan(Sample(tp, batch_size=30), 2000), 2000, ("i1",)) == 67
