"""Sudoku as a multi-turn text environment for LLM agents.

The agent sees the board (one row per line, '.' for blanks) and answers with one
placement per turn, `r{row}c{col}={value}` (1-indexed). Every turn costs one unit
of the budget whether or not the placement is accepted, so the minimum success
horizon H* equals the number of blanks: a puzzle with k blanks needs exactly k
correct placements. Varying `blanks` therefore sweeps the horizon directly.

Each placement is checked against the rules (row/column/box) and then against
the puzzle's unique solution, so only correct digits ever land on the board and
the board can never become unsolvable; mistakes only cost turns.

Train/valid/eval split by hash: with k the first 8 hex digits of sha256(puzzle), a
puzzle is 'eval' iff k % 8 == 0, 'valid' iff k % 8 == 1, else 'train' (see
`split_of`). The generator discards candidates of the other splits, so the three are
disjoint by construction, for any seeds, sizes and counts, with no bookkeeping.
'valid' is what the warm start selects its checkpoint on; 'eval' is held out for
the reported numbers.

The authors' protocol (sudoku.prompt: authors; SudokuEnv(protocol="authors")) is their
environment as their launchers ran it: no system prompt, each turn one user message
(`authors_prompt`), replies parsed by their grammar (`parse_authors_action`), their
feedback messages, and their rules: any digit lands in an empty cell, so a wrong one
stays and the episode ends, unsolved, once the board is full. H* is still the number of
blanks (a solve takes exactly H* placements).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass

from esopt.config import SUDOKU_MAX_BLANKS

BOX = {4: (2, 2), 6: (2, 3), 9: (3, 3)}  # board size -> box (rows, columns)
MAX_BLANKS = SUDOKU_MAX_BLANKS  # the most blanks this generator reaches (measured: docs/sudoku_and_models.md)
MAX_FAILED_ATTEMPTS = 2000  # consecutive rejected candidates before giving up
MAX_SHORT_REMOVALS = 100  # consecutive grids that do not reach the blanks asked for: give up at once


class GenerationError(ValueError, RuntimeError):
    """The generator cannot make the puzzles asked for (too many blanks or puzzles): a setting's
    fault, so a ValueError (one line from the CLI), and a RuntimeError as it always was."""


ACTION_RE = re.compile(r"r\s*(\d+)\s*c\s*(\d+)\s*=\s*(\d+)", re.IGNORECASE | re.ASCII)
MAX_NUMBER_DIGITS = 18  # longer numbers are treated as malformed (int() caps at 4300 digits)
INVALID_FEEDBACK = "invalid: write rRcC=V, e.g. r1c2=3"


def _check_size(size: int) -> None:
    if size not in BOX:
        raise ValueError(f"size must be one of {sorted(BOX)}, got {size!r}")


def _box_index(r: int, c: int, size: int) -> int:
    """0-based box number, boxes numbered row-major."""
    br, bc = BOX[size]
    return (r // br) * (size // bc) + c // bc


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SudokuTask:
    puzzle: str
    solution: str
    size: int
    blanks: int

    def __post_init__(self) -> None:
        _check_size(self.size)
        cells = self.size * self.size
        if len(self.puzzle) != cells or len(self.solution) != cells:
            raise ValueError(f"puzzle and solution must have {cells} chars for size {self.size}")
        if self.puzzle.count(".") != self.blanks:
            raise ValueError(f"blanks={self.blanks} but puzzle has {self.puzzle.count('.')} blanks")

    @property
    def id(self) -> str:
        return _sha256(self.puzzle)[:12]


def render(board: str, size: int) -> str:
    return "\n".join(board[i : i + size] for i in range(0, size * size, size))


OBSERVATIONS = ("board", "cells", "coords")


def observe(board: str, size: int, style: str = "board") -> str:
    """What the agent sees of the board. "board": the rows; "cells": the rows, then the
    empty cells in action form (the authors' prompt lists them as "Current empty
    cells"), so choosing a cell is a copy and the model's work is the digit; "coords":
    each row led by its label rN (the authors' prompt labels rows r1..r9), so a cell's
    row is copied from its line and its column is its offset from the label."""
    if style == "board":
        return render(board, size)
    if style == "cells":
        return render(board, size) + "\nempty " + " ".join(f"r{i // size + 1}c{i % size + 1}" for i, ch in enumerate(board) if ch == ".")
    if style == "coords":
        return "\n".join(f"r{k + 1} {line}" for k, line in enumerate(render(board, size).split("\n")))
    raise ValueError(f"observation {style!r}: expected one of {OBSERVATIONS}")


SPLITS = ("train", "valid", "eval")


def split_of(puzzle: str) -> str:
    k = int(_sha256(puzzle)[:8], 16) % 8
    return "eval" if k == 0 else "valid" if k == 1 else "train"


def _candidates(board: str, size: int) -> dict[int, int]:
    """Bitmask of rule-legal digits (bit d-1 for digit d) for every blank cell."""
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    for i, ch in enumerate(board):
        if ch != ".":
            r, c = divmod(i, size)
            bit = 1 << (int(ch) - 1)
            rows[r] |= bit
            cols[c] |= bit
            boxes[_box_index(r, c, size)] |= bit
    full = (1 << size) - 1
    out = {}
    for i, ch in enumerate(board):
        if ch == ".":
            r, c = divmod(i, size)
            out[i] = full & ~(rows[r] | cols[c] | boxes[_box_index(r, c, size)])
    return out


def solve_count(board: str, size: int, limit: int = 2) -> int:
    """Number of solutions of `board`, counting stops at `limit`."""
    _check_size(size)
    if len(board) != size * size:
        raise ValueError(f"board must have {size * size} chars, got {len(board)}")
    digits = "123456789"[:size]
    if any(ch != "." and ch not in digits for ch in board):
        raise ValueError(f"board chars must be '.' or 1-{size}")

    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    blanks = []  # (row, col, box) of each empty cell
    for i, ch in enumerate(board):
        r, c = divmod(i, size)
        b = _box_index(r, c, size)
        if ch == ".":
            blanks.append((r, c, b))
            continue
        bit = 1 << (int(ch) - 1)
        if (rows[r] | cols[c] | boxes[b]) & bit:
            return 0  # the givens already break a rule
        rows[r] |= bit
        cols[c] |= bit
        boxes[b] |= bit
    full = (1 << size) - 1

    def search(limit: int) -> int:
        if not blanks:
            return 1
        # branch on the most constrained cell: keeps the tree tiny on near-full boards
        best, best_cands, best_n = 0, 0, size + 1
        for k, (r, c, b) in enumerate(blanks):
            cands = full & ~(rows[r] | cols[c] | boxes[b])
            n = cands.bit_count()
            if n < best_n:
                best, best_cands, best_n = k, cands, n
                if n <= 1:
                    break
        if best_n == 0:
            return 0
        r, c, b = cell = blanks.pop(best)
        count = 0
        while best_cands and count < limit:
            bit = best_cands & -best_cands
            best_cands ^= bit
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            count += search(limit - count)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[b] ^= bit
        blanks.insert(best, cell)
        return count

    return search(limit) if limit > 0 else 0


def _rng(*parts: object) -> random.Random:
    # sha256 rather than hash(): stable across processes and Python versions
    return random.Random(int(_sha256("|".join(map(str, parts)))[:16], 16))


def _random_grid(size: int, rng: random.Random) -> str:
    """A random full grid: a base pattern under validity-preserving symmetries."""
    br, bc = BOX[size]
    relabel = rng.sample("123456789"[:size], size)

    def shuffled_lines(width: int) -> list[int]:  # permute bands of `width` lines, then lines within each
        bands = size // width
        return [band * width + line for band in rng.sample(range(bands), bands) for line in rng.sample(range(width), width)]

    rows, cols = shuffled_lines(br), shuffled_lines(bc)
    # row r of the base pattern is row 0 shifted by bc * (r % br) + r // br: every row,
    # column and br x bc box holds each digit once
    grid = [[relabel[(bc * (r % br) + r // br + c) % size] for c in cols] for r in rows]
    if br == bc and rng.random() < 0.5:  # transposing keeps square boxes only
        grid = list(zip(*grid))
    return "".join("".join(row) for row in grid)


def _remove_cells(solution: str, size: int, blanks: int, rng: random.Random) -> str:
    """Blank up to `blanks` cells in random order keeping the solution unique (fewer when
    the grid runs out of cells that can go)."""
    board = list(solution)
    order = rng.sample(range(size * size), size * size)
    removed = 0
    for tried, i in enumerate(order):
        if removed == blanks or removed + len(order) - tried < blanks:
            break
        board[i] = "."
        if solve_count("".join(board), size) == 1:
            removed += 1
        else:
            board[i] = solution[i]
    return "".join(board)


def generate_puzzles(size: int, blanks: int, n: int, seed: int, split: str) -> list[SudokuTask]:
    """`n` distinct uniquely-solvable puzzles of `split`, each with exactly `blanks` blanks.

    Candidate k is drawn from an rng keyed on (seed, split, size, blanks, k), so
    the output is deterministic and a shorter call is a prefix of a longer one.
    """
    _check_size(size)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not 1 <= blanks <= MAX_BLANKS[size]:
        raise ValueError(
            f"blanks must be in 1..{MAX_BLANKS[size]} for {size}x{size} (the most this generator reaches), got {blanks}"
        )
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")

    tasks: list[SudokuTask] = []
    seen: set[str] = set()
    attempt, failed, short, reached = 0, 0, 0, 0
    while len(tasks) < n:
        if failed >= MAX_FAILED_ATTEMPTS or short >= MAX_SHORT_REMOVALS:
            why = (f"{short} grids in a row fell short (the best reached {reached})" if short >= MAX_SHORT_REMOVALS
                   else f"{failed} consecutive candidates failed (too many blanks, or too few distinct puzzles)")
            raise GenerationError(f"generated only {len(tasks)}/{n} {size}x{size} {split} puzzles with {blanks} blanks: {why}")
        rng = _rng(seed, split, size, blanks, attempt)
        attempt += 1
        solution = _random_grid(size, rng)
        puzzle = _remove_cells(solution, size, blanks, rng)
        if puzzle.count(".") < blanks:
            failed, short, reached = failed + 1, short + 1, max(reached, puzzle.count("."))
            continue
        short = 0
        if split_of(puzzle) != split or puzzle in seen:
            failed += 1
            continue
        failed = 0
        seen.add(puzzle)
        tasks.append(SudokuTask(puzzle=puzzle, solution=solution, size=size, blanks=blanks))
    return tasks


def training_tasks(size: int, blanks: int, n: int, task_seed: int, pool: int | None = None,
                   pool_seed: int = 0) -> list[SudokuTask]:
    """A generation's (or RL step's) `n` training puzzles. pool None: fresh ones drawn from
    `task_seed`. pool N: a cyclic run through one fixed set of N train-split puzzles (drawn
    from `pool_seed`, the same for every run and generation), as the authors' batches cycle
    through their training file: from the first puzzle when N divides n (n == N: all N, in
    order, every generation: the authors' 32 per H*), else from a start `task_seed` picks."""
    if pool is None:
        return generate_puzzles(size, blanks, n, seed=task_seed, split="train")
    tasks = generate_puzzles(size, blanks, pool, seed=pool_seed, split="train")
    start = 0 if n % pool == 0 else _rng("pool", task_seed).randrange(pool)
    return [tasks[(start + k) % pool] for k in range(n)]


def parse_action(text: str) -> tuple[int, int, int] | None:
    """(row, col, value) from the first `rRcC=V` in `text`, unchecked; None if absent."""
    m = ACTION_RE.search(text)
    if m is None or any(len(g) > MAX_NUMBER_DIGITS for g in m.groups()):
        return None
    r, c, v = (int(g) for g in m.groups())
    return r, c, v


def expert_action(board: str, size: int, solution: str, order: str = "fewest") -> str:
    """Demonstrator: fill a blank with its solution digit. order="fewest": the most
    constrained blank (row-major on ties); "row": a blank of the row with the fewest
    blanks (then fewest candidates), so a lone blank is completed from its own row;
    "first": the first blank in row-major order."""
    cands = _candidates(board, size)
    if not cands:
        raise ValueError("board has no blank cell")
    if order == "fewest":
        i = min(cands, key=lambda i: (cands[i].bit_count(), i))
    elif order == "row":
        row_blanks = [board[r * size:(r + 1) * size].count(".") for r in range(size)]
        i = min(cands, key=lambda i: (row_blanks[i // size], cands[i].bit_count(), i))
    elif order == "first":
        i = min(cands)
    else:
        raise ValueError(f"order {order!r}: expected 'fewest', 'row' or 'first'")
    r, c = divmod(i, size)
    return f"r{r + 1}c{c + 1}={solution[i]}"


# --- The authors' protocol (github zz1358m/Agentic-ESOpt at 8c08393, sudoku-train-time/envs/sudoku.py):
# one user message per turn holding the rules, the last feedback, the original puzzle and the
# current board with coordinates, and the list of empty cells; replies `set <row> <col> <value>`
# (1-indexed); any digit lands in an empty cell; the episode ends when the board is full.

PROTOCOLS = ("ours", "authors")
PROMPTS = ("full", "short", "authors")  # sudoku.prompt; "authors" selects the authors' protocol
AUTHORS_INVALID = "Invalid action format. Use exactly: set <row> <col> <value>."
_NUMBER_WORDS = {4: "four", 6: "six", 9: "nine"}
_AUTHORS_KEYWORD = re.compile(r"\b(set|fill|place|action)\b", re.IGNORECASE)
_AUTHORS_CELL = re.compile(r"\br\s*([1-9])\s*c\s*([1-9])\b\D*([1-9])\b", re.IGNORECASE)
_AUTHORS_DIGIT = re.compile(r"\b[1-9]\b")
_FIRST_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)


def protocol_of(prompt: str) -> str:
    """The environment protocol a sudoku.prompt value selects."""
    return "authors" if prompt == "authors" else "ours"


def _json_action(text: str) -> tuple[int, int, int] | None:
    """(row, col, value) from the first {...} in `text` when it is a JSON object naming
    row/r, col/c and value/v as anything int() takes (numbers, digit strings, booleans,
    as the authors' parser does); None otherwise."""
    m = _FIRST_OBJECT.search(text)
    if m is None:
        return None
    try:
        obj = json.loads(m.group(0))
        r, c, v = (int(obj[k] if k in obj else obj.get(k[0])) for k in ("row", "col", "value"))
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        return None
    return r, c, v


def parse_authors_action(text: str) -> tuple[int, int, int] | None:
    """(row, col, value), 1-indexed and unchecked, by the authors' grammar; None if absent.

    In order: a JSON object {"row", "col", "value"} (or r/c/v); else, in each line that
    names set/fill/place/action and then in the whole reply, `rRcC` followed by a digit
    (r3c4=5, r3c4 5), or else the first three standalone digits 1-9 (set 3 4 5). Digits
    are single: `set 10 2 3` has only two, so it is no action."""
    found = _json_action(text)
    if found is not None:
        return found
    candidates = [line for line in text.splitlines() if _AUTHORS_KEYWORD.search(line)] + [text]
    for cand in candidates:
        m = _AUTHORS_CELL.search(cand)
        if m is not None:
            r, c, v = (int(g) for g in m.groups())
            return r, c, v
        digits = _AUTHORS_DIGIT.findall(cand)
        if len(digits) >= 3:
            r, c, v = (int(d) for d in digits[:3])
            return r, c, v
    return None


def board_with_coords(board: str, size: int) -> str:
    """The authors' board: a column header c1..cN, rows labelled rN:, '|' between box
    columns and a dashed line between box rows."""
    br, bc = BOX[size]
    groups = [range(g, g + bc) for g in range(0, size, bc)]
    heads = [" ".join(f"c{k + 1}" for k in g) for g in groups]
    rule = "      " + "+".join("-" * (len(h) + (0 if k in (0, len(heads) - 1) else 2)) for k, h in enumerate(heads))
    lines = ["      " + " | ".join(heads)]
    for r in range(size):
        row = board[r * size:(r + 1) * size]
        lines.append(f"r{r + 1}:   " + " | ".join(" ".join(row[k] for k in g) for g in groups))
        if (r + 1) % br == 0 and r + 1 < size:
            lines.append(rule)
    return "\n".join(lines)


def authors_prompt(task: SudokuTask, board: str, turn: int, feedback: str = "") -> str:
    """The authors' whole prompt for one turn (`turn` counts from 0): rules and format,
    the last feedback if any, the original puzzle, the current board and its empty cells."""
    n = task.size
    br, bc = BOX[n]
    empty = [f"r{i // n + 1}c{i % n + 1}" for i, ch in enumerate(board) if ch == "."]
    rules = (
        "You are an agent solving Sudoku one action at a time. "
        "At each turn, fill exactly one empty cell. Rows and columns are 1-indexed. "
        f"The board is split by | and horizontal lines into {_NUMBER_WORDS[n]} {br}x{bc} boxes. "
        f"Every row, every column, and every {br}x{bc} box must contain digits 1 through {n} exactly once. "
        "Choose the cell only from the Current empty cells list. "
        "Keep all original givens fixed. Your entire response must be exactly one line "
        "containing one action and nothing else. Do not explain, reason aloud, wrap the "
        "answer in code fences, or output any extra words. Use exactly this format:\n"
        "set <row> <col> <value>\n"
    )
    if feedback:
        rules += f"\nLast environment feedback: {feedback}\n"
    return (
        f"{rules}\nOriginal puzzle, mask_count={task.blanks}:\n{board_with_coords(task.puzzle, n)}\n\n"
        f"Current board, turn={turn}, remaining_empty={len(empty)}:\n{board_with_coords(board, n)}\n\n"
        f"Current empty cells: {', '.join(empty) if empty else 'none'}\n"
    )


class SudokuEnv:
    """One episode at a time; `step` takes raw model text and never raises on it.

    protocol "ours": observations are `observe(board)` then the feedback line, actions
    rRcC=V, and only correct digits land (a wrong one is rejected and costs the turn).
    protocol "authors": the authors' environment (module docstring, "The authors'
    protocol"): each observation is their whole prompt, actions `set r c v`, any digit
    lands in an empty cell, and the episode ends when the board is full (solved only if
    every placement was right) or the turns run out. `observation` is ours only.
    """

    def __init__(self, max_turns: int, reward: str = "success", observation: str = "board", protocol: str = "ours"):
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if reward not in ("success", "shaped"):
            raise ValueError(f"reward must be 'success' or 'shaped', got {reward!r}")
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if protocol == "authors" and observation != "board":
            raise ValueError(f"observation {observation!r} is ours only: the authors' prompt shows its own board "
                             "(coordinates and empty cells); leave sudoku.observation at board with prompt: authors")
        self.max_turns = max_turns
        self.reward = reward
        self.observation = observation
        self.protocol = protocol
        self._task: SudokuTask | None = None
        self._board = ""
        self._done = True

    @property
    def task(self) -> SudokuTask | None:
        return self._task

    @property
    def board(self) -> str:
        return self._board

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: SudokuTask) -> str:
        if task.blanks < 1:
            raise ValueError("task has no blank cells")
        self._task = task
        self._board = task.puzzle
        self._done = False
        self._turns = self._invalid = self._illegal = self._placed = self._wrong = 0
        if self.protocol == "authors":
            return authors_prompt(task, self._board, turn=0)
        return observe(self._board, task.size, self.observation)

    def _judge(self, action: str) -> str:
        """Feedback line for `action`; applies it to the board when accepted."""
        parsed = parse_action(action)
        if parsed is None:
            self._invalid += 1
            return INVALID_FEEDBACK
        r, c, v = parsed
        n = self._task.size
        prefix = f"rejected r{r}c{c}={v}: "
        for name, x in (("row", r), ("column", c), ("value", v)):
            if not 1 <= x <= n:
                self._illegal += 1
                return prefix + f"{name} must be 1-{n}"
        i = (r - 1) * n + (c - 1)
        if self._board[i] != ".":
            self._illegal += 1
            return prefix + "cell is filled"
        d = str(v)
        box = _box_index(r - 1, c - 1, n)
        cells = {
            f"row {r}": [(r - 1) * n + k for k in range(n)],
            f"column {c}": [k * n + (c - 1) for k in range(n)],
            f"box {box + 1}": [j for j in range(n * n) if _box_index(*divmod(j, n), n) == box],
        }
        for unit, idx in cells.items():
            if any(self._board[j] == d for j in idx):
                self._illegal += 1
                return prefix + f"{v} already in {unit}"
        if self._task.solution[i] != d:
            self._illegal += 1
            return prefix + "wrong digit"
        self._board = self._board[:i] + d + self._board[i + 1 :]
        self._placed += 1
        return f"placed r{r}c{c}={v}"

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("episode is over; call reset() before step()")
        self._turns += 1
        text = action if isinstance(action, str) else str(action)
        feedback = self._judge_authors(text) if self.protocol == "authors" else self._judge(text)
        # ours places only correct digits, so a full board is solved; the authors' may hold wrong ones
        solved = self._board == self._task.solution
        self._done = "." not in self._board or self._turns >= self.max_turns
        reward = 0.0
        if self._done:
            # _placed counts correct digits only, so placed/blanks is the fraction filled correctly
            reward = float(solved) if self.reward == "success" else self._placed / self._task.blanks
        info = {
            "success": solved,
            "turns": self._turns,
            "invalid_actions": self._invalid,
            "illegal_actions": self._illegal,
            "placed": self._placed,
            "blanks_left": self._board.count("."),
            "feedback": feedback,
        }
        if self.protocol == "authors":
            info["wrong_placements"] = self._wrong
            return authors_prompt(self._task, self._board, self._turns, feedback), reward, self._done, info
        # Board first: every cell keeps the same position in every observation.
        return observe(self._board, self._task.size, self.observation) + "\n" + feedback, reward, self._done, info

    def _judge_authors(self, action: str) -> str:
        """The authors' feedback for `action`; any digit in range lands in an empty cell."""
        parsed = parse_authors_action(action)
        if parsed is None:
            self._invalid += 1
            return AUTHORS_INVALID
        r, c, v = parsed
        n = self._task.size
        if not (1 <= r <= n and 1 <= c <= n and 1 <= v <= n):
            self._illegal += 1
            return f"Row, column, and value must all be integers from 1 to {n}."
        i = (r - 1) * n + (c - 1)
        if self._task.puzzle[i] != ".":
            self._illegal += 1
            return f"Cell r{r}c{c} is a fixed given and cannot be changed."
        if self._board[i] != ".":
            self._illegal += 1
            return f"Cell r{r}c{c} is already filled."
        self._board = self._board[:i] + str(v) + self._board[i + 1 :]
        if self._task.solution[i] == str(v):
            self._placed += 1
        else:
            self._wrong += 1
        return f"Filled r{r}c{c} with {v}."


def instructions(size: int, style: str = "full") -> str:
    """The system prompt. "full" explains rules and format (for pretrained LLMs);
    "short" names the task and the format only (for the tiny model, where every
    prompt token is paid for on every turn of every episode); "authors": none (their
    rules travel in each turn's one user message, `authors_prompt`)."""
    _check_size(size)
    if style == "short":
        return f"Sudoku {size}x{size}. Reply rRcC=V"
    if style == "authors":
        return ""
    if style != "full":
        raise ValueError(f"prompt style {style!r}: expected one of {PROMPTS}")
    br, bc = BOX[size]
    return (
        f"You are playing Sudoku on a {size}x{size} board, shown one row per line from the top; "
        f"'.' marks an empty cell. Every digit 1-{size} must appear exactly once in each row, each column "
        f"and each {br}x{bc} box (rows x columns). Each turn, fill exactly one empty cell: reply with rRcC=V "
        f"(row R, column C, value V, counted from 1), for example r1c2=3. "
        f"After each move you see whether it was placed or rejected, and the board."
    )
