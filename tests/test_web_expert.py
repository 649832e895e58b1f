"""The scripted expert solves every task template in a real browser, and wrong answers fail
every evaluator kind. Needs the web extra and Debian's chromium; skipped without them
unless ESOPT_WEB_REQUIRED is set (CI sets it), then missing pieces fail the run."""


import pytest

from conftest import require_web

require_web()

from esopt.envs.web import ScriptedExpert, WebEnv, WebRuntime, generate_tasks
from esopt.envs.web.templates import TEMPLATES, template_tasks


@pytest.fixture(scope="module")
def runtime():
    rt = WebRuntime(seed=0, browsers=2)
    yield rt
    rt.close()


def run_expert(env, task, syntax="webarena"):
    obs = env.reset(task)
    expert = ScriptedExpert.for_task(task, env.site_urls, syntax)
    done, actions = False, []
    while not done:
        actions.append(expert.act(obs))
        obs, reward, done, info = env.step(actions[-1])
    return reward, info, actions


def sample(tid):
    """One task of the template: from the eval split for every other template, else train."""
    tasks = template_tasks(tid, 0)
    want = "eval" if tid % 2 == 0 and any(t.config["split"] == "eval" for t in tasks) else "train"
    return [next(t for t in tasks if t.config["split"] == want)]


@pytest.mark.parametrize("tid", sorted(TEMPLATES), ids=[TEMPLATES[t][0] for t in sorted(TEMPLATES)])
def test_the_expert_solves_every_template(runtime, tid):
    env = WebEnv(runtime)
    try:
        for task in sample(tid):
            reward, info, actions = run_expert(env, task)
            assert reward == 1.0 and info["success"], (task.intent, actions, info)
            assert info["invalid_actions"] == 0 and info["failed_actions"] == 0 and info["error"] is None
    finally:
        env.close()


def test_the_expert_speaks_the_webrl_syntax_too(runtime):
    env = WebEnv(runtime)
    task = generate_tasks(0, "train", 1, templates=[205])[0]  # type a comment, click, stop
    reward, info, actions = run_expert(env, task, syntax="webrl")
    env.close()
    assert actions[0].startswith('do(action="Search"') and actions[-1].startswith("exit(message=")
    assert reward == 1.0, (actions, info)


def _one(tid, pred=lambda t: True):
    return next(t for t in generate_tasks(0, "train", templates=[tid]) if pred(t))


WRONG = {  # evaluator kind -> (template, a wrong final action)
    "exact_match": (202, "stop [1000]"),
    "must_include": (101, "stop [$0.01]"),
    "one_of": (102, "stop [a car]"),
    "must_exclude": (303, "stop [open or closed]"),
    "url_match": (103, "stop []"),  # still on the start page
    "program_html": (105, "stop []"),  # nothing was added
}


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_an_obviously_wrong_answer_fails_each_evaluator_kind(runtime, kind):
    tid, action = WRONG[kind]
    task = _one(tid)
    env = WebEnv(runtime)
    env.reset(task)
    _, reward, done, info = env.step(action)
    env.close()
    assert done and reward == 0.0 and not info["success"] and info["error"] is None, info
    shown = info["eval"]
    if kind in ("url_match", "program_html"):
        assert shown[kind]["score"] == 0.0
    else:
        assert shown["string_match"][kind] == 0.0
