import pytest

from esopt.envs.sudoku import (
    SudokuEnv,
    SudokuTask,
    expert_action,
    generate_puzzles,
    parse_action,
    render,
    solve_count,
    split_of,
)

SOLUTION = "1234341221434321"
EASY = SudokuTask(puzzle="1.3434.2.143432.", solution=SOLUTION, size=4, blanks=4)
# sparse board so every rejection kind (row/column/box conflict, wrong digit) is reachable
#   1 . . .
#   . . . 2
#   . . 4 .
#   . 3 . .
SPARSE = SudokuTask(puzzle="1......2..4..3..", solution=SOLUTION, size=4, blanks=12)


def is_valid_solution(grid: str, size: int) -> bool:
    h, w = {4: (2, 2), 6: (2, 3), 9: (3, 3)}[size]  # box rows x columns
    digits = set("123456789"[:size])
    rows = [grid[r * size : (r + 1) * size] for r in range(size)]
    cols = ["".join(row[c] for row in rows) for c in range(size)]
    boxes = [
        "".join(rows[br * h + i][bc * w + j] for i in range(h) for j in range(w))
        for br in range(size // h)
        for bc in range(size // w)
    ]
    return all(set(unit) == digits for unit in rows + cols + boxes)


def play_expert(env: SudokuEnv, task: SudokuTask):
    env.reset(task)
    done, reward, info = False, 0.0, {}
    while not done:
        _, reward, done, info = env.step(expert_action(env.board, task.size, task.solution))
    return reward, info


# --- fixtures sanity -------------------------------------------------------


def test_fixture_puzzles_have_unique_solution():
    assert solve_count(EASY.puzzle, 4) == 1
    assert solve_count(SPARSE.puzzle, 4) == 1
    assert is_valid_solution(SOLUTION, 4)


def test_solve_count_stops_at_limit_and_detects_conflicts():
    assert solve_count("." * 16, 4, limit=2) == 2
    assert solve_count("." * 16, 4, limit=1000) == 288  # all 4x4 grids
    assert solve_count("11" + "." * 14, 4) == 0


def test_render_joins_rows():
    assert render(EASY.puzzle, 4) == "1.34\n34.2\n.143\n432."


# --- expert / episode ------------------------------------------------------


def test_expert_solves_known_puzzle_in_exactly_blanks_turns_with_reward_one():
    env = SudokuEnv(max_turns=10)
    assert env.reset(EASY) == render(EASY.puzzle, 4)
    reward, info = play_expert(env, EASY)
    assert reward == 1.0
    assert info["success"] and info["turns"] == EASY.blanks == info["placed"]
    assert info["blanks_left"] == 0 and env.board == SOLUTION
    assert info["invalid_actions"] == info["illegal_actions"] == 0


def test_expert_picks_most_constrained_cell_row_major_on_ties():
    assert expert_action(EASY.puzzle, 4, SOLUTION) == "r1c2=2"  # all blanks forced: row-major first
    # r1c2 has two candidates (2, 4); r1c4 and r2c1 have one each, r1c4 comes first
    assert expert_action("1.3...122143" "4321", 4, SOLUTION) == "r1c4=4"


@pytest.mark.parametrize("size,blanks", [(4, 10), (9, 30)])
def test_expert_solves_generated_puzzles_in_exactly_blanks_turns(size, blanks):
    env = SudokuEnv(max_turns=blanks)
    for task in generate_puzzles(size, blanks, n=10, seed=0, split="train"):
        reward, info = play_expert(env, task)
        assert reward == 1.0 and info["turns"] == blanks


def test_reward_is_zero_before_the_final_step():
    env = SudokuEnv(max_turns=10)
    env.reset(EASY)
    _, reward, done, _ = env.step("r1c2=2")
    assert (reward, done) == (0.0, False)


def test_budget_exhaustion_ends_episode_with_reward_zero():
    env = SudokuEnv(max_turns=2)
    env.reset(EASY)
    _, r1, d1, _ = env.step("r1c2=2")
    _, r2, d2, info = env.step("r2c3=1")
    assert (r1, d1) == (0.0, False)
    assert (r2, d2) == (0.0, True)
    assert not info["success"] and info["placed"] == 2 and info["blanks_left"] == 2


def test_shaped_reward_is_fraction_of_blanks_correctly_filled():
    env = SudokuEnv(max_turns=3, reward="shaped")
    env.reset(EASY)
    env.step("r1c2=2")
    env.step("r1c2=3")  # rejected: wasted turn
    _, reward, done, info = env.step("r2c3=1")
    assert done and reward == pytest.approx(2 / 4)
    assert info["placed"] == 2 and info["illegal_actions"] == 1


def test_shaped_reward_is_one_when_solved():
    reward, _ = play_expert(SudokuEnv(max_turns=10, reward="shaped"), EASY)
    assert reward == 1.0


def test_stepping_after_done_raises_runtime_error():
    env = SudokuEnv(max_turns=1)
    env.reset(EASY)
    env.step("nonsense")
    with pytest.raises(RuntimeError):
        env.step("r1c2=2")


def test_stepping_before_reset_raises_runtime_error():
    with pytest.raises(RuntimeError):
        SudokuEnv(max_turns=5).step("r1c2=2")


def test_reset_starts_a_fresh_episode():
    env = SudokuEnv(max_turns=1)
    env.reset(EASY)
    env.step("r1c2=2")
    env.reset(EASY)
    assert env.board == EASY.puzzle and env.task == EASY and not env.done


# --- feedback lines --------------------------------------------------------


@pytest.mark.parametrize(
    "action,feedback",
    [
        ("hello", "invalid: write rRcC=V, e.g. r1c2=3"),
        ("r0c1=1", "rejected r0c1=1: row must be 1-4"),
        ("r5c1=1", "rejected r5c1=1: row must be 1-4"),
        ("r9c9=9", "rejected r9c9=9: row must be 1-4"),  # row checked first
        ("r1c0=2", "rejected r1c0=2: column must be 1-4"),
        ("r1c2=0", "rejected r1c2=0: value must be 1-4"),
        ("r1c2=5", "rejected r1c2=5: value must be 1-4"),
        ("r1c1=1", "rejected r1c1=1: cell is filled"),
        ("r2c4=3", "rejected r2c4=3: cell is filled"),
        ("r1c2=1", "rejected r1c2=1: 1 already in row 1"),
        ("r1c2=3", "rejected r1c2=3: 3 already in column 2"),
        ("r2c2=1", "rejected r2c2=1: 1 already in box 1"),
        ("r4c4=4", "rejected r4c4=4: 4 already in box 4"),
        ("r1c2=4", "rejected r1c2=4: wrong digit"),
    ],
)
def test_each_rejection_yields_exact_feedback_costs_a_turn_and_leaves_board(action, feedback):
    env = SudokuEnv(max_turns=20)
    env.reset(SPARSE)
    obs, reward, done, info = env.step(action)
    assert info["feedback"] == feedback
    assert obs == render(SPARSE.puzzle, 4) + "\n" + feedback
    assert env.board == SPARSE.puzzle
    assert (reward, done, info["turns"], info["placed"]) == (0.0, False, 1, 0)
    malformed = feedback.startswith("invalid")
    assert info["invalid_actions"] == int(malformed)
    assert info["illegal_actions"] == int(not malformed)


def test_accepted_placement_feedback_and_cumulative_info():
    env = SudokuEnv(max_turns=20)
    env.reset(SPARSE)
    env.step("garbage")
    env.step("r1c1=1")
    obs, _, _, info = env.step("Let me place R1 C2 = 2.")
    assert obs.splitlines()[-1] == "placed r1c2=2"
    assert env.board == "12" + SPARSE.puzzle[2:]
    assert info == {
        "success": False,
        "turns": 3,
        "invalid_actions": 1,
        "illegal_actions": 1,
        "placed": 1,
        "blanks_left": 11,
        "feedback": "placed r1c2=2",
    }


HOSTILE = [
    "",
    "r",
    "x" * 10000,
    "r" * 10000,
    "r1c1=999999999999999",
    "r1c1=" + "9" * 5000,
    "r" + "1" * 5000 + "c",
    "\x00",
    "ｒ１ｃ１＝１",
    "r１c１=１",
    "r-1c2=3",
    "r2c3=4.5",
    "🙂 r99c1=5 🙂",
    "r0c0=0",
    "\n\n\t",
]


@pytest.mark.parametrize("action", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_model_output_never_raises(action):
    env = SudokuEnv(max_turns=20)
    env.reset(SPARSE)
    obs, reward, done, info = env.step(action)
    assert obs.endswith("\n" + info["feedback"])
    assert info["turns"] == 1 and reward == 0.0 and not done


def test_huge_value_is_echoed_and_rejected_as_out_of_range():
    env = SudokuEnv(max_turns=5)
    env.reset(EASY)
    _, _, _, info = env.step("r1c1=999999999999999")
    assert info["feedback"] == "rejected r1c1=999999999999999: value must be 1-4"


# --- parse_action ----------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("r2c3=4", (2, 3, 4)),
        ("R 2 C 3 = 4", (2, 3, 4)),
        ("I will play r1c2=3, then r2c2=4", (1, 2, 3)),
        ("r12c0=99", (12, 0, 99)),
        ("row 2 col 3 is 4", None),
        ("ｒ１ｃ１＝１", None),
        ("r１c１=１", None),  # only ASCII digits
        ("", None),
    ],
)
def test_parse_action_takes_first_match_unchecked(text, expected):
    assert parse_action(text) == expected


# --- generation ------------------------------------------------------------


@pytest.mark.parametrize(
    "size,blanks",
    [(4, b) for b in range(1, 11)] + [(6, 5), (6, 10), (6, 15), (6, 20), (9, 5), (9, 15), (9, 30)],
)
def test_generated_puzzles_have_exact_blanks_unique_consistent_solution(size, blanks):
    tasks = generate_puzzles(size, blanks, n=20, seed=1, split="train")
    assert len(tasks) == 20
    assert len({t.puzzle for t in tasks}) == 20
    for t in tasks:
        assert (t.size, t.blanks) == (size, blanks)
        assert len(t.puzzle) == size * size and t.puzzle.count(".") == blanks
        assert solve_count(t.puzzle, size) == 1
        assert is_valid_solution(t.solution, size)
        assert all(p in (".", s) for p, s in zip(t.puzzle, t.solution))
        assert split_of(t.puzzle) == "train"


def test_generation_is_deterministic_and_prefix_stable():
    a = generate_puzzles(4, 6, n=50, seed=3, split="eval")
    assert a == generate_puzzles(4, 6, n=50, seed=3, split="eval")
    assert generate_puzzles(4, 6, n=80, seed=3, split="eval")[:50] == a
    assert generate_puzzles(9, 15, n=5, seed=3, split="train") == generate_puzzles(9, 15, n=8, seed=3, split="train")[:5]
    assert generate_puzzles(4, 6, n=50, seed=4, split="eval") != a
    assert generate_puzzles(4, 6, n=0, seed=3, split="eval") == []


def test_train_and_eval_puzzles_are_disjoint_by_hash():
    train = generate_puzzles(4, 4, n=300, seed=0, split="train")
    eval_ = generate_puzzles(4, 4, n=300, seed=0, split="eval")
    assert {t.puzzle for t in train}.isdisjoint(t.puzzle for t in eval_)
    assert all(split_of(t.puzzle) == "train" for t in train)
    assert all(split_of(t.puzzle) == "eval" for t in eval_)
    # even the same seed of another split cannot leak: the hash decides membership
    other_seed = generate_puzzles(4, 4, n=300, seed=1, split="train")
    assert {t.puzzle for t in other_seed}.isdisjoint(t.puzzle for t in eval_)


def test_the_validation_split_is_disjoint_from_train_and_eval():
    valid = generate_puzzles(6, 10, n=200, seed=0, split="valid")
    assert all(split_of(t.puzzle) == "valid" for t in valid)
    for other in ("train", "eval"):
        assert {t.puzzle for t in valid}.isdisjoint(t.puzzle for t in generate_puzzles(6, 10, n=200, seed=0, split=other))


def test_6x6_boards_have_2x3_boxes():
    from esopt.envs.sudoku import BOX, _box_index, instructions

    assert BOX[6] == (2, 3)
    # box 0 is rows 1-2 x columns 1-3, box 1 rows 1-2 x columns 4-6, box 2 rows 3-4 x columns 1-3
    assert [_box_index(r, c, 6) for r, c in [(0, 0), (1, 2), (0, 3), (1, 5), (2, 0), (5, 5)]] == [0, 0, 1, 1, 2, 5]
    # transposed, a 6x6 solution keeps its rows and columns but has 3x2 boxes: the rules see it
    grid = generate_puzzles(6, 1, n=1, seed=0, split="train")[0].solution
    transposed = "".join(grid[c * 6 + r] for r in range(6) for c in range(6))
    assert is_valid_solution(grid, 6) and not is_valid_solution(transposed, 6)
    assert solve_count(grid, 6) == 1 and solve_count(transposed, 6) == 0
    assert "2x3 box" in instructions(6, "full")


def test_task_id_is_sha256_prefix_of_puzzle():
    import hashlib

    assert EASY.id == hashlib.sha256(EASY.puzzle.encode()).hexdigest()[:12]
    assert len(EASY.id) == 12


def test_generation_raises_runtime_error_when_distinct_puzzles_run_out():
    # 288 grids x 16 cells bounds the 1-blank 4x4 puzzles; ~1/8 of them are eval
    with pytest.raises(RuntimeError, match="puzzles"):
        generate_puzzles(4, 1, n=2000, seed=0, split="eval")


# --- argument validation ---------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,named",
    [
        (dict(size=5, blanks=4, n=1, seed=0, split="train"), "5"),
        (dict(size=4, blanks=4, n=1, seed=0, split="test"), "test"),
        (dict(size=4, blanks=0, n=1, seed=0, split="train"), "0"),
        (dict(size=4, blanks=13, n=1, seed=0, split="train"), "13"),
        (dict(size=9, blanks=65, n=1, seed=0, split="train"), "65"),
        (dict(size=4, blanks=4, n=-1, seed=0, split="train"), "-1"),
    ],
)
def test_generate_rejects_bad_args_naming_the_value(kwargs, named):
    with pytest.raises(ValueError, match=named):
        generate_puzzles(**kwargs)


@pytest.mark.parametrize(
    "kwargs,named",
    [(dict(max_turns=0), "0"), (dict(max_turns=-3), "-3"), (dict(max_turns=5, reward="dense"), "dense")],
)
def test_env_rejects_bad_constructor_args_naming_the_value(kwargs, named):
    with pytest.raises(ValueError, match=named):
        SudokuEnv(**kwargs)


def test_task_rejects_inconsistent_blank_count():
    with pytest.raises(ValueError):
        SudokuTask(puzzle=EASY.puzzle, solution=SOLUTION, size=4, blanks=3)


def test_the_turn_budget_is_fixed_or_per_blank_never_both(tmp_path):
    import yaml

    from esopt.config import ConfigError, load_config
    from esopt.spec.sudoku import SudokuEpisodes

    from conftest import SMOKE

    raw = yaml.safe_load(SMOKE.read_text())
    assert SudokuEpisodes.from_config(load_config(SMOKE)).turn_budget(3) == raw["sudoku"]["max_turns"]

    def config(**sudoku):
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(raw | {"sudoku": {k: v for k, v in (raw["sudoku"] | sudoku).items() if v is not None}}))
        return path

    per_blank = SudokuEpisodes.from_config(load_config(config(max_turns=None, turns_per_blank=3)))
    assert [per_blank.turn_budget(h) for h in (2, 3)] == [6, 9]  # the authors' 3 x H*
    for bad in (dict(turns_per_blank=3), dict(max_turns=None)):
        with pytest.raises(ConfigError, match="exactly one of max_turns and turns_per_blank"):
            load_config(config(**bad))


def test_the_cells_observation_lists_every_empty_cell_in_action_form():
    task = generate_puzzles(6, 5, n=1, seed=0, split="train")[0]
    env = SudokuEnv(15, observation="cells")
    obs = env.reset(task)
    rows, cells = obs.splitlines()[:6], obs.splitlines()[6]
    assert rows == SudokuEnv(15).reset(task).splitlines()  # the board as in the plain observation
    listed = cells.removeprefix("empty ").split()
    assert len(listed) == 5 and all(task.puzzle[(int(a[1]) - 1) * 6 + int(a[3]) - 1] == "." for a in listed)
    r, c = int(listed[0][1]), int(listed[0][3])
    obs, *_ = env.step(f"r{r}c{c}={task.solution[(r - 1) * 6 + c - 1]}")
    assert obs.splitlines()[6] == "empty " + " ".join(listed[1:]) and obs.splitlines()[-1].startswith("placed")
    with pytest.raises(ValueError, match="observation"):
        SudokuEnv(15, observation="pixels")


def test_the_coords_observation_labels_every_row():
    task = generate_puzzles(6, 5, n=1, seed=0, split="train")[0]
    plain = SudokuEnv(15).reset(task).splitlines()
    labelled = SudokuEnv(15, observation="coords").reset(task).splitlines()
    assert labelled == [f"r{k + 1} {row}" for k, row in enumerate(plain)]
