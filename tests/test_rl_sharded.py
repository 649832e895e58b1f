"""The RL baselines over 2 gloo ranks (FSDP2): one step equals the one-rank step on the same global batch."""

import copy
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from esopt.rl.critic import build_critic
from esopt.rl.losses import token_logprobs
from esopt.rl.sharding import enable_checkpointing, lockstep_rows
from esopt.rl.trainer import RLConfig, RLTrainer

from test_rl import _fixed_batch

WORKER = Path(__file__).with_name("rl_sharded_worker.py")
# fp32 on one thread: the two runs sum the same numbers in a different order (per-rank
# gradients reduced over ranks, stats all-reduced), so equal to rounding, not bit for bit.
# (PPO's first-step surrogate is −mean of whitened advantages: 0 up to rounding, hence the abs.)
# AdamW's first step moves a weight by lr·g/(|g| + eps): where a gradient entry is within
# rounding of 0 that ratio is not stable, so the weights agree to 1e-6 on all but 0.1% of
# the model's entries, and to 1% of lr everywhere. (Counted over the model, not per tensor:
# the smoke model's 512-entry tensors cannot hold 0.1% of stray entries, and which tensor
# gets the one near-zero gradient depends on the CPU: one k_proj entry at 1.4e-6 on an
# Intel Xeon, none on AMD EPYC.)
LOSS_RTOL, LOSS_ATOL, WEIGHT_ATOL, STRAY_FRACTION, STRAY_ATOL = 1e-5, 1e-6, 1e-6, 1e-3, 1e-2


def assert_same_weights(got, want, lr):
    stray, total = {}, 0
    for k, w in want.items():
        diff = (got[k] - w).abs()
        assert float(diff.max()) <= STRAY_ATOL * lr, (k, float(diff.max()))
        stray[k], total = int((diff > WEIGHT_ATOL).sum()), total + diff.numel()
    assert sum(stray.values()) <= STRAY_FRACTION * total, {k: n for k, n in stray.items() if n}

CASES = {
    # GRPO as the authors ran it (clip 0.2, KL 1e-3 to a sharded frozen reference), two
    # optimizer steps of uneven micro-batches, gradient checkpointing and chunked logits on
    "grpo": dict(algo="grpo", steps=1, tasks_per_step=3, group_size=2, lr=1e-3, minibatches=2, micro_batch=2,
                 temperature=0.7, kl_coef=1e-3, gradient_checkpointing=True, logits_chunk=5),
    # PPO with its separate critic, sharded too
    "ppo": dict(algo="ppo", steps=1, tasks_per_step=5, group_size=1, lr=1e-3, minibatches=1, micro_batch=3,
                temperature=0.7, critic_lr=3e-2, lam=0.95),
}


def test_lockstep_rows_give_every_rank_as_many_calls():
    # 7 rows over 2 ranks, chunks of 2: rank 0 has 0 2 4 6, rank 1 has 1 3 5 and one empty call
    assert [r.tolist() for r in lockstep_rows(7, 0, 2, 2)] == [[0, 2], [4, 6]]
    assert [r.tolist() for r in lockstep_rows(7, 1, 2, 2)] == [[1, 3], [5]]
    assert [r.tolist() for r in lockstep_rows(3, 1, 4, 2)] == [[1]]
    assert [r.tolist() for r in lockstep_rows(3, 3, 4, 2)] == [[]]
    assert [r.tolist() for r in lockstep_rows(5, 0, 1, 2)] == [[0, 1], [2, 3], [4]]


def test_chunked_logprobs_and_checkpointing_match_the_full_logits(smoke_model):
    from esopt.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(smoke_model, dtype="float32")
    ids = torch.randint(0, len(tok), (3, 17))
    am = torch.ones_like(ids)
    am[1, 12:] = 0
    full = token_logprobs(model, ids, am, 0.7)
    for chunk in (1, 5, 64):
        assert torch.allclose(token_logprobs(model, ids, am, 0.7, chunk), full, rtol=0, atol=1e-5)
    # gradients through the checkpointed chunks and decoder layers: the same as without
    grads = {}
    for ckpt, chunk in ((False, None), (True, 4)):
        m = copy.deepcopy(model).train()
        if ckpt:
            enable_checkpointing(m)
        token_logprobs(m, ids, am, 0.7, chunk).sum().backward()
        grads[ckpt] = torch.cat([p.grad.flatten() for p in m.parameters()])
    assert torch.allclose(grads[True], grads[False], rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def sharded(smoke_model, tmp_path_factory):
    from esopt.models.load import load_model_and_tokenizer

    base, tok = load_model_and_tokenizer(smoke_model, dtype="float32")
    tmp = tmp_path_factory.mktemp("sharded")
    episodes = {name: _fixed_batch(base, tok, c["tasks_per_step"] * c["group_size"], c["group_size"])
                for name, c in CASES.items()}
    torch.save({"cases": CASES, "episodes": episodes}, tmp / "batch.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    failures = []
    # One CI run (2026-12-04, a loaded 2-core VM) lost rank 0 to a SIGABRT whose message the
    # interleaved stderr tail did not hold: each rank now tees its output to a file of its own,
    # and a failed launch is retried once, its ranks' logs kept in a warning (twice fails the test).
    for attempt in range(2):
        logs = tmp / f"logs{attempt}"
        res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                              f"--log-dir={logs}", "--tee=3",
                              str(WORKER), str(smoke_model), str(tmp / "batch.pt"), str(tmp / "out.pt")],
                             capture_output=True, text=True, env=env, timeout=240)
        if res.returncode == 0:
            break
        ranks = "\n".join(f"--- {f.relative_to(logs)} (tail) ---\n{f.read_text(errors='replace')[-3000:]}"
                          for f in sorted(logs.rglob("std*.log")))
        failures.append(f"torchrun exit {res.returncode}\n{ranks or res.stderr[-4000:]}")
        warnings.warn(f"2-rank worker failed (attempt {attempt + 1}):\n{failures[-1]}", stacklevel=1)
    assert res.returncode == 0, "\n\n".join(failures)
    return base, tok, episodes, torch.load(tmp / "out.pt", weights_only=False)


@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks_take_the_one_rank_step(sharded, smoke_model, name):
    base, tok, episodes, out = sharded
    cfg = RLConfig(**CASES[name])
    policy = copy.deepcopy(base)
    critic = build_critic(policy, smoke_model) if cfg.algo == "ppo" else None
    fixed = episodes[name]
    one = RLTrainer(policy, cfg, lambda *a: copy.deepcopy(fixed), tok.pad_token_id, critic=critic, progress=False)
    rec = one.step(0)
    two = out[name]["rec"]
    assert two["optimizer_steps"] == rec["optimizer_steps"] == cfg.minibatches
    assert two["train_tokens"] == rec["train_tokens"] and two["episodes"] == rec["episodes"]
    assert two["generated_tokens"] == 1 + 2  # each rank's counters, summed
    for key in ("pg_loss", "grad_norm", "clip_frac", "kl_ref", "vf_loss"):
        if key in rec:
            assert two[key] == pytest.approx(rec[key], rel=LOSS_RTOL, abs=LOSS_ATOL), key
    assert_same_weights(out[name]["policy"], policy.state_dict(), cfg.lr)
    moved = max(float((w - base.state_dict()[k]).abs().max()) for k, w in policy.state_dict().items())
    assert moved > 1e-4  # the step did move the weights (lr 1e-3)
    if critic is not None:
        assert_same_weights(out[name]["critic"], critic.state_dict(), cfg.critic_lr)
    # the sharded checkpoint (full state dicts gathered on rank 0) resumes to the same state
    resumed = out[name]["resumed"]
    assert resumed["steps"] == 1
    assert all(torch.equal(resumed["policy"][k], w) for k, w in out[name]["policy"].items())
    assert resumed["opt"].keys() == resumed["opt_want"].keys() and len(resumed["opt"]) > 0
    assert all(torch.equal(resumed["opt"][k]["exp_avg_sq"], v["exp_avg_sq"]) for k, v in resumed["opt_want"].items())


@pytest.mark.slow
def test_train_rl_under_torchrun_publishes_one_gathered_model(tmp_path, smoke_model):
    """`esopt train-rl` over 2 gloo ranks end to end: sharded rollouts, steps, the per-step
    sharded checkpoint, the model gathered and published by rank 0 (about 30 s)."""
    import json

    from esopt.hashing import weights_sha256
    from esopt.models.load import load_model_and_tokenizer

    from test_cli import write_config

    config = write_config(tmp_path, **{"rl.steps": 2, "rl.gradient_checkpointing": True, "rl.logits_chunk": 8})
    out = tmp_path / "grpo"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          "-m", "esopt.cli.main", "train-rl", "--config", str(config), "--algo", "grpo", "--horizon", "2",
                          "--seed", "0", "--model", str(smoke_model), "--out", str(out), "--threads", "1"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    prov = json.loads((out / "provenance.json").read_text())
    budget = json.loads((out / "budget.json").read_text())
    assert prov["ranks"] == budget["ranks"] == 2 and budget["steps"] == 2 and budget["episodes"] == 2 * 4
    model, _ = load_model_and_tokenizer(out / "model")
    assert weights_sha256(model) == prov["final_weights_sha256"] != prov["base_weights_sha256"]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["run"]["ranks"] == 2 and ckpt["step"] == 2
