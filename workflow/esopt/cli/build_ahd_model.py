"""esopt build-ahd-model: the tiny heuristic writer of the AHD experiments (ahd.model).

At tiny scale the writer answers the searches' expression-mode prompts
(esopt.ahd.prompts) with one expression over the task's features. It is
warm-started on random demonstrations of every task and operator: i1/e1 a new random
expression, e2 a combination of its parents, m1 a structural change, m2 new constants
(esopt.ahd.writer). The demonstrations carry no notion of a good heuristic:
finding good ones is the search's (and ES's) job. With `source: hub` (config/paper.yaml:
an instruction-tuned 8B-class writer, `response: function`) it fetches that model
instead: a pre-staged `local_path`, or a snapshot at the pinned revision.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.io import atomic_path, write_json_atomic
from esopt.provenance.record import Provenance
from esopt.seeding import derive_seed

log = logging.getLogger("esopt.build_ahd_model")

OPERATORS = ("i1", "e1", "e2", "m1", "m2")


def demonstrations(task_names, per_task: int, parents_e: int, seed: int) -> list[list[dict[str, str]]]:
    """Chat transcripts (user prompt, assistant expression) for every task and operator."""
    from esopt.ahd import make_task
    from esopt.ahd.prompts import Candidate, TaskPrompt
    from esopt.ahd.writer import child, random_expression, to_text

    out = []
    for name in task_names:
        task = make_task(name)
        tp = TaskPrompt.from_task(task, "expression")
        feats = list(task.features)
        rng = random.Random(derive_seed("ahd-demos", name, seed))
        for j in range(per_task):
            op = OPERATORS[j % len(OPERATORS)]
            n = {"i1": 0, "m1": 1, "m2": 1}.get(op, parents_e)
            parents = [random_expression(feats, rng) for _ in range(n)]
            shown = [Candidate(id=i, operator="i1", thought=to_text(p), code=task.expression_code(to_text(p)))
                     for i, p in enumerate(parents)]
            reply = to_text(child(op, parents, feats, rng))
            out.append([{"role": "user", "content": tp.build(op, shown)}, {"role": "assistant", "content": reply}])
    random.Random(derive_seed("ahd-demo-order", seed)).shuffle(out)
    return out


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.models.hub import weight_hashes
    from esopt.models.load import load_model_and_tokenizer
    from esopt.models.tiny import build_tiny_model
    from esopt.models.tokenizer import train_tokenizer
    from esopt.models.tool_warmstart import SFTSettings, supervised_fine_tune

    a = cfg.get("ahd") or {}
    m = a.get("model")
    if not m:
        raise ValueError("build-ahd-model builds ahd.model; this config has none (the writer is the main model)")
    out = Path(args.out)
    if m["source"] != "tiny":
        return fetch_writer(cfg, m, out, args)
    w = m["warmstart"]
    if w.get("threads") and not args.threads:
        torch.set_num_threads(w["threads"])
    prov = Provenance("build-ahd-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"warmstart": w["seed"]}, inputs=[args.config])
    transcripts = demonstrations(list(a["tasks"]), w["examples_per_task"], a["eoh"]["parents_e"], w["seed"])
    log.info("%d demonstrations; e.g.\n%s\n-> %s", len(transcripts), transcripts[0][0]["content"],
             transcripts[0][1]["content"])
    corpus = ["".join(f"{x['role']}\n{x['content']}\n" for x in t) for t in transcripts]
    tok = train_tokenizer(corpus, m["tiny"]["vocab_size"])
    model = build_tiny_model(m["tiny"], tok, seed=m["tiny"].get("seed", 0)).float()
    params = sum(p.numel() for p in model.parameters())
    log.info("tiny heuristic writer: %d parameters", params)
    stats = supervised_fine_tune(model, tok, transcripts, SFTSettings(w["steps"], w["batch_size"], w["lr"], w["seed"]))
    model = model.to(getattr(torch, m["dtype"]))
    if out.exists():
        shutil.rmtree(out)
    with atomic_path(out) as tmp:
        tmp.unlink()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        load_model_and_tokenizer(tmp)  # what every rule will do; fail here, not later
    hashes = weight_hashes(out)
    write_json_atomic(out / "weights.sha256.json", hashes)
    prov.write(out / "provenance.json", outputs=[out],
               extra={"model": {"name": m["name"], "parameters": params, "warmstart": stats}, "weights_sha256": hashes})
    log.info("heuristic writer ready at %s", out)
    return 0


def fetch_writer(cfg: dict, m: dict, out: Path, args: argparse.Namespace) -> int:
    """An instruction-tuned hub writer (paper: an 8B-class model): a pre-staged directory
    (local_path, linked as is) or a snapshot at the pinned revision."""
    from esopt.models.hub import download_snapshot, weight_hashes

    prov = Provenance("build-ahd-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      inputs=[args.config])
    if out.exists():
        shutil.rmtree(out)
    local = m.get("local_path")
    if local:
        src = Path(local).expanduser().resolve()
        if not (src / "config.json").exists():
            raise FileNotFoundError(f"ahd.model.local_path {src} holds no config.json (expected a from_pretrained directory)")
        out.mkdir(parents=True)
        for f in src.iterdir():
            if f.name not in ("provenance.json", "weights.sha256.json"):
                (out / f.name).symlink_to(f)
        extra = {"name": m["name"], "source": str(src)}
        prov.inputs.append(str(src))
    else:
        hub = m.get("hub") or {}
        if not hub.get("repo_id") or not hub.get("revision"):
            raise ValueError("ahd.model with source: hub needs hub.repo_id and hub.revision (or a local_path)")
        download_snapshot(hub["repo_id"], hub["revision"], out)
        extra = {"name": m["name"], "repo_id": hub["repo_id"], "revision": hub["revision"]}
    hashes = weight_hashes(out)
    write_json_atomic(out / "weights.sha256.json", hashes)
    prov.write(out / "provenance.json", outputs=[out], extra={"model": extra, "weights_sha256": hashes})
    log.info("heuristic writer ready at %s", out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt build-ahd-model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True, help="model directory to create (results/models/NAME)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
