"""How idle threads wait, side by side: a warm-start step with spinning and with sleeping threads.

libgomp (torch's OpenMP) and the HF tokenizers' thread pool keep idle threads spinning by
default. On a machine where every core already has a job (snakemake --cores N with N jobs,
or anything else running), those spinning threads take time from the jobs that have work.
esopt's commands set OMP_WAIT_POLICY=PASSIVE and TOKENIZERS_PARALLELISM=false
(esopt/cli/__init__.py); this script measures what that buys. Each setting runs the real
`esopt build-model` on the smoke config (tokenizer, demonstrations, `--steps` warm-start
steps on 1 torch thread, as the pipeline's jobs) in a fresh process, alone and beside
`--busy` processes that each keep one core busy, and prints its wall time and the ratio
to the esopt setting. It checks that every setting built the same weights, bit for bit.

    python benchmarks/cpu_waiting.py --busy 2 --steps 100
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {  # name -> (OMP_WAIT_POLICY, TOKENIZERS_PARALLELISM); None: the library's default
    "default (spin)": (None, None),
    "OMP passive": ("PASSIVE", None),
    "tokenizers serial": (None, "false"),
    "esopt (both)": ("PASSIVE", "false"),
}

# The measured process: the real `esopt build-model` (tokenizer, demonstrations, warm start).
# For a library default, torch loads (and libgomp reads its policy) before esopt.cli can set
# one, and TOKENIZERS_PARALLELISM=true is what tokenizers does when it is unset.
WORKLOAD = r"""
import os, sys, time
if os.environ.get("BENCH_OMP_DEFAULT"):
    import torch  # noqa: F401
from esopt.cli import build_model
t = time.perf_counter()
assert build_model.main(["--config", sys.argv[1], "--out", sys.argv[2]]) == 0
print(time.perf_counter() - t)
"""


def busy() -> None:
    while True:
        pass


def write_config(d: Path, steps: int) -> Path:
    import yaml

    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg["model"]["warmstart"]["steps"] = steps
    path = d / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def measure(config: Path, out: Path, setting: tuple[str | None, str | None]) -> tuple[float, str]:
    omp, tokenizers = setting
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "TOKENIZERS_PARALLELISM")}
    env["PYTHONPATH"] = str(ROOT / "workflow")
    env["TOKENIZERS_PARALLELISM"] = tokenizers or "true"
    if omp:
        env["OMP_WAIT_POLICY"] = omp
    else:
        env["BENCH_OMP_DEFAULT"] = "1"
    res = subprocess.run([sys.executable, "-c", WORKLOAD, str(config), str(out)], env=env,
                         capture_output=True, text=True, check=True)
    return float(res.stdout.strip().splitlines()[-1]), hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--busy", type=int, default=os.cpu_count(), help="processes that keep a core busy (default: one per core)")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        config = write_config(Path(d), args.steps)
        rows, weights = {}, set()
        for load in (0, args.busy):
            procs = [mp.Process(target=busy, daemon=True) for _ in range(load)]
            for q in procs:
                q.start()
            try:
                for name, setting in SETTINGS.items():
                    rows[(load, name)], digest = measure(config, Path(d) / "model", setting)
                    weights.add(digest)
            finally:
                for q in procs:
                    q.terminate()
                    q.join()
    assert len(weights) == 1, "the settings built different weights"
    print(f"esopt build-model, smoke config, {args.steps} warm-start steps, wall s ({os.cpu_count()} cores)")
    print(f"{'setting':<20} {'alone (s)':>10} {'ratio':>7} {f'+{args.busy} busy (s)':>14} {'ratio':>7}")
    for name in SETTINGS:
        a, b = rows[(0, name)], rows[(args.busy, name)]
        ra, rb = a / rows[(0, "esopt (both)")], b / rows[(args.busy, "esopt (both)")]
        print(f"{name:<20} {a:>10.2f} {ra:>6.2f}x {b:>14.2f} {rb:>6.2f}x")


if __name__ == "__main__":
    main()
