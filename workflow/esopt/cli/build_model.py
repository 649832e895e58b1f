"""esopt build-model: the base model directory every other rule loads with from_pretrained.

tiny:  train a tokenizer on Sudoku transcripts, build a Qwen3.5-architecture model,
       warm-start it on demonstrations, save_pretrained.
hub:   snapshot_download at a pinned revision (or use model.local_path as is).
local: use model.local_path as is.
Every case writes weights.sha256.json and provenance.json beside the weights.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.build_model")


def build_tiny(cfg: dict, m: dict, out: Path) -> dict:
    """A tiny model warm-started on Sudoku demonstrations (model.warmstart), left at its
best checkpoint on the validation split when warmstart.select is set."""
    from esopt.models.build import build_tiny, sft_settings
    from esopt.models.demonstrations.sudoku import SudokuDemos, demonstrations
    from esopt.runs.episodes import validation_score

    transcripts = list(demonstrations(SudokuDemos.from_config(cfg, m["warmstart"])))
    select = m["warmstart"].get("select")
    score = validation_score(cfg, select) if select else None
    model, stats = build_tiny(m, transcripts, sft_settings(m["warmstart"]), out, score=score)
    return {"demonstrations": stats["examples"], "final_loss": stats["final_loss"], "selection": stats.get("selection"),
            "parameters": sum(p.numel() for p in model.parameters()),
            "mean_abs_weight": float(torch.cat([p.detach().float().abs().flatten() for p in model.parameters()]).mean())}


def build_probe(cfg: dict, tokenizer_dir: Path, out: Path) -> dict:
    """The memory-probe model: memory.probe's architecture, random weights, the base
    model's tokenizer. Large enough that memory ratios are not interpreter overhead."""
    from transformers import AutoTokenizer

    from esopt.models.load import save_model
    from esopt.models.tiny import build_tiny_model

    spec = cfg["memory"]["probe"]
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = build_tiny_model(spec, tok, seed=spec.get("seed", 0)).to(getattr(torch, cfg["model"]["dtype"]))
    save_model(model, tok, out)
    n = sum(p.numel() for p in model.parameters())
    log.info("memory probe: %d parameters", n)
    return {"parameters": n, "probe": spec}


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    out = Path(args.out)
    if args.probe:
        if not (cfg.get("memory") or {}).get("probe"):
            raise ValueError(f"{args.config} has no memory.probe block to build a probe model from")
        if not args.tokenizer:
            raise ValueError("--probe needs --tokenizer DIR (the base model directory)")
        prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          seeds={"probe": cfg["memory"]["probe"].get("seed", 0)}, inputs=[args.config, args.tokenizer])
        extra = build_probe(cfg, Path(args.tokenizer), out)
        prov.write(out / "provenance.json", outputs=[out], extra={"model": extra})
        return 0
    from esopt.config import model_spec
    from esopt.models.build import hash_weights, stage

    m = model_spec(cfg, args.name)
    ws_threads = m.get("warmstart", {}).get("threads")
    if ws_threads and not args.threads:
        torch.set_num_threads(ws_threads)  # the warm start's own, fixed thread count
    prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"warmstart": m.get("warmstart", {}).get("seed")}, inputs=[args.config])
    if m["source"] == "tiny":
        extra = {"name": m["name"], "warmstart": build_tiny(cfg, m, out)}
    else:
        extra, staged = stage(m, out)
        prov.inputs += staged
    hashes = hash_weights(out)
    prov.write(out / "provenance.json", outputs=[out], extra={"model": extra, "weights_sha256": hashes})
    log.info("model ready at %s", out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt build-model", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True, help="model directory to create (results/models/NAME)")
    p.add_argument("--name", default=None, help="which model of the config to build: `model` (default) or one of population_study.models")
    p.add_argument("--probe", action="store_true", help="build the memory-probe model of the config's memory block instead")
    p.add_argument("--tokenizer", default=None, help="with --probe: directory whose tokenizer the probe uses")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
