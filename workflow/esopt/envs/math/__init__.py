"""ReAct Math: a math problem, an optional Python tool, and one final answer.

The environment sees only the agent's non-tool replies (esopt.agent.react runs the
<python>...</python> calls). A reply without a final answer (no \\boxed{} and no
"Answer:" line, see esopt.envs.answers) gets an explanatory observation and the
episode goes on; the first reply with a final answer ends it with reward 1.0 when
`is_equivalent(answer, gold)` and 0.0 otherwise.

Problems come from three places:

* `generate_problems(n, seed, split, level)`: generated arithmetic and word problems
  whose integer answer needs a computation a tiny model cannot do in its head but
  can delegate to Python by copying the numbers from the question. "basic" (two
  operands, one operation) stands in for DAPO-Math, "hard" (3-4 operands, mixed
  operations, word problems) for AIME. Each task carries the Python expression that
  solves it (`solution_code`; `reference_code(task)` makes it a program) for
  supervised demonstrations. Train/test split by hash of the question, as in
  esopt.envs.sudoku: a question is 'test' iff the first 8 hex digits of its sha256
  are divisible by 4 (`split_of`), and the generator discards candidates of the other
  split, so the splits are disjoint for any seeds and counts.
* `load_dapo(...)`: DAPO-Math-17k (BytedTsinghua-SIA/DAPO-Math-17k), from the hub or
  a local parquet/jsonl/json file.
* `load_aime(...)`: AIME problems (default MathArena/aime_2026), hub or local file.
  The hub is read through esopt.envs.hub_data: offline with the dataset not cached,
  a HubUnavailableError (re-exported here) says so and how to pass a local file.

Answer checking: `is_equivalent` uses math-verify when it is importable (`CHECKER`
says which checker is active), behind a fast exact path for plain numbers, and a
normalized exact match (`fallback_equivalent`) otherwise. It never raises.

Modules:
  tasks     MathTask
  answers   normalize, fallback_equivalent, is_equivalent (math-verify, sympy guards)
  generate  generated basic/hard problems: generate_problems, split_of, reference_code
  load      DAPO-Math-17k and AIME from local files or the hub: load_dapo, load_aime
  env       MathEnv, instructions, NO_ANSWER_FEEDBACK
  benchmark BENCHMARK: its registration (esopt.envs.benchmarks): task sets, expert
"""

from esopt.envs.hub_data import HubUnavailableError
from esopt.envs.math.answers import CHECKER, HAVE_MATH_VERIFY, fallback_equivalent, is_equivalent, normalize
from esopt.envs.math.benchmark import BENCHMARK
from esopt.envs.math.env import NO_ANSWER_FEEDBACK, MathEnv, instructions
from esopt.envs.math.generate import LEVELS, generate_problems, reference_code, split_of
from esopt.envs.math.load import AIME_HUB_ID, DAPO_HUB_ID, DEFAULT_AIME_YEAR, load_aime, load_dapo
from esopt.envs.math.tasks import MathTask

__all__ = [
    "BENCHMARK",
    "AIME_HUB_ID",
    "CHECKER",
    "DAPO_HUB_ID",
    "DEFAULT_AIME_YEAR",
    "HAVE_MATH_VERIFY",
    "LEVELS",
    "NO_ANSWER_FEEDBACK",
    "HubUnavailableError",
    "MathEnv",
    "MathTask",
    "fallback_equivalent",
    "generate_problems",
    "instructions",
    "is_equivalent",
    "load_aime",
    "load_dapo",
    "normalize",
    "reference_code",
    "split_of",
]
