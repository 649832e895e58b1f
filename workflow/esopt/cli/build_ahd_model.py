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
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.build_ahd_model")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.ahd.writer import demonstrations
    from esopt.models.build import build_tiny, hash_weights, sft_settings, stage

    a = cfg.get("ahd") or {}
    m = a.get("model")
    if not m:
        raise ValueError("build-ahd-model builds ahd.model; this config has none (the writer is the main model)")
    out = Path(args.out)
    if m["source"] != "tiny":  # an instruction-tuned hub writer (paper: an 8B-class model)
        prov = Provenance("build-ahd-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          inputs=[args.config])
        extra, staged = stage(m, out, where="ahd.model")
        prov.inputs += staged
    else:
        w = m["warmstart"]
        if w.get("threads") and not args.threads:
            torch.set_num_threads(w["threads"])
        prov = Provenance("build-ahd-model", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          seeds={"warmstart": w["seed"]}, inputs=[args.config])
        transcripts = demonstrations(list(a["tasks"]), w["examples_per_task"], a["eoh"]["parents_e"], w["seed"])
        log.info("%d demonstrations; e.g.\n%s\n-> %s", len(transcripts), transcripts[0][0]["content"],
                 transcripts[0][1]["content"])
        model, stats = build_tiny(m, transcripts, sft_settings(w, "tool-sft-order"), out, what="tiny heuristic writer")
        extra = {"name": m["name"], "parameters": sum(p.numel() for p in model.parameters()), "warmstart": stats}
    hashes = hash_weights(out)
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
