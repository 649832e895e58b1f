"""Datasets from the Hugging Face Hub, with a clear error when the machine is offline.

Shared by the loaders of esopt.envs.math (DAPO-Math, AIME) and esopt.envs.docvqa
(DocVQA). `load_hub_rows` calls datasets.load_dataset, but first checks whether the
hub can be reached at all (`hub_reachable`) and, when it cannot or HF_HUB_OFFLINE
(HF_DATASETS_OFFLINE, TRANSFORMERS_OFFLINE) is set, loads in offline mode
(`offline_mode`), so a dataset in the local cache still loads and one that is not
fails at once instead of after half a minute of retries. That failure is a
`HubUnavailableError` (a ConnectionError) whose message names the dataset, says the
machine appears to be offline and how to download the data and pass a local file
instead.

Also shared by both: the names of the train/test splits (`SPLITS`, `canonical_split`)
and how a loader's `path` argument is read (`HUB_ID`, `is_local`: a local file or
folder, or a hub id "owner/name").
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

__all__ = ["HUB_ID", "SPLITS", "HubUnavailableError", "canonical_split", "env_offline", "hub_reachable", "is_local",
           "load_hub_rows", "looks_offline", "offline_mode"]

SPLITS = {"train": "train", "test": "test", "eval": "test"}  # "eval" is the sudoku name of the test split
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # a hub dataset id, "owner/name"


def canonical_split(split: str) -> str:
    """'train' or 'test' ('eval' = 'test') of our own generated or hash-split sets."""
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'test' ('eval' = 'test'), got {split!r}")
    return SPLITS[split]


def is_local(text: str, suffixes: tuple[str, ...]) -> bool:
    """Whether a loader's `path` names a local file or folder rather than a hub id: it
    exists, ends in one of `suffixes`, starts with ".", "/" or "~", or is no "owner/name"."""
    p = Path(text).expanduser()
    return p.exists() or p.suffix in suffixes or text.startswith((".", "/", "~")) or not HUB_ID.fullmatch(text)


class HubUnavailableError(ConnectionError):
    """A dataset could not be fetched from the Hugging Face Hub (offline, not cached)."""


def env_offline() -> bool:
    """HF_HUB_OFFLINE, HF_DATASETS_OFFLINE or TRANSFORMERS_OFFLINE is set to a true value."""
    return any(os.environ.get(k, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connection to the hub endpoint opens; assumed when a proxy is configured."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def offline_mode(on: bool) -> Iterator[None]:
    """datasets and huggingface_hub read HF_HUB_OFFLINE once, at import; a later
    setting (or an unreachable hub) must reach them too, or load_dataset retries
    the network for half a minute. Cache-only loading still works in this mode."""
    if not on:
        yield
        return
    import datasets.config
    import huggingface_hub.constants

    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def looks_offline(e: BaseException | None) -> bool:
    """`e`, or an exception it was raised from, is a connection/offline/not-cached error."""
    seen = 0
    while e is not None and seen < 10:
        name = type(e).__name__
        if isinstance(e, (ConnectionError, socket.gaierror, TimeoutError)) or "Offline" in name \
                or "Connect" in name or "LocalEntryNotFound" in name:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def load_hub_rows(hub_id: str, split: str, config: str | None = None, *, what: str = "dataset",
                  local_help: str = "the downloaded .parquet/.jsonl/.json file or folder",
                  any_error: bool = False) -> Any:
    """`datasets.load_dataset(hub_id, config, split=split)`, offline when the hub is out of reach.

    Raises HubUnavailableError (naming `what` and `hub_id`, saying the machine
    appears to be offline, how to download the dataset and `local_help`: what to
    pass instead) when loading fails while offline or with a connection error;
    other errors propagate unchanged, unless `any_error`, which wraps every
    failure (the message then says the hub did not give the dataset). ImportError,
    with `local_help`, when `datasets` is not installed."""
    try:
        import datasets
    except ImportError as e:
        raise ImportError(f"loading {hub_id!r} from the hub needs the `datasets` package (pip install 'esopt[data]'), "
                          f"or pass a local file instead: {local_help}") from e
    offline = env_offline() or not hub_reachable()
    try:
        with offline_mode(offline):
            return datasets.load_dataset(hub_id, config, split=split)
    except Exception as e:  # ConnectionError, DatasetNotFoundError, OSError, ... whatever datasets raises
        seems_offline = offline or looks_offline(e)
        if not (seems_offline or any_error):
            raise
        why = ("HF_HUB_OFFLINE is set" if env_offline() else
               "the Hugging Face Hub cannot be reached" if seems_offline else "see the error above")
        state = "this machine appears to be offline" if seems_offline else "the hub did not give it"
        spec = f"split {split!r}" if config is None else f"config {config!r}, split {split!r}"
        raise HubUnavailableError(
            f"cannot load {what} {hub_id!r} ({spec}): {state} ({why}; {type(e).__name__}: {str(e)[:200]}) "
            f"and it is not in the local Hugging Face cache. Download it where there is internet "
            f"(`huggingface-cli download --repo-type dataset {hub_id} --local-dir DIR`) "
            f"and pass a local file instead: {local_help}.") from e
