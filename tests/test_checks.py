"""esopt check-models: the base's held-out results against model.expect."""

import json
import subprocess
import sys

import yaml

from esopt.runs.checks import check_rows, warn_outside

from conftest import SMOKE


def _config(tmp_path, expect):
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["model"]["expect"] = expect
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _summary(tmp_path, horizon, success):
    path = tmp_path / f"h{horizon}.json"
    path.write_text(json.dumps({"horizon": horizon, "success": success, "episodes": 512}))
    return path


def _check(config, out, *summaries):
    return subprocess.run([sys.executable, "-m", "esopt.cli.main", "check-models", "--config", str(config), "--out", str(out),
                           *map(str, summaries)], capture_output=True, text=True)


def test_a_base_outside_its_interval_is_flagged_loudly_but_does_not_fail_the_run(tmp_path):
    config = _config(tmp_path, {2: [0.5, 0.8], 3: [0.2, 0.4]})
    out = tmp_path / "check.json"
    p = _check(config, out, _summary(tmp_path, 2, 0.113), _summary(tmp_path, 3, 0.3))
    assert p.returncode == 0, p.stderr
    check = json.loads(out.read_text())
    assert check["all_within"] is False
    assert [(r["horizon"], r["within"]) for r in check["rows"]] == [(2, False), (3, True)]
    assert "WARNING" in p.stderr and "0.113" in p.stderr and "[0.500, 0.800]" in p.stderr
    assert (tmp_path / "check.provenance.json").exists()


def test_a_base_within_every_interval_passes_quietly(tmp_path):
    config = _config(tmp_path, {2: [0.5, 0.8]})
    out = tmp_path / "check.json"
    p = _check(config, out, _summary(tmp_path, 2, 0.7))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["all_within"] is True
    assert "WARNING" not in p.stderr


def test_an_expected_horizon_without_a_summary_is_an_error(tmp_path):
    config = _config(tmp_path, {2: [0.5, 0.8], 3: [0.2, 0.4]})
    p = _check(config, tmp_path / "check.json", _summary(tmp_path, 2, 0.7))
    assert p.returncode == 2 and "H* ['3']" in p.stderr


def test_expect_outside_the_horizons_or_reversed_is_a_config_error(tmp_path):
    import pytest

    from esopt.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="not in sudoku.horizons"):
        load_config(_config(tmp_path, {7: [0.1, 0.2]}))
    with pytest.raises(ConfigError, match="low <= high"):
        load_config(_config(tmp_path, {2: [0.5, 0.2]}))


def test_rows_only_for_keys_with_an_interval():
    rows = check_rows([{"horizon": 2, "success": 0.4}, {"horizon": 9, "success": 0.1}], {"2": [0.3, 0.5]}, "m")
    assert [r["horizon"] for r in rows] == [2] and rows[0]["within"]
    assert warn_outside(rows, "here") is True


# ---- the tool model (Mean@k by evaluation set) and the heuristic writer (valid rate by task)

def _smoke_with(tmp_path, tools=None, ahd=None):
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["tool_agents"]["model"]["expect"] = tools
    cfg["ahd"]["model"]["expect"] = ahd
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _tool_summary(tmp_path, benchmark, dataset, mean_at_k):
    path = tmp_path / f"{benchmark}_{dataset}.json"
    path.write_text(json.dumps({"benchmark": benchmark, "meta": {"method": "no_skill", "benchmark": benchmark,
                                                                 "dataset": dataset},
                                "mean_at_k": mean_at_k, "k": 4, "tasks": 64}))
    return path


def _writer_result(tmp_path, task, rep, valid_rate):
    path = tmp_path / f"{task}_r{rep}.json"
    path.write_text(json.dumps({"task": task, "search": "sample", "es": False, "seed": rep, "samples": 100,
                                "valid_rate": valid_rate}))
    return path


def test_the_tool_model_is_checked_per_evaluation_set_by_name(tmp_path):
    config = _smoke_with(tmp_path, tools={"math/dapo": [0.2, 0.4], "math/aime": [0.0, 0.1]})
    out = tmp_path / "check.json"
    p = subprocess.run([sys.executable, "-m", "esopt.cli.main", "check-models", "--config", str(config),
                        "--name", "smoke-qwen35-tools", "--out", str(out),
                        str(_tool_summary(tmp_path, "math", "dapo", 0.3)),
                        str(_tool_summary(tmp_path, "math", "aime", 0.25))], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    check = json.loads(out.read_text())
    assert (check["kind"], check["metric"], check["all_within"]) == ("tools", "mean_at_k", False)
    assert [(r["set"], r["value"], r["episodes"], r["within"]) for r in check["rows"]] == [
        ("math/dapo", 0.3, 256, True), ("math/aime", 0.25, 256, False)]
    assert "WARNING" in p.stderr and "mean_at_k 0.250 at set math/aime" in p.stderr


def test_the_writers_valid_rate_is_the_mean_over_its_repetitions(tmp_path):
    config = _smoke_with(tmp_path, ahd={"construct_tsp": [0.5, 0.7]})
    out = tmp_path / "check.json"
    results = [_writer_result(tmp_path, "construct_tsp", r, v) for r, v in enumerate([0.45, 0.6, 0.75])]
    p = subprocess.run([sys.executable, "-m", "esopt.cli.main", "check-models", "--config", str(config),
                        "--name", "smoke-qwen35-ahd", "--out", str(out), *map(str, results)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["task"] == "construct_tsp" and row["summaries"] == 3 and row["episodes"] == 300
    assert abs(row["value"] - 0.6) < 1e-12 and row["within"]  # two of the three repetitions alone were outside
    assert "WARNING" not in p.stderr


def test_a_checked_set_without_its_summary_is_an_error(tmp_path):
    import pytest

    from esopt.config import load_config, named_model
    from esopt.runs.checks import check_model

    kind, spec = named_model(load_config(_smoke_with(tmp_path, tools={"math/dapo": [0, 1], "docvqa/docvqa": [0, 1]})),
                             "smoke-qwen35-tools")
    with pytest.raises(ValueError, match=r"set \['docvqa/docvqa'\]"):
        check_model(kind, spec, [json.loads(_tool_summary(tmp_path, "math", "dapo", 0.3).read_text())])


def test_expect_keys_must_be_what_the_pipeline_measures(tmp_path):
    import pytest

    from esopt.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"tool_agents.model.expect: \['math/gsm8k'\] are not evaluation sets"):
        load_config(_smoke_with(tmp_path, tools={"math/gsm8k": [0.1, 0.2]}))
    with pytest.raises(ConfigError, match=r"tool_agents.model.expect: an interval is \[low, high\]"):
        load_config(_smoke_with(tmp_path, tools={"math/dapo": [0.5, 0.2]}))
    with pytest.raises(ConfigError, match=r"ahd.model.expect: \['aco_tsp'\] are not in ahd.tasks"):
        load_config(_smoke_with(tmp_path, ahd={"aco_tsp": [0.1, 0.2]}))
    cfg = yaml.safe_load(_smoke_with(tmp_path, ahd={"construct_tsp": [0.1, 0.2]}).read_text())
    cfg["ahd"]["searches"] = ["eoh"]
    (tmp_path / "eoh_only.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="Sample runs"):
        load_config(tmp_path / "eoh_only.yaml")


def test_every_model_of_the_config_is_found_by_name_with_its_kind():
    from esopt.config import checked_models, load_config

    kinds = {name: kind for name, (kind, _) in checked_models(load_config(SMOKE)).items()}
    assert kinds == {"smoke-qwen35": "sudoku", "smoke-qwen35-wide": "sudoku", "smoke-qwen35-tools": "tools",
                     "smoke-qwen35-web": "web", "smoke-qwen35-ahd": "ahd"}


def test_a_new_interval_reruns_the_check_and_rebuilds_no_model(tmp_path):
    from esopt.config import load_config
    from esopt.provenance.jobs import settings

    a = load_config(_smoke_with(tmp_path, tools={"math/dapo": [0.1, 0.2]}, ahd={"construct_tsp": [0.1, 0.2]}))
    b = load_config(_smoke_with(tmp_path, tools={"math/dapo": [0.3, 0.4]}, ahd={"construct_tsp": [0.5, 0.9]}))
    for target, name in (("tools", "smoke-qwen35-tools"), ("ahd", "smoke-qwen35-ahd")):
        assert settings("build-model", a, target=target) == settings("build-model", b, target=target)
        assert "expect" not in settings("build-model", a, target=target)["model"]
        assert settings("check-models", a, name=name) != settings("check-models", b, name=name)


def test_a_summary_of_a_trained_run_is_refused(tmp_path):
    import pytest

    from esopt.config import load_config, named_model
    from esopt.runs.checks import check_model

    cfg = load_config(_smoke_with(tmp_path, tools={"math/dapo": [0, 1]}, ahd={"construct_tsp": [0, 1]}))
    esopt_run = json.loads(_tool_summary(tmp_path, "math", "dapo", 0.3).read_text())
    esopt_run["meta"]["method"] = "esopt"
    with pytest.raises(ValueError, match="not of the base"):
        check_model(*named_model(cfg, "smoke-qwen35-tools"), [esopt_run])
    with_es = {**json.loads(_writer_result(tmp_path, "construct_tsp", 0, 0.9).read_text()), "es": True}
    with pytest.raises(ValueError, match="not of the base"):
        check_model(*named_model(cfg, "smoke-qwen35-ahd"), [with_es])


def test_a_tool_model_named_like_the_main_model_is_a_config_error(tmp_path):
    import pytest

    from esopt.config import ConfigError, load_config

    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["tool_agents"]["model"]["name"] = cfg["model"]["name"]  # one directory results/models/NAME for two models
    (tmp_path / "same.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="must be unique"):
        load_config(tmp_path / "same.yaml")
