"""How esopt's two action syntaxes read the WebArena-Lite authors' recorded replies.

The authors' evaluation records (webarena-train-time/results/eval/*/run_0*.json of
zz1358m/Agentic-ESOpt) keep each task's final reply in `predicted_answer`. This reads every
such reply under PATH with `parse_action(text, syntax=...)` for both syntaxes and prints,
per syntax, how many replies yield an action (and of which kinds), and how many replies the
two read differently (one parses and the other not, or both parse to different actions).
`syntax="vab"` reads as VisualAgentBench's harness does, so its count is the harness's.

    python benchmarks/web_replies.py /tmp/h1_eval [--show 5] [--out FILE.json]

A PATH that does not exist prints a note and exits 0 (the records are not part of this repo).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from esopt.envs.web.actions import SYNTAXES, Action, parse_action


def recorded_replies(root: Path) -> list[tuple[str, str]]:
    """(file:task id, reply) for every `predicted_answer` in the JSON records under `root`."""
    out = []
    for path in sorted(root.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            print(f"skipping {path}: {e}", file=sys.stderr)
            continue
        results = data.get("results", []) if isinstance(data, dict) else data
        for r in results if isinstance(results, list) else []:
            if isinstance(r, dict) and isinstance(r.get("predicted_answer"), str):
                out.append((f"{path.relative_to(root)}:{r.get('task_id')}", r["predicted_answer"]))
    return out


def compare(replies: list[tuple[str, str]]) -> dict:
    """Per syntax: parsed count and kinds; and the replies the syntaxes read differently."""
    parsed = {s: [parse_action(text, syntax=s) for _, text in replies] for s in SYNTAXES}
    summary = {"replies": len(replies), "empty": sum(not t.strip() for _, t in replies)}
    for s in SYNTAXES:
        ok = [a for a in parsed[s] if isinstance(a, Action)]
        summary[s] = {"parsed": len(ok), "kinds": dict(Counter(a.kind for a in ok).most_common())}
    a, b = parsed["tolerant"], parsed["vab"]
    only = {"tolerant_only": [], "vab_only": [], "both_differ": []}
    for (where, text), x, y in zip(replies, a, b):
        if isinstance(x, Action) and not isinstance(y, Action):
            only["tolerant_only"].append((where, text, x))
        elif isinstance(y, Action) and not isinstance(x, Action):
            only["vab_only"].append((where, text, y))
        elif isinstance(x, Action) and x != y:
            only["both_differ"].append((where, text, (x, y)))
    summary["differ"] = {k: len(v) for k, v in only.items()}
    summary["differ"]["total"] = sum(summary["differ"].values())
    return {"summary": summary, "examples": only}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path, help="the authors' results/eval folder (or any folder of such JSON)")
    ap.add_argument("--show", type=int, default=3, help="examples printed per kind of difference")
    ap.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = ap.parse_args(argv)
    if not args.path.exists():
        print(f"{args.path}: not found; nothing to measure (extract the authors' results/eval folder there)")
        return 0
    replies = recorded_replies(args.path)
    if not replies:
        print(f"{args.path}: no predicted_answer fields found")
        return 0
    res = compare(replies)
    s = res["summary"]
    print(f"{s['replies']} recorded replies ({s['empty']} empty) under {args.path}")
    for syn in SYNTAXES:
        print(f"  {syn:9s} parses {s[syn]['parsed']:4d}  kinds {s[syn]['kinds']}")
    d = s["differ"]
    print(f"  differ: {d['total']} (tolerant only {d['tolerant_only']}, vab only {d['vab_only']}, "
          f"both but different {d['both_differ']})")
    for k, rows in res["examples"].items():
        for where, text, got in rows[:args.show]:
            one = text if len(text) <= 160 else text[:70] + " ... " + text[-85:]
            print(f"  [{k}] {where}: {one!r}\n      -> {got}")
    if args.out:
        args.out.write_text(json.dumps(s, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
