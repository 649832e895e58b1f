"""`esopt <command>`: the same as `python -m esopt.cli.<command_with_underscores>`."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "build-model": "esopt.cli.build_model",
    "train-es": "esopt.cli.train_es",
    "train-rl": "esopt.cli.train_rl",
    "evaluate": "esopt.cli.evaluate",
    "replay": "esopt.cli.replay",
    "audit": "esopt.cli.audit",
    "report-sudoku": "esopt.cli.report_sudoku",
    "report-methods": "esopt.cli.report_methods",
    "memory": "esopt.cli.memory",
    "report-memory": "esopt.cli.report_memory",
    "prepare-data": "esopt.cli.prepare_data",
    "build-tool-model": "esopt.cli.build_tool_model",
    "train-agent": "esopt.cli.train_agent",
    "evaluate-agent": "esopt.cli.evaluate_agent",
    "build-ahd-model": "esopt.cli.build_ahd_model",
    "search-heuristics": "esopt.cli.search_heuristics",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: esopt <command> [options]\n\ncommands:\n" + "\n".join(f"  {c}" for c in COMMANDS), file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
