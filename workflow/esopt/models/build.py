"""The one model builder: a tiny model warm-started on demonstrations, or a staged hub model.

tiny:   a tokenizer trained on the demonstrations, a Qwen3.5-architecture model from the
        spec's `tiny` block, supervised warm start (esopt.models.sft), cast to the spec's
        dtype, saved atomically and loaded back as every rule will load it.
hub:    a snapshot at the pinned revision (esopt.models.hub).
local:  a pre-staged directory (`local_path`), linked file by file.
Every model directory then gets weights.sha256.json (`hash_weights`) beside its
provenance record, which the command writes last.
"""

from __future__ import annotations

import copy
import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from esopt.io import write_json_atomic
from esopt.models.hub import download_snapshot, staged_source, weight_hashes
from esopt.models.load import check_model_dir, save_model
from esopt.models.sft import SFTSettings, Transcript, supervised_fine_tune
from esopt.models.tiny import build_tiny_model
from esopt.models.tokenizer import train_tokenizer

log = logging.getLogger(__name__)

STAGED_ASIDE = ("provenance.json", "weights.sha256.json")  # a staged directory's own records are not linked


def sft_settings(warmstart: dict[str, Any], order_key: str = "sft-order") -> SFTSettings:
    """A model's warmstart block: steps, batch_size, lr, seed, and select.every (and its
    target) if it selects."""
    select = warmstart.get("select") or {}
    return SFTSettings(warmstart["steps"], warmstart["batch_size"], warmstart["lr"], warmstart["seed"], order_key,
                       select.get("every"), select.get("target"))


def build_tiny(spec: dict[str, Any], transcripts: Sequence[Transcript], sft: SFTSettings, out: str | Path,
               what: str = "tiny model", score: Callable[[torch.nn.Module, Any], float] | None = None,
               ) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The tiny model of `spec` (model.tiny, dtype) warm-started on `transcripts`, saved at
    `out`; returns the model and the warm start's stats (examples, final_loss, and with
    `score(model, tokenizer)` and sft.select_every, the checkpoint selection). Checkpoints
    are scored as they will be used: cast to the spec's dtype."""
    out = Path(out)
    # The tokenizer learns from the transcripts as the chat template lays them out
    # (special tokens aside), so role names and the system prompt become few tokens.
    corpus = ["".join(f"{x['role']}\n{x['content']}\n" for x in t) for t in transcripts]
    tok = train_tokenizer(corpus, spec["tiny"]["vocab_size"], spec["tiny"].get("cell_tokens", False))
    model = build_tiny_model(spec["tiny"], tok, seed=spec["tiny"].get("seed", 0)).float()
    log.info("%s: %d parameters, layers %s", what, sum(p.numel() for p in model.parameters()), spec["tiny"]["layer_types"])
    dtype = getattr(torch, spec["dtype"])
    scorer = (lambda m: score(copy.deepcopy(m).to(dtype), tok)) if score is not None else None
    checkpoint = warmstart_checkpoint(out)
    stats = supervised_fine_tune(model, tok, transcripts, sft, desc=f"{what} warm start", scorer=scorer,
                                 checkpoint=checkpoint, run_info={"tiny": spec["tiny"], "dtype": spec["dtype"]})
    model = model.to(dtype)
    save_model(model, tok, out)
    checkpoint.unlink(missing_ok=True)
    return model, stats


def warmstart_checkpoint(out: str | Path) -> Path:
    """Where the warm start of the model at `out` keeps its state while in progress: beside
    the directory, which the workflow deletes before a rerun."""
    out = Path(out)
    return out.parent / f".{out.name}.warmstart.pt"


def stage(spec: dict[str, Any], out: str | Path, where: str = "model") -> tuple[dict[str, Any], list[str]]:
    """A hub model at `out`: its local_path, or the pinned revision's snapshot in the local
    Hugging Face cache (`hf download` on a node with network), linked file by file; else a
    download of that snapshot. Returns what the record says of its source, and the
    directories it read (inputs of the record)."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    local, hub = spec.get("local_path"), spec.get("hub") or {}
    if not local and (not hub.get("repo_id") or not hub.get("revision")):
        raise ValueError(f"{where} with source: hub needs hub.repo_id and hub.revision (or a local_path)")
    src = staged_source(spec)
    pinned = {} if local else {"repo_id": hub["repo_id"], "revision": hub["revision"]}
    if src is not None:  # pre-staged weights stay where they are
        check_model_dir(src)  # a bad local_path fails here, not in the first job that loads it
        out.mkdir(parents=True)
        for f in src.iterdir():
            if f.name not in STAGED_ASIDE:
                (out / f.name).symlink_to(f)
        return {"name": spec["name"], "source": str(src), **pinned}, [str(src)]
    download_snapshot(hub["repo_id"], hub["revision"], out)
    return {"name": spec["name"], **pinned}, []


def hash_weights(out: str | Path) -> dict[str, str]:
    """weights.sha256.json beside the weights: sha256 of every weight file."""
    hashes = weight_hashes(out)
    write_json_atomic(Path(out) / "weights.sha256.json", hashes)
    return hashes
