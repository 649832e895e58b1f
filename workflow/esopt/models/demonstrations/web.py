"""Expert web demonstrations: the scripted expert's episodes of the training tasks, played in
the real browser on the real sites (the tiny web model's warm start, esopt.models.sft).

Each turn of an expert episode becomes one transcript: the prompt the agent would see
(esopt.agent.rollout.build_messages, so the warm start matches the rollouts) and the
expert's action. With `mistake_prob`, an action is preceded by a wrong one (an id the
page does not have, or an unreadable reply) and the feedback it gets, so the model has
seen the recovery (only where the rest of the plan still fits the turn budget). Episodes
the expert does not finish with success (a plan longer than max_turns) are dropped.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm

from esopt.agent.rollout import Trajectory, Turn, build_messages
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)


def wrong_action(rng: random.Random) -> str:
    """A reply the environment refuses with an explanation: a missing id, or no action at all."""
    return rng.choice([f"click [{rng.randint(900, 999)}]", "click", "type [7]", "I will look at the page."])


def demonstrations(tasks: Sequence[Any], make_env: Callable[[], Any], system: str, mistake_prob: float, seed: int,
                   history_turns: int | None = 0, progress: bool = True) -> Iterator[list[dict[str, str]]]:
    """Chat transcripts ending in an expert action, along the expert's successful episodes."""
    from esopt.envs.web.expert import ExpertError, ScriptedExpert

    rng = random.Random(derive_seed("web-demos", seed))
    kept = 0
    for task in tqdm(tasks, desc="web demonstrations", disable=not progress):
        env = make_env()
        try:
            obs = env.reset(task)
            traj = Trajectory(task.id, system, obs)
            expert = ScriptedExpert.for_task(task, env.site_urls)
            transcripts, info, done = [], {}, False
            while not done and not expert.done:
                left = env.max_turns - len(traj.turns) - (len(expert.plan) - expert.k)
                if left > 0 and rng.random() < mistake_prob:  # only where the plan still fits the turn budget
                    bad = wrong_action(rng)
                    obs, _, done, info = env.step(bad)
                    traj.turns.append(Turn(bad, obs, 0.0))
                    if done:
                        break
                action = expert.act(obs)
                transcripts.append(build_messages(traj, history_turns) + [{"role": "assistant", "content": action}])
                obs, _, done, info = env.step(action)
                traj.turns.append(Turn(action, obs, 0.0))
        except ExpertError as e:
            log.warning("task %s: the expert's plan does not fit the page (%s); dropped", task.id, str(e).splitlines()[0])
            continue
        finally:
            env.close()
        if not info.get("success"):
            log.warning("task %s: the expert's episode failed (%s); dropped", task.id, info.get("error") or info.get("eval"))
            continue
        kept += 1
        yield from transcripts
    log.info("web: %d of %d expert episodes kept", kept, len(tasks))
