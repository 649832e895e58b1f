"""One heuristic-design run as the pipeline configures it (`esopt search-heuristics`).

The config's search (EoH or Sample) for one task and budget, the writer model behind a
policy analyst, the sandboxed evaluator on the task's search instances, and with `es`
online Agentic ESOpt on the writer (esopt.ahd.run); then the best heuristic and the
task's reference heuristic on the held-out test instances.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt.config import ahd_budget
from esopt.seeding import derive_seed

log = logging.getLogger("esopt.search_heuristics")

SEARCHES = ("eoh", "sample")


def budget_settings(cfg: dict, budget: int) -> dict:
    """The ahd.budgets entry of this many samples (a clear error for any other)."""
    b = ahd_budget(cfg, budget)
    if b is None:
        raise ValueError(f"--budget {budget}: not one of the config's ahd.budgets "
                         f"{[b['samples'] for b in cfg['ahd']['budgets']]}")
    return b


def make_search(cfg: dict, name: str, task_prompt, budget: dict, seed: int):
    from esopt.ahd.search import EoH, Sample

    a = cfg["ahd"]
    if name == "eoh":
        e = a["eoh"]
        return EoH(task_prompt, pop_size=e["pop_size"], parents_e=e["parents_e"], k=budget["k"], seed=seed)
    if name == "sample":
        return Sample(task_prompt, batch_size=budget["sample_batch"], seed=seed)
    raise ValueError(f"--search {name!r}: expected one of {SEARCHES}")


def make_evaluator(cfg: dict, task, split: str, seed: int):
    from esopt.ahd import InstanceSpec
    from esopt.ahd.evaluate import HeuristicEvaluator

    a = cfg["ahd"]
    t = a["tasks"][task.name]
    spec = InstanceSpec(**t[split])
    instances = task.instances(split, spec, seed)
    ev = a["evaluation"]
    return HeuristicEvaluator(task, instances, timeout_s=ev["timeout_s"], cpu_s=ev["cpu_s"],
                              memory_mb=ev["memory_mb"], workers=ev.get("workers", 1),
                              require_all_layers=ev.get("require_all_layers", False))


def check_run(cfg: dict, task_name: str, budget: int) -> dict:
    """A clear error for a task or budget the config does not have; the budget's settings."""
    if task_name not in cfg["ahd"]["tasks"]:
        raise ValueError(f"--task {task_name!r}: not in the config's ahd.tasks {list(cfg['ahd']['tasks'])}")
    return budget_settings(cfg, budget)


@dataclass
class HeuristicDesign:
    """What a run produced: result.json's content, every sample, the ES history (--es)."""

    result: dict[str, Any]
    samples: list[dict[str, Any]]
    history: Any = None
    extra: dict[str, Any] = field(default_factory=dict)  # what the provenance record adds


def design_heuristics(cfg: dict, task_name: str, search_name: str, budget: int, es_on: bool, seed: int,
                      model, tokenizer, resume_dir: Path) -> HeuristicDesign:
    """One run (seed = the repetition) with the writer `model`; progress checkpointed in resume_dir."""
    from esopt.ahd import make_task
    from esopt.ahd.prompts import TaskPrompt
    from esopt.ahd.run import ESSettings, HeuristicSearchRun
    from esopt.es.run import ESRun
    from esopt.prompt.analyst import PolicyAnalyst

    a = cfg["ahd"]
    b = check_run(cfg, task_name, budget)
    task = make_task(task_name, a["tasks"][task_name].get("params"))
    w = a["writer"]
    writer = PolicyAnalyst(model, tokenizer, max_new_tokens=w["max_new_tokens"], temperature=w["temperature"],
                           top_p=w["top_p"], top_k=w["top_k"], system=w.get("system", ""),
                           batch_size=w.get("batch_size"))
    task_prompt = TaskPrompt.from_task(task, a["response"])
    run_seed = derive_seed("ahd", task_name, search_name, budget, seed)  # shared by ES and its baseline
    search = make_search(cfg, search_name, task_prompt, b, run_seed)
    es = None
    if es_on:
        e = a["es"]
        es = ESSettings(alpha=e["alpha"], sigma0=e["sigma0"], normalization=e["normalization"],
                        penalty=e["penalty"], update_rounding=e["update_rounding"],
                        operators=("m1", "m2") if search_name == "eoh" else ("i1",))
    weights = ESRun(model, a["es"]["update_rounding"], "exact")  # the base hash: with ES and without
    base_hash = weights.base_weights_sha256
    run = HeuristicSearchRun(task=task, task_prompt=task_prompt, search=search,
                             evaluator=make_evaluator(cfg, task, "search", seed), writer=writer,
                             budget=budget, seed=run_seed, checkpoint=resume_dir / "checkpoint.json",
                             weights=weights, es=es,
                             run_info={"task": task_name, "search": search_name, "budget": budget,
                                       "base_weights_sha256": base_hash})
    summary = run.run()

    # The best heuristic and the reference, on held-out instances.
    test = make_evaluator(cfg, task, "test", a["test_seed"])  # one test set for every run
    best = summary["best"]
    best_test = test(best["code"]) if best else None
    ref_test = test(task.reference_code)
    ref_search = run.evaluator(task.reference_code)
    result = {"task": task_name, "search": search_name, "budget": budget, "es": bool(es_on),
              "seed": seed, "metric": task.metric, "response": a["response"],
              "test_objective": best_test.objective if best_test else None,
              "test_error": best_test.error if best_test else "no valid heuristic in the budget",
              "search_objective": best["objective"] if best else None,
              "reference_test_objective": ref_test.objective, "reference_search_objective": ref_search.objective,
              **summary}
    extra = {"task": task_name, "search": search_name, "budget": budget, "es": bool(es_on),
             "base_weights_sha256": base_hash}
    history = None
    if es is not None:
        history = run.history
        result["final_weights_sha256"] = weights.finish(history)
        extra["final_weights_sha256"] = result["final_weights_sha256"]  # what `esopt audit` replays to
    log.info("%s %s budget %d es=%s: best search %.4g, test %s (reference %s)", task_name, search_name,
             budget, bool(es_on), best["objective"] if best else float("nan"), result["test_objective"],
             ref_test.objective)
    return HeuristicDesign(result, run.samples, history, extra)
