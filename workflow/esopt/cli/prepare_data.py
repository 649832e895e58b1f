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
from esopt.envs.benchmarks import BENCHMARKS
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.prepare_data")


def set_spec(cfg: dict, benchmark: str, name: str) -> dict[str, Any]:
    from esopt.config import benchmark_block

    b = benchmark_block(cfg, benchmark)
    if not b:
        where = "web" if benchmark == "web" else f"tool_agents.benchmarks.{benchmark}"
        raise ValueError(f"the config has no {where} block")
    if name == "train":
        return b["train"]
    if name not in b.get("eval", {}):
        raise ValueError(f"--set {name!r}: expected train or one of {sorted(b.get('eval', {}))}")
    return b["eval"][name]


def build_tasks(benchmark: str, name: str, spec: dict[str, Any], out: Path,
                site_seed: int = 0) -> tuple[list[Any], list[str]]:
    """(tasks, local input files) of one set; images (DocVQA) land under out/."""
    src, n, seed = spec["source"], spec.get("n"), spec.get("seed", 0)
    split = "train" if name == "train" else "test"
    path = spec.get("path")
    inputs = [path] if path and Path(path).exists() else []
    if benchmark == "math":
        from esopt.envs import math as m

        if src == "generated":  # level: one level, or a list of levels mixed in equal parts
            levels = spec.get("level", "basic")
            levels = [levels] if isinstance(levels, str) else list(levels)
            parts = [m.generate_problems(n // len(levels) + (i < n % len(levels)), seed=seed, split=split, level=lv)
                     for i, lv in enumerate(levels)]
            return [p[i] for i in range(max(map(len, parts))) for p in parts if i < len(p)], inputs  # round robin
        if src == "dapo":  # one file; our train/test split by a hash of the question
            rows = m.load_dapo(path or spec.get("hub_id"), split=spec.get("split", "train"))
            return [t for t in rows if m.split_of(t.question) == split][:n], inputs
        if src == "aime":
            return m.load_aime(path or spec.get("hub_id"), limit=n), inputs
    elif benchmark == "docvqa":
        from esopt.envs import docvqa as d

        if src == "generated":
            return d.render_documents(out / "images", n, seed=seed, split=split), inputs
        if src == "docvqa":
            return d.load_docvqa(path or spec.get("hub_id"), split=spec.get("split", "validation"), limit=n,
                                 image_dir=out / "images"), inputs
    elif benchmark == "web":
        if src == "generated":
            from esopt.envs.web.templates import generate_tasks

            tasks = generate_tasks(site_seed, split="train" if name == "train" else "eval",
                                   per_template=spec.get("per_template"))
            return tasks[:n], inputs
        if src in ("webarena_lite", "webarena_train"):
            from esopt.envs.web.webarena import load_suite

            return load_suite(path, subset=src.removeprefix("webarena_"))[:n], inputs
    raise ValueError(f"{benchmark} set {name!r}: source {src!r} is not one this benchmark knows")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.runs.tool_episodes import write_tasks

    spec = set_spec(cfg, args.benchmark, args.set)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    site_seed = (cfg.get("web") or {}).get("site_seed", 0)
    tasks, inputs = build_tasks(args.benchmark, args.set, spec, out, site_seed=site_seed)
    if not tasks:
        raise ValueError(f"{args.benchmark} set {args.set!r} has no tasks")
    prov = Provenance("prepare-data", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"data": site_seed if args.benchmark == "web" else spec.get("seed", 0)},
                      inputs=[args.config, *inputs])
    tasks_file = write_tasks(out, tasks)
    if args.benchmark == "docvqa":  # read every image once, here (see tool_episodes.make_tools)
        from tqdm.auto import tqdm

        from esopt.runs.tool_episodes import make_tools

        ocr = next(t for t in make_tools(cfg, "docvqa", out) if t.name == "ocr")
        for image in tqdm(sorted({t.image for t in tasks}), desc="OCR"):
            ocr.read(image)
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
