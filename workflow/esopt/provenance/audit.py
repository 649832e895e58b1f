"""Audit a result against its provenance.json: re-hash, re-check the config, replay ES.

One provenance record (see esopt.provenance.record) is checked in this order:

record        the file parses and holds the keys every record has
config-hash   config_sha256 == sha256 of the recorded (resolved) config
config-file   the config file at config_path, loaded and resolved *now* (schema
              defaults filled), against the recorded config in the sections this
              result depends on: what the pipeline's rule passes as params (see
              `depends_on`), so growing the grid (horizons, seeds, populations,
              es.variants, population_study, rl.methods, reference numbers) or editing
              an unrelated section is a note, as it reruns nothing. A relevant
              difference fails and names the dotted keys. When the file is byte for
              byte the one the run read, differences at keys the file spells out fail
              (the record contradicts its own config file: a forged record); differences
              only at keys the file leaves to schema defaults are a note (the code moved
              on, not the config)
input         every recorded input file re-hashed (model weights, config, data, the
              upstream record); the config file's own hash is a note, not a failure,
              when its relevant sections resolve as recorded
chain         an input that is another record (DIR/provenance.json of the training run
              or model build): the files it records as produced agree with the hashes
              this record took of them
output        every recorded output file re-hashed
model-weights build-model: every weight file in weights_sha256 that the outputs do not list
history       ES: history.json agrees with the record on the base and final weight
              hashes, the method (--variant) and the horizon
ranks         ES over torch.distributed ranks: every replica's final weights hash
              to final_weights_sha256
base-weights  ES/RL: the base model (the --model input) loads to base_weights_sha256
replay        ES: the history replayed onto the base model gives final_weights_sha256
              (train-rl: a note; RL runs cannot be replayed; search-heuristics --es: the
              writer's online updates)
saved-weights ES/RL: the saved DIR/model loads to final_weights_sha256 (not for
              search-heuristics, which keeps no model)
code          note only: the recorded git commit (and dirty flag) against the checkout now

Report records (command "notebook:NAME", written by the figure notebooks beside their
table as TABLE.provenance.json) hold no config: their inputs and outputs are re-hashed.

Weight checks and replays: esopt.provenance.weights. How recorded paths are resolved:
esopt.provenance.find.
"""


from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from esopt.provenance.find import (
    _abs,
    _read_record,
    display_path,
    find_records,
    infer_root,
    producer_of,
)
from esopt.provenance.record_checks import (
    DEFAULT_MAX_REPLAY_PARAMS,
    AuditReport,
    Check,
    RecordChecks,
)
from esopt.provenance.weights import WeightChecks


class Auditor(RecordChecks, WeightChecks):
    """Checks records one by one (audit_record), keeping file hashes between them."""


def audit(path: str | os.PathLike, *, root: str | os.PathLike | None = None, replay: str = "auto",
          max_replay_params: int = DEFAULT_MAX_REPLAY_PARAMS, upstream: bool = False, progress: bool = False,
          on_check: Callable[[Check], None] | None = None,
          on_record: Callable[[Path], None] | None = None) -> AuditReport:
    """Audit every provenance record PATH names (see find_records); collect every check.

    upstream: also audit the records that produced this record's inputs (the training
    run behind an evaluated model, the build behind a base model), transitively.
    """
    from tqdm.auto import tqdm

    auditor = Auditor(root, replay, max_replay_params, on_check)
    queue = find_records(path, auditor.root)
    report = AuditReport(str(path))
    seen: set[Path] = set()
    bar = tqdm(total=len(queue), desc="audit", unit="record", disable=not progress or len(queue) < 2)
    while queue:
        prov = queue.pop(0)
        if prov in seen:
            continue
        seen.add(prov)
        report.records.append(display_path(prov))
        if on_record:
            on_record(prov)
        report.checks += auditor.audit_record(prov)
        bar.update(1)
        if upstream:
            rec = _read_record(prov) or {}
            base = auditor.root or infer_root(prov, rec) or Path.cwd()
            for p in rec.get("inputs") or {}:
                up = producer_of(_abs(p if Path(p).is_absolute() else base / p), auditor.root)
                if up is not None and up not in seen and up not in queue:
                    queue.append(up)
                    bar.total += 1
    bar.close()
    return report
