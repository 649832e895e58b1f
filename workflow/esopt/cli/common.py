"""What every command does first: logging, threads, config, clear errors."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Callable

import torch

from esopt.config import ConfigError, load_config

log = logging.getLogger("esopt")


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the config's `threads`)")


def add_provenance_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rule", default=None, help="Snakemake rule name, recorded in provenance.json")
    p.add_argument("--wildcards", default="{}", help="JSON of the rule's wildcards, recorded in provenance.json")


def setup(config_path: str | None = None, threads: int | None = None, verbose: bool = False) -> dict[str, Any] | None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    # transformers/hub must not reach for the network for a local model directory
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    cfg = load_config(config_path) if config_path else None
    n = threads or (cfg or {}).get("threads")
    if n:
        torch.set_num_threads(int(n))
    return cfg


def run_main(fn: Callable[[argparse.Namespace], int | None], parser: argparse.ArgumentParser, argv=None) -> int:
    """Parse, run, and turn user mistakes into one clear line and exit code 2."""
    args = parser.parse_args(argv)
    try:
        return int(fn(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        log.debug("details", exc_info=True)
        print(f"esopt: error: {e}", file=sys.stderr)
        return 2
    finally:
        log_imports(parser.prog)


IMPORT_LOG = "ESOPT_IMPORT_LOG"


def log_imports(prog: str) -> None:
    """With $ESOPT_IMPORT_LOG set, append the esopt modules this command loaded: the test
    that every job's code input (esopt.provenance.jobs) holds what its command really runs."""
    path = os.environ.get(IMPORT_LOG)
    if path:
        mods = sorted(m for m in sys.modules if m == "esopt" or m.startswith("esopt."))
        with open(path, "a") as f:  # one short line per process: appends of ranks do not interleave
            f.write(json.dumps({"command": prog.removeprefix("esopt "), "modules": mods}) + "\n")


def parse_wildcards(text: str) -> dict[str, Any]:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"raw": text}
