"""`esopt <command>`: the same as `python -m esopt.cli.<command_with_underscores>`."""

from __future__ import annotations

import difflib
import importlib
import sys

COMMANDS = (
    "build-model", "train-es", "train-rl", "evaluate", "check-models", "memory",
    "prepare-data", "train-agent", "search-heuristics",
    "replay", "audit", "preflight", "publish",
)
USAGE = "usage: esopt <command> [options]   (esopt <command> --help: its options)\n\ncommands:\n" + \
    "\n".join(f"  {c}" for c in COMMANDS)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"esopt: error: unknown command {argv[0]!r}{hint}\n\n{USAGE}", file=sys.stderr)
        return 2
    return importlib.import_module("esopt.cli." + argv[0].replace("-", "_")).main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
