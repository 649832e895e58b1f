"""esopt build-web-model: the base model of the web benchmark (web.model).

source tiny: the scripted expert plays the training tasks in the real browser on the
local sites (esopt.models.demonstrations.web), and with warmstart.site_seeds the same
templates' training tasks on differently seeded copies of the sites; its turns train the tokenizer and
warm-start a Qwen3.5-architecture model (esopt.models.build.build_tiny), saved with
save_pretrained like every other model. source hub / local (config/paper.yaml:
Qwen3.5-27B): the snapshot at the pinned revision, or a pre-staged local_path, staged
as build-model stages the main model. Without a web.model block the rules use the
main model directory.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.build_web_model")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.models.build import build_tiny, hash_weights, sft_settings, stage
    from esopt.models.demonstrations.web import demonstrations, name_pool
    from esopt.runs.tool_episodes import episode_envs, load_tasks, system_prompt, web_provenance

    w = cfg.get("web") or {}
    m = w.get("model")
    if not m:
        raise ValueError("build-web-model builds web.model; this config has none (the web agent uses `model`)")
    out = Path(args.out)
    if m["source"] != "tiny":
        prov = Provenance("build-web-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          inputs=[args.config])
        extra, staged = stage(m, out, where="web.model")
        prov.inputs += staged
        prov.write(out / "provenance.json", outputs=[out], extra={**extra, "weights_sha256": hash_weights(out)})
        log.info("web model staged at %s", out)
        return 0
    ws = m["warmstart"]
    if ws.get("threads") and not args.threads:
        torch.set_num_threads(ws["threads"])
    tasks = load_tasks(args.data, "web")[: ws.get("tasks") or None]
    prov = Provenance("build-web-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"warmstart": ws.get("seed", 0)}, inputs=[args.config, args.data])
    transcripts, per_site_seed = [], {}
    swaps = ws.get("name_swaps", 0)
    pool = name_pool(cfg) if swaps else None
    for site_seed, seed_tasks, demo_seed in demonstration_sets(cfg, tasks):
        with episode_envs({**cfg, "web": {**w, "site_seed": site_seed}}, "web", []) as make_env:
            turns = list(demonstrations(seed_tasks, make_env, system_prompt("web", [], cfg=cfg),
                                        ws.get("mistake_prob", 0.2), demo_seed, w.get("history_turns", 0),
                                        name_swaps=swaps, pool=pool))
        per_site_seed[site_seed] = {"tasks": len(seed_tasks), "turns": len(turns)}  # with the swapped copies
        transcripts += turns
    if not transcripts:
        raise RuntimeError(f"the expert solved none of the {len(tasks)} training tasks in {args.data}: see the log")
    log.info("%d demonstration turns (per site seed: %s)", len(transcripts), per_site_seed)
    model, stats = build_tiny(m, transcripts, sft_settings(ws, "web-sft-order"), out, what="tiny web model")
    params = sum(p.numel() for p in model.parameters())
    prov.write(out / "provenance.json", outputs=[out],
               extra={"model": {"name": m["name"], "parameters": params, "warmstart": stats,
                                "demonstration_turns": len(transcripts), "demonstrations_per_site_seed": per_site_seed},
                      "weights_sha256": hash_weights(out), **web_provenance(cfg, "web")})
    log.info("web model ready at %s", out)
    return 0


def demonstration_sets(cfg: dict, tasks: list) -> list[tuple[int, list, int]]:
    """(site seed, training tasks, demonstration seed) for each copy of the sites the expert
    plays: the job's training tasks on web.site_seed, and with warmstart.site_seeds the same
    templates' training tasks on differently seeded sites (other product names, prices, posts
    and issues), so that a model can only solve them by reading the objective and the page,
    not by recalling one site's content. A template's split depends on the intent alone,
    so no held-out intent is demonstrated on any seed."""
    from esopt.envs.web.templates import generate_tasks
    from esopt.seeding import derive_seed

    w = cfg["web"]
    ws = w["model"]["warmstart"]
    main_seed, demo_seed = w.get("site_seed", 0), ws.get("seed", 0)
    sets = [(main_seed, tasks, demo_seed)]
    for s in ws.get("site_seeds") or []:
        if s == main_seed:
            continue
        if w.get("sites", "local") != "local":
            raise ValueError("web.model.warmstart.site_seeds needs web.sites: local (it reseeds the local sites)")
        extra = generate_tasks(seed=s, split="train")[: ws.get("tasks") or None]
        sets.append((s, extra, derive_seed("web-demos-site-seed", demo_seed, s)))
    return sets


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt build-web-model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--data", required=True, help="the web training set (from esopt prepare-data --benchmark web --set train)")
    p.add_argument("--out", required=True, help="model directory to create (results/models/NAME)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
