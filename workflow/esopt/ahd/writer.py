"""The small expression language the tiny heuristic writer is warm-started on.

A tiny model cannot write whole Python functions, so at tiny scale it writes one
expression over a task's named features (esopt.ahd.tasks.base: `features`,
`expression_template`): e.g. `d+0.5*e` for "prefer near nodes, a little the ones near
the start". Expressions are trees of features, constants, + - * /, sqrt and square;
this module draws random ones and applies the four EoH operators syntactically, so
the warm start teaches what e1 (a new form), e2 (a combination), m1 (a structural
change) and m2 (new constants) look like. Which expressions are *good* the model does
not learn here: that is left to the search and to ES. `demonstrations` gives the warm
start's transcripts (a prompt of every task and operator, a random expression as reply).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from esopt.seeding import derive_seed

CONSTANTS = ("0.1", "0.2", "0.5", "1", "2", "3", "5")
BINARY = ("+", "-", "*", "/")
UNARY = ("sqrt", "sq")  # np.sqrt(np.abs(x)) and x**2

Expr = str | tuple  # a leaf (feature or constant) or (op, child[, child])

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def to_text(e: Expr) -> str:
    """Python text with the parentheses precedence needs (and no others)."""
    if isinstance(e, str):
        return e
    if e[0] == "sqrt":
        return f"np.sqrt(np.abs({to_text(e[1])}))"
    if e[0] == "sq":
        return f"{_wrap(e[1], 3)}**2"
    op, a, b = e
    p = _PRECEDENCE[op]
    left = _wrap(a, p)
    right = _wrap(b, p + (op in "-/"))  # a-(b-c), a/(b*c)
    return f"{left}{op}{right}"


def _wrap(e: Expr, need: int) -> str:
    text = to_text(e)
    if isinstance(e, tuple) and e[0] in _PRECEDENCE and _PRECEDENCE[e[0]] < need:
        return f"({text})"
    if isinstance(e, tuple) and e[0] == "sq" and need >= 3:
        return f"({text})"
    return text


def random_expression(features: Sequence[str], rng: random.Random, depth: int = 2) -> Expr:
    """A random tree of at most `depth` binary levels; every tree uses a feature."""
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice(list(features)) if rng.random() < 0.8 else rng.choice(CONSTANTS)
    r = rng.random()
    if r < 0.1:
        return (rng.choice(UNARY), rng.choice(list(features)))
    op = rng.choice(BINARY)
    a = random_expression(features, rng, depth - 1)
    b = random_expression(features, rng, depth - 1)
    if not (_has_feature(a, features) or _has_feature(b, features)):
        a = rng.choice(list(features))
    if op in "*/" and rng.random() < 0.5:  # weights: c*x is the most useful shape
        a = rng.choice(CONSTANTS)
        op = "*"
    return (op, a, b)


def _has_feature(e: Expr, features: Sequence[str]) -> bool:
    if isinstance(e, str):
        return e in features
    return any(_has_feature(c, features) for c in e[1:])


def _subtrees(e: Expr, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(e, tuple):
        for i, c in enumerate(e[1:], start=1):
            out += _subtrees(c, path + (i,))
    return out


def _get(e: Expr, path: tuple) -> Expr:
    for i in path:
        e = e[i]
    return e


def _put(e: Expr, path: tuple, new: Expr) -> Expr:
    if not path:
        return new
    i = path[0]
    return e[:i] + (_put(e[i], path[1:], new),) + e[i + 1:]


def mutate_structure(e: Expr, features: Sequence[str], rng: random.Random) -> Expr:
    """m1: a subtree replaced by a new random one (or the whole expression wrapped)."""
    if rng.random() < 0.2:
        return (rng.choice(BINARY), e, random_expression(features, rng, 1))
    path = rng.choice(_subtrees(e))
    return _put(e, path, random_expression(features, rng, 1))


def mutate_constants(e: Expr, features: Sequence[str], rng: random.Random) -> Expr:
    """m2: the same form with other constants (a feature gets a weight if there are none)."""
    consts = [p for p in _subtrees(e) if _get(e, p) in CONSTANTS]
    if not consts:
        feats = [p for p in _subtrees(e) if _get(e, p) in features]
        p = rng.choice(feats) if feats else ()
        return _put(e, p, ("*", rng.choice(CONSTANTS), _get(e, p)))
    out = e
    for p in consts:
        if rng.random() < 0.7 or p == consts[-1]:
            old = _get(out, p)
            out = _put(out, p, rng.choice([c for c in CONSTANTS if c != old]))
    return out


def crossover(parents: Sequence[Expr], features: Sequence[str], rng: random.Random) -> Expr:
    """e2: pieces of two parents joined (the 'common backbone' at this scale)."""
    a, b = rng.sample(list(parents), 2) if len(parents) >= 2 else (parents[0], parents[0])
    pa = _get(a, rng.choice(_subtrees(a)))
    pb = _get(b, rng.choice(_subtrees(b)))
    if not _has_feature(pa, features):
        pa = a
    return (rng.choice(BINARY), pa, pb)


def size(e: Expr) -> int:
    return 1 if isinstance(e, str) else 1 + sum(size(c) for c in e[1:])


def child(op: str, parents: Sequence[Expr], features: Sequence[str], rng: random.Random,
          max_size: int = 11) -> Expr:
    """A demonstration child for an EoH operator: i1/e1 new, e2 crossover, m1/m2 mutations.
    Children differ from their parents and stay at most `max_size` nodes (short outputs)."""
    texts = {to_text(p) for p in parents}
    for _ in range(50):
        if op in ("i1", "e1"):
            c = random_expression(features, rng)
        elif op == "e2":
            c = crossover(parents, features, rng)
        elif op == "m1":
            c = mutate_structure(parents[0], features, rng)
        elif op == "m2":
            c = mutate_constants(parents[0], features, rng)
        else:
            raise ValueError(f"unknown operator {op!r}")
        if size(c) <= max_size and to_text(c) not in texts and _has_feature(c, features):
            return c
    return random_expression(features, rng)


# ---------------------------------------------------------------- the tiny writer's warm start

OPERATORS = ("i1", "e1", "e2", "m1", "m2")


def demonstrations(task_names, per_task: int, parents_e: int, seed: int) -> list[list[dict[str, str]]]:
    """Chat transcripts (user prompt, assistant expression) for every task and operator."""
    from esopt.ahd.prompts import Candidate, TaskPrompt
    from esopt.ahd.tasks import make_task

    out = []
    for name in task_names:
        task = make_task(name)
        tp = TaskPrompt.from_task(task, "expression")
        feats = list(task.features)
        rng = random.Random(derive_seed("ahd-demos", name, seed))
        for j in range(per_task):
            op = OPERATORS[j % len(OPERATORS)]
            n = {"i1": 0, "m1": 1, "m2": 1}.get(op, parents_e)
            parents = [random_expression(feats, rng) for _ in range(n)]
            shown = [Candidate(id=i, operator="i1", thought=to_text(p), code=task.expression_code(to_text(p)))
                     for i, p in enumerate(parents)]
            reply = to_text(child(op, parents, feats, rng))
            out.append([{"role": "user", "content": tp.build(op, shown)}, {"role": "assistant", "content": reply}])
    random.Random(derive_seed("ahd-demo-order", seed)).shuffle(out)
    return out
