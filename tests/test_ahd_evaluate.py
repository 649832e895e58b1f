"""Sandboxed evaluation of model-written heuristics: static checks, limits, hostile code.

A toy task keeps these tests independent of the real ones: the runner calls
`pick(values)` and returns the index; the parent scores values[index] (minimized) and
rejects anything that is not a valid index."""

from __future__ import annotations

import pytest

from esopt.ahd import evaluate
from esopt.ahd.evaluate import HeuristicEvaluator, check_code
from esopt.ahd.tasks.base import HeuristicTask, InstanceSpec

RUNNER = '''
import numpy as np

def run(heuristic, instance):
    return heuristic(np.array(instance["values"], dtype=float))
'''


class PickTask(HeuristicTask):
    name = "pick"
    function_name = "pick"
    signature = "def pick(values):"
    description = "return the index of a value"
    metric = "picked value"
    reference_code = "import numpy as np\ndef pick(values):\n    return int(np.argmin(values))\n"
    expression_template = "import numpy as np\ndef pick(values):\n    v = values\n    return int(np.argmin({expr}))\n"
    features = {"v": "the values"}
    runner = "unused"

    def instances(self, split, spec, seed):
        return [{"values": [3.0, 1.0, 2.0]}, {"values": [5.0, 4.0, 6.0]}]

    def score(self, instance, output):
        if not isinstance(output, int) or isinstance(output, bool) or not 0 <= output < len(instance["values"]):
            return None
        return instance["values"][output]

    def runner_source(self):
        return RUNNER


@pytest.fixture(scope="module")
def evaluator():
    task = PickTask()
    # 1 MB of output: a flood past it is cut quickly even on a busy 2-core machine
    return HeuristicEvaluator(task, task.instances("search", InstanceSpec(2, 3), 0), timeout_s=3, cpu_s=3,
                              memory_mb=512, output_mb=1)


def test_reference_and_expression_code_score_the_mean_objective(evaluator):
    ev = evaluator(PickTask.reference_code)
    assert ev.status == "ok" and ev.per_instance == [1.0, 4.0] and ev.objective == 2.5
    worst = evaluator(PickTask().expression_code("-v"))  # argmin of -v picks the largest
    assert worst.objective == pytest.approx((3.0 + 6.0) / 2)


@pytest.mark.parametrize("code, why", [
    ("import os\ndef pick(values):\n    return 0\n", "import of 'os'"),
    ("import subprocess\ndef pick(values):\n    return 0\n", "import of 'subprocess'"),
    ("from numpy import ctypeslib\ndef pick(values):\n    return 0\n", "ctypeslib"),
    ("import numpy.ctypeslib\ndef pick(values):\n    return 0\n", "numpy.ctypeslib"),
    ("def pick(values):\n    return eval('0')\n", "'eval'"),
    ("def pick(values):\n    return open('/etc/passwd').read()\n", "'open'"),
    ("def pick(values):\n    return values.__class__.__mro__\n", "attribute '__"),
    ("def pick(values):\n    return __import__('os')\n", "__import__"),
    ("def pick(values):\n    return getattr(values, 'sum')()\n", "'getattr'"),
    ("import operator\ndef pick(values):\n    return operator.attrgetter('__class__')(values)\n", "'attrgetter'"),
    ("from operator import attrgetter\ndef pick(values):\n    return 0\n", "operator.attrgetter"),
    ("from operator import methodcaller\ndef pick(values):\n    return 0\n", "operator.methodcaller"),
    ("import typing\ndef pick(values: 'x'):\n    return typing.get_type_hints(pick)\n", "'get_type_hints'"),
    ("import math\nmath.factorial(10**9)\ndef pick(values):\n    return 0\n", "top level"),
    ("print('hi')\ndef pick(values):\n    return 0\n", "top level"),
    ("def other(values):\n    return 0\n", "no top-level function named 'pick'"),
    ("def pick(values:\n    return 0\n", "does not parse"),
    ("", "empty"),
])
def test_static_check_refuses_before_running(code, why):
    reason = check_code(code, "pick")
    assert reason is not None and why in reason


def test_static_check_allows_ordinary_heuristics():
    code = ("import numpy as np\nimport math\nfrom collections import Counter\nSCALE = 2.0\n"
            "def pick(values):\n    '''doc'''\n    s = np.sort(values)\n    return int(np.argmin(values * SCALE + math.e * 0))\n")
    assert check_code(code, "pick") is None


@pytest.mark.parametrize("body, status", [
    ("    while True:\n        pass\n", "timeout"),  # CPU loop
    ("    import time\n    time.sleep(30)\n    return 0\n", "refused"),  # time is not allowed: refused statically
    ("    x = bytearray(2 * 1024**3)\n    return 0\n", "memory"),
    ("    raise RuntimeError('boom')\n", "error"),
    ("    return 'zero'\n", "invalid_output"),
    ("    return 17\n", "invalid_output"),
    ("    return float('nan')\n", "invalid_output"),
    ("    return [0] * 10**6\n", "invalid_output"),  # a flood of output (3 MB): cut, then rejected
])
def test_hostile_or_broken_candidates_score_worst_and_never_raise(evaluator, body, status):
    ev = evaluator("def pick(values):\n" + body)
    assert ev.objective is None and not ev.valid
    assert ev.status == status, ev
    assert ev.error
    if "10**6" in body:
        assert "cut" in ev.error or "unreadable result" in ev.error, ev  # the cut output cannot be read


def test_a_candidate_cannot_forge_the_result_line(evaluator):
    # It may print anything; only the harness's marker line counts, and the output is validated.
    code = "def pick(values):\n    print('@@esopt-result-0000000000000000@@[0, 0]')\n    return 99\n"
    ev = evaluator(code)
    assert ev.objective is None and ev.status == "invalid_output"


# A candidate past the static check (here: with the check switched off) reads the marker from
# the harness's code, prints a result line of its own and exits before the harness does.
FORGER = """
import sys

def pick(values):
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "_esopt_main":
        frame = frame.f_back
    marker = next(c for c in frame.f_code.co_consts if isinstance(c, str) and c.startswith("@@esopt-result-"))
    print(marker + FORGED, flush=True)
    raise SystemExit(0)
"""


@pytest.mark.parametrize("forged, status, objective", [
    ("[1, 1]", "ok", 2.5),  # valid picks are scored as what they are, though pick() returns none
    ("[0, 2]", "ok", (3.0 + 6.0) / 2),
    ("[7, -1]", "invalid_output", None),  # what the parent cannot validate is rejected
    ('"best"', "invalid_output", None),
])
def test_a_forged_result_line_scores_only_what_the_trusted_scoring_validates(evaluator, monkeypatch, forged,
                                                                             status, objective):
    monkeypatch.setattr(evaluate, "check_code", lambda code, name: None)
    ev = evaluator(FORGER.replace("FORGED", repr(forged)))
    assert (ev.status, ev.objective) == (status, objective), ev


def test_the_evaluator_records_its_sandbox_layers(evaluator):
    assert evaluator.sandbox.layers["rlimits"] and evaluator.sandbox.layers["audit_hook"]
    record = evaluate.sandbox_provenance({"ahd": {"evaluation": {"require_all_layers": True}}})
    assert record["layers"] == evaluator.sandbox.layers and record["require_all_layers"] is True


def test_identical_code_is_evaluated_once(evaluator):
    code = "import numpy as np\ndef pick(values):\n    return int(np.argmax(values))\n"
    before = evaluator.sandbox_runs
    first, second = evaluator(code), evaluator(code)
    assert evaluator.sandbox_runs == before + 1
    assert (first.objective, second.objective, second.cached) == (4.5, 4.5, True)
    many = evaluator.many([code, PickTask.reference_code, code])
    assert [e.objective for e in many] == [4.5, 2.5, 4.5]
