"""Expert ReAct demonstrations for the tool benchmarks (the tiny tool model's warm start,
esopt.models.sft).

A few hundred steps on expert episodes leave the tiny model partly competent, so ES
and GRPO have a signal to improve. The expert runs the real
tools: a math demonstration's observation is what the sandbox printed, a DocVQA
one's is what OCR read (tasks whose answer OCR did not read verbatim are left out, so
the model never learns to answer what it could not see). With `mistake_prob` an
episode starts with a malformed call (unclosed tag) and the feedback it gets, so the
model has seen the recovery.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm

from esopt.agent.react import make_react_env
from esopt.agent.rollout import Trajectory, Turn, build_messages
from esopt.agent.tools import Tool
from esopt.envs.benchmarks import get
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)


def demonstrations(benchmark: str, tasks: Sequence[Any], tools: Sequence[Tool], system: str,
                   mistake_prob: float, seed: int, history_turns: int | None = None,
                   progress: bool = True) -> Iterator[list[dict[str, str]]]:
    """Chat transcripts ending in an expert reply, along expert episodes of the real tools
    (the benchmark's expert: esopt.envs.benchmarks.Benchmark.expert_actions, expert_answer)."""
    bench = get(benchmark)
    rng = random.Random(derive_seed("tool-demos", benchmark, seed))
    kept = 0
    for task in tqdm(tasks, desc=f"{benchmark} demonstrations", disable=not progress):
        env = make_react_env(benchmark, tools, None)
        traj = Trajectory(getattr(task, "id", ""), system, env.reset(task))
        transcripts = []
        for action in bench.expert_actions(task, tools):
            if rng.random() < mistake_prob:
                bad = action.rsplit("</", 1)[0]  # an unclosed call
                obs, _, _, _ = env.step(bad)
                traj.turns.append(Turn(bad, obs, 0.0))
            transcripts.append(build_messages(traj, history_turns) + [{"role": "assistant", "content": action}])
            obs, _, _, _ = env.step(action)
            traj.turns.append(Turn(action, obs, 0.0))
        answer = bench.expert_answer(task, traj.turns[-1].observation)
        if answer is None:
            continue
        reply = f"Answer: {answer}"
        transcripts.append(build_messages(traj, history_turns) + [{"role": "assistant", "content": reply}])
        _, reward, done, _ = env.step(reply)
        if not done or reward <= 0:
            continue  # the expert's own answer must score
        kept += 1
        yield from transcripts
    log.info("%s: %d of %d expert episodes kept", benchmark, kept, len(tasks))
