"""Loading any model directory (tiny, hub snapshot, local) through from_pretrained, and saving one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from esopt.io import atomic_path


def default_device() -> str:
    """cuda:LOCAL_RANK when a GPU is visible (one GPU per torchrun rank), else cpu."""
    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return "cpu"


def load_model_and_tokenizer(path: str | os.PathLike, dtype: str | None = None, device: str | None = None):
    """from_pretrained model (eval mode) and tokenizer (left padding); device None: default_device()."""
    device = device or default_device()
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} is not a model directory (no config.json); run `esopt build-model` first")
    kwargs = {"dtype": getattr(torch, dtype)} if dtype else {"dtype": "auto"}
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
    model.eval()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"  # generation batches are left-padded
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def save_model(model, tokenizer, out: str | Path, check_load: bool = True) -> None:
    """save_pretrained of the model and its tokenizer, atomically (replacing `out`); with
    check_load, loaded back as every rule will load it, so a broken model fails here."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    with atomic_path(out) as tmp:
        tmp.unlink()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if check_load:
            load_model_and_tokenizer(tmp)
