"""esopt.ahd.prompts and esopt.ahd.search: AHD prompts, reply parsing, EoH and Sample as pure logic."""

import json
import math
import random
import re
from collections import Counter
from typing import ClassVar

import pytest

from esopt.ahd.prompts import (
    MAX_EXPR_CHARS,
    Candidate,
    Request,
    TaskPrompt,
    code_key,
    parse_expression,
    parse_reply,
)
from esopt.ahd.search import EoH, Sample, rank_weights, select_parents


class ToyTask:
    """The attributes of esopt.ahd.tasks.base.HeuristicTask that prompts and parsing use."""

    name = "toy_fit"
    function_name = "score"
    signature = "def score(x, y, z):"
    description = "Write score(x, y, z), a float from three numbers; it is compared with a hidden target."
    metric = "mean absolute error"
    features: ClassVar[dict[str, str]] = {"x": "first input", "y": "second input", "z": "third input"}
    expression_template = "def score(x, y, z):\n    return {expr}\n"

    def expression_code(self, expr: str) -> str:
        return self.expression_template.replace("{expr}", expr.strip())


TASK = ToyTask()
FUNC = TaskPrompt.from_task(TASK, "function")
EXPR = TaskPrompt.from_task(TASK, "expression")
POINTS = [(x, y, z) for x in (-2.0, -0.5, 1.0, 3.0) for y in (-1.0, 0.5, 2.0) for z in (0.0, 1.5)]


def toy_objective(code: str) -> float | None:
    """A pure function of the code: mean |score - target| over fixed points; None if it fails."""
    ns: dict = {}
    try:
        exec(compile(code, "<toy>", "exec"), ns)  # noqa: S102 - the test's own toy expressions
        err = sum(abs(ns["score"](x, y, z) - (x * y + 2 * z - 1)) for x, y, z in POINTS) / len(POINTS)
        return float(err)
    except Exception:  # noqa: BLE001 - any failure makes the toy candidate invalid
        return None


def cand(cid, objective, code=None, thought=""):
    return Candidate(id=cid, operator="i1", thought=thought or f"idea {cid}",
                     code=code or f"def score(x, y, z):\n    return {cid}\n", objective=objective)


def answer(req: Request, objective, code=None):
    return req.child(reply="r", thought=f"t{req.child_id}", code=code or f"def score(x, y, z):\n    return {req.child_id}\n",
                     objective=objective)


# ---- Candidate, TaskPrompt
def test_candidate_json_round_trip():
    c = Candidate(id=7, operator="m1", thought="t", code="c", objective=1.25, parents=[3], generation=2, reply="r",
                  error="", verdict="kept")
    back = Candidate.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back == c and back.valid
    assert not Candidate(id=1, operator="i1").valid
    assert not Candidate(id=1, operator="i1", objective=math.nan).valid


def test_task_prompt_reads_the_task():
    assert FUNC.inputs == ("x", "y", "z") and FUNC.function_name == "score" and FUNC.task_name == "toy_fit"
    assert EXPR.features == ("x", "y", "z")
    with pytest.raises(ValueError):
        TaskPrompt.from_task(TASK, "haiku")


def test_expression_prompts_are_exact():
    a, b = cand(1, 1.0, thought="x*y"), cand(2, 2.0, thought="y +  2*z")
    assert EXPR.build("i1") == "task toy_fit op i1\nvars x y z\nwrite:"
    assert EXPR.build("e1", [a, b]) == "task toy_fit op e1\nvars x y z\nparent 1: x*y\nparent 2: y + 2*z\nwrite:"
    assert EXPR.build("e2", [b, a]) == "task toy_fit op e2\nvars x y z\nparent 1: y + 2*z\nparent 2: x*y\nwrite:"
    assert EXPR.prompt_m1(a) == "task toy_fit op m1\nvars x y z\nparent 1: x*y\nwrite:"
    assert EXPR.prompt_m2(b) == "task toy_fit op m2\nvars x y z\nparent 1: y + 2*z\nwrite:"


def test_function_prompts_follow_eoh_wording():
    a = cand(1, 0.123456, thought="square the first input", code="def score(x, y, z):\n    return x * x\n")
    b = cand(2, 9.5, thought="sum all", code="def score(x, y, z):\n    return x + y + z\n")
    tail = ("First, describe your new algorithm and main steps in one sentence. The description must be inside a brace. "
            "Next, implement it in Python as a function named score. This function should accept 3 input(s): "
            "'x', 'y', 'z'. Use exactly this signature: def score(x, y, z):\nDo not give additional explanations.")
    assert FUNC.prompt_i1() == TASK.description + "\n" + tail
    e1 = FUNC.prompt_e1([a, b])
    assert e1.startswith(TASK.description + "\nI have 2 existing algorithms with their codes as follows:\n"
                         "No.1 algorithm and the corresponding code are:\nsquare the first input\n"
                         "def score(x, y, z):\n    return x * x\nNo.2 algorithm")
    assert "totally different form from the given ones.\n" in e1 and e1.endswith(tail)
    e2 = FUNC.prompt_e2([a, b])
    assert "but can be motivated from them." in e2 and "Firstly, identify the common backbone idea" in e2
    m1 = FUNC.prompt_m1(a)
    assert "Algorithm description: square the first input\nCode:\ndef score" in m1
    assert "a different form but can be a modified version of the algorithm provided" in m1
    assert "different parameter settings of the score function provided" in FUNC.prompt_m2(a)
    for prompt in (e1, e2, m1, FUNC.prompt_m2(a)):  # objectives are never shown, as in EoH
        assert "0.123456" not in prompt and "9.5" not in prompt
    with pytest.raises(ValueError):
        FUNC.build("m1", [a, b])
    with pytest.raises(ValueError):
        FUNC.build("i1", [a])
    with pytest.raises(ValueError):
        FUNC.build("x9")


# ---- parsing
GOOD = """{Score by the product of the first two inputs plus twice the third.}
```python
import math

def score(x, y, z):
    # product
    return x * y + 2 * z
```
"""


def test_parse_function_replies():
    thought, code = parse_reply(GOOD, FUNC)
    assert thought == "Score by the product of the first two inputs plus twice the third."
    assert code == "import math\n\ndef score(x, y, z):\n    # product\n    return x * y + 2 * z\n"
    # unfenced code runs to the end; trailing prose is cut so that it parses
    reply = "Sure! {Use the sum.}\ndef score(x, y, z):\n    return x + y + z\nThis function adds the inputs.\n"
    assert parse_reply(reply, FUNC) == ("Use the sum.", "def score(x, y, z):\n    return x + y + z\n")
    # no brace: empty thought; nested braces inside the description are kept
    assert parse_reply("def score(x, y, z):\n    return 1\n", FUNC) == ("", "def score(x, y, z):\n    return 1\n")
    assert parse_reply("{a {b} c}\ndef score(x,y,z): return {1: 2}[1]", FUNC)[0] == "a {b} c"
    # a leading <think> block is ignored, including its braces and code
    think = "<think>{wrong} def score(x,y,z): return 0</think>\n{right}\n```\ndef score(x, y, z):\n    return 2\n```"
    assert parse_reply(think, FUNC) == ("right", "def score(x, y, z):\n    return 2\n")
    # the first fence that defines the function wins; an unclosed fence runs to the end
    two = "```\nprint(1)\n```\n{b}\n```py\ndef score(x, y, z):\n    return 3\n```\n```\ndef score(x,y,z): return 4\n```"
    assert parse_reply(two, FUNC) == ("b", "def score(x, y, z):\n    return 3\n")
    assert parse_reply("```python\ndef score(x, y, z):\n    return 5", FUNC) == ("", "def score(x, y, z):\n    return 5\n")


@pytest.mark.parametrize("reply", [
    "", "   \n\n", "{only a thought}", "I cannot help with that.",
    "def other(x, y, z):\n    return 1\n",                        # wrong function
    "```python\nimport os\n```",                                      # code without the function
    "{x" * 5000, "```" * 3000, "}{" * 4000 + "def", "\x00def score(x):\x00",
    None, 42, b"def score(x, y, z): return 1",                     # not text at all
])
def test_parse_function_rejects_malformed_and_hostile(reply):
    assert parse_reply(reply, FUNC) is None


def test_parse_never_raises_on_random_text():
    rng = random.Random(3)
    alphabet = "{}`()def score:\n\t #'\"\\x y z=+-*/0123456789import from\x00\u2028"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        for tp in (FUNC, EXPR):
            out = parse_reply(text, tp, TASK)
            assert out is None or (isinstance(out, tuple) and len(out) == 2)


def test_parse_expression_replies():
    assert parse_reply("x*y + 2*z\nparent 2: junk", EXPR, TASK) == (
        "x*y + 2*z", "def score(x, y, z):\n    return x*y + 2*z\n")
    assert parse_reply("\n\n   y - 1  \n", EXPR, TASK) == ("y - 1", "def score(x, y, z):\n    return y - 1\n")
    # without the task object, the task prompt's template stands in
    assert parse_reply("z", EXPR) == ("z", "def score(x, y, z):\n    return z\n")
    assert parse_expression("max(x, y) / (1 + abs(z))") == "max(x, y) / (1 + abs(z))"


@pytest.mark.parametrize("reply", [
    "", "\n \n", "x +* y", "x; y", "__import__('os')", "import os", "x.__class__", "(" * 150 + "x" + ")" * 40,
    "x" + "+x" * MAX_EXPR_CHARS, "x\ry", "x\x00", "def score(x, y, z):", "write: x", None,
])
def test_parse_expression_rejects(reply):
    assert parse_reply(reply, EXPR, TASK) is None


def test_code_key_ignores_comments_blank_lines_and_spacing():
    a = "def score(x, y, z):\n    # a comment\n\n    return x+y   # tail\n"
    b = "def score(x,y,z):\n  return x + y\n"
    assert code_key(a) == code_key(b) == "def score ( x , y , z ) :\n<indent> return x + y\n<dedent>"
    assert code_key(a) != code_key("def score(x, y, z):\n    return x-y\n")
    assert code_key("s = '# not a comment'") != code_key("s = ''")
    # code that does not tokenize still gets a key
    assert code_key("def f(:\n   '''open   # c\n\n") == "def f(:\n'''open"


# ---- selection
def test_rank_weights_are_eohs():
    assert rank_weights(3) == [1 / 4, 1 / 5, 1 / 6]
    assert rank_weights(0) == []


def test_selection_frequencies_favour_better_members():
    pop = [cand(i, float(i)) for i in range(10)]
    rng = random.Random(12345)
    draws = 40_000
    counts = Counter(select_parents(pop, 1, rng)[0].id for _ in range(draws))
    w = rank_weights(10)
    for r in range(10):  # within 4 standard deviations of EoH's probabilities
        p = w[r] / sum(w)
        assert abs(counts[r] / draws - p) < 4 * math.sqrt(p * (1 - p) / draws)
    assert counts[0] > counts[4] > counts[9]
    assert 1.6 < counts[0] / counts[9] < 2.0  # expected 20/11 = 1.82


def test_select_parents_distinct_and_capped():
    pop = [cand(i, float(i)) for i in range(4)]
    rng = random.Random(0)
    for _ in range(200):
        ids = [p.id for p in select_parents(pop, 3, rng)]
        assert len(ids) == len(set(ids)) == 3
    assert sorted(p.id for p in select_parents(pop, 9, rng)) == [0, 1, 2, 3]
    assert select_parents([], 2, rng) == []


# ---- EoH: batches, survival, duplicates
def fill(search, objectives, codes=None):
    """Answer the whole current batch with these objectives (None = invalid)."""
    reqs = search.next_batch()
    assert len(reqs) == len(objectives)
    children = [answer(r, o, None if codes is None else codes[i]) for i, (r, o) in enumerate(zip(reqs, objectives))]
    return reqs, children, search.accept(reqs, children)


def test_eoh_operator_batches_and_parent_counts():
    s = EoH(EXPR, pop_size=4, parents_e=3, k=2, init_size=6, seed=1)
    assert s.requests_per_generation() == 4 + 4 + 8 + 8
    init = s.next_batch()
    assert [r.operator for r in init] == ["i1"] * 6 and all(r.parents == [] for r in init)
    assert [r.child_id for r in init] == list(range(6)) and all(r.generation == 0 for r in init)
    fill(s, [6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    assert not s.initializing and [c.objective for c in s.population] == [1.0, 2.0, 3.0, 4.0]
    members = {c.id for c in s.population}
    for op in ("e1", "e2", "m1", "m2"):
        reqs = s.next_batch()
        assert {r.operator for r in reqs} == {op} and all(r.generation == 1 for r in reqs)
        assert reqs[0].child_id == len(s.history)
        if op in ("e1", "e2"):
            assert len(reqs) == 4
            for r in reqs:
                ids = [p.id for p in r.parents]
                assert len(ids) == len(set(ids)) == 3 and set(ids) <= members
        else:
            assert len(reqs) == 8
            assert all(len(r.parents) == 1 for r in reqs)
            for a, b in zip(reqs[::2], reqs[1::2]):  # k = 2 requests per selected parent
                assert a.parents[0].id == b.parents[0].id and a.prompt == b.prompt and a.seed != b.seed
        assert all(r.prompt == EXPR.build(op, r.parents) for r in reqs)
        fill(s, [None] * len(reqs))  # nothing valid: the population stays, the search moves on
    assert s.generation == 1 and s.next_operator() == "e1" and len(s.history) == 6 + 24


def test_eoh_survival_keeps_best_unique_valid():
    s = EoH(EXPR, pop_size=3, init_size=10, seed=0)
    same = "def score(x, y, z):\n    return x\n"
    same_spaced = "def score(x,y,z):\n\n    return x   # dup\n"
    codes = [None, None, same, None, same_spaced, None, None, None, None, None]
    objs = [5.0, 3.0, 4.0, 3.0, 0.5, None, math.nan, math.inf, 7.0, 2.0]
    _, children, st = fill(s, objs, [c or f"def score(x, y, z):\n    return {i}\n" for i, c in enumerate(codes)])
    # within the batch: id 3 repeats id 1's objective, id 4 repeats id 2's code; 5-7 are invalid
    assert [c.verdict for c in children] == ["discarded", "kept", "kept", "duplicate", "duplicate",
                                            "invalid", "invalid", "invalid", "discarded", "kept"]
    assert [(c.id, c.objective) for c in s.population] == [(9, 2.0), (1, 3.0), (2, 4.0)]
    assert children[6].objective is None and "non-finite" in children[6].error
    assert st["valid"] == 7 and st["duplicates"] == 2 and st["kept"] == 3 and st["population_size"] == 3
    # against members: an objective equal after rounding to 5 decimals, a code equal up to spacing
    _, ch2, _ = fill(s, [2.000001, 1.0, 2.5], [None, "def score(x,y,z):\n  return x  # again\n", None])
    assert [c.verdict for c in ch2] == ["duplicate", "duplicate", "kept"]
    assert [(c.id, c.objective) for c in s.population] == [(9, 2.0), (12, 2.5), (1, 3.0)]
    assert s.best().id == 9 and s.next_operator() == "e2"
    # objective_decimals=None compares exactly
    s = EoH(EXPR, pop_size=3, objective_decimals=None, seed=0)
    fill(s, [2.0, 2.000001, 2.0])
    assert [c.objective for c in s.population] == [2.0, 2.000001]


def test_eoh_initialization_rules():
    # enough valid candidates after the first batch: evolution starts
    s = EoH(EXPR, pop_size=5, parents_e=2, seed=0)
    fill(s, [None, 2.0, None, 1.0, None])
    assert not s.initializing and s.next_operator() == "e1"
    # one valid candidate: another i1 batch until the cap, then evolution with what there is
    s = EoH(EXPR, pop_size=4, parents_e=2, max_init_batches=2, seed=0)
    fill(s, [None, 1.0, None, None])
    assert s.initializing
    fill(s, [None, 1.0, None, None])  # an objective duplicate: still one member
    assert not s.initializing and len(s.population) == 1
    e1 = s.next_batch()
    assert len(e1) == 4 and all(len(r.parents) == 1 for r in e1)
    # nothing valid ever: i1 batches go on past the cap
    s = EoH(EXPR, pop_size=3, max_init_batches=1, seed=0)
    for _ in range(4):
        assert s.next_operator() == "i1"
        fill(s, [None] * 3)
    assert s.initializing and s.best() is None and s.stats()["valid_rate"] == 0.0
    # m-only searches need just one member
    s = EoH(EXPR, pop_size=3, operators=("m1",), seed=0)
    fill(s, [None, None, 1.0])
    assert s.next_operator() == "m1" and s.requests_per_generation() == 3


def test_eoh_accept_checks_and_truncated_batch():
    s = EoH(EXPR, pop_size=4, seed=0)
    fill(s, [1.0, 2.0, 3.0, 4.0])
    reqs = s.next_batch()
    with pytest.raises(ValueError):  # a reordered batch
        s.accept(reqs[::-1], [answer(r, 9.0) for r in reqs[::-1]])
    with pytest.raises(ValueError):  # a child that answers another request
        s.accept(reqs, [answer(reqs[1], 9.0), answer(reqs[0], 8.0)])
    with pytest.raises(ValueError):  # more children than requests
        s.accept(reqs[:1], [answer(reqs[0], 9.0), answer(reqs[1], 8.0)])
    # a truncated batch: the driver sent only the first two requests
    st = s.accept(reqs[:2], [answer(reqs[0], 0.5), answer(reqs[1], None)])
    assert st["n"] == 2 and st["operator"] == "e1" and len(s.history) == 6
    assert s.next_operator() == "e2" and s.next_batch()[0].child_id == 6
    with pytest.raises(ValueError):  # the batch is done: its requests are stale
        s.accept(reqs[2:3], [answer(reqs[2], 1.5)])
    # requests may be cut without answers (fewer candidates than requests)
    nxt = s.next_batch()
    s.accept(nxt, [answer(nxt[0], 0.25)])
    assert s.best().objective == 0.25 and len(s.history) == 7 and s.next_operator() == "m1"


def test_eoh_next_batch_is_deterministic_and_seeded():
    def run(seed):
        s = EoH(EXPR, pop_size=6, k=2, seed=seed)
        fill(s, [float(i) for i in range(6)])
        return s
    a, b, c = run(4), run(4), run(5)
    batch = [(r.child_id, r.prompt, [p.id for p in r.parents], r.seed) for r in a.next_batch()]
    assert batch == [(r.child_id, r.prompt, [p.id for p in r.parents], r.seed) for r in a.next_batch()]  # idempotent
    assert batch == [(r.child_id, r.prompt, [p.id for p in r.parents], r.seed) for r in b.next_batch()]
    assert batch != [(r.child_id, r.prompt, [p.id for p in r.parents], r.seed) for r in c.next_batch()]


def test_state_dict_mismatch_is_refused():
    s = EoH(EXPR, pop_size=4, seed=0)
    fill(s, [1.0, 2.0, 3.0, 4.0])
    state = json.loads(json.dumps(s.state_dict()))
    with pytest.raises(ValueError, match="pop_size"):
        EoH(EXPR, pop_size=5, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="kind"):
        Sample(EXPR, batch_size=4).load_state_dict(state)


# ---- end to end on a toy: a seeded fake "LLM" writes expressions
PARENT = re.compile(r"^parent \d+: (.*)$", re.MULTILINE)
ATOMS = ["x", "y", "z", "x*y", "y*z", "x*z", "1", "2", "0.5", "2*z", "x+y"]


def fake_llm(req: Request) -> str:
    """Reads the parents off the prompt (so the prompt format is exercised) and writes a reply."""
    rng = random.Random(req.seed)
    parents = PARENT.findall(req.prompt)
    roll = rng.random()
    if roll < 0.08:
        return "x +* oops"  # unparsable
    if roll < 0.12:
        return "x / (y - y)"  # parses, fails at evaluation
    if req.operator in ("m1", "m2"):
        c = rng.choice([-1, -0.5, 0.5, 1, 2])
        return f"{parents[0]} + {c}*{rng.choice(ATOMS)}" if req.operator == "m1" else f"{parents[0]} - {c}"
    if req.operator == "e2" and len(parents) >= 2:
        return f"({parents[0]}) + ({parents[1]}) - {rng.choice(ATOMS)}"
    return " + ".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 3)))


def driver(search, budget: int, task_prompt=EXPR, stop_after_batches: int | None = None) -> list[int]:
    """The driver loop: cut the last batch to the budget; returns the batch sizes."""
    sizes: list[int] = []
    used = len(search.history)
    while used < budget and (stop_after_batches is None or len(sizes) < stop_after_batches):
        reqs = search.next_batch()[: budget - used]
        children = []
        for r in reqs:
            reply = fake_llm(r)
            parsed = parse_reply(reply, task_prompt, TASK)
            if parsed is None:
                children.append(r.child(reply=reply, error="unparsable reply"))
                continue
            thought, code = parsed
            obj = toy_objective(code)
            children.append(r.child(reply=reply, thought=thought, code=code, objective=obj,
                                    error="" if obj is not None else "evaluation failed"))
        search.accept(reqs, children)
        used += len(children)
        sizes.append(len(children))
    return sizes


def test_eoh_end_to_end_exact_budget_and_resume():
    budget = 137  # init 6, then 36 per generation: 3 generations and a cut 4th
    s = EoH(EXPR, pop_size=6, k=2, seed=11)
    assert s.requests_per_generation() == 36
    sizes = driver(s, budget)
    assert sizes == [6] + [6, 6, 12, 12] * 3 + [6, 6, 11]
    hist = s.history
    assert len(hist) == budget and [c.id for c in hist] == list(range(budget))
    assert s.generation == 3 and s.next_operator() == "m2"
    assert Counter(c.operator for c in hist) == {"i1": 6, "e1": 24, "e2": 24, "m1": 47, "m2": 36}
    assert Counter(c.generation for c in hist) == {0: 6, 1: 36, 2: 36, 3: 36, 4: 23}
    # every m1/m2 child of a generation came from a member of the population it was drawn from
    assert all(len(c.parents) == 1 for c in hist if c.operator in ("m1", "m2"))
    assert all(len(c.parents) == 2 for c in hist if c.operator in ("e1", "e2"))
    pop = s.population
    assert len(pop) == 6 and all(c.valid and c.verdict == "kept" for c in pop)
    assert [c.objective for c in pop] == sorted(c.objective for c in pop)
    assert len({c.objective for c in pop}) == 6 and len({code_key(c.code) for c in pop}) == 6
    assert all(c.verdict == "invalid" for c in hist if not c.valid)
    assert s.best() is pop[0] and pop[0].objective == min(c.objective for c in hist if c.valid)
    init_best = min(c.objective for c in hist if c.valid and c.generation == 0)
    assert pop[0].objective < init_best  # the search improved on the initial population
    st = s.stats()
    assert st["samples"] == budget and st["valid"] == sum(c.valid for c in hist) and 0.5 < st["valid_rate"] < 1.0
    assert st["duplicates"] == sum(c.verdict == "duplicate" for c in hist) > 0

    # an interrupted run, resumed from JSON, continues exactly as the uninterrupted one
    first = EoH(EXPR, pop_size=6, k=2, seed=11)
    driver(first, budget, stop_after_batches=4)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = EoH(EXPR, pop_size=6, k=2, seed=11)
    resumed.load_state_dict(state)
    assert [(r.prompt, r.child_id, r.seed) for r in resumed.next_batch()] == [
        (r.prompt, r.child_id, r.seed) for r in first.next_batch()]
    driver(resumed, budget)
    assert json.dumps(resumed.state_dict()) == json.dumps(s.state_dict())


def test_sample_end_to_end_exact_budget_and_resume():
    budget = 30
    s = Sample(EXPR, batch_size=8, seed=2)
    batch = s.next_batch()
    assert len(batch) == 8 and {r.prompt for r in batch} == {EXPR.prompt_i1()} and len({r.seed for r in batch}) == 8
    assert driver(s, budget) == [8, 8, 8, 6]
    hist = s.history
    assert len(hist) == budget and all(c.operator == "i1" and c.parents == [] for c in hist)
    best = s.best()
    assert best.objective == min(c.objective for c in hist if c.valid) and s.population == [best]
    assert s.stats()["samples"] == budget and s.generation == 4
    first = Sample(EXPR, batch_size=8, seed=2)
    driver(first, budget, stop_after_batches=2)
    resumed = Sample(EXPR, batch_size=8, seed=2)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    driver(resumed, budget)
    assert json.dumps(resumed.state_dict()) == json.dumps(s.state_dict())


def test_function_mode_end_to_end():
    """A function-mode reply round trip: prompts carry the parents' code, replies are parsed as functions."""
    s = EoH(FUNC, pop_size=3, seed=0)
    reqs = s.next_batch()
    children = []
    for r in reqs:
        thought, code = parse_reply(f"{{Return x plus {r.index}.}}\ndef score(x, y, z):\n    return x + {r.index}\n", FUNC)
        children.append(r.child(thought=thought, code=code, objective=toy_objective(code)))
    s.accept(reqs, children)
    e1 = s.next_batch()[0]
    assert len(e1.parents) == 2
    for p in e1.parents:
        assert p.thought in e1.prompt and p.code.strip() in e1.prompt
    # mean |x + c - target| over POINTS is 2.25, 2.375, 2.625 for c = 0, 1, 2
    assert [(c.thought, c.objective) for c in s.population] == [
        ("Return x plus 0.", 2.25), ("Return x plus 1.", 2.375), ("Return x plus 2.", 2.625)]
