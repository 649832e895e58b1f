"""esopt replay: rebuild trained weights from the base model and a history.json.

No weights travel: the update of every generation is regenerated from its seeds, and
its coefficients from the generation's raw rewards, normalized with the run's es
settings (the normalized rewards the history also records are checked, not used).
The rebuilt weights' hash is compared with the one the run recorded; a generation whose
recorded σ, α, seeds, normalized rewards or update flag are not what the run's settings
and raw rewards give is named, and fails the command like a wrong hash.
"""

from __future__ import annotations

import argparse
import logging

from esopt.cli.common import run_main, setup

log = logging.getLogger("esopt.replay")


def replay(base: str, history_path: str, out: str | None) -> dict:
    from esopt.es import History
    from esopt.hashing import weights_sha256
    from esopt.models.load import load_model_and_tokenizer, save_model

    history = History.load(history_path)
    problems = history.check()
    model, tok = load_model_and_tokenizer(base)
    base_hash = weights_sha256(model)
    want_base = history.run.get("base_weights_sha256")
    if want_base and want_base != base_hash:
        raise ValueError(f"{base} is not the base model of {history_path} (weights hash {base_hash[:12]}, history expects {want_base[:12]})")
    history.replay(history.perturber(model))  # as the run drew its noise and wrote its updates
    got = weights_sha256(model)
    want = (history.final or {}).get("weights_sha256")
    if out:
        save_model(model, tok, out)  # a temporary directory replaces `out`: nothing half-written on failure
    return {"generations": len(history.generations), "weights_sha256": got, "expected": want,
            "match": want is None or got == want, "problems": problems}


def main_fn(args: argparse.Namespace) -> int:
    setup()
    res = replay(args.base, args.history, args.out)
    print(f"replayed {res['generations']} generations: weights sha256 {res['weights_sha256']}")
    for p in res["problems"]:
        print(f"RECORDED VALUE NOT RECOMPUTED: {p}")
    if res["problems"]:
        return 1
    if res["expected"] is None:
        print("history records no final weight hash (unfinished run): nothing to compare")
        return 0
    if not res["match"]:
        print(f"MISMATCH: the run recorded {res['expected']}")
        return 1
    print("matches the weights the run saved")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="base model directory")
    p.add_argument("--history", required=True, help="history.json of an ES run")
    p.add_argument("--out", default=None, help="directory to save the rebuilt model (optional)")
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
