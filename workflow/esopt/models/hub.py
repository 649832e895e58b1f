"""Hub models: a pinned snapshot, or a pre-staged local directory, with weight hashes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from esopt.io import sha256_file

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


class OfflineError(FileNotFoundError):
    """The model is neither pre-staged nor downloadable from here."""


def prestage_hint(repo_id: str, revision: str) -> str:
    return (
        f"To pre-stage it, on a machine with network run\n"
        f"    hf download {repo_id} --revision {revision} --local-dir /path/to/{repo_id.split('/')[-1]}\n"
        f"copy that directory to the cluster and set `model.local_path: /path/to/{repo_id.split('/')[-1]}` "
        f"(or model.source: local) in the config."
    )


def cached_snapshot(repo_id: str, revision: str) -> Path | None:
    """The snapshot of `repo_id` at `revision` in the local Hugging Face cache (HF_HOME /
    HF_HUB_CACHE, as `hf download` fills it), or None; never touches the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id=repo_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None


def staged_source(spec: dict) -> Path | None:
    """Where a hub/local model block's weights are staged: its local_path, else the pinned
    revision's snapshot in the local cache (cached_snapshot); None when neither is there."""
    if spec.get("local_path"):
        return Path(spec["local_path"]).expanduser().resolve()
    hub = spec.get("hub") or {}
    if hub.get("repo_id") and hub.get("revision"):
        return cached_snapshot(hub["repo_id"], hub["revision"])
    return None


def download_snapshot(repo_id: str, revision: str, out: str | os.PathLike) -> Path:
    """snapshot_download at a pinned revision into `out`; fails at once without network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        path = snapshot_download(repo_id=repo_id, revision=revision, local_dir=str(out))
    except (LocalEntryNotFoundError, OSError) as e:
        raise OfflineError(f"could not download {repo_id}@{revision}: {e}\n{prestage_hint(repo_id, revision)}") from None
    return Path(path)


def weight_hashes(model_dir: str | os.PathLike) -> dict[str, str]:
    """sha256 of every weight file in a model directory, by relative path."""
    model_dir = Path(model_dir)
    files = sorted(f for f in model_dir.rglob("*") if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        raise FileNotFoundError(f"{model_dir} holds no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    return {str(f.relative_to(model_dir)): sha256_file(f) for f in files}
