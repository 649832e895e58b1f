"""Seconds per Agentic GRPO / PPO step: rollouts on HF generate vs the population engine, side by side.

Two RL trainers start from the same base (in rl.dtype, as `esopt train-rl` loads it) with the
config's rl settings at one H*; one rolls out through HF generate, the other through the
population engine over the policy's own weights (what `esopt train-rl` does where
engine.sudoku is population). They alternate step by step, so the machine's load weighs
on both alike, and the script prints per engine the seconds per step, the seconds in
rollouts and the rest (scoring, losses, backward, optimizer), then the ratios.

    python benchmarks/rl_rollouts.py --model results/models/tiny-qwen35 --horizon 4 --steps 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from esopt.agent.engine import Sampling  # noqa: E402
from esopt.agent.population import PopulationEngine  # noqa: E402
from esopt.config import load_config  # noqa: E402
from esopt.models.load import load_model_and_tokenizer  # noqa: E402
from esopt.rl.trainer import SAMPLING_PROFILES, RLConfig, RLTrainer  # noqa: E402
from esopt.runs.episodes import sudoku_rl_rollouts  # noqa: E402
from esopt.spec.sudoku import RlRun, SudokuEpisodes  # noqa: E402


def trainer(engine: str, args, cfg) -> RLTrainer:
    rl, episodes = RlRun.from_config(cfg), SudokuEpisodes.from_config(cfg)
    policy, tok = load_model_and_tokenizer(args.model, dtype=rl.dtype)
    prof = {**episodes.agent.sampling.settings(), **(SAMPLING_PROFILES[args.sampling] or {})}
    sampling = Sampling.from_profile(prof, episodes.agent.max_new_tokens)
    rcfg = RLConfig.from_settings({**rl.settings(), "steps": args.steps}, args.algo, prof, seed=0)
    inner = sudoku_rl_rollouts(episodes, rl, tok, args.horizon, sampling)
    fast = PopulationEngine(policy, tok, slots=1, context=args.context) if engine == "population" else None

    def rollout_fn(policy_, task_seed, sampling_seed, group, counters, shard=(0, 1)):
        return inner(fast or policy_, task_seed, sampling_seed, group, counters, shard=shard)

    return RLTrainer(policy, rcfg, rollout_fn, pad_id=tok.pad_token_id, progress=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(ROOT / "config/tiny.yaml"))
    ap.add_argument("--model", required=True, help="a saved model directory (esopt build-model)")
    ap.add_argument("--horizon", type=int, default=4)
    ap.add_argument("--algo", default="grpo", choices=["grpo", "ppo"])
    ap.add_argument("--sampling", default="t1", choices=sorted(SAMPLING_PROFILES))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--context", type=int, default=96)
    args = ap.parse_args()
    if args.algo == "ppo":
        raise SystemExit("ppo needs its critic (esopt.rl.critic); this benchmark times grpo")
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    runs = {name: trainer(name, args, cfg) for name in ("hf", "population")}
    recs: dict[str, list[dict]] = {name: [] for name in runs}
    for t in range(args.steps):
        for name, tr in runs.items():
            recs[name].append(tr.step(t))
    print(f"# {args.algo} ({args.sampling}), H* {args.horizon}, {args.steps} steps, {args.threads} thread(s)")
    print(f"{'engine':<11}{'s/step':>8}{'rollout s':>11}{'rest s':>8}{'tokens/step':>13}{'mean R':>8}")
    per = {}
    for name, rs in recs.items():
        wall = sum(r["wall_s"] for r in rs) / len(rs)
        roll = sum(r["rollout_s"] for r in rs) / len(rs)
        per[name] = (wall, roll)
        print(f"{name:<11}{wall:>8.2f}{roll:>11.2f}{wall - roll:>8.2f}"
              f"{sum(r['generated_tokens'] for r in rs) / len(rs):>13.0f}{sum(r['mean_reward'] for r in rs) / len(rs):>8.3f}")
    print(f"hf / population per step: {per['hf'][0] / per['population'][0]:.2f}x; "
          f"rollouts: {per['hf'][1] / per['population'][1]:.2f}x")


if __name__ == "__main__":
    main()
