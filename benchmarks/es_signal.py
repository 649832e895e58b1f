"""Is there a signal? Member reward differences against evaluation noise, and whether the ES
update points anywhere, at a model's base weights on Sudoku.

At the base θ, with the config's Sudoku, agent and es settings at one H* (σ the run's σ at
--generation, es.sigma.sigma0 at generation 0, unless --sigma; G --population; B
es.tasks_per_member unless --tasks; members decoded as es.member_decoding), it measures:

1. Reward spread vs evaluation noise. K (--directions) antithetic pairs R(θ ± σε_k) on one
   training batch, drawn as an ES generation draws it (generation --generation of a run
   with seed --seed: task_seed, the members' sampling seed, the member seeds; pair k is
   that generation's member pair k, so the first G/2 pairs ARE the trainer's generation),
   and the base on M (--batches) fresh batches (those of the next M generations): the
   std of its batch means (evaluation noise) beside the binomial sqrt(p(1-p)/B). Reported:
   the std of the 2K member rewards, the fraction of pairs with R+ ≠ R−, the fraction of
   disjoint generations (G/2 pairs each) whose rewards all tie (no update), and the SNR =
   member std on the same batch / the base's batch-to-batch std.
2. Update direction. g_G, the trainer's update (es.normalization over its G members,
   esopt.es.signal.pair_coefficients) of each disjoint generation, against g_N, the same
   update from all K pairs: cos(g_G, g_N) mean ± sd, and the null of the same cosines with
   the 2K rewards shuffled among members (--shuffles permutations). g_N contains each g_G's
   pairs, so the null is not 0; the held-out column compares g_G with g_N made without its
   pairs (null near 0). Then a finite difference along ĝ_N = g_N/|g_N|: mean reward of
   θ + ηĝ_N and θ − ηĝ_N on the M fresh batches and their difference's 95% t interval.
   η (--step) defaults to the length of one α-sized ES update: the mean |g_G| (with the
   trainer's coefficients (α/G)·R̂_i) over the generations that updated, or, if none did,
   α·sqrt(2N/G) (the length of a z-scored update whose pairs' rewards are opposite, N
   parameters). Several --step values (comma-separated) sweep the step's length, which is
   what α sets: each is measured on the same fresh batches, paired with the base there.
3. σ sweep (--sigmas, multiples of σ): measurement 1 with --sigma-directions pairs per σ.

Members run on the population engine (every member's episodes in one batched forward,
--slots members per call), perturbed by the trainer's perturber from their seeds.
It prints the tables and writes all numbers to --out (JSON) with the command line, the
base weights' sha256 and the wall time. What the numbers say: docs/es_core.md, Is there a
signal?

    python benchmarks/es_signal.py --model results/models/tiny-qwen35 --horizon 4 --out es_signal.json
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import platform
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from esopt.agent.population import PopulationEngine  # noqa: E402
from esopt.config import engine_settings, load_config  # noqa: E402
from esopt.es import ESConfig  # noqa: E402
from esopt.es.lowrank import make_perturber  # noqa: E402
from esopt.es.settings import member_seeds, resolve_units, task_seed  # noqa: E402
from esopt.es.signal import (  # noqa: E402
    generations_of,
    gram_cosine,
    gram_norm,
    noise_gram,
    pair_coefficients,
    reward_spread,
)
from esopt.hashing import weights_sha256  # noqa: E402
from esopt.io import write_json_atomic  # noqa: E402
from esopt.models.load import load_model_and_tokenizer  # noqa: E402
from esopt.provenance.record import git_state  # noqa: E402
from esopt.report.verdicts import t975  # noqa: E402
from esopt.runs.episodes import EpisodeSpec, run_episodes, summarize, train_tasks  # noqa: E402
from esopt.spec.sudoku import EsRun, SudokuEpisodes  # noqa: E402


class Members:
    """Rewards of perturbed members and of the base on a generation's task batch, through
    the population engine; the model holds the base weights between calls."""

    def __init__(self, model, tok, es: EsRun, es_cfg: ESConfig, episodes: SudokuEpisodes, horizon: int, tasks: int,
                 slots: int, context: int):
        self.model, self.tok, self.episodes, self.horizon, self.tasks = model, tok, episodes, horizon, tasks
        self.perturber = make_perturber(model, "full", None, rounding=es_cfg.update_rounding, revert=es.revert)
        self.engine = PopulationEngine(model, tok, slots=slots, context=context)
        self.spec = EpisodeSpec.from_specs(episodes, horizon, es.member_decoding)
        self.episodes_run = 0

    def _play(self, tseed: int, members: int | None) -> list[float]:
        """Mean reward of each of `members` captured slots (None: the model's own weights) on the batch of tseed."""
        tasks = train_tasks(self.episodes, self.horizon, self.tasks, tseed)
        n = 1 if members is None else members
        trajs = run_episodes(self.engine, self.tok, self.spec, self.tasks, seed=tseed, split="train",
                             tasks=tasks * n, members=None if members is None else [k for k in range(n) for _ in tasks])
        self.episodes_run += len(trajs)
        return [summarize(trajs[k * self.tasks:(k + 1) * self.tasks])["mean_reward"] for k in range(n)]

    def base(self, tseed: int) -> float:
        return self._play(tseed, None)[0]

    def perturbed(self, members: list[tuple[int, float]], tseed: int, desc: str) -> list[float]:
        """R(θ + scale·ε(seed)) for each (seed, scale), --slots members per batched call, as the
        trainer's batched fitness: apply, capture, revert, then all captured members play."""
        out: list[float] = []
        slots = self.engine.slots
        for start in tqdm(range(0, len(members), slots), desc=desc, unit="call", leave=False):
            chunk = members[start:start + slots]
            for k, (seed, scale) in enumerate(chunk):
                self.perturber.apply(seed, scale)
                try:
                    self.engine.capture(k)
                finally:
                    self.perturber.revert()
            out += self._play(tseed, len(chunk))
        return out

    def stepped(self, seeds: list[int], coefficients: list[float], tseeds: list[int], desc: str) -> list[list[float]]:
        """Rewards of θ + Σ c_k ε_k and θ − Σ c_k ε_k (the trainer's update, its rounding) on
        each batch: [[R+, R−] per batch]. The base weights are restored bit for bit after."""
        saved = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        try:
            for slot, sign in enumerate((1.0, -1.0)):
                # a fresh perturber per side: an fp32 master (es.update_rounding) is taken from the base
                make_perturber(self.model, "full", None, rounding=self.perturber.rounding).update(
                    seeds, [sign * c for c in coefficients])
                self.engine.capture(slot)
                with torch.no_grad():
                    for n, p in self.model.named_parameters():
                        p.copy_(saved[n])
        finally:
            with torch.no_grad():
                for n, p in self.model.named_parameters():
                    p.copy_(saved[n])
        return [self._play(t, 2) for t in tqdm(tseeds, desc=desc, unit="batch", leave=False)]


def mean_sd(xs: list[float]) -> dict[str, float | int | None]:
    return {"n": len(xs), "mean": statistics.fmean(xs) if xs else None,
            "sd": statistics.stdev(xs) if len(xs) > 1 else None}


def interval(xs: list[float]) -> dict[str, float | int | None]:
    """Mean, sd and the 95% Student t interval of the mean."""
    m = mean_sd(xs)
    if m["sd"] is None:
        return {**m, "ci_low": None, "ci_high": None}
    half = t975(len(xs) - 1) * m["sd"] / math.sqrt(len(xs))
    return {**m, "ci_low": m["mean"] - half, "ci_high": m["mean"] + half}


def evaluation_noise(base_rewards: list[float], tasks: int) -> dict[str, float | None]:
    """The base's batch-to-batch spread: the std (ddof 1) of its batch means, beside the
    binomial sqrt(p(1-p)/B) at their mean p (a success reward's; shaped rewards are not 0/1)."""
    p = statistics.fmean(base_rewards)
    q = min(max(p, 0.0), 1.0)
    return {"batches": len(base_rewards), "mean": p,
            "std": statistics.stdev(base_rewards) if len(base_rewards) > 1 else None,
            "binomial_std": math.sqrt(q * (1 - q) / tasks)}


def snr(member_std: float, noise_std: float | None) -> float | None:
    return None if not noise_std else member_std / noise_std


def direction(plus: list[float], minus: list[float], gram: torch.Tensor, population: int, alpha: float,
              normalization: str, shuffles: int, seed: int) -> dict:
    """Part 2 from the rewards and the pairs' Gram matrix: g_G per disjoint generation vs
    g_N, with and without its own pairs, and the shuffled-reward null."""
    pairs = len(plus)
    gens = generations_of(pairs, population)

    def estimates(p: list[float], m: list[float]) -> tuple[list[float], list[tuple[list[float], list[float]]]]:
        """a_N, and (a_G, a_N without g_G's pairs) of every generation."""
        full = pair_coefficients(p, m, alpha, normalization)
        out = []
        for g in gens:
            a = [0.0] * pairs
            a[g.start:g.stop] = pair_coefficients(p[g.start:g.stop], m[g.start:g.stop], alpha, normalization)
            rest = [k for k in range(pairs) if k not in g]
            held = [0.0] * pairs
            for k, c in zip(rest, pair_coefficients([p[k] for k in rest], [m[k] for k in rest], alpha, normalization)):
                held[k] = c
            out.append((a, held))
        return full, out

    def cosines(p: list[float], m: list[float]) -> tuple[list[float], list[float]]:
        full, per_gen = estimates(p, m)
        with_own = [gram_cosine(a, full, gram) for a, _ in per_gen]
        held_out = [gram_cosine(a, held, gram) for a, held in per_gen]
        return [c for c in with_own if c is not None], [c for c in held_out if c is not None]

    full, per_gen = estimates(plus, minus)
    norms = [gram_norm(a, gram) for a, _ in per_gen]
    cos, cos_held = cosines(plus, minus)
    rng = random.Random(seed)
    null, null_held = [], []
    rewards = [r for pair in zip(plus, minus) for r in pair]
    for _ in tqdm(range(shuffles), desc="null (shuffled rewards)", leave=False):
        r = rewards[:]
        rng.shuffle(r)
        c, h = cosines(r[0::2], r[1::2])
        null += c
        null_held += h
    return {
        "generations": len(gens), "generations_updated": sum(n > 0 for n in norms),
        "update_norms": norms, "g_N_norm": gram_norm(full, gram), "g_N_coefficients": full,
        "cosine_self": gram_cosine(full, full, gram),
        "cosine": mean_sd(cos), "cosine_values": cos, "null": mean_sd(null),
        "cosine_heldout": mean_sd(cos_held), "cosine_heldout_values": cos_held, "null_heldout": mean_sd(null_held),
        "shuffles": shuffles,
    }


def fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def floats(text: str) -> list[float]:
    """A comma-separated list of numbers ('' is none); argparse reports a bad one before anything runs."""
    return [float(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a saved model directory (esopt build-model)")
    ap.add_argument("--config", default=str(ROOT / "config/tiny.yaml"))
    ap.add_argument("--horizon", type=int, default=None, help="H* (default: the config's longest sudoku.horizons)")
    ap.add_argument("--sigma", type=float, default=None, help="σ (default: the run's σ at --generation; sigma0 at 0)")
    ap.add_argument("--population", type=int, default=16, help="G, members per generation (even)")
    ap.add_argument("--tasks", type=int, default=None, help="B, puzzles per member (default: es.tasks_per_member)")
    ap.add_argument("--directions", type=int, default=128, help="K, antithetic pairs on the one batch")
    ap.add_argument("--batches", type=int, default=16, help="M, fresh batches for the base's noise and the step")
    ap.add_argument("--step", type=floats, default=None,
                    help="η, or several comma-separated (a sweep of the step's length; default: one α-sized ES update)")
    ap.add_argument("--sigmas", type=floats, default="0.5,1,2,4", help="multiples of σ for the sweep ('' skips it)")
    ap.add_argument("--sigma-directions", type=int, default=32, help="pairs per σ in the sweep")
    ap.add_argument("--shuffles", type=int, default=200, help="permutations of the rewards for the null")
    ap.add_argument("--generation", type=int, default=0, help="the ES generation whose batch and members are used")
    ap.add_argument("--seed", type=int, default=0, help="the ES run's seed (es.seeds)")
    ap.add_argument("--slots", type=int, default=None, help="members per batched call (default: G)")
    ap.add_argument("--context", type=int, default=None,
                    help="the population engine's KV cache (default: engine.population.context, else 256)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="write every number here (JSON)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    logging.getLogger("esopt.es.normalize").setLevel(logging.ERROR)  # tied generations are counted, not logged
    cfg = load_config(args.config)
    horizon = args.horizon or max(cfg["sudoku"]["horizons"])
    es, episodes = EsRun.from_config(cfg, horizon), SudokuEpisodes.from_config(cfg)
    if es.perturbation != "full" or not es.antithetic:
        raise SystemExit("es_signal measures full-rank antithetic ES (es.perturbation full, es.antithetic true)")
    G, K = args.population, args.directions
    if G < 2 or G % 2 or K < G // 2:
        raise SystemExit(f"--population must be even and >= 2, --directions >= G/2 (got G {G}, K {K})")
    model, tok = load_model_and_tokenizer(args.model, device="cpu")
    base_sha = weights_sha256(model)
    settings, weight_scale = resolve_units(es.settings(), model)
    run_cfg = ESConfig.from_settings(settings, G, seed=args.seed)
    sigma = run_cfg.sigma(args.generation) if args.sigma is None else args.sigma
    B = args.tasks or es.tasks_per_member
    context = args.context or engine_settings(cfg, "sudoku").get("context", 256)
    members = Members(model, tok, es, run_cfg, episodes, horizon, B, args.slots or G, context)
    n_params = sum(p.numel() for _, p in members.perturber.params)
    # pair k of generation t is member pair k of that generation of a run with seed --seed
    wide = dataclasses.replace(run_cfg, population=2 * max(K, args.sigma_directions))
    all_seeds = member_seeds(wide, args.generation)[0][0::2]
    seeds = all_seeds[:K]
    tseed = task_seed(run_cfg, args.generation)
    fresh = [task_seed(run_cfg, args.generation + 1 + j) for j in range(args.batches)]
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s); "
          f"{n_params / 1e6:.2f}M parameters, {model.dtype}; H* {horizon}, σ {sigma:g}, α {run_cfg.alpha:g}, G {G}, "
          f"B {B}, K {K}, M {args.batches}, member decoding {es.member_decoding}, {es.normalization}")

    # 1. reward spread vs evaluation noise
    base_here = members.base(tseed)
    base_fresh = [members.base(t) for t in tqdm(fresh, desc="base on fresh batches", unit="batch", leave=False)]
    noise = evaluation_noise(base_fresh, B)
    flat = members.perturbed([(s, sign * sigma) for s in seeds for sign in (1, -1)], tseed, f"members at σ {sigma:g}")
    plus, minus = flat[0::2], flat[1::2]
    spread = reward_spread(plus, minus, G)
    spread["snr"] = snr(spread["member_std"], noise["std"])
    spread["mean_abs_from_base"] = statistics.fmean(abs(r - base_here) for r in flat)

    # 2. update direction
    gram = noise_gram(members.perturber, seeds)
    d = direction(plus, minus, gram, G, run_cfg.alpha, run_cfg.normalization, args.shuffles, args.seed)
    moved = [n for n in d["update_norms"] if n > 0]
    if args.step:  # one or more lengths given (an empty list is the default)
        etas, eta_rule = args.step, "--step"
    else:
        etas = [statistics.fmean(moved) if moved else run_cfg.alpha * math.sqrt(2 * n_params / G)]
        eta_rule = "mean |g_G| of the generations that updated" if moved else "alpha*sqrt(2N/G): no generation updated"
    about = {"eta_rule": eta_rule, "sigma_norm": sigma * math.sqrt(n_params)}
    steps = [finite_difference(members, model, base_sha, seeds, d, eta, fresh, base_fresh) | about for eta in etas]
    fd = steps[0]

    # 3. σ sweep
    sweep = []
    ks = min(args.sigma_directions, len(all_seeds))
    for m in args.sigmas:
        if m == 1.0 and ks <= K:  # measurement 1's first pairs
            p, q = plus[:ks], minus[:ks]
        else:
            r = members.perturbed([(s, sign * m * sigma) for s in all_seeds[:ks] for sign in (1, -1)], tseed,
                                  f"members at {m:g}σ")
            p, q = r[0::2], r[1::2]
        s = reward_spread(p, q, G)
        sweep.append({"multiple": m, "sigma": m * sigma, **s, "snr": snr(s["member_std"], noise["std"]),
                      "plus": p, "minus": q})

    wall = time.perf_counter() - t_start
    code = git_state(ROOT)
    result = {
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(["es_signal.py", *argv]),
        "commit": code["commit"], "dirty": code["dirty"],
        "machine": platform.processor() or platform.machine(), "threads": args.threads,
        "torch": torch.__version__, "model": str(args.model), "base_weights_sha256": base_sha,
        "config": str(args.config), "parameters": n_params, "dtype": str(model.dtype).removeprefix("torch."),
        "horizon": horizon, "sigma": sigma, "alpha": run_cfg.alpha, "weight_scale": weight_scale,
        "population": G, "tasks": B, "directions": K, "batches": args.batches, "generation": args.generation,
        "seed": args.seed, "task_seed": tseed, "fresh_task_seeds": fresh, "member_seeds": seeds,
        "member_decoding": es.member_decoding, "normalization": run_cfg.normalization, "reward": episodes.reward,
        "spread": {**spread, "base_on_batch": base_here, "plus": plus, "minus": minus},
        "noise": {**noise, "rewards": base_fresh},
        "direction": d,
        "finite_difference": fd, "sigma_sweep": sweep,
        **({"step_sweep": steps} if len(steps) > 1 else {}),
        "episodes": members.episodes_run, "wall_s": wall,
    }
    report(result)
    if args.out:
        write_json_atomic(args.out, result)
    return result


def finite_difference(members: Members, model, base_sha: str, seeds: list[int], d: dict, eta: float,
                      fresh: list[int], base_fresh: list[float]) -> dict:
    """θ ± ηĝ_N on the fresh batches: both rewards, their difference, and θ + ηĝ_N paired with the base."""
    fd: dict = {"eta": eta}
    if d["g_N_norm"] == 0:
        return fd | {"skipped": "all member rewards equal: g_N is zero"}
    coefs = [eta * a / d["g_N_norm"] for a in d["g_N_coefficients"]]
    stepped = members.stepped(seeds, coefs, fresh, f"θ ± {eta:g}ĝ_N on fresh batches")
    if weights_sha256(model) != base_sha:  # the next step and the sweep must start from θ
        raise RuntimeError("the base weights were not restored after the finite-difference step")
    up, down = [r[0] for r in stepped], [r[1] for r in stepped]
    return fd | {"plus": interval(up), "minus": interval(down), "base": interval(base_fresh),
                 "difference": interval([u - v for u, v in zip(up, down)]),
                 "plus_minus_base": interval([u - b for u, b in zip(up, base_fresh)]),
                 "minus_minus_base": interval([v - b for v, b in zip(down, base_fresh)]),
                 "rewards_plus": up, "rewards_minus": down}


def report(r: dict) -> None:
    s, n, d = r["spread"], r["noise"], r["direction"]
    print("\n### 1. Member rewards on one batch vs the base's batch-to-batch noise\n")
    print(row(["base on the batch", "member mean", "member std", "pair diff std", "pairs R+≠R−",
               f"generations tied (of {s['generations']})", "base batch std", "binomial std", "SNR"]))
    print(row(["---"] * 9))
    print(row([fmt(s["base_on_batch"]), fmt(s["member_mean"]), fmt(s["member_std"]), fmt(s["pair_diff_std"]),
               fmt(s["frac_pairs_unequal"], ".0%"), fmt(s["frac_generations_tied"], ".0%"), fmt(n["std"]),
               fmt(n["binomial_std"]), fmt(s["snr"], ".2f")]))
    print(f"\nbase over {n['batches']} fresh batches: mean {fmt(n['mean'])}")
    print("\n### 2. Update direction: cos(g_G, g_N) over disjoint generations vs shuffled rewards\n")
    print(row(["", "generations (updated / all)", "cos(g_G, g_N)", "null", "cos held out", "null held out"]))
    print(row(["---"] * 6))
    c, nl, ch, nh = d["cosine"], d["null"], d["cosine_heldout"], d["null_heldout"]
    print(row([f"G {r['population']}, K {r['directions']}", f"{d['generations_updated']} / {d['generations']}",
               f"{fmt(c['mean'])} ± {fmt(c['sd'])}", f"{fmt(nl['mean'])} ± {fmt(nl['sd'])}",
               f"{fmt(ch['mean'])} ± {fmt(ch['sd'])}", f"{fmt(nh['mean'])} ± {fmt(nh['sd'])}"]))
    for fd in r.get("step_sweep") or [r["finite_difference"]]:
        print(f"\nfinite difference along ĝ_N, η = {fd['eta']:.4g} ({fd['eta_rule']}; σ|ε| = {fd['sigma_norm']:.4g}):")
        if "skipped" in fd:
            print(f"  skipped: {fd['skipped']}")
            continue
        diff, gain = fd["difference"], fd["plus_minus_base"]
        print(f"  R(θ+ηĝ) {fmt(fd['plus']['mean'])}, R(θ−ηĝ) {fmt(fd['minus']['mean'])}, base {fmt(fd['base']['mean'])} "
              f"on {r['batches']} fresh batches; difference {fmt(diff['mean'], '+.4f')} "
              f"[{fmt(diff['ci_low'], '+.4f')}, {fmt(diff['ci_high'], '+.4f')}] (95%); θ+ηĝ minus the base "
              f"{fmt(gain['mean'], '+.4f')} [{fmt(gain['ci_low'], '+.4f')}, {fmt(gain['ci_high'], '+.4f')}]")
    if r["sigma_sweep"]:
        print("\n### 3. σ sweep (measurement 1 per σ)\n")
        print(row(["× σ", "σ", "pairs", "member std", "pairs R+≠R−", "generations tied", "SNR"]))
        print(row(["---"] * 7))
        for w in r["sigma_sweep"]:
            print(row([f"{w['multiple']:g}", f"{w['sigma']:.4g}", w["pairs"], fmt(w["member_std"]),
                       fmt(w["frac_pairs_unequal"], ".0%"), fmt(w["frac_generations_tied"], ".0%"), fmt(w["snr"], ".2f")]))
    print(f"\n{r['episodes']} episodes, {r['wall_s']:.0f} s; base weights sha256 {r['base_weights_sha256'][:16]}…")


if __name__ == "__main__":
    main()
