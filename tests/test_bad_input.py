"""Every bad input ends in one clear line naming the problem: exit 2, no traceback, no output.

One test per class of bad input: a broken model directory, a bad argument, an output
path that cannot be made, a config asking for what a job could not do, an unknown command.
"""

import shutil
import subprocess
import sys
import time

import pytest
import yaml

from esopt.cli.main import COMMANDS, main
from esopt.config import ConfigError, load_config

from conftest import ROOT, SMOKE


def esopt_main(capsys, *args):
    """`esopt ARGS` in this process: (exit code, stderr)."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    return rc, capsys.readouterr().err


def assert_clear_failure(rc, err, *named, out=None):
    assert rc == 2, err
    assert "Traceback" not in err
    for word in named:
        assert str(word) in err, f"{word!r} not in {err!r}"
    if out is not None:
        assert not out.exists() and not any(out.parent.glob(f".{out.name}*")), "an output was left behind"


def write_config(tmp_path, edit):
    cfg = yaml.safe_load(SMOKE.read_text())
    edit(cfg)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cut_weights(d):
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])


BROKEN_MODELS = {  # how the copy is broken: (what, the file the message must name)
    "missing": (lambda d: shutil.rmtree(d), "does not exist"),
    "no_config": (lambda d: (d / "config.json").unlink(), "config.json"),
    "corrupt_config": (lambda d: (d / "config.json").write_text("{bad"), "config.json"),
    "no_weights": (lambda d: (d / "model.safetensors").unlink(), "model.safetensors"),
    "truncated_weights": (_cut_weights, "model.safetensors is truncated"),
    "garbage_weights": (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 8 + b"not a header"),
                        "model.safetensors"),
    "no_tokenizer_json": (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json"),
    "no_tokenizer_files": (lambda d: [(d / f).unlink() for f in ("tokenizer.json", "tokenizer_config.json")],
                           "tokenizer.json"),
    "no_chat_template": (lambda d: (d / "chat_template.jinja").unlink(), "chat template"),
}


@pytest.mark.slow
@pytest.mark.parametrize("broken", sorted(BROKEN_MODELS))
def test_a_broken_model_directory_is_named_with_its_file(tmp_path, smoke_model, capsys, broken):
    model = tmp_path / "model"
    shutil.copytree(smoke_model, model)
    breaks, named = BROKEN_MODELS[broken]
    breaks(model)
    out = tmp_path / "eval" / "h2.json"
    rc, err = esopt_main(capsys, "evaluate", "--config", SMOKE, "--model", model, "--horizon", 2, "--out", out)
    assert_clear_failure(rc, err, model, named, out=out)
    assert not out.parent.exists()


BAD_ARGUMENTS = [  # (command line after `esopt`, what the message names)
    (["evaluate", "--benchmark", "chess"], "'chess'"),
    (["evaluate", "--meta", "{bad"], "--meta"),
    (["evaluate", "--meta", "[1, 2]"], "JSON object"),
    (["evaluate", "--wildcards", "h=2"], "--wildcards"),
    (["evaluate", "--threads", "-2"], "--threads"),
    (["evaluate", "--threads", "0"], "--threads"),
    (["evaluate", "--horizon", "0"], "--horizon"),
    (["evaluate", "--horizon", "13"], "13 blanks on a 4x4 board"),
    (["evaluate", "--seed", "-1"], "--seed"),
    (["evaluate", "--config", "TMP"], "is a directory"),
    (["train-es", "--population", "1"], "--population"),
    (["train-es", "--population", "3"], "--population 3: es.antithetic"),
    (["train-es", "--horizon", "13"], "13 blanks on a 4x4 board"),
    (["train-es", "--variant", "nosuch"], "'nosuch'"),
    (["train-es", "--benchmark", "chess"], "'chess'"),
    (["train-rl", "--algo", "dqn"], "'dqn'"),
    (["train-rl", "--horizon", "20"], "20 blanks on a 4x4 board"),
    (["memory", "--method", "sgd"], "'sgd'"),
    (["memory", "--device", "gpu7"], "--device"),
    (["build-model", "--data", "math"], "expected BENCHMARK=DIR"),
    (["build-model", "--data", "chess=DIR"], "'chess' is not a benchmark"),
    (["evaluate", "--benchmark", "chess"], "'chess'"),
]
REQUIRED = {  # the rest of a valid command line; the bad argument comes last and wins
    "evaluate": ["--model", "MODEL", "--horizon", 2, "--out", "OUT"],
    "train-es": ["--model", "MODEL", "--horizon", 2, "--population", 4, "--seed", 0, "--out", "OUT"],
    "train-rl": ["--model", "MODEL", "--horizon", 2, "--algo", "grpo", "--seed", 0, "--out", "OUT"],
    "memory": ["--method", "inference", "--model", "MODEL", "--out", "OUT"],
    "build-model": ["--for", "tools", "--out", "OUT"],
}


@pytest.mark.parametrize("argv,named", BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_a_bad_argument_stops_before_any_work_naming_it(tmp_path, capsys, argv, named):
    command, *bad = argv
    out = tmp_path / "out" / ("x.json" if command in ("evaluate", "memory") else "run")
    given = {"MODEL": tmp_path / "no-model", "OUT": out, "TMP": tmp_path}
    rest = [given.get(a, a) for a in REQUIRED[command] + bad]
    start = time.time()
    rc, err = esopt_main(capsys, command, "--config", SMOKE, *rest)
    # the model directory does not exist: a command that got past its arguments would say so
    assert_clear_failure(rc, err, named, out=out)
    assert "no-model" not in err and time.time() - start < 30
    assert not out.parent.exists()


@pytest.mark.parametrize("command", ["evaluate", "build-model", "train-es", "audit"])
def test_an_output_path_that_cannot_be_created_fails_before_the_work(tmp_path, capsys, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "sub" / ("x.json" if command == "evaluate" else "run")
    argv = {
        "evaluate": ["--config", SMOKE, "--model", tmp_path / "no-model", "--horizon", 2, "--out", out],
        "build-model": ["--config", SMOKE, "--out", out],
        "train-es": ["--config", SMOKE, "--model", tmp_path / "no-model", "--horizon", 2, "--population", 4,
                     "--seed", 0, "--out", out],
        "audit": [tmp_path, "--json", out],
    }[command]
    rc, err = esopt_main(capsys, command, *argv)
    assert_clear_failure(rc, err, out, "a-file is a file, not a directory")
    assert "no-model" not in err  # checked before the model is looked at
    assert blocker.read_text() == "not a directory"


def _set(path, value):
    def edit(cfg):
        *parents, key = path.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        node[key] = value
    return edit


BAD_CONFIGS = {  # (edit, what the message names)
    "horizon_beyond_4x4": (_set("sudoku.horizons", [2, 3, 20]), "sudoku.horizons: 20 blanks on a 4x4 board"),
    "64_blanks_on_9x9": (lambda c: (_set("sudoku.size", 9)(c), _set("sudoku.horizons", [2, 3, 64])(c)),
                         "64 blanks on a 9x9 board"),
    "study_horizon_beyond_board": (_set("population_study.horizons", [13]), "population_study.horizons: 13"),
    "warmstart_blanks_beyond_board": (_set("model.warmstart.blanks", [1, 16]), "model.warmstart.blanks: 16"),
    "memory_horizon_beyond_board": (_set("memory.horizon", 40), "memory.horizon: 40"),
    "odd_population_antithetic": (_set("es.populations", [3]), "es.populations 3:"),
    "odd_study_population_antithetic": (_set("population_study.populations", [2, 5]), "population_study.populations"),
    "qwen3_with_linear_attention": (lambda c: c["model"]["tiny"].update(architecture="qwen3", layer_types=[
        "linear_attention", "full_attention"]), "model.tiny: architecture qwen3"),
    "heads_not_a_multiple": (_set("model.tiny.num_key_value_heads", 3), "num_key_value_heads 3"),
    "by_horizon_unknown": (_set("es.by_horizon", {7: {"alpha": 0.1}}), "es.by_horizon keys ['7']"),
    "memory_rl_without_rl": (lambda c: c.pop("rl"), "memory.methods ['grpo', 'ppo']"),
    "trace2skill_without_block": (lambda c: c["tool_agents"].pop("trace2skill"), "tool_agents.trace2skill"),
    "grpo_without_block": (lambda c: c["tool_agents"].pop("grpo"), "tool_agents.grpo"),
    "openai_analyst_without_url": (_set("tool_agents.trace2skill.analyst", {"kind": "openai"}), "base_url"),
    "odd_tool_population": (_set("tool_agents.es.population", 3), "tool_agents es population 3"),
}


@pytest.mark.parametrize("bad", sorted(BAD_CONFIGS))
def test_a_config_a_job_could_not_run_fails_validation_naming_the_key(tmp_path, bad):
    edit, named = BAD_CONFIGS[bad]
    path = write_config(tmp_path, edit)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert named in str(e.value)


@pytest.mark.slow
def test_snakemake_dry_run_stops_on_a_config_a_job_could_not_run(tmp_path):
    path = write_config(tmp_path, _set("sudoku.horizons", [2, 3, 20]))
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", ROOT / "Snakefile", "-d", tmp_path / "wd",
                          "--configfile", path], capture_output=True, text=True, check=False)
    assert res.returncode != 0
    assert "sudoku.horizons: 20 blanks on a 4x4 board" in res.stdout + res.stderr


def test_the_generator_reaches_its_bound_fast_and_fails_fast_beyond_it(monkeypatch):
    from esopt.envs import sudoku

    for size in (4, 6, 9):  # what validation accepts, the generator makes in well under a second a puzzle
        start = time.time()
        assert len(sudoku.generate_puzzles(size, sudoku.MAX_BLANKS[size], n=2, seed=0, split="eval")) == 2
        assert time.time() - start < 20
    monkeypatch.setitem(sudoku.MAX_BLANKS, 9, 64)  # past the bound: no grid gets there
    start = time.time()
    with pytest.raises(ValueError, match="fell short"):
        sudoku.generate_puzzles(9, 64, n=1, seed=0, split="eval")
    assert time.time() - start < 30  # it used to grind through 2000 grids (132 s)


def test_an_unknown_command_is_named_and_the_commands_listed():
    res = subprocess.run([sys.executable, "-m", "esopt.cli.main", "nosuchcmd"], capture_output=True, text=True, check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "unknown command 'nosuchcmd'" in res.stderr
    assert all(c in res.stderr for c in COMMANDS)


def test_a_failed_model_save_leaves_the_old_model_and_no_temporary(tmp_path):
    from esopt.models.load import save_model

    class Broken:
        def save_pretrained(self, d):
            (d / "model.safetensors").write_bytes(b"half")
            raise OSError("disk full")

    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text("{}")
    with pytest.raises(OSError, match="disk full"):
        save_model(Broken(), Broken(), out)
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and (out / "config.json").read_text() == "{}"
