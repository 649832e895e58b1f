"""esopt build-model: a model directory that other rules load with from_pretrained.

--for picks which model block of the config it builds:
  base   `model` (with --name, one of population_study.models). tiny: a tokenizer trained on
         Sudoku transcripts, a Qwen3.5-architecture model warm-started on demonstrations
         (esopt.models.demonstrations.sudoku); hub: snapshot_download at a pinned revision;
         local: model.local_path as is. With --probe, the memory-probe model instead.
  tools  tool_agents.model (tiny): warm-started on expert ReAct episodes of every tool
         benchmark's training set (--data B=DIR once per benchmark; real sandbox, real OCR).
  web    web.model: tiny, warm-started on the scripted expert's episodes in the real browser
         (--data web=DIR; esopt.models.demonstrations.web); hub / local staged as for base.
  ahd    ahd.model: tiny, the heuristic writer warm-started on random expression-mode
         demonstrations of every task and operator (esopt.ahd.writer); hub staged.
Every model directory gets provenance.json beside the weights, and weights.sha256.json
(all but the probe). A build published with the config's results (`esopt publish`, files up
to published.model_mib) is restored instead, record and all: a warm start is
bit-reproducible on one CPU type only, and a grid run in pieces needs one base. Without a tools, web or ahd block the rules use the base model.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.published import restore_model
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


def base_model(args: argparse.Namespace, cfg: dict, out: Path) -> None:
    """`model` or a population_study model (--name); with --probe, the memory-probe model."""
    if args.probe:
        if not (cfg.get("memory") or {}).get("probe"):
            raise ValueError(f"{args.config} has no memory.probe block to build a probe model from")
        if not args.tokenizer:
            raise ValueError("--probe needs --tokenizer DIR (the base model directory)")
        prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          seeds={"probe": cfg["memory"]["probe"].get("seed", 0)}, inputs=[args.config, args.tokenizer])
        extra = build_probe(cfg, Path(args.tokenizer), out)
        prov.write(out / "provenance.json", outputs=[out], extra={"model": extra})
        return
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


def data_dirs(data: list[str], benchmarks: list[str], block: str) -> dict[str, str]:
    """--data BENCHMARK=DIR, once for each of `benchmarks` (those of the config `block`)."""
    dirs = {}
    for d in data:
        bench, sep, path = d.partition("=")
        if not sep or not bench or not path:
            raise ValueError(f"--data {d!r}: expected BENCHMARK=DIR (e.g. {benchmarks[0]}=results/data/{benchmarks[0]}/train)")
        if bench not in benchmarks:
            raise ValueError(f"--data {d!r}: {bench!r} is not a benchmark of {block} (expected one of {sorted(benchmarks)})")
        dirs[bench] = path
    missing = set(benchmarks) - set(dirs)
    if missing:
        raise ValueError(f"--data BENCHMARK=DIR missing for {sorted(missing)}")
    return dirs


def tool_model(args: argparse.Namespace, cfg: dict, out: Path) -> None:
    """tool_agents.model: warm-started on expert ReAct episodes of the tool benchmarks' training sets."""
    from esopt.models.build import build_tiny, hash_weights, sft_settings
    from esopt.models.demonstrations.tools import demonstrations
    from esopt.runs.tool_episodes import load_tasks, make_tools, system_prompt
    from esopt.spec.agents import ToolEpisodes

    ta = cfg.get("tool_agents") or {}
    m = ta.get("model")
    if not m or m.get("source") != "tiny":
        raise ValueError("build-model --for tools builds tool_agents.model with source: tiny; this config has none")
    w = m["warmstart"]
    if w.get("threads") and not args.threads:
        torch.set_num_threads(w["threads"])
    data = data_dirs(args.data, list(ta["benchmarks"]), "tool_agents")
    prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"warmstart": w["seed"]}, inputs=[args.config, *data.values()])
    transcripts = []
    episodes = ToolEpisodes.from_config(cfg)
    for bench, d in sorted(data.items()):
        tasks = load_tasks(d, bench)[: w["tasks_per_benchmark"]]
        tools = make_tools(episodes, bench, d)
        transcripts += list(demonstrations(bench, tasks, tools, system_prompt(bench, tools), w["mistake_prob"],
                                           w["seed"], episodes.history_turns))
    log.info("%d demonstration turns", len(transcripts))
    model, stats = build_tiny(m, transcripts, sft_settings(w, "tool-sft-order"), out, what="tiny tool model")
    params = sum(p.numel() for p in model.parameters())
    hashes = hash_weights(out)
    prov.write(out / "provenance.json", outputs=[out],
               extra={"model": {"name": m["name"], "parameters": params, "warmstart": stats}, "weights_sha256": hashes})


def web_model(args: argparse.Namespace, cfg: dict, out: Path) -> None:
    """web.model: tiny, warm-started on the scripted expert's episodes (on web.site_seed's sites and
    warmstart.site_seeds'); hub / local: staged."""
    from esopt.models.build import build_tiny, hash_weights, sft_settings, stage
    from esopt.models.demonstrations.web import demonstration_sets, demonstrations, name_pool
    from esopt.runs.tool_episodes import episode_envs, load_tasks, system_prompt, web_provenance
    from esopt.spec.agents import WebJob

    w = cfg.get("web") or {}
    m = w.get("model")
    if not m:
        raise ValueError("build-model --for web builds web.model; this config has none (the web agent uses `model`)")
    if m["source"] != "tiny":
        prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          inputs=[args.config])
        extra, staged = stage(m, out, where="web.model")
        prov.inputs += staged
        prov.write(out / "provenance.json", outputs=[out], extra={**extra, "weights_sha256": hash_weights(out)})
        return
    data = data_dirs(args.data, ["web"], "web")["web"]
    ws = m["warmstart"]
    if ws.get("threads") and not args.threads:
        torch.set_num_threads(ws["threads"])
    tasks = load_tasks(data, "web")[: ws.get("tasks") or None]
    prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"warmstart": ws.get("seed", 0)}, inputs=[args.config, data])
    transcripts, per_site_seed = [], {}
    swaps = ws.get("name_swaps", 0)
    pool = name_pool(cfg) if swaps else None
    job = WebJob.from_config(cfg)
    for site_seed, seed_tasks, demo_seed in demonstration_sets(cfg, tasks):
        with episode_envs(job.on_site_seed(site_seed), "web", []) as make_env:
            turns = list(demonstrations(seed_tasks, make_env, system_prompt("web", [], episodes=job),
                                        ws.get("mistake_prob", 0.2), demo_seed, job.history_turns,
                                        name_swaps=swaps, pool=pool))
        per_site_seed[site_seed] = {"tasks": len(seed_tasks), "turns": len(turns)}  # with the swapped copies
        transcripts += turns
    if not transcripts:
        raise RuntimeError(f"the expert solved none of the {len(tasks)} training tasks in {data}: see the log")
    log.info("%d demonstration turns (per site seed: %s)", len(transcripts), per_site_seed)
    model, stats = build_tiny(m, transcripts, sft_settings(ws, "web-sft-order"), out, what="tiny web model")
    params = sum(p.numel() for p in model.parameters())
    prov.write(out / "provenance.json", outputs=[out],
               extra={"model": {"name": m["name"], "parameters": params, "warmstart": stats,
                                "demonstration_turns": len(transcripts), "demonstrations_per_site_seed": per_site_seed},
                      "weights_sha256": hash_weights(out), **web_provenance(job)})


def ahd_model(args: argparse.Namespace, cfg: dict, out: Path) -> None:
    """ahd.model: the tiny heuristic writer, warm-started on random expression-mode
    demonstrations (no notion of a good heuristic: finding one is the search's job); hub: staged."""
    from esopt.ahd.writer import demonstrations
    from esopt.models.build import build_tiny, hash_weights, sft_settings, stage

    a = cfg.get("ahd") or {}
    m = a.get("model")
    if not m:
        raise ValueError("build-model --for ahd builds ahd.model; this config has none (the writer is the main model)")
    if m["source"] != "tiny":  # an instruction-tuned hub writer (paper: an 8B-class model)
        prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          inputs=[args.config])
        extra, staged = stage(m, out, where="ahd.model")
        prov.inputs += staged
    else:
        w = m["warmstart"]
        if w.get("threads") and not args.threads:
            torch.set_num_threads(w["threads"])
        prov = Provenance("build-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          seeds={"warmstart": w["seed"]}, inputs=[args.config])
        transcripts = demonstrations(list(a["tasks"]), w["examples_per_task"], a["eoh"]["parents_e"], w["seed"])
        log.info("%d demonstrations; e.g.\n%s\n-> %s", len(transcripts), transcripts[0][0]["content"],
                 transcripts[0][1]["content"])
        model, stats = build_tiny(m, transcripts, sft_settings(w, "tool-sft-order"), out, what="tiny heuristic writer")
        extra = {"name": m["name"], "parameters": sum(p.numel() for p in model.parameters()), "warmstart": stats}
    hashes = hash_weights(out)
    prov.write(out / "provenance.json", outputs=[out], extra={"model": extra, "weights_sha256": hashes})


BUILDERS = {"base": base_model, "tools": tool_model, "web": web_model, "ahd": ahd_model}


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if args.target != "base" and (args.probe or args.name):
        raise ValueError(f"--probe and --name build the base model, not --for {args.target}")
    if args.data and args.target not in ("tools", "web"):
        raise ValueError(f"--data is for --for tools or web, not --for {args.target}")
    out = Path(args.out)
    restored = None if args.probe else restore_model(cfg, out)
    if restored is not None:  # the grid's own base, whatever CPU this sitting runs on
        git, device = restored.get("git") or {}, restored.get("device") or {}
        log.info("restored %s from its published build (commit %s, %s, %s): not built again", out,
                 str(git.get("commit"))[:10], device.get("cpu_model") or device.get("cpu"), restored.get("end"))
    else:
        BUILDERS[args.target](args, cfg, out)
    log.info("model ready at %s", out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt build-model", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True, help="model directory to create (results/models/NAME)")
    p.add_argument("--for", dest="target", default="base", choices=tuple(BUILDERS),
                   help="which model: base (`model`, default), tools (tool_agents.model), web (web.model), ahd (ahd.model)")
    p.add_argument("--data", action="append", default=[], metavar="BENCHMARK=DIR",
                   help="with --for tools or web: a benchmark's training set (from esopt prepare-data), once per benchmark")
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
