"""esopt check-models: the base's held-out results against model.expect."""

import json
import subprocess
import sys

import yaml

from esopt.eval.checks import check_rows, warn_outside

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
    from esopt.config import ConfigError, load_config
    import pytest

    with pytest.raises(ConfigError, match="not in sudoku.horizons"):
        load_config(_config(tmp_path, {7: [0.1, 0.2]}))
    with pytest.raises(ConfigError, match="low <= high"):
        load_config(_config(tmp_path, {2: [0.5, 0.2]}))


def test_rows_only_for_keys_with_an_interval():
    rows = check_rows([{"horizon": 2, "success": 0.4}, {"horizon": 9, "success": 0.1}], {"2": [0.3, 0.5]}, "m")
    assert [r["horizon"] for r in rows] == [2] and rows[0]["within"]
    assert warn_outside(rows, "here") is True
