"""The ES optimizer. Knows nothing about LLMs or environments: any torch.nn.Module."""

from esopt.es.history import GenerationRecord, History
from esopt.es.normalize import normalize_rewards
from esopt.es.perturb import Perturber
from esopt.es.run import ESRun
from esopt.es.schedule import SigmaSchedule
from esopt.es.settings import ESConfig, member_seeds
from esopt.es.trainer import ESTrainer

__all__ = [
    "ESConfig",
    "ESRun",
    "ESTrainer",
    "GenerationRecord",
    "History",
    "Perturber",
    "SigmaSchedule",
    "member_seeds",
    "normalize_rewards",
]
