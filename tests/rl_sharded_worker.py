"""One RL step on a fixed batch, under torchrun: the worker of tests/test_rl_sharded.py.

python -m torch.distributed.run --nproc-per-node N tests/rl_sharded_worker.py MODEL BATCH.pt OUT.pt
Each rank "rolls out" its share (episodes i with i % N == rank) of the fixed episodes in
BATCH.pt; for each case there (algo, RLConfig keys) one step runs, and rank 0 writes the
step's record and the full updated policy (and critic) weights to OUT.pt.
"""

import copy
import sys

import torch

from esopt.es.distributed import from_env
from esopt.models.load import load_model_and_tokenizer
from esopt.rl.critic import build_critic
from esopt.rl.sharding import full_state_dict
from esopt.rl.trainer import RLConfig, RLTrainer


def main(model_dir, batch_path, out_path):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    col = from_env("gloo")
    base, tok = load_model_and_tokenizer(model_dir, dtype="float32")
    spec = torch.load(batch_path, weights_only=False)
    out = {}
    for name, case in spec["cases"].items():
        fixed = spec["episodes"][name]
        policy = copy.deepcopy(base)
        cfg = RLConfig(**case)
        critic = build_critic(policy, model_dir) if cfg.algo == "ppo" else None

        def rollout_fn(policy_, task_seed, sampling_seed, group, counters, shard=(0, 1), fixed=fixed):
            rank, world = shard
            counters["generated_tokens"] = counters.get("generated_tokens", 0) + rank + 1  # summed over ranks
            return copy.deepcopy(fixed[rank::world])

        ckpt = f"{out_path}.{name}.ckpt"
        trainer = RLTrainer(policy, cfg, rollout_fn, tok.pad_token_id, critic=critic, progress=False, collective=col,
                            checkpoint_path=ckpt)
        rec = trainer.step(0)
        trainer.metrics.append(rec)
        trainer.save(ckpt)
        weights = full_state_dict(policy)
        critic_w = full_state_dict(critic) if critic is not None else None
        # a fresh sharded trainer resumes from the checkpoint to the same weights and AdamW state
        again = copy.deepcopy(base)
        resumed = RLTrainer(again, cfg, rollout_fn, tok.pad_token_id, progress=False, collective=col,
                            critic=build_critic(again, model_dir) if cfg.algo == "ppo" else None, checkpoint_path=ckpt)
        steps = resumed.resume()
        same = {"steps": steps, "policy": full_state_dict(again),
                "opt": resumed.state()["opt"].get("state"), "opt_want": trainer.state()["opt"].get("state")}  # rank 0's
        out[name] = {"rec": rec, "policy": weights, "critic": critic_w, "resumed": same}
    if col.rank == 0:
        torch.save(out, out_path)
    col.barrier()
    col.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
