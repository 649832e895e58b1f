"""esopt search-heuristics: one automatic-heuristic-design run (test time).

An external search (--search eoh | sample) asks the writer model for heuristics for
one task (--task, esopt.ahd), evaluates every reply in the sandbox on the
task's search instances, and keeps the best, for exactly --budget samples. With
--es the writer's weights also move online (Agentic ESOpt, σ → 0; see
esopt.ahd.run); without it the model is fixed (the matched baseline).
The best heuristic is then scored on held-out test instances, as is the task's
reference heuristic.

DIR/result.json     test and search objectives of the best heuristic, the reference's,
                    sample accounting, the best-so-far curve
DIR/samples.jsonl   every sample: operator, reply, code, objective or error
DIR/history.json    --es: the ES generations (replayable onto the base model)
DIR/provenance.json
A killed run resumes from DIR/.resume/ and ends where an uninterrupted run would.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.io import write_json_atomic, write_text_atomic
from esopt.provenance.record import Provenance
from esopt.seeding import derive_seed

log = logging.getLogger("esopt.search_heuristics")

SEARCHES = ("eoh", "sample")


def budget_settings(cfg: dict, budget: int) -> dict:
    for b in cfg["ahd"]["budgets"]:
        if int(b["samples"]) == int(budget):
            return b
    raise ValueError(f"--budget {budget}: not one of the config's ahd.budgets "
                     f"{[b['samples'] for b in cfg['ahd']['budgets']]}")


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
                              memory_mb=ev["memory_mb"], workers=ev.get("workers", 1))


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if "ahd" not in cfg:
        raise ValueError(f"{args.config} has no ahd block")
    from esopt.ahd import make_task
    from esopt.ahd.prompts import TaskPrompt
    from esopt.ahd.run import ESSettings, HeuristicSearchRun
    from esopt.es.history import weights_sha256
    from esopt.models.load import load_model_and_tokenizer
    from esopt.prompt.analyst import PolicyAnalyst

    a = cfg["ahd"]
    if args.task not in a["tasks"]:
        raise ValueError(f"--task {args.task!r}: not in the config's ahd.tasks {list(a['tasks'])}")
    b = budget_settings(cfg, args.budget)
    task = make_task(args.task, a["tasks"][args.task].get("params"))
    out = Path(args.out)
    resume_dir = out / ".resume"
    resume_dir.mkdir(parents=True, exist_ok=True)
    prov = Provenance("search-heuristics", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"search": args.seed}, inputs=[args.config, args.model])
    model, tok = load_model_and_tokenizer(args.model)
    w = a["writer"]
    writer = PolicyAnalyst(model, tok, max_new_tokens=w["max_new_tokens"], temperature=w["temperature"],
                           top_p=w["top_p"], top_k=w["top_k"], system=w.get("system", ""),
                           batch_size=w.get("batch_size"))
    task_prompt = TaskPrompt.from_task(task, a["response"])
    run_seed = derive_seed("ahd", args.task, args.search, args.budget, args.seed)  # shared by ES and its baseline
    search = make_search(cfg, args.search, task_prompt, b, run_seed)
    es = None
    if args.es:
        e = a["es"]
        es = ESSettings(alpha=e["alpha"], sigma0=e["sigma0"], normalization=e["normalization"],
                        penalty=e.get("penalty"), operators=("m1", "m2") if args.search == "eoh" else ("i1",))
    base_hash = weights_sha256(model)
    run = HeuristicSearchRun(task=task, task_prompt=task_prompt, search=search,
                             evaluator=make_evaluator(cfg, task, "search", args.seed), writer=writer,
                             budget=args.budget, seed=run_seed, checkpoint=resume_dir / "checkpoint.json",
                             model=model, es=es,
                             run_info={"task": args.task, "search": args.search, "budget": args.budget,
                                       "base_weights_sha256": base_hash})
    summary = run.run()

    # The best heuristic and the reference, on held-out instances.
    test = make_evaluator(cfg, task, "test", a["test_seed"])  # one test set for every run
    best = summary["best"]
    best_test = test(best["code"]) if best else None
    ref_test = test(task.reference_code)
    ref_search = run.evaluator(task.reference_code)
    result = {"task": args.task, "search": args.search, "budget": args.budget, "es": bool(args.es),
              "seed": args.seed, "metric": task.metric, "response": a["response"],
              "test_objective": best_test.objective if best_test else None,
              "test_error": best_test.error if best_test else "no valid heuristic in the budget",
              "search_objective": best["objective"] if best else None,
              "reference_test_objective": ref_test.objective, "reference_search_objective": ref_search.objective,
              **summary}
    if es is not None:
        run.history.final = {"weights_sha256": weights_sha256(model)}
        run.history.save(out / "history.json")
        result["final_weights_sha256"] = run.history.final["weights_sha256"]
    outputs = [out / "result.json", out / "samples.jsonl"] + ([out / "history.json"] if es else [])
    write_text_atomic(out / "samples.jsonl", "".join(json.dumps(s) + "\n" for s in run.samples))
    write_json_atomic(out / "result.json", result)
    extra = {"task": args.task, "search": args.search, "budget": args.budget, "es": bool(args.es),
             "base_weights_sha256": base_hash}
    if es is not None:
        extra["final_weights_sha256"] = result["final_weights_sha256"]  # what `esopt audit` replays to
    prov.write(out / "provenance.json", outputs=outputs, extra=extra)
    shutil.rmtree(resume_dir)
    log.info("%s %s budget %d es=%s: best search %.4g, test %s (reference %s)", args.task, args.search,
             args.budget, bool(args.es), best["objective"] if best else float("nan"), result["test_objective"],
             ref_test.objective)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt search-heuristics", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--task", required=True, help="a task of the config's ahd.tasks")
    p.add_argument("--search", required=True, choices=SEARCHES)
    p.add_argument("--budget", type=int, required=True, help="samples (one of ahd.budgets)")
    p.add_argument("--es", action="store_true", help="online ES on the writer (Agentic ESOpt)")
    p.add_argument("--seed", type=int, required=True, help="repetition")
    p.add_argument("--model", required=True, help="the writer model directory")
    p.add_argument("--out", required=True, help="run directory to create")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
