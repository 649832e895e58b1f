"""What every command does first: logging, threads, config, checked arguments, clear errors."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from esopt.config import ConfigError, check_run_args, load_config

log = logging.getLogger("esopt")

# Arguments several commands share, by name (argparse dest): each means the same in every
# command and is checked here, once, before the command starts (run_main).
MIN_INTS = {"threads": 1, "horizon": 1, "population": 2, "budget": 1, "seed": 0}  # counts, and their least value
JSON_OBJECTS = ("meta", "wildcards")  # parsed into dicts
OUTPUT_PATHS = ("out", "json")  # files or directories the command writes
RUN_ARGS = ("horizon", "population", "variant")  # checked against the config (esopt.config.check_run_args)

# Config files run_main has loaded and checked, by path: setup takes its config from here,
# so a command reads and validates its file once.
_LOADED: dict[str, dict[str, Any]] = {}


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="torch threads, >= 1 (default: the config's `threads`)")


def add_provenance_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rule", default=None, help="Snakemake rule name, recorded in provenance.json")
    p.add_argument("--wildcards", default="{}", help="JSON object of the rule's wildcards, recorded in provenance.json")


def setup(config_path: str | None = None, threads: int | None = None, verbose: bool = False) -> dict[str, Any] | None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    # transformers/hub must not reach for the network for a local model directory
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    cfg = (_LOADED.pop(str(config_path), None) or load_config(config_path)) if config_path else None
    n = threads or (cfg or {}).get("threads")
    if n:
        torch.set_num_threads(int(n))
    return cfg


def json_object(text: str | dict[str, Any], flag: str = "--meta") -> dict[str, Any]:
    """`text` parsed as a JSON object (a dict is returned as is); ValueError otherwise."""
    if isinstance(text, dict):
        return text
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{flag}: {text!r} is not valid JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{flag}: {text!r} must be a JSON object {{...}}, got a {type(obj).__name__}")  # noqa: TRY004 (a user error: one clear line)
    return obj


def parse_wildcards(text: str | dict[str, Any]) -> dict[str, Any]:
    """--wildcards (or --meta): a JSON object; run_main has already parsed and checked it."""
    return json_object(text, "--wildcards")


def check_output_path(path: str | os.PathLike, flag: str = "--out") -> None:
    """Can `path` (a file or a directory) be created or replaced? Checked before a command
    starts, so a bad path fails at once rather than after the work. Creates nothing."""
    path = Path(path)
    if path.exists():
        target = path if path.is_dir() else path.parent  # a directory is written into; a file replaced
        if not os.access(target, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {path}: {target} is not writable")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:  # the nearest existing ancestor
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: cannot create it, {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: cannot create it, {parent} is not writable")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The shared arguments (MIN_INTS, JSON_OBJECTS, --device) of any command, as argparse errors (usage, exit 2)."""
    given = vars(args)
    for name, v in given.items():
        flag = "--" + name.replace("_", "-")
        if name in MIN_INTS and v is not None and v < MIN_INTS[name]:
            parser.error(f"argument {flag}: must be an integer >= {MIN_INTS[name]}, got {v}")
        if name in JSON_OBJECTS and v is not None:
            try:
                setattr(args, name, json_object(v, flag))
            except ValueError as e:
                parser.error(f"argument {e}")
    device = given.get("device")
    if device:
        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError):
            parser.error(f"argument --device: {device!r} is not a device (cpu, cuda, cuda:N)")
        if dev.type == "cuda" and not torch.cuda.is_available():
            parser.error(f"argument --device: {device!r}, but no GPU is visible here")


def run_main(fn: Callable[[argparse.Namespace], int | None], parser: argparse.ArgumentParser, argv=None) -> int:
    """Parse and check the arguments, the output paths and the config, then run: user mistakes
    (a bad argument, config, input file or output path) end in one clear line and exit code 2,
    before any work."""
    args = parser.parse_args(argv)
    check_args(parser, args)
    try:
        for name in OUTPUT_PATHS:
            if getattr(args, name, None):
                check_output_path(getattr(args, name), "--" + name)
        if getattr(args, "config", None):  # the config, and the run's arguments against it
            _LOADED[str(args.config)] = config = load_config(args.config)
            check_run_args(config, **{k: getattr(args, k, None) for k in RUN_ARGS})
        return int(fn(args) or 0)
    except (ConfigError, OSError, ValueError) as e:  # OSError: FileNotFoundError, a full disk, ...
        log.debug("details", exc_info=True)
        print(f"esopt: error: {e}", file=sys.stderr)
        return 2
    finally:
        _LOADED.clear()  # a later command (in the same process) reads its file afresh
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
