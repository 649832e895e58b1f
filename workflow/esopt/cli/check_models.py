"""esopt check-models: does a base land in its config block's `expect` intervals?

--name picks any model of the config: `model` (default), one of
population_study.models, tool_agents.model or ahd.model. The summaries are what the
pipeline measured of that base (esopt.runs.checks says which, per kind: held-out
success by H*, Mean@k by evaluation set, the writer's valid rate by task). Each key of
`expect` (the interval for any machine, docs/tiny_recipe.md) is compared with them; FILE.json
gets one row per key (value, expected, within) and `all_within`. Outside an interval
it warns loudly, here and at the end of the Snakemake run; it does not fail the run,
since the results are still real, only not comparable with the documented ones.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from esopt.cli.common import add_provenance_args, parse_wildcards, run_main, setup
from esopt.io import write_json_atomic
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.check_models")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config)
    from esopt.config import named_model
    from esopt.runs.checks import check_model, warn_outside

    kind, m = named_model(cfg, args.name)
    check = check_model(kind, m, [json.loads(Path(f).read_text()) for f in args.summaries])
    ok = warn_outside(check["rows"], f"{args.config}, {m['name']}'s expect")
    if not m.get("expect"):
        log.info("model %s has no expect block: nothing to check", m["name"])
    elif ok:
        log.info("model %s: every base result within its expected interval (%d checked)", m["name"], len(check["rows"]))
    out = Path(args.out)
    prov = Provenance("check-models", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      inputs=[args.config, *args.summaries])
    write_json_atomic(out, check)
    prov.write(out.with_suffix(".provenance.json"), outputs=[out])
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt check-models", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--name", default=None,
                   help="which model of the config: `model` (default), population_study.models, tool_agents.model or ahd.model")
    p.add_argument("--out", required=True, help="check FILE.json (results/checks/MODEL.json)")
    p.add_argument("summaries", nargs="+",
                   help="the pipeline's measurements of the base: results/eval/MODEL/base/h*.json (Sudoku), "
                        "results/eval/MODEL/tools/no_skill/*.json (tool model), "
                        "results/ahd/MODEL/*/sample_b*_base/r*/result.json (heuristic writer)")
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
