"""esopt build-tool-model: the tiny base model of the tool benchmarks (tool_agents.model).

Expert ReAct episodes on the training sets (real sandbox, real OCR) train the
tokenizer and warm-start a Qwen3.5-architecture model (esopt.models.tool_warmstart),
which is saved with save_pretrained like every other model. Configs whose tool
agents use a hub model (config/paper.yaml) do not run this: the rules use the main
model directory instead.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.build_tool_model")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.models.build import build_tiny, hash_weights, sft_settings
    from esopt.models.demonstrations.tools import demonstrations
    from esopt.runs.tool_episodes import load_tasks, make_tools, system_prompt

    ta = cfg.get("tool_agents") or {}
    m = ta.get("model")
    if not m or m.get("source") != "tiny":
        raise ValueError("build-tool-model builds tool_agents.model with source: tiny; this config has none")
    w = m["warmstart"]
    if w.get("threads") and not args.threads:
        torch.set_num_threads(w["threads"])
    data = {}
    for d in args.data:
        bench, sep, path = d.partition("=")
        if not sep or not bench or not path:
            raise ValueError(f"--data {d!r}: expected BENCHMARK=DIR (e.g. math=results/data/math/train)")
        if bench not in ta["benchmarks"]:
            raise ValueError(f"--data {d!r}: {bench!r} is not a benchmark of tool_agents (expected one of {sorted(ta['benchmarks'])})")
        data[bench] = path
    missing = set(ta["benchmarks"]) - set(data)
    if missing:
        raise ValueError(f"--data BENCHMARK=DIR missing for {sorted(missing)}")
    out = Path(args.out)
    prov = Provenance("build-tool-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"warmstart": w["seed"]}, inputs=[args.config, *data.values()])
    transcripts = []
    for bench, d in sorted(data.items()):
        tasks = load_tasks(d, bench)[: w["tasks_per_benchmark"]]
        tools = make_tools(cfg, bench, d)
        transcripts += list(demonstrations(bench, tasks, tools, system_prompt(bench, tools), w["mistake_prob"],
                                           w["seed"], ta.get("history_turns")))
    log.info("%d demonstration turns", len(transcripts))
    model, stats = build_tiny(m, transcripts, sft_settings(w, "tool-sft-order"), out, what="tiny tool model")
    params = sum(p.numel() for p in model.parameters())
    hashes = hash_weights(out)
    prov.write(out / "provenance.json", outputs=[out],
               extra={"model": {"name": m["name"], "parameters": params, "warmstart": stats}, "weights_sha256": hashes})
    log.info("tool model ready at %s", out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt build-tool-model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--data", action="append", default=[], metavar="BENCHMARK=DIR",
                   help="a benchmark's training set (from esopt prepare-data); once per benchmark")
    p.add_argument("--out", required=True, help="model directory to create (results/models/NAME)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
