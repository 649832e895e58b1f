"""esopt audit: check that a result is what its provenance.json says it is.

PATH is a provenance file (DIR/provenance.json, FILE.provenance.json), a result file
or directory whose provenance lies beside or above it and lists it as an output
(DIR/metrics.jsonl, DIR/model, results/eval/.../h3.json, results/tables/x.csv, and a
report's figure, whose record lies beside its table), or a directory such as
results/, whose every provenance file is audited.

Per record: the config hash against the recorded config; the config file as it is now
against the recorded config in the sections the result depends on (what its pipeline
rule passes as params: a grown grid or an unrelated section is a note, as it reruns
nothing); every input and output re-hashed, and an upstream record among the inputs
checked against the files it produced; what can be recomputed is recomputed, not
trusted: an ES history's normalized rewards and updates from its raw rewards, member 0's
rewards from the kept trajectories, metrics and budgets from the history, an
evaluation's summary from its trajectories, Sudoku episodes through the environment;
for ES runs the history replayed onto the base model to the saved weight hash (bit for
bit, models up to --max-replay-params; larger ones are skipped with a message); for ES
and RL runs the base and saved models' weight hashes; the tree the record was made from
against this checkout, file by file. Auditing a directory also lists the files under it
that no record lists as an output. Differing code and uncovered files are warnings
(--strict: failures). Exit 0 only when no check fails, 1 when one fails (the first one
is named), 2 on a usage error. docs/audit.md has the details.
"""

from __future__ import annotations

import argparse
import logging

from esopt.cli.common import run_main, setup
from esopt.io import write_json_atomic

log = logging.getLogger("esopt.audit")


def main_fn(args: argparse.Namespace) -> int:
    setup()
    from tqdm.auto import tqdm

    from esopt.provenance.audit import audit
    from esopt.provenance.find import display_path
    from esopt.provenance.record_checks import Check

    replay = "never" if args.no_replay else args.replay
    show = (lambda c: c.status in ("fail", "warn", "skip")) if args.quiet else (lambda c: True)

    header: dict[str, str | None] = {"pending": None}

    def on_record(prov) -> None:
        header["pending"] = display_path(prov)  # printed before its first shown check

    def on_check(c: Check) -> None:
        if show(c):
            if header["pending"]:
                tqdm.write(header["pending"])
                header["pending"] = None
            tqdm.write(c.line())

    report = audit(args.path, root=args.root, replay=replay, max_replay_params=args.max_replay_params,
                   upstream=args.upstream, progress=True, on_check=on_check, on_record=on_record)
    if args.json:
        write_json_atomic(args.json, report.to_dict())
    n = report.counts()
    skipped = [c for c in report.checks if c.status == "skip"]
    warned = report.warnings
    summary = (f"{len(report.checks) - n['note']} checks in {len(report.records)} record(s): {n['ok']} passed, "
               f"{n['fail']} failed, {n['skip']} skipped" + (f", {n['warn']} warning(s)" if n["warn"] else ""))
    first = report.first_failure
    if first is None and args.strict and (warned or skipped):
        first = next(c for c in report.checks if c.status in ("warn", "skip"))
        what = "a warning" if first.status == "warn" else "skipped"
        first = Check(first.name, first.target, "fail", f"{what}, failed under --strict: {first.detail}", first.record)
    if first is not None:
        print(f"audit: {summary}")
        print(f"audit: FAILED: {first.name} {first.target}: {first.detail}" + (f" [{first.record}]" if first.record != first.target else ""))
        return 1
    cut = lambda t: t if len(t) <= 120 else t[:119] + "…"
    aside = [cut(f"{w}: {c.name} {c.target}: {c.detail}") for w, c in (("first warning", next(iter(warned), None)),
                                                                       ("skipped", next(iter(skipped), None))) if c]
    print(f"audit: OK: {summary}" + (f" ({'; '.join(aside)})" if aside else ""))
    return 0


def parser() -> argparse.ArgumentParser:
    from esopt.provenance.record_checks import DEFAULT_MAX_REPLAY_PARAMS, REPLAY_MODES

    p = argparse.ArgumentParser(prog="esopt audit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="provenance file, result file or directory, or a results tree")
    p.add_argument("--root", default=None,
                   help="directory the recorded relative paths are relative to (default: inferred from where each "
                        "provenance file lies, else the current directory)")
    p.add_argument("--replay", choices=REPLAY_MODES, default="auto",
                   help="auto (default): replay ES and check weight hashes for models up to --max-replay-params; "
                        "always: whatever the size; never: no replay (weight hashes still checked)")
    p.add_argument("--no-replay", action="store_true", help="skip the ES replay (same as --replay never)")
    p.add_argument("--max-replay-params", type=int, default=DEFAULT_MAX_REPLAY_PARAMS,
                   help=f"largest model (parameters) whose weights are loaded and replayed (default {DEFAULT_MAX_REPLAY_PARAMS:.0e})")
    p.add_argument("--upstream", action="store_true",
                   help="also audit the records that made this record's inputs (the training run behind an evaluated model, ...)")
    p.add_argument("--strict", action="store_true",
                   help="a warning (code that differs from the record's tree, files no record covers, ...) or a "
                        "skipped check fails the audit")
    p.add_argument("-q", "--quiet", action="store_true", help="print only failed, warned and skipped checks and the verdict")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the full report as JSON")
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
