"""The ES optimizer. Knows nothing about LLMs or environments: any torch.nn.Module.

The names below are imported on first use (PEP 562), so importing one module of the
package (the population engine reads esopt.es.noise) does not run the trainer: a job's
code input lists only what it imports (esopt.provenance.imports reads EXPORTS), and a
trainer edit reruns the jobs that train, not every evaluation.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# name -> the module that defines it
EXPORTS = {
    "ESConfig": "esopt.es.settings",
    "ESRun": "esopt.es.run",
    "ESTrainer": "esopt.es.trainer",
    "GenerationRecord": "esopt.es.history",
    "History": "esopt.es.history",
    "Perturber": "esopt.es.perturb",
    "SigmaSchedule": "esopt.es.schedule",
    "member_seeds": "esopt.es.settings",
    "normalize_rewards": "esopt.es.normalize",
}
__all__ = ["ESConfig", "ESRun", "ESTrainer", "GenerationRecord", "History", "Perturber", "SigmaSchedule",
           "member_seeds", "normalize_rewards"]  # EXPORTS' names (tests/test_layers.py)

if TYPE_CHECKING:  # for type checkers and editors; esopt.provenance.imports skips this block
    from esopt.es.history import GenerationRecord, History
    from esopt.es.normalize import normalize_rewards
    from esopt.es.perturb import Perturber
    from esopt.es.run import ESRun
    from esopt.es.schedule import SigmaSchedule
    from esopt.es.settings import ESConfig, member_seeds
    from esopt.es.trainer import ESTrainer


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(EXPORTS[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
