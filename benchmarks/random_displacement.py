"""Did an ES run move the base better than a random move of the same size?

An ES run's displacement from its base is a sum of Gaussian directions, one per member
pair and generation, weighted by the members' normalized rewards. When those rewards
differ mostly by noise, the weights make the sum a random walk: its size grows as
alpha * sqrt(T / G) whatever the rewards, and held-out success changes as it would along
any direction of that size. This benchmark tests that: for each trained run it moves the
base along --draws random Gaussian directions with the run's displacement norm tensor by
tensor, evaluates each like the run (`esopt evaluate`, same config, horizon and
evaluation seed, so the same puzzles in the same order), and prints every model's change
from the base, paired episode by episode, with its 95% interval. --scales also evaluates
the base moved part of the way along the run's own move (base + s * (run - base)): to
first order, what a smaller alpha would have reached.

    python benchmarks/random_displacement.py --config config/horizons.yaml --horizon 15 \\
        --base results/models/tiny-qwen35-6x6 \\
        --base-eval results/eval/tiny-qwen35-6x6/base/h15.json \\
        --run results/train/es/tiny-qwen35-6x6/sudoku/h15_g16_s0/model=results/eval/tiny-qwen35-6x6/es/h15_g16_s0/h15.json \\
        --draws 2 --scales 0.25,0.5 --out docs/random_displacement_h15.json

Each draw or scale costs one evaluation (about 4 minutes of a core at H* 15 on the 6x6 base).
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from paired_eval import paired, shown  # noqa: E402

from esopt.io import write_json_atomic  # noqa: E402

WEIGHTS = "model.safetensors"
NOT_COPIED = {WEIGHTS, "provenance.json", "weights.sha256.json"}  # the base's weights and its own records


def displacement_norms(base: dict[str, torch.Tensor], run: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per tensor, the L2 norm of run - base (in float64: the moves are ~1e-2 of the weights)."""
    if base.keys() != run.keys():
        raise SystemExit(f"the run's tensors are not the base's: {sorted(base.keys() ^ run.keys())[:5]}")
    return {k: float((run[k].double() - base[k].double()).norm()) for k in base}


def random_move(base: dict[str, torch.Tensor], norms: dict[str, float], seed: int) -> dict[str, torch.Tensor]:
    """The base moved along one Gaussian direction per tensor, scaled to the given norms."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k in sorted(base):  # sorted: the draw does not depend on the file's key order
        w = base[k]
        d = torch.randn(w.shape, generator=g, dtype=torch.float64)
        out[k] = (w.double() + d * (norms[k] / float(d.norm()))).to(w.dtype) if norms[k] > 0 else w.clone()
    return out


def scaled_move(base: dict[str, torch.Tensor], run: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """base + scale * (run - base): the run's own move, shortened or lengthened."""
    return {k: (w.double() + scale * (run[k].double() - w.double())).to(w.dtype) for k, w in base.items()}


def rms(norms: dict[str, float], base: dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(n * n for n in norms.values()) / sum(w.numel() for w in base.values()))


def evaluate(config: str, model: Path, horizon: int, out: Path, threads: int) -> Path:
    cmd = [sys.executable, "-m", "esopt.cli.main", "evaluate", "--config", config, "--model", str(model),
           "--benchmark", "sudoku", "--horizon", str(horizon), "--out", str(out), "--threads", str(threads)]
    subprocess.run(cmd, check=True)
    return out.with_suffix(".trajectories.jsonl")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="the config the runs and their evaluations used")
    ap.add_argument("--horizon", type=int, required=True, help="H* of the evaluations")
    ap.add_argument("--base", type=Path, required=True, help="the base model directory")
    ap.add_argument("--base-eval", type=Path, required=True, help="the base's evaluation summary FILE.json at --horizon")
    ap.add_argument("--run", action="append", required=True, metavar="MODEL=EVAL",
                    help="a trained model directory and its evaluation summary at --horizon (repeatable)")
    ap.add_argument("--draws", type=int, default=2, help="random directions per run")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first draw (draw k of run r: seed + 1000 r + k)")
    ap.add_argument("--scales", type=lambda v: [float(x) for x in v.split(",") if x], default=[],
                    help="comma list: also evaluate the base moved by these multiples of each run's own move "
                         "(0.5: half the way; what a smaller alpha would have done, to first order)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="results JSON")
    args = ap.parse_args(argv)

    base = load_file(args.base / WEIGHTS)
    base_traj = args.base_eval.with_suffix(".trajectories.jsonl")
    rows = []
    with tempfile.TemporaryDirectory(prefix="random_displacement_") as tmp:

        def measure(name: str, weights: dict[str, torch.Tensor]) -> dict:
            """The base's directory with these weights, evaluated and paired with the base."""
            d = Path(tmp) / name
            d.mkdir()
            for f in args.base.iterdir():
                if f.is_file() and f.name not in NOT_COPIED:
                    shutil.copy2(f, d / f.name)
            save_file(weights, str(d / WEIGHTS), metadata={"format": "pt"})
            return paired(base_traj, evaluate(args.config, d, args.horizon, d / f"h{args.horizon}.json", args.threads))

        for r, spec in enumerate(args.run):
            model, _, summary = spec.partition("=")
            if not summary:
                raise SystemExit(f"--run {spec}: expected MODEL=EVAL")
            model, summary = Path(model), Path(summary)
            trained = load_file(model / WEIGHTS)
            norms = displacement_norms(base, trained)
            row = {"run": str(model), "rms_displacement": rms(norms, base),
                   "run_vs_base": paired(base_traj, summary.with_suffix(".trajectories.jsonl")), "random": [], "scaled": []}
            for k in range(args.draws):
                seed = args.seed + 1000 * r + k
                row["random"].append({"seed": seed, **measure(f"run{r}_draw{k}", random_move(base, norms, seed))})
                print(f"{model}: random draw {k} (seed {seed}): {shown(row['random'][-1])}", flush=True)
            for scale in args.scales:
                row["scaled"].append({"scale": scale, **measure(f"run{r}_scale{scale:g}", scaled_move(base, trained, scale))})
                print(f"{model}: its move x {scale:g}: {shown(row['scaled'][-1])}", flush=True)
            rows.append(row)
            moves = ", ".join(f"{q['difference_points']:+.1f}" for q in row["random"])
            print(f"{model}: rms displacement {row['rms_displacement']:.5f}; the run {shown(row['run_vs_base'])}; "
                  f"random moves of its size {moves or '(none)'}", flush=True)
    write_json_atomic(args.out, {"config": args.config, "horizon": args.horizon, "base": str(args.base),
                                 "base_eval": str(args.base_eval), "draws": args.draws, "scales": args.scales, "runs": rows})


if __name__ == "__main__":
    main()
