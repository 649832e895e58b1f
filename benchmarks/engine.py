"""HF generate vs vLLM per ES generation, measured side by side on the same model and episodes.

Both engines run the same ES generations (the same member seeds, task batches and greedy
or sampled member decoding as the config's es section) on Sudoku at one H*, each with the
same number of CPU threads, alternating generation by generation so that the machine's load
weighs on both alike, and the script prints per engine: seconds per generation,
seconds in member rollouts, the share of a generation spent outside rollouts (apply,
revert, update, reward bookkeeping), generated tokens and tokens per second, then the
ratios vLLM / HF. Engine start-up is timed apart (it is paid once per job). Both revert
members as the config's es.revert says. Then, for prompts that hold the whole conversation
(agent.history_turns null) at 10, 20 and 45 turns: vLLM with its prefix cache against vLLM
re-encoding every turn (the cache emptied before each call) and HF, and whether the
greedy replies are the same.

Needs vLLM (docs/engine.md: its own environment). vLLM's Qwen3.5 module imports
torchvision, which the CPU build cannot load, so on CPU the model is the config's tiny
shape as a Qwen3ForCausalLM (model.tiny.architecture qwen3), built and warm-started by
`esopt build-model` unless --model names one.

    python benchmarks/engine.py --config config/tiny.yaml --horizon 4 --threads 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from esopt.config import load_config  # noqa: E402
from esopt.es import ESConfig, ESTrainer  # noqa: E402
from esopt.runs.episodes import EpisodeSpec, run_episodes, summarize  # noqa: E402
from esopt.spec.sudoku import EsRun, SudokuEpisodes  # noqa: E402


def qwen3_model(config: str, steps: int, overrides: list[str], model_dir: Path) -> None:
    """The config's tiny model as Qwen3 (full attention), warm-started for `steps` steps;
    overrides (KEY=VALUE) change its shape, e.g. hidden_size=512."""
    cfg = load_config(config)
    m = cfg["model"]
    m["name"] = f"{m['name']}-qwen3"
    m["tiny"]["architecture"] = "qwen3"
    for kv in overrides:
        key, value = kv.split("=", 1)
        m["tiny"][key] = yaml.safe_load(value)
    m["warmstart"]["steps"] = steps
    m["warmstart"].pop("select", None)
    m.pop("expect", None)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    path = model_dir.parent / f"{model_dir.name}.config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    subprocess.run([sys.executable, "-m", "esopt.cli.build_model", "--config", str(path), "--out", str(model_dir)],
                   check=True)


class Run:
    """ES generations of one engine, stepped one at a time so that two engines can alternate
    (the machine's load then weighs on both alike)."""

    def __init__(self, policy, perturber, tok, cfg, args):
        es = EsRun.from_config(cfg, args.horizon)
        settings = {**es.settings(), "generations": args.generations, "sigma": {**es.sigma.settings(), "schedule": "constant"}}
        es_cfg = ESConfig.from_settings(settings, args.population, seed=0)
        spec = EpisodeSpec.from_specs(SudokuEpisodes.from_config(cfg), args.horizon, es.member_decoding)
        self.rollout_s, self.wall_s, self.tokens, self.rewards = 0.0, 0.0, 0, []

        def fitness(member):
            counters: dict[str, int] = {}
            t = time.perf_counter()
            trajs = run_episodes(policy, tok, spec, args.tasks, seed=member.task_seed, split="train", counters=counters)
            self.rollout_s += time.perf_counter() - t
            self.tokens += counters.get("generated_tokens", 0)
            s = summarize(trajs)
            self.rewards.append(s["mean_reward"])
            return s["mean_reward"], {}

        self.trainer = ESTrainer(None if perturber is not None else policy, es_cfg, fitness, progress=False,
                                 perturber=perturber, revert=settings["revert"])
        self.generations = 0

    def step(self) -> None:
        t = time.perf_counter()
        self.trainer.step(self.generations)
        self.wall_s += time.perf_counter() - t
        self.generations += 1

    def summary(self) -> dict[str, float]:
        g = self.generations
        return {"s_per_gen": self.wall_s / g, "rollout_s_per_gen": self.rollout_s / g,
                "outside_share": 1 - self.rollout_s / self.wall_s, "tokens_per_gen": self.tokens / g,
                "tokens_per_s": self.tokens / self.rollout_s, "mean_reward": sum(self.rewards) / len(self.rewards)}


def multiturn(engine, model, tok, cfg, turns: int, episodes: int) -> dict[str, float]:
    """Greedy Sudoku episodes whose prompt is the whole conversation (agent.history_turns
    null), `turns` turns each: seconds with the prefix cache, re-encoding every turn, and HF."""
    from esopt.agent.engine import Sampling
    from esopt.agent.rollout import rollout
    from esopt.agent.vllm_engine import ReEncoding
    from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions

    size = cfg["sudoku"]["size"]
    tasks = generate_puzzles(size, max(cfg["sudoku"]["horizons"]), episodes, seed=1, split="train")
    greedy = Sampling(do_sample=False, max_new_tokens=cfg["agent"]["max_new_tokens"])
    out = {}
    for name, policy in (("cached", engine), ("re-encoded", ReEncoding(engine)), ("hf", model)):
        counters: dict[str, int] = {}
        t = time.perf_counter()
        trajs = rollout(policy, tok, lambda: SudokuEnv(max_turns=turns), tasks, system=instructions(size, "short"),
                        sampling=greedy, seed=0, max_turns=turns, history_turns=None, counters=counters)
        out[name] = time.perf_counter() - t
        out[f"{name}_replies"] = [[x.action for x in tr.turns] for tr in trajs]
        out[f"{name}_prompt_tokens"] = counters.get("prompt_tokens", 0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(ROOT / "config/tiny.yaml"))
    ap.add_argument("--model", help="a saved Qwen3 model directory; built there if missing (default: a temporary one)")
    ap.add_argument("--warmstart-steps", type=int, default=300)
    ap.add_argument("--tiny", nargs="*", default=[], metavar="KEY=VALUE",
                    help="change the built model's shape (model.tiny keys), e.g. hidden_size=512")
    ap.add_argument("--horizon", type=int, default=4)
    ap.add_argument("--population", type=int, default=16)
    ap.add_argument("--tasks", type=int, default=32, help="episodes per member")
    ap.add_argument("--generations", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.1, help="on CPU: the share of host memory")
    ap.add_argument("--multiturn", type=int, nargs="*", default=[10, 20, 45],
                    help="turn counts of the whole-conversation prompts measured cached vs re-encoded")
    ap.add_argument("--multiturn-episodes", type=int, default=16)
    ap.add_argument("--vllm-dtype", default="bfloat16", help="the engine's dtype (float32: no bf16 near-ties)")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")

    import torch

    from esopt.agent.vllm_engine import VLLMEngine
    from esopt.models.load import load_model_and_tokenizer

    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model) if args.model else Path(tmp) / "model"
        if not model_dir.exists():
            qwen3_model(args.config, args.warmstart_steps, args.tiny, model_dir)
        model, tok = load_model_and_tokenizer(model_dir)
        print(f"model {model_dir} ({type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} params), "
              f"H* {args.horizon}, G {args.population}, {args.tasks} episodes per member, {args.generations} "
              f"generations, {args.threads} threads", flush=True)
        t = time.perf_counter()
        engine = VLLMEngine(model_dir, tok, gpu_memory_utilization=args.gpu_memory_utilization,
                            max_model_len=model.config.max_position_embeddings, seed=0, dtype=args.vllm_dtype)
        start = time.perf_counter() - t
        try:
            es = cfg["es"]
            runs = [Run(model, None, tok, cfg, args),
                    Run(engine, engine.perturber(es["update_rounding"], revert=es["revert"]), tok, cfg, args)]
            for _ in range(args.generations):  # alternate: HF generation t, vLLM generation t
                for run in runs:
                    run.step()
            hf, vl = (run.summary() for run in runs)
            engine.perturber(es["update_rounding"], revert=es["revert"]).revert()
            turns = {t: multiturn(engine, model, tok, cfg, t, args.multiturn_episodes) for t in args.multiturn}
        finally:
            engine.close()
    print(f"\nvLLM {engine.version}: engine start {start:.1f} s (once per job)\n")
    print(f"{'':24s}{'HF':>12s}{'vLLM':>12s}{'vLLM/HF':>10s}")
    rows = [("s / generation", "s_per_gen", "{:.2f}"), ("rollout s / generation", "rollout_s_per_gen", "{:.2f}"),
            ("outside rollouts", "outside_share", "{:.1%}"), ("generated tokens / gen", "tokens_per_gen", "{:.0f}"),
            ("tokens / s (rollouts)", "tokens_per_s", "{:.0f}"), ("mean member reward", "mean_reward", "{:.3f}")]
    for label, key, fmt in rows:
        print(f"{label:24s}{fmt.format(hf[key]):>12s}{fmt.format(vl[key]):>12s}{vl[key] / hf[key]:>10.2f}"
              if hf[key] else f"{label:24s}{fmt.format(hf[key]):>12s}{fmt.format(vl[key]):>12s}")
    print(f"\nspeed-up per ES generation (HF s / vLLM s): {hf['s_per_gen'] / vl['s_per_gen']:.2f}x")
    print(f"\nwhole-conversation prompts (history_turns null), {args.multiturn_episodes} greedy episodes, seconds:")
    print(f"{'turns':>6s}{'vLLM cached':>13s}{'re-encoded':>12s}{'ratio':>7s}{'same replies':>14s}{'HF':>9s}"
          f"{'prompt tokens':>15s}")
    for t, m in turns.items():
        same = m["cached_replies"] == m["re-encoded_replies"]
        print(f"{t:6d}{m['cached']:13.2f}{m['re-encoded']:12.2f}{m['re-encoded'] / m['cached']:7.2f}{str(same):>14s}"
              f"{m['hf']:9.2f}{m['cached_prompt_tokens']:15,d}")


if __name__ == "__main__":
    main()
