"""Seconds per ES generation: today's member-by-member HF path vs the population engine, side by side.

On one model and one Sudoku horizon, with the config's ES settings (population, episodes
per member, member decoding, revert), the script runs ES generations on four paths,
alternating generation by generation so that the machine's load weighs on all alike:

- hf: today's path (engine.sudoku: hf): each member perturbs the model in place and
  plays its episodes through HF generate, one member after another;
- member: the population engine on the model perturbed in place, member by member
  (what the engine's own decoder gains without batching the members);
- population: every member's weights captured, then all members' episodes in one batched
  rollout (engine.sudoku: population);
- lowrank: the low-rank variant (es.perturbation lowrank, rank 1, EGGROLL's forward: shared
  weights plus each member's factors; not the paper's method, shown for its cost);
- inference: no ES, one batched rollout of the base model over as many episodes as a
  generation plays (population x tasks, distinct puzzles), through the population
  engine's decoder: the floor a generation could reach.

It prints per path seconds per generation and generated tokens per second, then the
ratios hf / population (the issue's goal: >= 4) and population / inference (goal: <= 1.5),
for each --dtypes entry (the model cast to it), and the engine's memory: the stacked
member weights and the largest KV cache of a call. Then matmuls of the tiny shape in
bfloat16 vs float32 (the CPU's bf16 support decides which is faster).

    python benchmarks/population_engine.py --model results/models/tiny-qwen35 --horizon 4
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from esopt.agent.population import PopulationEngine  # noqa: E402
from esopt.config import load_config  # noqa: E402
from esopt.es import ESConfig, ESTrainer  # noqa: E402
from esopt.models.load import load_model_and_tokenizer  # noqa: E402
from esopt.runs.episodes import EpisodeSpec, run_episodes, summarize, train_tasks  # noqa: E402
from esopt.spec.sudoku import EsRun, SudokuEpisodes  # noqa: E402

PATHS = ("hf", "member", "population", "lowrank", "inference")


class Path_:
    """ES generations (or base-model rollouts) of one path, stepped one at a time."""

    def __init__(self, name: str, model, tok, cfg, args):
        es = EsRun.from_config(cfg, args.horizon)
        episodes = SudokuEpisodes.from_config(cfg)
        settings = {**es.settings(), "generations": args.generations}
        if name == "lowrank":
            settings |= {"perturbation": "lowrank", "rank": 1}
        self.es_cfg = ESConfig.from_settings(settings, args.population, seed=0)
        self.spec = EpisodeSpec.from_specs(episodes, args.horizon, es.member_decoding)
        self.name, self.model, self.tok, self.args, self.episodes = name, model, tok, args, episodes
        self.wall_s, self.tokens, self.rewards, self.generations = 0.0, 0, [], 0
        self.engine = (PopulationEngine(model, tok, slots=args.population, context=args.context,
                                        rank=1 if name == "lowrank" else None) if name != "hf" else None)
        policy = model if name == "hf" else self.engine
        n = args.tasks

        def fitness(member):
            counters: dict[str, int] = {}
            trajs = run_episodes(policy, tok, self.spec, n, seed=member.task_seed, split="train", counters=counters,
                                 tasks=train_tasks(episodes, args.horizon, n, member.task_seed))
            self.tokens += counters.get("generated_tokens", 0)
            return summarize(trajs)["mean_reward"], {}

        path = self

        class Batched:
            capture = self.engine.capture if self.engine else None
            capture_lowrank = self.engine.capture_lowrank if self.engine else None

            @staticmethod
            def evaluate(members):
                tasks = train_tasks(episodes, args.horizon, n, members[0].task_seed)
                counters: dict[int, dict[str, int]] = {}
                trajs = run_episodes(policy, tok, path.spec, n, seed=members[0].task_seed, split="train",
                                     tasks=tasks * len(members), counters=counters,
                                     members=[k for k in range(len(members)) for _ in tasks])
                path.tokens += sum(c.get("generated_tokens", 0) for c in counters.values())
                return [(summarize(trajs[k * n:(k + 1) * n])["mean_reward"], {}) for k in range(len(members))]

        self.trainer = ESTrainer(model, self.es_cfg, fitness, progress=False, revert=settings["revert"],
                                 batched=Batched() if name in ("population", "lowrank") else None)

    def step(self) -> None:
        t = time.perf_counter()
        if self.name == "inference":  # as many distinct episodes as a generation, on the base weights
            n = self.args.tasks * self.args.population
            counters: dict[str, int] = {}
            tasks = train_tasks(self.episodes, self.args.horizon, n, 10_000 + self.generations)
            trajs = run_episodes(self.engine, self.tok, self.spec, n, seed=self.generations, split="train",
                                 tasks=tasks, counters=counters)
            self.tokens += counters.get("generated_tokens", 0)
            self.rewards.append(summarize(trajs)["mean_reward"])
        else:
            rec = self.trainer.step(self.generations)
            self.trainer.history.generations.append(rec)
            self.rewards.append(sum(rec.rewards) / len(rec.rewards))
        self.wall_s += time.perf_counter() - t
        self.generations += 1

    def summary(self) -> dict[str, float]:
        g = self.generations
        return {"s_per_gen": self.wall_s / g, "tokens_per_gen": self.tokens / g, "tokens_per_s": self.tokens / self.wall_s,
                "mean_reward": sum(self.rewards) / len(self.rewards)}


def matmul_dtypes(rows: int, d_in: int, d_out: int, members: int, repeats: int) -> dict[str, float]:
    """Seconds of one batched matmul of the tiny shape (members x rows x d_in by d_in x d_out), per dtype."""
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, w = torch.randn(members, rows, d_in).to(dtype), torch.randn(members, d_in, d_out).to(dtype)
        torch.bmm(x, w)
        t = time.perf_counter()
        for _ in range(repeats):
            torch.bmm(x, w)
        out[str(dtype).removeprefix("torch.")] = (time.perf_counter() - t) / repeats
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(ROOT / "config/tiny.yaml"))
    ap.add_argument("--model", required=True, help="a saved model directory (esopt build-model)")
    ap.add_argument("--horizon", type=int, default=4)
    ap.add_argument("--population", type=int, default=None, help="default: the config's first es.populations")
    ap.add_argument("--tasks", type=int, default=None, help="episodes per member (default: es.tasks_per_member)")
    ap.add_argument("--generations", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--context", type=int, default=256, help="the population engine's KV cache length")
    ap.add_argument("--dtypes", nargs="+", default=["float32"], help="dtypes every path runs in")
    ap.add_argument("--today", default="bfloat16", help="dtype of the `today` row: hf in the weights' saved dtype")
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    args.population = args.population or cfg["es"]["populations"][0]
    args.tasks = args.tasks or cfg["es"]["tasks_per_member"]
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s); "
          f"H* {args.horizon}, G {args.population}, {args.tasks} episodes per member, {args.generations} generations, "
          f"member decoding {cfg['es']['member_decoding']}")
    # every (path, dtype) alternates generation by generation in one loop; `today` is the hf
    # path in the weights' saved dtype (the default before the population engine)
    runs = [("hf", args.today)] + [(name, d) for d in args.dtypes for name in args.paths if (name, d) != ("hf", args.today)]
    paths = {}
    for name, dtype in runs:
        model, tok = load_model_and_tokenizer(args.model)
        paths[name, dtype] = Path_(name, model.to(getattr(torch, dtype)), tok, cfg, args)
    for _ in range(args.generations):
        for p in paths.values():
            p.step()
    params = sum(t.numel() for t in next(iter(paths.values())).model.parameters())
    print(f"\n{params / 1e6:.2f}M parameters")
    print(f"{'path':<11}{'dtype':<10}{'s/gen':>9}{'tokens/gen':>12}{'tokens/s':>10}{'mean R':>8}")
    r = {}
    for (name, dtype), p in paths.items():
        s = p.summary()
        r[name, dtype] = s["s_per_gen"]
        print(f"{name:<11}{dtype:<10}{s['s_per_gen']:>9.2f}{s['tokens_per_gen']:>12.0f}{s['tokens_per_s']:>10.0f}"
              f"{s['mean_reward']:>8.3f}")
    for d in args.dtypes:
        print(f"\n## {d}")
        if ("population", d) in r:
            print(f"today (hf, {args.today}) / population: {r['hf', args.today] / r['population', d]:.2f}x  (goal >= 4)")
            for other in ("hf", "member"):
                if (other, d) in r:
                    print(f"{other} / population:  {r[other, d] / r['population', d]:.2f}x")
            if ("inference", d) in r:
                print(f"population / inference:  {r['population', d] / r['inference', d]:.2f}x  (goal <= 1.5)")
            if ("lowrank", d) in r:
                print(f"lowrank / population:  {r['lowrank', d] / r['population', d]:.2f}x")
            engine = paths["population", d].engine
            stack = sum(t.numel() * t.element_size() for t in engine.stack.values())
            print(f"population engine memory: stacked weights {stack / 2**20:.1f} MiB ({args.population} members); "
                  f"largest KV cache of a call {engine.peak_cache_bytes / 2**20:.1f} MiB")
    if len(args.dtypes) > 1:
        print("\n## s/gen bfloat16 / float32")
        for name in args.paths:
            if ("bfloat16", name) in r and ("float32", name) in r:
                print(f"{name:<11}{r[name, 'bfloat16'] / r[name, 'float32']:.2f}x")
    cfg_t = cfg["model"]["tiny"]
    mm = matmul_dtypes(args.tasks * 40, cfg_t["hidden_size"], cfg_t["intermediate_size"], args.population, 20)
    print(f"\nbmm {args.population} x ({args.tasks * 40} x {cfg_t['hidden_size']}) by ({cfg_t['hidden_size']} x "
          f"{cfg_t['intermediate_size']}): float32 {mm['float32'] * 1e3:.1f} ms, bfloat16 {mm['bfloat16'] * 1e3:.1f} ms "
          f"(bf16 / fp32 {mm['bfloat16'] / mm['float32']:.2f}x)")


if __name__ == "__main__":
    main()
