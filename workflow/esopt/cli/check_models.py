"""esopt check-models: do the base's held-out results land in the config's `expect` intervals?

Reads `esopt evaluate` summaries of a base model (results/eval/MODEL/base/h*.json),
compares each with model.expect[H*] (the interval README states for any machine) and
writes FILE.json: one row per horizon (value, expected, within) and `all_within`.
Outside an interval it warns loudly, here and at the end of the Snakemake run; it does
not fail the run, since the results are still real, only not README's.
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
    from esopt.config import model_spec
    from esopt.eval.checks import check_rows, warn_outside

    m = model_spec(cfg, args.name)
    expect = m.get("expect") or {}
    summaries = [json.loads(Path(f).read_text()) for f in args.summaries]
    rows = check_rows(summaries, expect, m["name"])
    missing = sorted(set(map(str, expect)) - {str(r["horizon"]) for r in rows}, key=int)
    if missing:
        raise ValueError(f"model {m['name']}: expect has H* {missing} but no summary of them was given")
    ok = warn_outside(rows, f"{args.config}, model.expect")
    if not expect:
        log.info("model %s has no expect block: nothing to check", m["name"])
    elif ok:
        log.info("model %s: every base result within its expected interval (%d checked)", m["name"], len(rows))
    out = Path(args.out)
    prov = Provenance("check-models", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      inputs=[args.config, *args.summaries])
    write_json_atomic(out, {"model": m["name"], "all_within": ok, "rows": rows})
    prov.write(out.with_suffix(".provenance.json"), outputs=[out])
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt check-models", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--name", default=None, help="which model of the config: `model` (default) or one of population_study.models")
    p.add_argument("--out", required=True, help="check FILE.json (results/checks/MODEL.json)")
    p.add_argument("summaries", nargs="+", help="esopt evaluate summaries of the base (results/eval/MODEL/base/h*.json)")
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
