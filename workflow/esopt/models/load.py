"""Loading any model directory (tiny, hub snapshot, local) through from_pretrained."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def load_model_and_tokenizer(path: str | os.PathLike, dtype: str | None = None, device: str = "cpu"):
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
