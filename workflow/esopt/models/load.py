"""Loading any model directory (tiny, hub snapshot, local) through from_pretrained, and saving one.

Every command loads its models here, so every way a directory can be broken (missing,
a missing or truncated file, a tokenizer that is not there) stops with one ModelDirError
naming the directory and the file, before anything is computed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer

BUILD_HINT = "remake it with the job that writes it (esopt build-model for a base model)"
# What from_pretrained of a fast tokenizer reads; without them AutoTokenizer silently
# builds an empty tokenizer, or falls back to a slow one that needs sentencepiece.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# The weights, one file or shards listed in an index (safetensors first, as save_pretrained writes)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# What from_pretrained raises on files it cannot use (not on a lack of memory: that is no file's fault)
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, SafetensorError, json.JSONDecodeError)


class ModelDirError(ValueError):
    """A model directory that cannot be loaded; the message names the directory and the file."""


def default_device() -> str:
    """cuda:LOCAL_RANK when a GPU is visible (one GPU per torchrun rank), else cpu."""
    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return "cpu"


def _read_json(path: Path, what: str) -> Any:
    """A JSON file of a model directory, or a ModelDirError naming it."""
    if not path.is_file():
        raise ModelDirError(f"model directory {path.parent} has no {path.name} ({what}); {BUILD_HINT}")
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ModelDirError(f"model directory {path.parent}: cannot read {path.name}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelDirError(f"model directory {path.parent}: {path.name} is not valid JSON ({e}); "
                            f"the file is corrupt or truncated; {BUILD_HINT}") from None


def _check_safetensors(path: Path) -> None:
    """The file holds its header and every tensor the header lists (no tensor is read).

    Layout: 8 bytes little-endian header length N, N bytes of JSON {name: {data_offsets:
    [begin, end], ...}}, then the data, whose length is the largest end offset."""
    where = f"model directory {path.parent}: {path.name}"
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 0 or n > size - 8:
                raise ModelDirError(f"{where} is truncated or corrupt ({size} bytes, shorter than its header); "
                                    f"{BUILD_HINT}")
            header = json.loads(f.read(n))
    except OSError as e:
        raise ModelDirError(f"{where}: cannot read it: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ModelDirError(f"{where} is corrupt (its header is not valid JSON); {BUILD_HINT}") from None
    try:
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (AttributeError, KeyError, IndexError, TypeError):
        raise ModelDirError(f"{where} is corrupt (its header lists no tensor offsets); {BUILD_HINT}") from None
    if 8 + n + end != size:
        state = "truncated" if 8 + n + end > size else "corrupt (bytes after its last tensor)"
        raise ModelDirError(f"{where} is {state}: {size} bytes, its header describes {8 + n + end}; "
                            f"{BUILD_HINT}")


def _weight_files(path: Path) -> list[Path]:
    """The weight files of a model directory: the single file, or the shards of its index."""
    for name in WEIGHT_FILES:
        f = path / name
        if not f.exists():
            continue
        if not name.endswith(".index.json"):
            return [f]
        weight_map = (_read_json(f, "the index of the weight shards") or {}).get("weight_map") or {}
        shards = [path / s for s in sorted(set(weight_map.values()))]
        missing = [s.name for s in shards if not s.is_file()]
        if not shards or missing:
            raise ModelDirError(f"model directory {path}: {name} lists shards that are not there: "
                                f"{missing or 'none listed'}; {BUILD_HINT}")
        return shards
    raise ModelDirError(f"model directory {path} has no weights (none of {', '.join(WEIGHT_FILES)}); {BUILD_HINT}")


def check_model_dir(path: str | os.PathLike, weights: bool = True) -> Path:
    """`path` as a Path if it is a from_pretrained directory this project can load: config.json,
    the tokenizer files and (with `weights`) intact weights; else a ModelDirError naming the
    directory and the file. Cheap: only headers are read."""
    path = Path(path)
    if not path.exists():
        raise ModelDirError(f"model directory {path} does not exist; {BUILD_HINT}")
    if not path.is_dir():
        raise ModelDirError(f"{path} is a file, not a model directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise ModelDirError(f"model directory {path} is not readable (permissions)")
    _read_json(path / "config.json", "not a from_pretrained directory")
    for name in TOKENIZER_FILES:
        _read_json(path / name, "the tokenizer")
    if weights:
        for f in _weight_files(path):
            if f.suffix == ".safetensors":
                _check_safetensors(f)
            elif not os.access(f, os.R_OK):
                raise ModelDirError(f"model directory {path}: cannot read {f.name} (permissions)")
    return path


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer of a model directory (left padding, a pad token), with a chat template."""
    path = check_model_dir(path, weights=False)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except LOAD_ERRORS as e:
        raise ModelDirError(f"model directory {path}: the tokenizer does not load ({type(e).__name__}: {e})") from e
    if len(tok) == 0:
        raise ModelDirError(f"model directory {path}: tokenizer.json holds an empty vocabulary")
    if not tok.chat_template:
        raise ModelDirError(f"model directory {path} has no chat template (chat_template.jinja, or chat_template "
                            "in tokenizer_config.json): every agent prompt is rendered with it")
    tok.padding_side = "left"  # generation batches are left-padded
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model_and_tokenizer(path: str | os.PathLike, dtype: str | None = None, device: str | None = None):
    """from_pretrained model (eval mode) and tokenizer (left padding); device None: default_device(),
    or, in a process given several GPUs outside torchrun, the layers spread over all of them
    (device_map="auto": a model too big for one GPU, e.g. the paper's 27B web agent on 4)."""
    spread = device is None and torch.cuda.device_count() > 1 and "LOCAL_RANK" not in os.environ
    device = device or default_device()
    path = check_model_dir(path)
    tok = load_tokenizer(path)  # before the weights: the cheaper one fails first
    kwargs = {"dtype": getattr(torch, dtype)} if dtype else {"dtype": "auto"}
    if spread:
        kwargs["device_map"] = "auto"
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except LOAD_ERRORS as e:
        raise ModelDirError(f"model directory {path}: the model does not load ({type(e).__name__}: {e})") from e
    if not spread:
        model = model.to(device)
    model.eval()
    return model, tok


def save_model(model, tokenizer, out: str | Path, check_load: bool = True) -> None:
    """save_pretrained of the model and its tokenizer into a temporary directory beside `out`,
    which then replaces `out`; with check_load, loaded back first as every rule will load it,
    so a broken model fails here. On any failure `out` is as it was and nothing is left behind."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; models are meant to be read by others
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for f in tmp.iterdir():  # save_pretrained leaves model.safetensors 0600 (transformers 5)
            if f.is_file():
                os.chmod(f, 0o666 & ~umask)
        if check_load:
            load_model_and_tokenizer(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
