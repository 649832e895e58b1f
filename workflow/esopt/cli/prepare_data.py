"""esopt prepare-data: one task set of an agent benchmark, as DIR/tasks.jsonl (+ images).

The set is tool_agents.benchmarks.B.train or .eval.NAME (web: web.train or web.eval.NAME)
of the config:
  source: generated     math: arithmetic / word problems (level basic | hard, or a
                        list of levels mixed in equal parts);
                        docvqa: document images rendered here (forms, receipts, tables)
  source: dapo | aime   math: DAPO-Math-17k / AIME, from `path` (a .parquet/.jsonl/.json
                        file) or the hub (`hub_id`, needs network or a warm HF cache);
                        DAPO's one file is split by a hash of the question, as the
                        generated sets are (a quarter held out)
  source: docvqa        the real DocVQA: `path` to the official annotation JSON or a
                        parquet file, or the hub (`hub_id`)
  source: generated     web: tasks from the templates over the local sites (web.site_seed),
                        `per_template` at most of each (WebArena's task format)
  source: webarena_lite | webarena_train
                        web: the 165 WebArena-Lite tasks / the WebArena tasks the authors
                        trained on, from `path` (test.raw.json or config_files/); site
                        placeholders are kept and filled in per episode
Generated training and evaluation sets are disjoint by construction (split train/test).
DocVQA sets also get DIR/ocr_cache/: the OCR tool's reading of every image, made once here.
DIR/provenance.json records the source, its file hashes and the task count.
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path
from typing import Any

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.envs.benchmarks import BENCHMARKS, Benchmark, get
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.prepare_data")


def set_spec(cfg: dict, bench: Benchmark, name: str) -> dict[str, Any]:
    from esopt.config import benchmark_block

    b = benchmark_block(cfg, bench.name)
    if not b:
        raise ValueError(f"the config has no {bench.block} block")
    if name == "train":
        return b["train"]
    if name not in b.get("eval", {}):
        raise ValueError(f"--set {name!r}: expected train or one of {sorted(b.get('eval', {}))}")
    return b["eval"][name]


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.runs.tool_episodes import write_tasks

    bench = get(args.benchmark)
    spec = set_spec(cfg, bench, args.set)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    path = spec.get("path")
    inputs = [path] if path and Path(path).exists() else []
    tasks = bench.load_set(args.set, spec, out, cfg)
    if not tasks:
        raise ValueError(f"{args.benchmark} set {args.set!r} has no tasks")
    prov = Provenance("prepare-data", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"data": bench.data_seed(cfg, spec)}, inputs=[args.config, *inputs])
    tasks_file = write_tasks(out, tasks)
    if bench.prepare is not None:  # e.g. OCR reads every image once, here (see tool_episodes.make_tools)
        from esopt.runs.tool_episodes import make_tools
        from esopt.spec.agents import agent_episodes

        bench.prepare(tasks, make_tools(agent_episodes(cfg, args.benchmark), args.benchmark, out))
    prov.write(out / "provenance.json", outputs=[out],
               extra={"benchmark": args.benchmark, "set": args.set, "spec": spec, "tasks": len(tasks)})
    log.info("%s/%s: %d tasks in %s", args.benchmark, args.set, len(tasks), tasks_file)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt prepare-data", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--benchmark", required=True, choices=BENCHMARKS)
    p.add_argument("--set", required=True, help="train, or a name of tool_agents.benchmarks.B.eval (web.eval)")
    p.add_argument("--out", required=True, help="data directory to create (results/data/B/SET)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
