"""Agentic GRPO and Agentic PPO: multi-turn policy-gradient baselines.

One step t:
  1. draw tasks from the run seed; roll out episodes in token space (GRPO: a group
     of `group_size` episodes per task) with the sampling profile of the run;
  2. advantages: GRPO normalizes each episode's return within its group and gives
     it to every generated token of every turn; PPO places turn rewards at the last
     generated token of each turn and runs GAE over the generated tokens (observation
     tokens are skipped), then whitens;
  3. `epochs` passes over the step's sequences in `minibatches` optimizer steps:
     clipped ratio against the sampling log-probs, token-mean loss, optional KL to
     the frozen reference, AdamW, gradient clipping (PPO: plus a clipped value loss);
  4. a checkpoint (weights, optimizer, counters) is written atomically, so a killed
     run resumes and ends where an uninterrupted one would.

With a collective of several ranks (torchrun) the policy, critic and reference are
sharded by FSDP2 and each rank rolls out its share of the episodes (esopt.rl.sharding);
the update equals the one-rank update on the gathered batch.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from esopt.agent.tokens import TokenTrajectory
from esopt.io import atomic_path, sha256_file
from esopt.rl.advantages import gae, group_advantages, masked_whiten
from esopt.rl.critic import ValueModel
from esopt.rl.losses import clipped_policy_loss, clipped_value_loss, kl_k3, masked_mean
from esopt.rl.sharding import (
    TokenScorer,
    all_reduce_sum,
    enable_checkpointing,
    full_params,
    gathered_map,
    load_state_dicts,
    lockstep_rows,
    reshard,
    shard,
    state_dicts,
)
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)


@dataclass
class RLConfig:
    algo: str  # grpo | ppo
    steps: int
    tasks_per_step: int
    group_size: int = 8  # GRPO rollouts per task (PPO: 1)
    lr: float = 1e-6
    weight_decay: float = 0.0
    epochs: int = 1
    minibatches: int = 1  # optimizer steps per epoch
    micro_batch: int = 64  # sequences per forward/backward (gradient accumulation)
    loss_agg: str = "token-mean"  # or "episode-mean"
    clip_low: float = 0.2
    clip_high: float | None = None  # ε_high; None: = clip_low
    kl_coef: float = 0.0  # > 0 loads a frozen reference model
    max_grad_norm: float = 1.0
    temperature: float = 1.0  # of the sampling profile: log-probs are taken at it
    # PPO
    gamma: float = 1.0
    lam: float = 1.0
    critic: str = "separate"
    critic_lr: float = 1e-5
    vf_clip: float | None = 0.2
    vf_coef: float = 0.5  # weight of the value loss when the critic shares the policy
    gradient_checkpointing: bool = False  # recompute decoder activations in backward (policy, critic)
    logits_chunk: int | None = None  # positions per output-head block (None: full [B, T, V] logits)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.algo not in ("grpo", "ppo"):
            raise ValueError(f"algo {self.algo!r}: expected 'grpo' or 'ppo'")
        if self.algo == "grpo" and self.group_size < 2:
            raise ValueError(f"GRPO needs group_size >= 2, got {self.group_size}")
        if self.loss_agg not in ("token-mean", "episode-mean"):
            raise ValueError(f"loss_agg {self.loss_agg!r}: expected 'token-mean' or 'episode-mean'")
        if self.algo == "ppo" and self.group_size != 1:
            raise ValueError(f"PPO rolls out each task once; group_size must be 1, got {self.group_size}")

    @property
    def episodes_per_step(self) -> int:
        return self.tasks_per_step * self.group_size

    @classmethod
    def from_settings(cls, rl: dict[str, Any], algo: str, sampling: dict[str, Any], seed: int) -> RLConfig:
        """From an rl block's settings (esopt.spec.sudoku.RlRun.settings(), or a tool agent's
        GRPO settings) and a sampling profile ({temperature, ...}); rl[algo] holds the
        algorithm's own keys (PPO's critic, GAE and value keys stand at their neutral values
        for GRPO)."""
        per = rl[algo]
        return cls(
            algo=algo, steps=rl["steps"], tasks_per_step=per["tasks_per_step"], group_size=per.get("group_size", 1),
            lr=rl["lr"], weight_decay=rl["weight_decay"], epochs=rl["epochs"], minibatches=rl["minibatches"],
            micro_batch=rl["micro_batch"], loss_agg=rl["loss_agg"],
            clip_low=rl["clip_low"], clip_high=rl["clip_high"], kl_coef=rl["kl_coef"], max_grad_norm=rl["max_grad_norm"],
            temperature=sampling["temperature"], gamma=per.get("gamma", 1.0), lam=per.get("lam", 1.0),
            critic=per.get("critic", "separate"), critic_lr=per.get("critic_lr", rl["lr"]),
            vf_clip=per.get("vf_clip", 0.2), vf_coef=per.get("vf_coef", 0.5),
            gradient_checkpointing=rl["gradient_checkpointing"], logits_chunk=rl["logits_chunk"],
            seed=seed,
        )


# The paper's two sampling profiles of the RL baselines: `default` is agent.sampling (T 0.7,
# top-p 0.8, top-k 20); `t1` samples the full distribution.
SAMPLING_PROFILES = {"default": None, "t1": {"temperature": 1.0, "top_p": 1.0, "top_k": 0}}


def method_name(algo: str, sampling: str) -> str:
    """The method an RL run reports as: grpo, ppo, or grpo_t1 for GRPO under the T 1 profile."""
    return algo if sampling == "default" else f"{algo}_{sampling}"


def rl_flops(params: int, critic_params: int, totals: dict, cfg: RLConfig) -> float:
    """Model FLOPs from tokens processed, 2N per token forward and 4N backward
    (attention's sequence-length term left out): rollouts forward; training forward +
    backward; the reference model forward; PPO's critic forward for the old values
    and forward + backward when it learns."""
    f = 2 * params * totals["rollout_tokens"] + 6 * params * totals["train_tokens"]
    epochs = max(cfg.epochs, 1)
    if cfg.kl_coef > 0:
        f += 2 * params * totals["train_tokens"] / epochs
    if critic_params:
        f += 2 * critic_params * totals["train_tokens"] / epochs + 6 * critic_params * totals["train_tokens"]
    return float(f)


# rollout_fn(policy, tasks seed, sampling seed, group_size, counters) -> token trajectories,
# groups of `group_size` consecutive episodes sharing a task. Over several ranks it is called
# with shard=(rank, world_size) and returns only the episodes i with i % world_size == rank.
RolloutFn = Callable[[torch.nn.Module, int, int, int, dict], list[TokenTrajectory]]


def _pad(rows: Sequence[list], value, dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=dtype)


def collate(trajs: Sequence[TokenTrajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded tensors over all sequences of all episodes, plus the token rewards."""
    seqs, episode = [], []
    for e, tr in enumerate(trajs):
        for s in tr.sequences():
            seqs.append(s)
            episode.append(e)
    rewards = []
    for s in seqs:
        r = [0.0] * len(s["ids"])
        for pos, rew in zip(s["turn_ends"], s["rewards"]):
            r[pos] = rew
        rewards.append(r)
    return {
        "input_ids": _pad([s["ids"] for s in seqs], pad_id, torch.long),
        "attention_mask": _pad([[1] * len(s["ids"]) for s in seqs], 0, torch.long),
        "loss_mask": _pad([s["mask"] for s in seqs], 0, torch.float32),
        "old_logp": _pad([s["logprobs"] for s in seqs], 0.0, torch.float32),
        "rewards": _pad(rewards, 0.0, torch.float32),
        "episode": torch.tensor(episode, dtype=torch.long),
    }


def episode_gae(batch: dict[str, torch.Tensor], values: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE per episode over the concatenation of its sequences (in rollout order)."""
    adv = torch.zeros_like(values)
    ret = torch.zeros_like(values)
    lengths = batch["attention_mask"].sum(1).tolist()
    ep = batch["episode"].tolist()
    by_ep: dict[int, list[int]] = {}
    for i, e in enumerate(ep):
        by_ep.setdefault(e, []).append(i)
    for rows in by_ep.values():
        cat = lambda key, rows=rows: torch.cat([key[i, : lengths[i]] for i in rows])
        a, r = gae(cat(batch["rewards"]), cat(values), cat(batch["loss_mask"]), gamma, lam)
        off = 0
        for i in rows:
            n = lengths[i]
            adv[i, :n], ret[i, :n] = a[off:off + n], r[off:off + n]
            off += n
    return adv, ret


@dataclass
class RLTrainer:
    policy: torch.nn.Module
    cfg: RLConfig
    rollout_fn: RolloutFn
    pad_id: int
    critic: ValueModel | None = None
    reference: torch.nn.Module | None = None
    checkpoint_path: str | os.PathLike | None = None
    run_info: dict[str, Any] = field(default_factory=dict)  # checked on resume
    on_step: Callable[[dict[str, Any]], None] | None = None
    progress: bool = True
    collective: Any = None  # esopt.es.distributed.Collective; several ranks shard the models
    # this run's checkpoint kept elsewhere (a published partial run, esopt.provenance.published),
    # continued when checkpoint_path has none; one of another run is ignored with a warning
    continue_from: str | os.PathLike | None = None
    # set by resume() when the run continued an earlier sitting's checkpoint (continue_from)
    continued: dict[str, Any] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        c = self.cfg
        if c.algo == "ppo" and self.critic is None:
            raise ValueError("PPO needs a critic")
        if c.kl_coef > 0 and self.reference is None:
            self.reference = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self.shared = self.critic is not None and c.critic == "shared"
        self.rank = self.collective.rank if self.collective is not None else 0
        self.world = self.collective.world_size if self.collective is not None else 1
        if c.gradient_checkpointing:
            for m in (self.policy, self.critic.backbone if self.critic is not None and not self.shared else None):
                if m is not None:
                    enable_checkpointing(m)
        self.scorer = TokenScorer(self.policy, c.logits_chunk)
        self.ref_scorer = TokenScorer(self.reference, c.logits_chunk) if self.reference is not None else None
        if self.world > 1:
            if self.shared:
                raise ValueError("rl.ppo.critic 'shared' cannot be sharded over ranks; use 'separate' or one rank")
            device = next(self.policy.parameters()).device
            # FSDP2 initialises a root at its first forward: one through each root now, on every
            # rank, before any rollout runs the decoder layers without it
            ids = torch.zeros(1, 2, dtype=torch.long, device=device)
            for root, inner in ((self.scorer, self.policy), (self.ref_scorer, self.reference), (self.critic, None)):
                if root is not None:
                    shard(root, inner if inner is not None else root.backbone, device)
                    with torch.no_grad():
                        root(ids, torch.ones_like(ids))
                    reshard(root)  # the root stays gathered after a forward; the optimizer takes the shards
        params = list(self.policy.parameters()) + (list(self.critic.head.parameters()) if self.shared else [])
        self.opt = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay)
        self.critic_opt = (torch.optim.AdamW(self.critic.parameters(), lr=c.critic_lr, weight_decay=c.weight_decay)
                           if self.critic is not None and not self.shared else None)
        self.metrics: list[dict[str, Any]] = []
        self.totals = {"episodes": 0, "generated_tokens": 0, "rollout_tokens": 0, "train_tokens": 0, "wall_s": 0.0}

    # ---- checkpointing -------------------------------------------------------------
    def _run_record(self) -> dict[str, Any]:
        return {"rl": asdict(self.cfg), **self.run_info, **({"ranks": self.world} if self.world > 1 else {})}

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs. Sharded: full state dicts keyed by parameter name,
        gathered on rank 0 (a collective: every rank calls it)."""
        if self.world > 1:
            policy, opt = state_dicts(self.scorer, self.opt)  # keyed as in the scorer: "model." + name
            critic, critic_opt = state_dicts(self.critic, self.critic_opt) if self.critic_opt else (None, None)
        else:
            policy, opt = self.policy.state_dict(), self.opt.state_dict()
            critic = self.critic.state_dict() if self.critic is not None and not self.shared else None
            critic_opt = self.critic_opt.state_dict() if self.critic_opt else None
        return {
            "run": self._run_record(), "step": len(self.metrics), "policy": policy, "opt": opt, "critic": critic,
            "critic_head": self.critic.head.state_dict() if self.shared else None, "critic_opt": critic_opt,
            "metrics": self.metrics, "totals": self.totals, "continued_from": self.continued,
        }

    def save(self, path: str | os.PathLike) -> None:
        st = self.state()
        if self.rank == 0:
            with atomic_path(path) as tmp:
                torch.save(st, tmp)
        if self.world > 1:
            self.collective.barrier()  # the file is complete before any rank may read it

    def resume(self) -> int:
        """Load checkpoint_path if present (else continue_from) and return the steps done.
        A checkpoint_path of another run is an error; a continue_from of another run (the
        config or base changed since it was published) is skipped: the run starts afresh."""
        own = self.checkpoint_path is not None and Path(self.checkpoint_path).exists()
        p = self.checkpoint_path if own else self.continue_from
        if p is None or not Path(p).exists():
            return 0
        st = torch.load(p, map_location="cpu", weights_only=False)
        run = self._run_record()
        if st["run"] != run:
            diff = sorted(k for k in set(st["run"]) | set(run) if st["run"].get(k) != run.get(k))
            if not own:
                log.warning("not continuing: %s belongs to a different run (differs in %s); the run starts at step 0",
                            p, diff)
                return 0
            raise ValueError(f"{p} belongs to a different run (differs in {diff}); delete it or use another output directory")
        if self.world > 1:
            load_state_dicts(self.scorer, self.opt, st["policy"], st["opt"])
            if st["critic"] is not None:
                load_state_dicts(self.critic, self.critic_opt, st["critic"], st["critic_opt"])
        else:
            self.policy.load_state_dict(st["policy"])
            self.opt.load_state_dict(st["opt"])
            if st["critic"] is not None:
                self.critic.load_state_dict(st["critic"])
            if st["critic_opt"] is not None:
                self.critic_opt.load_state_dict(st["critic_opt"])
        if st["critic_head"] is not None:
            self.critic.head.load_state_dict(st["critic_head"])
        self.metrics, self.totals = st["metrics"], st["totals"]
        # where the run was continued from; kept in its own checkpoints so that a resume keeps it
        self.continued = (st.get("continued_from") if own else
                          {"checkpoint": str(p), "sha256": sha256_file(p), "steps": st["step"]})
        log.info("%s from %s after %d steps", "resumed" if own else "continued", p, st["step"])
        return st["step"]

    # ---- one step ------------------------------------------------------------------
    def _minibatches(self, n: int, t: int, epoch: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(derive_seed("rl-minibatch", self.cfg.seed, t, epoch))
        perm = torch.randperm(n, generator=g)
        return [chunk for chunk in perm.chunk(min(self.cfg.minibatches, n)) if chunk.numel()]

    @torch.no_grad()
    def _rowwise(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """fn(input_ids, attention_mask) over all rows of the batch, 256 rows at a time; over
        several ranks each computes its rows in lockstep and the results are all-gathered."""
        ids, am = batch["input_ids"], batch["attention_mask"]
        dev = next(self.policy.parameters()).device
        if self.world == 1:
            return torch.cat([fn(ids[i].to(dev), am[i].to(dev)).float().cpu() for i in torch.arange(ids.shape[0]).split(256)])
        return gathered_map(lambda rows: fn(ids[rows].to(dev), am[rows].to(dev)), ids.shape[0], ids.shape[1],
                            self.rank, self.world, 256, self.collective.all_gather)

    def _values(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        self.critic.eval()
        return self._rowwise(self.critic, batch) * batch["loss_mask"]

    def advantages(self, trajs: Sequence[TokenTrajectory], batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.cfg
        if c.algo == "grpo":
            groups = [i // c.group_size for i in range(len(trajs))]
            ep_adv = group_advantages([tr.reward for tr in trajs], groups)
            return {"advantages": ep_adv[batch["episode"]][:, None] * batch["loss_mask"]}
        values = self._values(batch)
        adv, ret = episode_gae(batch, values, c.gamma, c.lam)
        return {"advantages": masked_whiten(adv, batch["loss_mask"]), "returns": ret, "old_values": values}

    def loss_weights(self, trajs: Sequence[TokenTrajectory], batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """token-mean: every generated token weighs the same, so long (often failed)
        episodes weigh more; episode-mean: every episode weighs the same (its tokens
        share 1), as in the original GRPO's per-sequence mean."""
        mask = batch["loss_mask"]
        if self.cfg.loss_agg == "token-mean":
            return mask.clone()
        per_episode = torch.tensor([max(tr.generated_tokens, 1) for tr in trajs], dtype=torch.float32)
        return mask / per_episode[batch["episode"]][:, None]

    def step(self, t: int) -> dict[str, Any]:
        c = self.cfg
        start = time.perf_counter()
        counters: dict[str, int] = {}
        trajs = self._rollouts(t, counters)
        rollout_s = time.perf_counter() - start
        batch = collate(trajs, self.pad_id)
        batch.update(self.advantages(trajs, batch))
        batch["weight"] = self.loss_weights(trajs, batch)
        if self.reference is not None:
            batch["ref_logp"] = self._rowwise(lambda ids, am: self.ref_scorer(ids, am, c.temperature), batch)
        if self.world > 1:  # a root stays gathered after a forward without backward: free it
            for root in (self.ref_scorer, self.critic):
                if root is not None:
                    reshard(root)
        self.policy.train()
        if self.critic is not None:
            self.critic.train()
        stats: dict[str, list[float]] = {}
        train_tokens = 0
        device = next(self.policy.parameters()).device
        for epoch in range(c.epochs):
            for idx in self._minibatches(batch["input_ids"].shape[0], t, epoch):
                # the weight of the whole (global) mini-batch: each rank's loss is its share of it
                total_w = batch["weight"][idx].sum().clamp(min=1e-12)
                self.opt.zero_grad(set_to_none=True)
                if self.critic_opt is not None:
                    self.critic_opt.zero_grad(set_to_none=True)
                st_sum: dict[str, float] = {}
                # Gradient accumulation over micro-batches: the loss is the (weighted) token
                # mean over the whole mini-batch, the activations those of one micro-batch.
                # This rank's rows of the mini-batch (all of them on one rank), as many micro-batches
                # on every rank; a rank out of rows runs a zero-weight one (forwards are collectives).
                for pos in lockstep_rows(len(idx), self.rank, self.world, c.micro_batch):
                    empty = pos.numel() == 0
                    mb = {k: v[idx[pos] if not empty else idx[:1]] for k, v in batch.items()}
                    width = int(mb["attention_mask"].sum(1).max())
                    mb = {k: (v[:, :width] if v.dim() == 2 else v) for k, v in mb.items()}
                    mb = {k: v.to(device) for k, v in mb.items()}  # the batch is built on the CPU
                    train_tokens += 0 if empty else int(mb["attention_mask"].sum())
                    mask, w = mb["loss_mask"], mb["weight"]
                    share = 0.0 if empty else float(w.sum() / total_w)  # this micro-batch's part of the mean
                    logp = self.scorer(mb["input_ids"], mb["attention_mask"], c.temperature)
                    loss, st = clipped_policy_loss(logp, mb["old_logp"], mb["advantages"], mask, c.clip_low, c.clip_high, w)
                    st["pg_loss"] = loss.item()
                    if self.reference is not None:
                        kl = masked_mean(kl_k3(logp, mb["ref_logp"]), w)
                        loss = loss + c.kl_coef * kl
                        st["kl_ref"] = kl.item()
                    if self.critic is not None:
                        v = self.critic(mb["input_ids"], mb["attention_mask"]).float()
                        vf = clipped_value_loss(v, mb["old_values"], mb["returns"], w, c.vf_clip)
                        st["vf_loss"] = vf.item()
                        if self.shared:
                            loss = loss + c.vf_coef * vf
                        else:
                            (vf * share * self.world).backward()
                    # × world: FSDP averages the ranks' gradients, the shares of the mean must add up
                    (loss * share * self.world).backward()
                    for k, v in st.items():
                        st_sum[k] = st_sum.get(k, 0.0) + v * share
                if self.world > 1:  # each rank summed its share of the global mean
                    keys = sorted(st_sum)
                    st_sum = dict(zip(keys, all_reduce_sum([st_sum[k] for k in keys], device)))
                if self.critic_opt is not None:
                    torch.nn.utils.clip_grad_norm_(self.critic.parameters(), c.max_grad_norm)
                    self.critic_opt.step()
                norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
                st_sum["grad_norm"] = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
                self.opt.step()
                for k, v in st_sum.items():
                    stats.setdefault(k, []).append(v)
        self.policy.eval()
        if self.world > 1:
            train_tokens = int(all_reduce_sum([train_tokens], device)[0])
        solved = [bool(tr.info.get("success")) for tr in trajs]
        n = len(trajs)
        rec = {
            "step": t, "episodes": n, "mean_reward": sum(tr.reward for tr in trajs) / n, "success_rate": sum(solved) / n,
            "mean_turns": sum(tr.num_turns for tr in trajs) / n, "truncated": sum(tr.truncated for tr in trajs) / n,
            "generated_tokens": counters.get("generated_tokens", 0),
            "rollout_tokens": counters.get("prompt_tokens", 0) + counters.get("generated_tokens", 0),
            "train_tokens": train_tokens, "optimizer_steps": len(stats.get("pg_loss", [])),
            **{k: sum(v) / len(v) for k, v in stats.items()},
            "rollout_s": rollout_s, "wall_s": time.perf_counter() - start,
        }
        return rec

    def _rollouts(self, t: int, counters: dict[str, int]) -> list[TokenTrajectory]:
        """The step's episodes. Several ranks: each rolls out its share with the full parameters
        (its own sampling seed), and all ranks get every episode, in the one-rank order."""
        c = self.cfg
        tasks_seed = derive_seed("rl-tasks", c.seed, t)
        if self.world == 1:
            return self.rollout_fn(self.policy, tasks_seed, derive_seed("rl-sampling", c.seed, t), c.group_size, counters)
        mine: dict[str, int] = {}
        with full_params(self.scorer):
            local = self.rollout_fn(self.policy, tasks_seed, derive_seed("rl-sampling", c.seed, t, self.rank),
                                    c.group_size, mine, shard=(self.rank, self.world))
        parts = self.collective.all_gather((local, mine))
        trajs: list[Any] = [None] * sum(len(p) for p, _ in parts)
        for r, (part, cnt) in enumerate(parts):
            for j, tr in enumerate(part):
                trajs[r + j * self.world] = tr
            for k, v in cnt.items():
                counters[k] = counters.get(k, 0) + v
        if any(tr is None for tr in trajs):
            raise RuntimeError(f"ranks returned {[len(p) for p, _ in parts]} episodes: not rank i of every i % {self.world}")
        return trajs

    def run(self) -> list[dict[str, Any]]:
        done = len(self.metrics) or self.resume()  # a caller may have resumed already
        bar = tqdm(range(done, self.cfg.steps), initial=done, total=self.cfg.steps,
                   desc=f"Agentic {self.cfg.algo.upper()} steps", disable=not self.progress or self.rank != 0)
        warned = False
        for t in bar:
            rec = self.step(t)
            self.metrics.append(rec)
            if rec["truncated"] and not warned and self.rank == 0:
                # A cut episode scores 0: a cap below the episodes' length makes the method fail by config.
                log.warning("step %d: %.0f%% of the episodes were cut by rl.max_total_tokens and scored 0 "
                            "(mean %.1f turns); raise the cap unless it is meant to bound memory",
                            t, 100 * rec["truncated"], rec["mean_turns"])
                warned = True
            for k in ("episodes", "generated_tokens", "rollout_tokens", "train_tokens", "wall_s"):
                self.totals[k] += rec[k]
            if self.checkpoint_path is not None:
                self.save(self.checkpoint_path)
            if self.on_step is not None:
                self.on_step(rec)
            bar.set_postfix(R=f"{rec['mean_reward']:.3f}", succ=f"{rec['success_rate']:.3f}")
        if self.checkpoint_path is not None and not Path(self.checkpoint_path).exists():
            self.save(self.checkpoint_path)  # continued with no step left: the run's own checkpoint
        return self.metrics
