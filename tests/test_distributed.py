"""Multi-rank ES: the population sharded over torch.distributed ranks (gloo on CPU)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from esopt.es import ESConfig, ESTrainer, SigmaSchedule
from esopt.es.distributed import Collective

from test_cli import esopt, train_args, write_config

pytestmark = pytest.mark.slow


def torchrun(nproc, *args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                           "-m", "esopt.cli.main", *map(str, args)], capture_output=True, text=True, env=env, **kw)


def test_two_gloo_ranks_end_bit_identical_to_each_other_and_to_one_process(tmp_path, smoke_model):
    config = write_config(tmp_path, **{"es.generations": 4})
    single = tmp_path / "single"
    esopt(*train_args(config, smoke_model, single))
    ranked = tmp_path / "ranked"
    res = torchrun(2, *train_args(config, smoke_model, ranked), "--threads", 1)
    assert res.returncode == 0, res.stderr[-4000:]

    prov = json.loads((ranked / "provenance.json").read_text())
    one = json.loads((single / "provenance.json").read_text())
    replicas = prov["ranks"]["replica_weights_sha256"]
    assert prov["ranks"]["world_size"] == 2 and len(replicas) == 2
    assert replicas[0] == replicas[1] == one["final_weights_sha256"]
    # the same history apart from timings: same rewards, in member order
    strip = lambda h: [{k: v for k, v in g.items() if k != "wall_s"} for g in h["generations"]]
    h_ranked = json.loads((ranked / "history.json").read_text())
    assert strip(h_ranked) == strip(json.loads((single / "history.json").read_text()))
    assert json.loads((ranked / "budget.json").read_text())["ranks"] == 2


class _Recorder(Collective):
    """Rank `rank` of 2 in one process: the other rank's rewards are computed here too."""

    def __init__(self, rank, other):
        super().__init__(rank=rank, world_size=2)
        self.other = other

    def all_gather(self, obj):
        return [obj, self.other(obj)]


def test_each_rank_evaluates_only_its_share_of_the_population():
    model = torch.nn.Linear(4, 1)
    seen = []

    def fitness(member):
        seen.append(member.index)
        return float(member.index), {}

    cfg = ESConfig(population=6, generations=1, alpha=0.1, sigma=SigmaSchedule("constant", 0.01, total=1))
    # the "other rank" supplies rewards for the odd members
    trainer = ESTrainer(model, cfg, fitness, progress=False,
                        collective=_Recorder(0, lambda mine: {i: (float(i), {}) for i in (1, 3, 5)}))
    rec = trainer.step(0)
    assert seen == [0, 2, 4]
    assert rec.rewards == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
