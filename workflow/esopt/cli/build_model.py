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
import shutil
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.io import atomic_path, write_json_atomic
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.build_model")


def build_tiny(cfg: dict, m: dict, out: Path) -> dict:
    from esopt.models.load import load_model_and_tokenizer
    from esopt.models.tiny import build_tiny_model
    from esopt.models.tokenizer import train_tokenizer
    from esopt.models.warmstart import WarmStart, demonstrations, supervised_warm_start

    w = m["warmstart"]
    ws = WarmStart(
        size=cfg["sudoku"]["size"], blanks=tuple(w["blanks"]), puzzles_per_blank=w["puzzles_per_blank"],
        mistake_prob=w["mistake_prob"], steps=w["steps"], batch_size=w["batch_size"], lr=w["lr"],
        history_turns=cfg["agent"]["history_turns"], seed=w["seed"], expert=w["expert"],
        prompt=cfg["sudoku"]["prompt"],
    )
    # The tokenizer learns from the transcripts as the chat template lays them out
    # (special tokens aside), so role names and the system prompt become few tokens.
    corpus = ["".join(f"{x['role']}\n{x['content']}\n" for x in t) for t in demonstrations(ws)]
    tok = train_tokenizer(corpus, m["tiny"]["vocab_size"])
    model = build_tiny_model(m["tiny"], tok, seed=m["tiny"].get("seed", 0)).float()
    log.info("tiny model: %d parameters, layers %s", sum(p.numel() for p in model.parameters()), m["tiny"]["layer_types"])
    stats = supervised_warm_start(model, tok, ws)
    model = model.to(getattr(torch, m["dtype"]))
    with atomic_path(out) as tmp:
        tmp.unlink()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        load_model_and_tokenizer(tmp)  # what every rule will do; fail here, not later
    stats["parameters"] = sum(p.numel() for p in model.parameters())
    stats["mean_abs_weight"] = float(torch.cat([p.detach().float().abs().flatten() for p in model.parameters()]).mean())
    return stats


def build_probe(cfg: dict, tokenizer_dir: Path, out: Path) -> dict:
    """The memory-probe model: memory.probe's architecture, random weights, the base
    model's tokenizer. Large enough that memory ratios are not interpreter overhead."""
    from transformers import AutoTokenizer

    from esopt.models.load import load_model_and_tokenizer
    from esopt.models.tiny import build_tiny_model

    spec = cfg["memory"]["probe"]
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = build_tiny_model(spec, tok, seed=spec.get("seed", 0)).to(getattr(torch, cfg["model"]["dtype"]))
    with atomic_path(out) as tmp:
        tmp.unlink()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        load_model_and_tokenizer(tmp)
    n = sum(p.numel() for p in model.parameters())
    log.info("memory probe: %d parameters", n)
    return {"parameters": n, "probe": spec}


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if args.probe:
        if not (cfg.get("memory") or {}).get("probe"):
            raise ValueError(f"{args.config} has no memory.probe block to build a probe model from")
        if not args.tokenizer:
            raise ValueError("--probe needs --tokenizer DIR (the base model directory)")
        out = Path(args.out)
        prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          seeds={"probe": cfg["memory"]["probe"].get("seed", 0)}, inputs=[args.config, args.tokenizer])
        if out.exists():
            shutil.rmtree(out)
        extra = build_probe(cfg, Path(args.tokenizer), out)
        prov.write(out / "provenance.json", outputs=[out], extra={"model": extra})
        return 0
    from esopt.config import model_spec

    m = model_spec(cfg, args.name)
    ws_threads = m.get("warmstart", {}).get("threads")
    if ws_threads and not args.threads:
        torch.set_num_threads(ws_threads)  # the warm start's own, fixed thread count
    out = Path(args.out)
    prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"warmstart": m.get("warmstart", {}).get("seed")}, inputs=[args.config])
    if out.exists():
        shutil.rmtree(out)
    local = m.get("local_path")
    if m["source"] == "tiny":
        extra = {"name": m["name"], "warmstart": build_tiny(cfg, m, out)}
    elif local:  # pre-staged weights stay where they are; out/ links to their files
        src = Path(local).expanduser().resolve()
        if not (src / "config.json").exists():
            raise FileNotFoundError(f"model.local_path {src} holds no config.json (expected a from_pretrained directory)")
        out.mkdir(parents=True)
        for f in src.iterdir():
            if f.name not in ("provenance.json", "weights.sha256.json"):
                (out / f.name).symlink_to(f)
        extra = {"name": m["name"], "source": str(src)}
        prov.inputs.append(str(src))
    else:
        from esopt.models.hub import download_snapshot

        hub = m["hub"]
        download_snapshot(hub["repo_id"], hub["revision"], out)
        extra = {"name": m["name"], "repo_id": hub["repo_id"], "revision": hub["revision"]}
    from esopt.models.hub import weight_hashes

    hashes = weight_hashes(out)
    write_json_atomic(out / "weights.sha256.json", hashes)
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
