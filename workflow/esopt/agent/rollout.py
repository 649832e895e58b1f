"""Batched multi-turn rollouts: every unfinished episode advances with one engine call per turn.

All episodes of one model state move together: turn k builds the chat prompt of
every active episode, asks the engine (esopt.agent.engine) to continue them all,
and steps each environment with its decoded action. Model output is untrusted; the
environment answers anything it cannot use with an explanatory observation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch

from esopt.agent.engine import Completion, Engine, Sampling, as_engine, count
from esopt.io import atomic_path


class TextEnv(Protocol):
    def reset(self, task: Any) -> str: ...
    def step(self, action: str) -> tuple[str, float, bool, dict]: ...


@dataclass
class Turn:
    action: str  # the reply's answer: what the environment was given
    observation: str  # what the environment answered
    reward: float
    reasoning: str = ""  # the reply's think block (agent.thinking on), never shown to the environment


THINK_CLOSE = "</think>"


def split_reply(text: str, thinking: bool) -> tuple[str, str]:
    """(reasoning, answer) of a decoded reply. With thinking on, the generation prompt
    opens the think block, so a reply reads `reasoning</think>answer`; one cut by the
    token cap before `</think>` is all reasoning and gives the environment no answer.
    With thinking off the whole reply is the answer."""
    if not thinking:
        return "", text
    reasoning, closed, answer = text.partition(THINK_CLOSE)
    return reasoning.strip(), (answer.lstrip("\n") if closed else "")


def require_thinking_mode(tokenizer) -> None:
    """agent.thinking needs a template whose generation prompt follows enable_thinking and
    a tokenizer that keeps `</think>` when replies are decoded without special tokens;
    otherwise no reply would ever show an answer, so say so instead of failing every episode."""
    msgs = [{"role": "user", "content": "x"}]
    on, off = (tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=t)
               for t in (True, False))
    if on == off:
        raise ValueError("agent.thinking is true but the chat template has no thinking mode (enable_thinking changes nothing)")
    ids = tokenizer(THINK_CLOSE, add_special_tokens=False)["input_ids"]
    if THINK_CLOSE not in tokenizer.decode(ids, skip_special_tokens=True):
        raise ValueError(f"agent.thinking is true but the tokenizer drops {THINK_CLOSE} when decoding replies")


@dataclass
class Trajectory:
    task_id: str
    system: str
    first_observation: str
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return len(self.turns)


def system_message(system: str) -> list[dict[str, str]]:
    """[the system message], or none for an empty system prompt (the authors' Sudoku
    prompt is one user message: a template would still render an empty system turn)."""
    return [{"role": "system", "content": system}] if system else []


def build_messages(traj: Trajectory, history_turns: int | None) -> list[dict[str, str]]:
    """system, then the conversation [first observation, action, observation, ...]
    cut to its last `history_turns` exchanges (None: all). With 0 the prompt is
    system + latest observation, which for Sudoku holds the whole state and the
    feedback on the last move."""
    n = len(traj.turns)
    start = 0 if history_turns is None else max(0, n - history_turns)
    first = traj.first_observation if start == 0 else traj.turns[start - 1].observation
    msgs = system_message(traj.system) + [{"role": "user", "content": first}]
    for t in traj.turns[start:]:
        reply = {"role": "assistant", "content": t.action}
        if t.reasoning:  # a thinking template decides whether an earlier turn shows it
            reply["reasoning_content"] = t.reasoning
        msgs.append(reply)
        msgs.append({"role": "user", "content": t.observation})
    return msgs


def render_prompt(tokenizer, messages: list[dict[str, str]], thinking: bool) -> str:
    """The chat template's text for the next reply. enable_thinking is always passed:
    Qwen3.5's template thinks when it is left out; templates without a thinking mode ignore it."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)


def observation_tokens(tokenizer, observation: str, thinking: bool) -> int:
    """Tokens an observation adds to the conversation: the template's rendering of it as the
    only (user) message, with the generation prompt (how the authors count an observation
    against their per-episode cap)."""
    text = render_prompt(tokenizer, [{"role": "user", "content": observation}], thinking)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def rollout(
    policy: torch.nn.Module | Engine,
    tokenizer,
    make_env: Callable[[], TextEnv],
    tasks: Sequence[Any],
    system: str,
    sampling: Sampling,
    seed: int,
    max_turns: int,
    history_turns: int | None = 0,
    batch_size: int | None = None,
    task_id: Callable[[Any], str] = lambda t: getattr(t, "id", str(t)),
    counters: dict[str, int] | None = None,
    thinking: bool = False,
    max_episode_tokens: int | None = None,
    members: Sequence[int] | None = None,
) -> list[Trajectory]:
    """Run one episode per task with the policy as it is now; returns trajectories in task order.

    `policy` is a model (run through esopt.agent.engine.HFEngine) or an Engine.
    `seed` fixes the sampling noise (the same seed for every ES member gives common
    random numbers); `batch_size` bounds how many episodes share one HF generate call.
    `counters` (if given) accumulates generate_calls, prompt_tokens and
    generated_tokens actually run through the model (cached replies cost nothing).
    `thinking` is agent.thinking: the template's enable_thinking; the environment gets
    each reply's answer, its reasoning is kept on the Turn.
    `max_episode_tokens` (None: no cap) caps an episode's tokens after its first prompt: each
    reply as generated plus each observation as the chat template renders it alone (with the
    next generation prompt), the authors' count. An episode the env has not ended when it
    reaches the cap ends there, with the reward it has (unanswered: none) and
    info["ended"] = "max_episode_tokens"; a reply that reaches it and answers is scored.
    `members` (a population engine, esopt.agent.population): the member slot that plays each
    task. The episodes of all members then advance together, one engine call per turn; an
    episode's sampling key is its index among its member's tasks (so every member draws the
    same noise for the same task, as when it plays alone), and `counters` holds one dict of
    counts per member, each as if the member's rows were its own engine call.
    """
    if thinking:
        require_thinking_mode(tokenizer)
    engine = as_engine(policy, tokenizer, batch_size)
    envs = [make_env() for _ in tasks]
    trajs = [Trajectory(task_id(t), system, env.reset(t)) for env, t in zip(envs, tasks)]
    # Greedy decoding is a function of the prompt: a prompt seen before (a stalled
    # episode repeating a rejected move, or two episodes in the same state) gets
    # its earlier reply without another forward pass.
    replies: dict[tuple[int, str], Completion] | None = None if sampling.do_sample else {}
    member = list(members) if members is not None else [0] * len(tasks)
    key, so_far = [], {}  # an episode's index among its member's tasks
    for m in member:
        key.append(so_far.get(m, 0))
        so_far[m] = key[-1] + 1
    spent = [0] * len(trajs)  # tokens counted against max_episode_tokens
    for turn in range(max_turns):
        active = [i for i, tr in enumerate(trajs) if not tr.done]
        if not active:
            break
        prompts = {i: (member[i], render_prompt(tokenizer, build_messages(trajs[i], history_turns), thinking))
                   for i in active}
        if replies is None:
            todo = active
        else:  # one generation per distinct new prompt (of each member)
            first = {}
            for i in active:
                if prompts[i] not in replies:
                    first.setdefault(prompts[i], i)
            todo = list(first.values())
        outs: dict[int, Completion] = {}  # sampled replies of this turn (greedy ones live in `replies`)
        if todo:
            ids = tokenizer([prompts[i][1] for i in todo], add_special_tokens=False)["input_ids"]
            if members is None:
                done = engine.generate(ids, sampling, ("sampling", seed, turn), keys=todo, counters=counters)
            else:
                done = engine.generate(ids, sampling, ("sampling", seed, turn), keys=[key[i] for i in todo],
                                       members=[member[i] for i in todo])
                if counters is not None:
                    for m in sorted({member[i] for i in todo}):
                        rows = [k for k, i in enumerate(todo) if member[i] == m]
                        count(counters.setdefault(m, {}), 1, sum(len(ids[k]) for k in rows),
                              sum(len(done[k].token_ids) for k in rows))
            for i, c in zip(todo, done):
                if replies is None:
                    outs[i] = c
                else:
                    replies[prompts[i]] = c
        for i in active:
            c = outs[i] if replies is None else replies[prompts[i]]
            reasoning, action = split_reply(c.text, thinking)
            obs, reward, done_, info = envs[i].step(action)
            tr = trajs[i]
            tr.turns.append(Turn(action, obs, float(reward), reasoning))
            tr.reward += float(reward)
            tr.done = done_
            tr.info = info
            if max_episode_tokens is not None and not done_:
                spent[i] += len(c.token_ids) + observation_tokens(tokenizer, obs, thinking)
                if spent[i] >= max_episode_tokens:
                    tr.done = True
                    tr.info = {**info, "ended": "max_episode_tokens", "episode_tokens": spent[i]}
    for tr in trajs:  # the turn budget ran out before the env said done
        tr.done = True
    return trajs


def write_trajectories(path: str | os.PathLike, trajs: Sequence[Trajectory], **extra: Any) -> None:
    """One JSON object per episode: prompt, actions, observations, rewards, turn count."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        for tr in trajs:
            rec = {**extra, **asdict(tr), "num_turns": tr.num_turns}
            f.write(json.dumps(rec) + "\n")


def kept_steps(steps: int, every: int = 10) -> set[int]:
    """The generations (or RL steps) whose sampled episodes a run keeps in trajectories/:
    the first, every 10th, and the last."""
    return {0, steps - 1} | set(range(0, steps, every))
