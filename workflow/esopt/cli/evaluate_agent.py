"""esopt evaluate-agent: Mean@k of an agent (a tool agent, or the web agent) on an evaluation set.

Every task is answered k times (tool_agents.evaluate.samples or web.evaluate.samples,
sampled decoding with k seeds); Mean@k is the mean score over all k x tasks episodes
(success for math and web, ANLS for DocVQA). On the real web sites, `web.reset` runs before
every round (sample), as VisualAgentBench's README requires, its times in the summary's
`resets`; a fuzzy-match judge failure stops the round and the job (never scored 0). --skill adds a Trace2Skill document to the
system prompt. Web summaries also give the success rate by site (`by_site`). The episodes
run on the benchmark's engine (engine.B: HF generate or vLLM, docs/engine.md); with vLLM
the HF model is only read on the host, for its dtype.
FILE.json holds Mean@k, each sample's score and how the episodes went;
FILE.trajectories.jsonl every episode; FILE.provenance.json the record.
"""

from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.envs.benchmarks import BENCHMARKS
from esopt.io import write_json_atomic
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.evaluate_agent")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.agent.rollout import write_trajectories
    from esopt.config import agent_section, agent_section_name
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.tool_episodes import (
        ToolEpisodeSpec,
        by_site,
        episode_envs,
        evaluation_rounds,
        host_device,
        load_tasks,
        make_tools,
        rollout_policy,
        site_reset,
        summarize_tool,
    )

    out = Path(args.out)
    if out.suffix != ".json":
        raise ValueError(f"--out {out}: expected a .json file")
    if agent_section_name(args.benchmark) not in cfg:
        raise ValueError(f"{args.config} has no {agent_section_name(args.benchmark)} block")
    ev = agent_section(cfg, args.benchmark)["evaluate"]
    seed = ev["seed"] if args.seed is None else args.seed
    skill = Path(args.skill).read_text() if args.skill else ""
    model, tok = load_model_and_tokenizer(args.model, device=host_device(cfg, args.benchmark))
    tasks = load_tasks(args.data, args.benchmark)
    tools = make_tools(cfg, args.benchmark, args.data)
    inputs = [args.config, args.model, args.data] + ([args.skill] if args.skill else [])
    runs = [Path(args.model).parent] + ([Path(args.skill).parent] if args.skill else [])
    for run in dict.fromkeys(runs):  # the training run that made the model or the skill, once, in order
        if (run / "provenance.json").exists():
            inputs.append(str(run / "provenance.json"))
    prov = Provenance("evaluate-agent", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"evaluate": seed}, inputs=inputs)
    samples, every = [], []
    reset = site_reset(cfg, args.benchmark, tasks)  # real sites: web.reset before every round, timed
    with episode_envs(cfg, args.benchmark, tools, tasks=tasks, reset=reset) as make_env, \
            rollout_policy(cfg, args.benchmark, model, tok, args.model, seed) as (policy, engine_record):
        spec = ToolEpisodeSpec.from_config(cfg, args.benchmark, ev["decoding"], batch_size=ev["batch_size"],
                                           make_env=make_env)
        for trajs in evaluation_rounds(policy, tok, spec, tools, tasks, ev["samples"], seed, skill, reset):
            samples.append(summarize_tool(trajs))
            every += trajs
    scores = [s["score"] for s in samples]
    summary = {"benchmark": args.benchmark, "model": str(args.model), "skill": args.skill, "meta": parse_wildcards(args.meta),
               "k": ev["samples"], "mean_at_k": statistics.fmean(scores),
               "sample_std": statistics.pstdev(scores), "scores": scores, "tasks": len(tasks),
               "decoding": ev["decoding"], "seed": seed, **{f"all_{k}": v for k, v in summarize_tool(every).items()}}
    if args.benchmark == "web":
        summary["by_site"] = by_site(tasks, every)
    if reset is not None:
        summary["resets"] = reset.records
    traj_path = out.with_suffix(".trajectories.jsonl")
    write_trajectories(traj_path, every)
    write_json_atomic(out, summary)
    from esopt.runs.tool_episodes import sandbox_provenance, web_provenance

    prov.write(out.with_suffix(".provenance.json"), outputs=[out, traj_path],
               extra={"model_device": str(model.device), "engine": engine_record,
                      **sandbox_provenance(cfg, args.benchmark),
                      **web_provenance(cfg, args.benchmark)})
    log.info("%s Mean@%d %.3f (samples %s)", args.benchmark, ev["samples"], summary["mean_at_k"],
             ", ".join(f"{x:.3f}" for x in scores))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt evaluate-agent", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--benchmark", required=True, choices=BENCHMARKS)
    p.add_argument("--model", required=True, help="model directory (base or DIR/model of a training run)")
    p.add_argument("--skill", default=None, help="skill document for the system prompt (DIR/skill.md of a Trace2Skill run)")
    p.add_argument("--data", required=True, help="evaluation set directory (from esopt prepare-data)")
    p.add_argument("--seed", type=int, default=None, help="evaluation seed (default: the block's evaluate.seed)")
    p.add_argument("--out", required=True, help="summary FILE.json")
    p.add_argument("--meta", default="{}", help="JSON copied into the summary (method, seed, eval set)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
