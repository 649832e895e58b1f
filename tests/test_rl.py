"""Agentic GRPO / PPO: advantages, GAE, token-level rollouts and their masks, optimizer steps."""

import copy
import shutil
import subprocess
import sys

import pytest
import torch
import yaml

from esopt.agent.rollout import Sampling
from esopt.agent.tokens import token_rollout
from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions
from esopt.hashing import weights_sha256
from esopt.models.load import load_model_and_tokenizer
from esopt.rl.advantages import gae, group_advantages, masked_whiten
from esopt.rl.critic import build_critic
from esopt.rl.losses import clipped_policy_loss, clipped_value_loss, token_logprobs
from esopt.rl.trainer import RLConfig, RLTrainer, collate

from conftest import SMOKE


def test_group_advantages_by_hand():
    # group 0: returns 1,0,0,1 -> mean 0.5, sample std sqrt(1/3); group 1: all equal -> no signal
    adv = group_advantages([1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1], eps=0.0)
    s = (1 / 3) ** 0.5
    assert torch.allclose(adv, torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0]))


def test_gae_carries_across_masked_observation_tokens():
    # [prompt, gen, gen | obs, obs, gen]: turn 1 ends at 2 (reward 0), turn 2 at 5 (reward 1)
    mask = torch.tensor([0, 1, 1, 0, 0, 1])
    rewards = torch.tensor([0.0, 0, 0, 0, 0, 1])
    values = torch.tensor([9.0, 0.5, 0.6, 9.0, 9.0, 0.8])  # values under the mask must not matter
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    a5 = 1 + 0 - 0.8
    a2 = (0 + 0.9 * 0.8 - 0.6) + 0.9 * 0.8 * a5
    a1 = (0 + 0.9 * 0.6 - 0.5) + 0.9 * 0.8 * a2
    assert torch.allclose(adv, torch.tensor([0, a1, a2, 0, 0, a5]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([0, a1 + 0.5, a2 + 0.6, 0, 0, a5 + 0.8]), atol=1e-6)
    # gamma = lam = 1: every step's advantage is the final reward minus its own value
    adv1, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(adv1[mask.bool()], torch.tensor([0.5, 0.4, 0.2]), atol=1e-6)


def test_masked_whiten_ignores_unmasked_entries():
    x = torch.tensor([100.0, 1.0, 3.0, -50.0])
    m = torch.tensor([0.0, 1.0, 1.0, 0.0])
    w = masked_whiten(x, m)
    assert torch.allclose(w, torch.tensor([0.0, -1.0, 1.0, 0.0]), atol=1e-5)


def test_clipped_losses_by_hand():
    logp = torch.tensor([[0.0, torch.log(torch.tensor(1.5)), torch.log(torch.tensor(0.5))]])
    old = torch.zeros(1, 3)
    adv = torch.tensor([[0.0, 1.0, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    loss, st = clipped_policy_loss(logp, old, adv, mask, clip_low=0.2)
    # token 1: min(1.5, 1.2) * 1 = 1.2; token 2: min(-0.5, -0.8) = -0.8 -> loss = -(1.2 - 0.8)/2
    assert loss.item() == pytest.approx(-0.2)
    assert st["clip_frac"] == pytest.approx(1.0)
    loss_hi, _ = clipped_policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.6)
    assert loss_hi.item() == pytest.approx(-(1.5 - 0.8) / 2)
    v = clipped_value_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 2.0]]),
                           torch.tensor([[0.0, 1.0]]), clip=0.5)
    assert v.item() == pytest.approx(0.5 * (2.0 - 0.5) ** 2)  # the clipped value is further from the return


@pytest.fixture(scope="module")
def smoke(smoke_model):
    return load_model_and_tokenizer(smoke_model, dtype="float32")


def episodes(model, tok, history_turns, n=2, max_turns=2, seed=0, **kw):
    tasks = generate_puzzles(4, 2, n, seed=seed, split="train")
    return token_rollout(model, tok, lambda: SudokuEnv(max_turns), tasks, instructions(4, "short"),
                         Sampling(do_sample=True, temperature=0.7, max_new_tokens=8), seed=seed,
                         max_turns=max_turns, history_turns=history_turns, **kw)


@pytest.mark.parametrize("history_turns", [None, 0])
def test_loss_mask_covers_exactly_the_generated_tokens(smoke, history_turns):
    model, tok = smoke
    tr = episodes(model, tok, history_turns, n=1)[0]
    assert tr.num_turns == 2
    seqs = tr.sequences()
    assert len(seqs) == (1 if history_turns is None else 2)
    gen = [i for t in tr.tokens for i in t.gen_ids]
    masked = [i for s in seqs for i, m in zip(s["ids"], s["mask"]) if m]
    assert masked == gen and sum(sum(s["mask"]) for s in seqs) == tr.generated_tokens
    # the unmasked tokens are the chat template's text around the replies, never re-tokenized replies
    msgs = [{"role": "system", "content": tr.system}, {"role": "user", "content": tr.first_observation}]
    if history_turns is None:
        for turn in tr.turns[:-1]:
            msgs += [{"role": "assistant", "content": turn.action}, {"role": "user", "content": turn.observation}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + tr.turns[-1].action
        decoded = tok.decode(seqs[0]["ids"])
        reply_ends_with_eos = tr.tokens[-1].gen_ids[-1] == tok.eos_token_id
        assert decoded == text + (tok.eos_token if reply_ends_with_eos else "")
    # rewards sit at the last generated token of each turn
    for s in seqs:
        for pos in s["turn_ends"]:
            assert s["mask"][pos] == 1 and (pos + 1 == len(s["ids"]) or s["mask"][pos + 1] == 0)


@pytest.mark.parametrize("engine", ["hf", "population"])
def test_sampling_logprobs_match_a_training_forward(smoke, engine):
    """The rollouts' log-probs are the training forward's, on HF generate and on the population
    engine over the policy's own weights (the RL rollouts where engine.sudoku is population)."""
    from esopt.agent.population import PopulationEngine

    model, tok = smoke
    policy = model if engine == "hf" else PopulationEngine(model, tok, slots=1)
    trajs = episodes(policy, tok, None, n=3)
    batch = collate(trajs, tok.pad_token_id)
    with torch.no_grad():
        lp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], temperature=0.7)
    m = batch["loss_mask"].bool()
    assert torch.allclose(lp[m], batch["old_logp"][m], atol=1e-4)


def test_token_cap_truncates_and_counts_as_failure(smoke):
    model, tok = smoke
    full = episodes(model, tok, None, n=2, max_turns=4)
    cap = len(full[0].tokens[0].context_ids) + 8 + 4  # room for one turn, not for a second
    capped = episodes(model, tok, None, n=2, max_turns=4, max_total_tokens=cap)
    for t in capped:
        assert t.num_turns == 1 and sum(len(s["ids"]) for s in t.sequences()) <= cap
        assert t.truncated and t.reward == 0.0 and not t.info["success"]


def test_a_run_whose_episodes_the_cap_cuts_warns_once(smoke, caplog):
    # At H* 15 a 2,048-token cap cut 6x6 episodes at ~23 of 45 turns, all scored 0: say so.
    model, tok = smoke
    cap = len(episodes(model, tok, 0, n=1)[0].tokens[0].context_ids) + 8 + 4  # one turn of two

    def rollout_fn(policy, task_seed, sampling_seed, group, counters):
        tasks = [t for t in generate_puzzles(4, 2, 2, seed=task_seed, split="train") for _ in range(group)]
        return token_rollout(policy, tok, lambda: SudokuEnv(2), tasks, instructions(4, "short"),
                             Sampling(do_sample=True, max_new_tokens=8), seed=sampling_seed, max_turns=2,
                             history_turns=0, max_total_tokens=cap, counters=counters)

    cfg = RLConfig(algo="grpo", steps=2, tasks_per_step=2, group_size=2, lr=1e-3, temperature=0.7)
    with caplog.at_level("WARNING", logger="esopt.rl.trainer"):
        metrics = RLTrainer(copy.deepcopy(model), cfg, rollout_fn, tok.pad_token_id, progress=False).run()
    assert [m["truncated"] for m in metrics] == [1.0, 1.0]
    cut = [r.getMessage() for r in caplog.records if "rl.max_total_tokens" in r.getMessage()]
    assert len(cut) == 1 and cut[0].startswith("step 0: 100% of the episodes were cut")


def test_a_checkpoint_made_under_another_token_cap_is_not_resumed(smoke_model, tmp_path):
    # The cap decides which episodes score 0, so a run continued under another one would mix two runs.
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["rl"]["steps"] = 1

    def train_rl(cap: int, out: str) -> subprocess.CompletedProcess:
        cfg["rl"]["max_total_tokens"] = cap
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
        return subprocess.run([sys.executable, "-m", "esopt.cli.main", "train-rl", "--config", "config.yaml",
                               "--threads", "1", "--algo", "grpo", "--horizon", "2", "--seed", "0",
                               "--model", str(smoke_model), "--out", out], cwd=tmp_path, capture_output=True, text=True)

    assert train_rl(1024, "first").returncode == 0
    (tmp_path / "second" / ".resume").mkdir(parents=True)  # as if a run under cap 4096 was killed
    shutil.copy(tmp_path / "first" / "checkpoint.pt", tmp_path / "second" / ".resume" / "checkpoint.pt")
    cut = train_rl(4096, "second")
    assert cut.returncode != 0 and "belongs to a different run (differs in ['max_total_tokens'])" in cut.stderr


def _fixed_batch(model, tok, n, group):
    """A fixed set of episodes with mixed returns (the smoke model rarely solves a puzzle)."""
    trajs = episodes(model, tok, 0, n=n, max_turns=2)
    for i, tr in enumerate(trajs):
        r = float(i % 2)  # half the episodes of every group succeed
        tr.reward = r
        for t in tr.tokens:
            t.reward = 0.0
        tr.tokens[-1].reward = r
    return trajs


def _pg_loss(policy, batch, temperature):
    with torch.no_grad():
        lp = token_logprobs(policy, batch["input_ids"], batch["attention_mask"], temperature)
        return clipped_policy_loss(lp, batch["old_logp"], batch["advantages"], batch["loss_mask"])[0].item()


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_one_step_changes_the_weights_and_lowers_the_loss(smoke, smoke_model, algo):
    base, tok = smoke
    policy = copy.deepcopy(base)
    group = 2 if algo == "grpo" else 1
    fixed = _fixed_batch(policy, tok, 4, group)
    # lr: AdamW's first step moves every weight by about lr whatever its gradient, so the
    # first-order decrease shows only for a small step (3e-3 overshot on the 400-step smoke base)
    cfg = RLConfig(algo=algo, steps=1, tasks_per_step=4 // group, group_size=group, lr=1e-3, minibatches=1,
                   micro_batch=3, temperature=0.7, critic_lr=3e-2, lam=0.95)
    critic = build_critic(policy, smoke_model) if algo == "ppo" else None
    trainer = RLTrainer(policy, cfg, lambda *a: copy.deepcopy(fixed), pad_id=tok.pad_token_id, critic=critic, progress=False)
    batch = collate(fixed, tok.pad_token_id)
    batch.update(trainer.advantages(fixed, batch))  # advantages (and PPO returns) before the step
    assert batch["advantages"].abs().sum() > 0
    before_hash = weights_sha256(policy)
    pg0 = _pg_loss(policy, batch, cfg.temperature)
    rec = trainer.step(0)
    assert weights_sha256(policy) != before_hash
    assert rec["optimizer_steps"] == 1 and rec["train_tokens"] > 0
    # the same batch, the same advantages and old log-probs: the surrogate went down
    assert _pg_loss(policy, batch, cfg.temperature) < pg0
    if algo == "ppo":
        m = batch["loss_mask"]
        with torch.no_grad():
            v1 = critic(batch["input_ids"], batch["attention_mask"])
        before = clipped_value_loss(batch["old_values"], batch["old_values"], batch["returns"], m, None)
        assert clipped_value_loss(v1, batch["old_values"], batch["returns"], m, None) < before


def test_killed_run_resumes_to_the_same_weights(smoke, tmp_path):
    base, tok = smoke

    def rollout_fn(policy, task_seed, sampling_seed, group, counters):
        tasks = [t for t in generate_puzzles(4, 2, 2, seed=task_seed, split="train") for _ in range(group)]
        return token_rollout(policy, tok, lambda: SudokuEnv(2), tasks, instructions(4, "short"),
                             Sampling(do_sample=True, max_new_tokens=8), seed=sampling_seed, max_turns=2,
                             history_turns=0, counters=counters)

    cfg = RLConfig(algo="grpo", steps=3, tasks_per_step=2, group_size=2, lr=1e-3, temperature=0.7)
    straight = copy.deepcopy(base)
    RLTrainer(straight, cfg, rollout_fn, tok.pad_token_id, progress=False).run()
    ckpt = tmp_path / "ckpt.pt"
    first = copy.deepcopy(base)
    t1 = RLTrainer(first, RLConfig(**{**cfg.__dict__, "steps": 3}), rollout_fn, tok.pad_token_id, checkpoint_path=ckpt, progress=False)
    t1.metrics.append(t1.step(0))  # one step, checkpointed, then the process "dies"
    t1.save(ckpt)
    resumed = copy.deepcopy(base)
    t2 = RLTrainer(resumed, cfg, rollout_fn, tok.pad_token_id, checkpoint_path=ckpt, progress=False)
    t2.run()
    assert len(t2.metrics) == 3
    assert weights_sha256(resumed) == weights_sha256(straight)


def test_a_published_checkpoint_of_another_run_is_not_continued(smoke, tmp_path, caplog):
    # continue_from is an earlier sitting's checkpoint (esopt publish): one of another run (the
    # config changed since) is skipped with a warning, not an error; this run's is continued
    base, tok = smoke

    def rollout_fn(policy, task_seed, sampling_seed, group, counters):
        tasks = [t for t in generate_puzzles(4, 2, 2, seed=task_seed, split="train") for _ in range(group)]
        return token_rollout(policy, tok, lambda: SudokuEnv(2), tasks, instructions(4, "short"),
                             Sampling(do_sample=True, max_new_tokens=8), seed=sampling_seed, max_turns=2,
                             history_turns=0, counters=counters)

    cfg = RLConfig(algo="grpo", steps=2, tasks_per_step=2, group_size=2, lr=1e-3, temperature=0.7)
    earlier = tmp_path / "published.pt"
    first = RLTrainer(copy.deepcopy(base), cfg, rollout_fn, tok.pad_token_id, progress=False)
    first.metrics.append(first.step(0))
    first.save(earlier)
    other = RLTrainer(copy.deepcopy(base), RLConfig(**{**cfg.__dict__, "lr": 2e-3}), rollout_fn, tok.pad_token_id,
                      checkpoint_path=tmp_path / "own.pt", continue_from=earlier, progress=False)
    with caplog.at_level("WARNING", logger="esopt.rl.trainer"):
        assert other.resume() == 0
    assert "not continuing" in caplog.text and "differs in ['rl']" in caplog.text and other.continued is None
    same = RLTrainer(copy.deepcopy(base), cfg, rollout_fn, tok.pad_token_id, checkpoint_path=tmp_path / "own.pt",
                     continue_from=earlier, progress=False)
    assert same.resume() == 1 and same.continued["steps"] == 1 and same.continued["checkpoint"] == str(earlier)
    same.run()  # its own checkpoints keep where it was continued from
    assert torch.load(tmp_path / "own.pt", weights_only=True)["continued_from"] == same.continued


def test_shared_critic_and_kl_reference_run_a_step(smoke, smoke_model):
    base, tok = smoke
    policy = copy.deepcopy(base)
    fixed = _fixed_batch(policy, tok, 4, 1)
    cfg = RLConfig(algo="ppo", steps=1, tasks_per_step=4, group_size=1, lr=3e-3, temperature=0.7,
                   critic="shared", kl_coef=0.1)
    critic = build_critic(policy, smoke_model, "shared")
    assert critic.backbone is policy.base_model  # only the head is new
    trainer = RLTrainer(policy, cfg, lambda *a: copy.deepcopy(fixed), pad_id=tok.pad_token_id, critic=critic, progress=False)
    assert trainer.reference is not None and trainer.critic_opt is None
    head = critic.head.weight.detach().clone()
    before = weights_sha256(policy)
    rec = trainer.step(0)
    assert weights_sha256(policy) != before and not torch.equal(head, critic.head.weight)
    assert rec["kl_ref"] >= 0.0 and "vf_loss" in rec
    assert weights_sha256(trainer.reference) == before  # the reference stays frozen
