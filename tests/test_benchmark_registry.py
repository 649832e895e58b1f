"""The benchmark registry (esopt.envs.benchmarks): docs/benchmarks.md's worked example,
registered as a throwaway package beside the real ones, runs through the lookups,
prepare-data's task files and the tool expert's demonstrations; a lookup imports only
the benchmark it names."""

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

import esopt.envs
from esopt.envs import benchmarks

ROOT = Path(__file__).resolve().parents[1]


def example(name: str) -> str:
    """A file of docs/benchmarks.md's worked example, as the page shows it."""
    doc = (ROOT / "docs/benchmarks.md").read_text()
    return re.search(rf"```python\n# envs/wordcount/{re.escape(name)}\n(.*?)```", doc, re.S).group(1)


@pytest.fixture
def wordcount(tmp_path, monkeypatch):
    """The example's package under a temporary directory on esopt.envs' path, its name in the registry."""
    pkg = tmp_path / "wordcount"
    pkg.mkdir()
    (pkg / "benchmark.py").write_text(example("benchmark.py"))
    (pkg / "__init__.py").write_text(example("__init__.py"))
    monkeypatch.setattr(esopt.envs, "__path__", [*esopt.envs.__path__, str(tmp_path)])
    monkeypatch.setattr(benchmarks, "BENCHMARKS", (*benchmarks.BENCHMARKS, "wordcount"))
    yield benchmarks.get("wordcount")
    for m in [m for m in sys.modules if m.startswith("esopt.envs.wordcount")]:
        del sys.modules[m]


class StandInPython:
    """The Python tool's interface (esopt.agent.tools) on exec, for the example's expert."""

    name, description = "python", "run Python"

    def __call__(self, argument: str, task) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(argument, {})
        return out.getvalue()


def test_a_registered_benchmark_runs_through_the_lookups(wordcount, tmp_path):
    from esopt.agent.react import make_react_env
    from esopt.runs.tool_episodes import load_tasks, write_tasks

    assert wordcount.section == "tool_agents" and benchmarks.package("wordcount") == "esopt.envs.wordcount"
    assert benchmarks.instructions("wordcount").startswith("Count the words")
    tasks = wordcount.load_set("train", {"source": "generated", "n": 5, "seed": 0}, tmp_path, {})
    write_tasks(tmp_path, tasks)
    assert load_tasks(tmp_path, "wordcount") == tasks  # prepare-data's file, read back through task_class
    env = make_react_env("wordcount", [StandInPython()], None)
    env.reset(tasks[0])
    assert env.step(f"Answer: {tasks[0].answer}")[1:3] == (1.0, True)


def test_the_example_expert_demonstrates_every_task(wordcount, tmp_path):
    from esopt.models.demonstrations.tools import demonstrations

    tasks = wordcount.load_set("train", {"source": "generated", "n": 4, "seed": 0}, tmp_path, {})
    transcripts = list(demonstrations("wordcount", tasks, [StandInPython()], "system", 0.0, 0, progress=False))
    assert len(transcripts) == 2 * len(tasks)  # the tool call, then the answer
    assert transcripts[1][-1]["content"] == f"Answer: {tasks[0].answer}"


def test_an_unknown_benchmark_is_named():
    with pytest.raises(ValueError, match="'chess'"):
        benchmarks.get("chess")


def test_the_names_need_no_benchmark_and_a_lookup_imports_only_its_own():
    code = ("import sys; from esopt.envs import benchmarks as b; assert b.BENCHMARKS; "
            "assert not [m for m in sys.modules if m.startswith(('esopt.envs.math', 'esopt.envs.docvqa', 'esopt.envs.web'))]; "
            "b.get('math'); assert not [m for m in sys.modules if m.startswith(('esopt.envs.docvqa', 'esopt.envs.web'))]; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_job_lists_the_code_of_its_own_benchmark_only():
    from esopt.provenance.jobs import code_files

    math = {f for f in code_files("evaluate", ["math"]) if "/envs/math/" in f}
    assert math and not {f for f in code_files("evaluate") if "/envs/math/" in f}
    assert not {f for f in code_files("evaluate", ["math"]) if "/envs/docvqa/" in f}
