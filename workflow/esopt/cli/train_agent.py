"""esopt train-agent: an agent (ReAct Math, DocVQA: tool_agents; web: the web block)
trained by one method and seed (esopt.runs.tool_training).

--method esopt              Agentic ESOpt on the weights (tool_agents.es)
--method esopt_trace2skill  co-evolution: each generation's rollouts (all members, the
                            SAME episodes the ES update uses) also feed Trace2Skill,
                            whose skill document is in the system prompt of the next
                            generation; no extra environment calls
--method trace2skill        Trace2Skill alone on the frozen base model: each generation
                            rolls out tool_agents.trace2skill.rollouts_per_generation
                            episodes (ES's G x tasks_per_member) on the same task batches
--method grpo               Agentic GRPO (tool_agents.grpo over rl); observations are
                            outside the loss mask

DIR/model/          trained weights (not for trace2skill: evaluate it with the base model)
DIR/skill.md        the final skill document (trace2skill methods)
DIR/skill_history.jsonl  one line per generation: the update's stats and the document
DIR/history.json    ES runs: seeds, rewards, σ, α per generation (replayable)
DIR/metrics.jsonl   one line per generation / step
DIR/trajectories/   sampled episodes of the first, every 10th and last generation
DIR/provenance.json
A killed run resumes from DIR/.resume/ and ends where an uninterrupted run would.
"""

from __future__ import annotations

import argparse
import logging
import shutil

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.envs.benchmarks import BENCHMARKS
from esopt.provenance.record import Provenance
from esopt.provenance.run_dir import RunDir
from esopt.spec.agents import METHODS, AgentTraining, block_name

log = logging.getLogger("esopt.train_agent")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if block_name(args.benchmark) not in cfg:
        raise ValueError(f"{args.config} has no {block_name(args.benchmark)} block")
    if args.method not in METHODS:
        raise ValueError(f"--method {args.method!r}: expected one of {METHODS}")
    job = AgentTraining.from_config(cfg, args.method, args.benchmark)
    from esopt.runs.tool_training import train_tool_agent

    run = RunDir(args.out)
    prov = Provenance("train-agent", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={args.method: args.seed}, inputs=[args.config, args.model, args.data])
    result = train_tool_agent(job, args.seed, args.model, args.data, run.resume, run.trajectories)

    # Publish atomically; provenance last.
    if result.checkpoint is not None:
        shutil.copy(result.checkpoint, run.add("checkpoint.pt"))
    if result.history is not None:
        result.history.save(run.add("history.json"))
    if result.model is not None:
        run.save_model(result.model, result.tokenizer)
    if result.prompt is not None:
        run.write_text("skill.md", result.prompt.opt.context())
        run.write_jsonl("skill_history.jsonl", result.prompt.lines)
    run.write_jsonl("metrics.jsonl", result.metrics)
    run.publish_trajectories()
    from esopt.runs.tool_episodes import sandbox_provenance, web_provenance

    run.finish(prov, extra={**result.extra, **sandbox_provenance(job.episodes, args.benchmark),
                            **web_provenance(job.episodes)})
    log.info("done: %s", run.out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt train-agent", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--method", required=True, help="esopt | esopt_trace2skill | trace2skill | grpo")
    p.add_argument("--benchmark", required=True, choices=BENCHMARKS)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--model", required=True, help="base model directory")
    p.add_argument("--data", required=True, help="training set directory (from esopt prepare-data)")
    p.add_argument("--out", required=True, help="training directory to create")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
