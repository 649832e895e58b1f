"""Speed-up of ES generations with the population sharded over N ranks vs 1 process.

Runs `esopt train-es` on the tiny config's model twice, side by side in one script:
once as a single process and once under torchrun with --ranks processes (gloo on CPU,
nccl on GPUs), for a few generations each, and compares the per-generation wall clock
recorded in history.json (process start and model loading are not counted). Also
checks that both runs end with the same weights. Every rank runs --threads torch
threads, so on an N-core machine use ranks x threads <= N.

    python benchmarks/distributed_es.py                       # 2 ranks, tiny model, H*=4, G=16
    python benchmarks/distributed_es.py --model results/models/tiny-qwen35 --generations 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str], threads: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{res.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "config/tiny.yaml"))
    p.add_argument("--model", default=str(ROOT / "results/models/tiny-qwen35"), help="built by `esopt build-model`")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--horizon", type=int, default=4)
    p.add_argument("--population", type=int, default=16)
    p.add_argument("--generations", type=int, default=3)
    args = p.parse_args()
    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"{args.model} is not a model directory: run `snakemake results/models/tiny-qwen35` first")

    with tempfile.TemporaryDirectory() as tmp:
        cfg = yaml.safe_load(Path(args.config).read_text())
        cfg["es"]["generations"] = args.generations
        config = Path(tmp) / "config.yaml"
        config.write_text(yaml.safe_dump(cfg))
        common = ["--config", str(config), "--horizon", str(args.horizon), "--population", str(args.population),
                  "--seed", "0", "--model", args.model, "--threads", str(args.threads)]
        walls, finals = {}, {}
        for ranks in (1, args.ranks):
            out = Path(tmp) / f"ranks{ranks}"
            launcher = [sys.executable, "-m", "esopt.cli.main"] if ranks == 1 else [
                sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", "-m", "esopt.cli.main"]
            run([*launcher, "train-es", *common, "--out", str(out)], args.threads)
            hist = json.loads((out / "history.json").read_text())
            walls[ranks] = [g["wall_s"] for g in hist["generations"]]
            finals[ranks] = hist["final"]["weights_sha256"]

    print(f"model {args.model}, H*={args.horizon}, G={args.population}, {cfg['es']['tasks_per_member']} tasks per member, "
          f"{args.threads} thread(s) per rank, {os.cpu_count()} CPUs")
    for ranks, w in walls.items():
        print(f"  {ranks} rank(s): s/generation {statistics.median(w):.2f} (median of {len(w)}: {', '.join(f'{x:.2f}' for x in w)})")
    speedup = statistics.median(walls[1]) / statistics.median(walls[args.ranks])
    print(f"speed-up {args.ranks} ranks vs 1: {speedup:.2f}x")
    print(f"final weights identical: {finals[1] == finals[args.ranks]}")


if __name__ == "__main__":
    main()
