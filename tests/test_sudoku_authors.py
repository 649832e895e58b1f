"""The authors' Sudoku protocol (sudoku.prompt: authors): their prompt, their action grammar,
their feedback and rules, as github zz1358m/Agentic-ESOpt at 8c08393 runs them
(sudoku-train-time/envs/sudoku.py)."""

import pytest

from esopt.agent.rollout import Trajectory, build_messages
from esopt.envs.sudoku import (
    AUTHORS_INVALID,
    SudokuEnv,
    SudokuTask,
    instructions,
    parse_authors_action,
    training_tasks,
)

PUZZLE = "27.61.958598..246.4.6589723.6495837273.46.8..98.2371463.7146589641895.37.59723614"
SOLUTION = "273614958598372461416589723164958372732461895985237146327146589641895237859723614"
NINE = SudokuTask(puzzle=PUZZLE, solution=SOLUTION, size=9, blanks=15)
SMALL = SudokuTask(puzzle="1.3434.2.143432.", solution="1234341221434321", size=4, blanks=4)

# The authors' build_action_prompt for NINE after r1c3=3 (turn 1), checked against their code
# run on the same board; our renderer must give it byte for byte.
AFTER_FIRST_MOVE = """\
You are an agent solving Sudoku one action at a time. At each turn, fill exactly one empty cell. \
Rows and columns are 1-indexed. The board is split by | and horizontal lines into nine 3x3 boxes. \
Every row, every column, and every 3x3 box must contain digits 1 through 9 exactly once. \
Choose the cell only from the Current empty cells list. Keep all original givens fixed. \
Your entire response must be exactly one line containing one action and nothing else. \
Do not explain, reason aloud, wrap the answer in code fences, or output any extra words. \
Use exactly this format:
set <row> <col> <value>

Last environment feedback: Filled r1c3 with 3.

Original puzzle, mask_count=15:
      c1 c2 c3 | c4 c5 c6 | c7 c8 c9
r1:   2 7 . | 6 1 . | 9 5 8
r2:   5 9 8 | . . 2 | 4 6 .
r3:   4 . 6 | 5 8 9 | 7 2 3
      --------+----------+--------
r4:   . 6 4 | 9 5 8 | 3 7 2
r5:   7 3 . | 4 6 . | 8 . .
r6:   9 8 . | 2 3 7 | 1 4 6
      --------+----------+--------
r7:   3 . 7 | 1 4 6 | 5 8 9
r8:   6 4 1 | 8 9 5 | . 3 7
r9:   . 5 9 | 7 2 3 | 6 1 4

Current board, turn=1, remaining_empty=14:
      c1 c2 c3 | c4 c5 c6 | c7 c8 c9
r1:   2 7 3 | 6 1 . | 9 5 8
r2:   5 9 8 | . . 2 | 4 6 .
r3:   4 . 6 | 5 8 9 | 7 2 3
      --------+----------+--------
r4:   . 6 4 | 9 5 8 | 3 7 2
r5:   7 3 . | 4 6 . | 8 . .
r6:   9 8 . | 2 3 7 | 1 4 6
      --------+----------+--------
r7:   3 . 7 | 1 4 6 | 5 8 9
r8:   6 4 1 | 8 9 5 | . 3 7
r9:   . 5 9 | 7 2 3 | 6 1 4

Current empty cells: r1c6, r2c4, r2c5, r2c9, r3c2, r4c1, r5c3, r5c6, r5c8, r5c9, r6c3, r7c2, r8c7, r9c1
"""


def test_the_authors_prompt_renders_a_known_board_byte_for_byte():
    env = SudokuEnv(45, protocol="authors")
    first = env.reset(NINE)
    assert "Last environment feedback" not in first and "turn=0, remaining_empty=15" in first
    obs, reward, done, _ = env.step("set 1 3 3")
    assert obs == AFTER_FIRST_MOVE and (reward, done) == (0.0, False)


def test_the_authors_prompt_is_one_user_message():
    env = SudokuEnv(45, protocol="authors")
    traj = Trajectory("t", instructions(9, "authors"), env.reset(NINE))
    assert build_messages(traj, history_turns=0) == [{"role": "user", "content": traj.first_observation}]


@pytest.mark.parametrize("reply, action", [
    ("set 1 2 3", (1, 2, 3)),
    ("SET 9 9 9", (9, 9, 9)),
    ("r1c2=3", (1, 2, 3)),                         # our syntax is theirs too
    ("set r3c4 5", (3, 4, 5)),
    ("place r1 c2 = 9", (1, 2, 9)),
    ("I'll place 4 at row 2\nset 2 5 7", (2, 5, 7)),  # a keyword line with too few digits is skipped
    ('{"row": 2, "col": 3, "value": 4}', (2, 3, 4)),
    ('{"r": "2", "c": 3, "v": 10}', (2, 3, 10)),   # JSON may carry out-of-range values: judged later
    ("1 2 3 4", (1, 2, 3)),                        # the first three standalone digits
    ("action: 12 3 4 5", (3, 4, 5)),               # 12 is no digit
    ("set 1,2,3", (1, 2, 3)),
    ("{bad json} 1 2 3", (1, 2, 3)),
    ("set 10 2 3", None),                          # digits are single: only two here
    ("set 0 2 3", None),
    ("set 1 2", None),
    ("r1c2", None),
    ('{"row": null}', None),
    ('{"row": 1e400, "c": 1, "v": 1}', None),
    ("", None),
    ("hello", None),
])
def test_the_authors_grammar(reply, action):
    assert parse_authors_action(reply) == action


def test_malformed_replies_get_the_authors_feedback_and_wrong_digits_land():
    env = SudokuEnv(10, protocol="authors")
    env.reset(SMALL)
    steps = [
        ("garbage", AUTHORS_INVALID),
        ("set 1 1 1", "Cell r1c1 is a fixed given and cannot be changed."),
        ("set 1 2 9", "Row, column, and value must all be integers from 1 to 4."),
        ('{"row": 1, "col": 2, "value": 0}', "Row, column, and value must all be integers from 1 to 4."),
        ("set 1 2 4", "Filled r1c2 with 4."),           # wrong (the solution has 2): it lands all the same
        ("set 1 2 2", "Cell r1c2 is already filled."),
        ("x" * 100_000 + " {" * 1000, AUTHORS_INVALID),  # long junk: feedback, no crash
    ]
    for reply, feedback in steps:
        obs, reward, done, info = env.step(reply)
        assert info["feedback"] == feedback and f"Last environment feedback: {feedback}\n" in obs and not done
    for reply in ("set 2 3 1", "r3c1=2", "set 4 4 1"):
        obs, reward, done, info = env.step(reply)
    # the board is full: the episode ends, unsolved (one wrong digit), after 10 turns' worth of budget
    assert done and reward == 0.0 and not info["success"] and info["wrong_placements"] == 1
    assert (info["invalid_actions"], info["illegal_actions"], info["placed"]) == (2, 4, 3)
    assert "Current empty cells: none" in obs


def test_the_authors_protocol_solves_in_exactly_h_star_turns():
    env = SudokuEnv(12, reward="success", protocol="authors")
    env.reset(SMALL)
    for reply in ("set 1 2 2", "set 2 3 1", "set 3 1 2", "set 4 4 1"):
        _, reward, done, info = env.step(reply)
    assert done and reward == 1.0 and info["success"] and info["turns"] == 4 == SMALL.blanks


def test_the_authors_prompt_needs_our_board_observation():
    with pytest.raises(ValueError, match="ours only"):
        SudokuEnv(4, observation="cells", protocol="authors")


def test_a_training_pool_gives_the_same_puzzles_every_generation():
    fresh = [training_tasks(4, 3, 8, task_seed=s) for s in (11, 12)]
    assert [t.id for t in fresh[0]] != [t.id for t in fresh[1]]  # today's default: new puzzles
    pooled = [training_tasks(4, 3, 8, task_seed=s, pool=8, pool_seed=5) for s in (11, 12, 13)]
    assert [t.id for t in pooled[0]] == [t.id for t in pooled[1]] == [t.id for t in pooled[2]]
    assert len({t.id for t in pooled[0]}) == 8 and all(t.blanks == 3 for t in pooled[0])
    # a larger batch cycles through the pool (the authors' choose_batch); a smaller one is a cyclic run from it
    assert [t.id for t in training_tasks(4, 3, 16, 11, pool=8, pool_seed=5)] == [t.id for t in pooled[0]] * 2
    part = training_tasks(4, 3, 5, 11, pool=8, pool_seed=5)
    assert {t.id for t in part} <= {t.id for t in pooled[0]} and len(part) == 5
