"""A training run's directory: it works in DIR/.resume/, then publishes each output
atomically and its provenance record last, so a killed run never leaves a directory
that looks complete, and a rerun resumes from DIR/.resume/."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from esopt.io import write_json_atomic, write_text_atomic
from esopt.models.load import save_model
from esopt.provenance.record import Provenance


class RunDir:
    def __init__(self, out: str | os.PathLike, create: bool = True):
        self.out = Path(out)
        self.resume = self.out / ".resume"  # checkpoints and history while the run is in progress
        self.trajectories = self.resume / "trajectories"  # sampled episodes, published with the run
        self.outputs: list[Path] = []  # what the provenance record lists as produced
        if create:
            self.resume.mkdir(parents=True, exist_ok=True)

    def add(self, name: str) -> Path:
        """An output the run wrote itself (e.g. history.save(run.add("history.json")))."""
        path = self.out / name
        self.outputs.append(path)
        return path

    def save_model(self, model, tokenizer, name: str = "model") -> Path:
        """save_pretrained of the model and its tokenizer, atomically."""
        save_model(model, tokenizer, self.add(name), check_load=False)
        return self.out / name

    def write_json(self, name: str, obj: Any) -> None:
        write_json_atomic(self.add(name), obj)

    def write_jsonl(self, name: str, rows: Iterable[Any]) -> None:
        write_text_atomic(self.add(name), "".join(json.dumps(r) + "\n" for r in rows))

    def write_text(self, name: str, text: str) -> None:
        write_text_atomic(self.add(name), text)

    def publish_trajectories(self) -> None:
        """DIR/trajectories/: the episodes the run kept, an output like any other (the
        audit re-hashes them and checks the history's rewards against them)."""
        final = self.out / "trajectories"
        if self.trajectories.exists():  # copied beside it, then swapped in: never half a copy
            tmp = self.out / ".trajectories.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(self.trajectories, tmp)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, self.add("trajectories"))
        elif final.exists():
            shutil.rmtree(final)

    def finish(self, prov: Provenance, extra: dict[str, Any] | None = None) -> None:
        """The provenance record of every output, then the resume state goes."""
        prov.write(self.out / "provenance.json", outputs=self.outputs, extra=extra)
        shutil.rmtree(self.resume)
