"""`esopt <command>`: the same as `python -m esopt.cli.<command_with_underscores>`."""

from __future__ import annotations

import importlib
import sys

COMMANDS = (
    "build-model", "train-es", "train-rl", "evaluate", "check-models", "memory",
    "prepare-data", "build-tool-model", "train-agent", "evaluate-agent",
    "build-ahd-model", "search-heuristics",
    "replay", "audit",
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: esopt <command> [options]\n\ncommands:\n" + "\n".join(f"  {c}" for c in COMMANDS), file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return importlib.import_module("esopt.cli." + argv[0].replace("-", "_")).main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
