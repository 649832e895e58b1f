"""config/README.md is generated from the config schema and lists every key."""

import re
from pathlib import Path

import yaml

from esopt import config_docs

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
README = ROOT / "config" / "README.md"


def table_paths(text: str) -> list[str]:
    return [m.group(1).replace("\\|", "|") for m in re.finditer(r"^\| `([^`]+)` \|", text, re.MULTILINE)]


def schema_paths(node, root, path=""):
    """Every key's dotted path, walked independently of the generator; map entries as `<*>`."""
    while isinstance(node, dict) and "$ref" in node:
        target = root
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if not isinstance(node, dict):
        return
    for key, sub in (node.get("properties") or {}).items():
        child = f"{path}.{key}" if path else key
        yield child
        yield from schema_paths(sub, root, child)
    entries = list((node.get("patternProperties") or {}).values())
    if isinstance(node.get("additionalProperties"), dict):
        entries.append(node["additionalProperties"])
    for sub in entries:
        yield f"{path}.<*>"
        yield from schema_paths(sub, root, f"{path}.<*>")
    if isinstance(node.get("items"), dict):
        yield from schema_paths(node["items"], root, f"{path}[]")
    for alt in node.get("oneOf", []) + node.get("anyOf", []):
        yield from schema_paths(alt, root, path)


def test_config_readme_is_in_sync_with_the_schema():
    expected = config_docs.render(config_docs.load_schema(SCHEMA))
    actual = README.read_text() if README.exists() else ""
    assert actual == expected, (
        "config/README.md is out of date with workflow/schemas/config.schema.yaml; "
        f"regenerate it with `{config_docs.COMMAND}`")


def test_every_schema_property_appears_in_the_table():
    schema = yaml.safe_load(SCHEMA.read_text())
    rows = table_paths(config_docs.render(schema))
    normalized = {re.sub(r"<[^>]+>", "<*>", p) for p in rows}
    expected = set(schema_paths(schema, schema))
    assert expected, "the walk found no keys"
    assert not expected - normalized, f"keys missing from the table: {sorted(expected - normalized)}"
    assert len(rows) == len(set(rows)), "a key appears twice"
    # Nested objects, arrays of objects, maps and oneOf alternatives, by their documented paths.
    for path in ("es.variants.<name>.sigma", "es.variants.<name>.sigma.sigmaT", "es.by_horizon.<H>.alpha",
                 "ahd.budgets[].sample_batch", "population_study.models[].tiny.head_dim",
                 "tool_agents.benchmarks.math.eval.<set>.source", "ahd.tasks.<task>.search.n",
                 "memory.probe.hidden_size", "reference.sudoku.<method>.<H>"):
        assert path in rows, path


def test_rows_carry_type_default_and_description():
    schema = yaml.safe_load(SCHEMA.read_text())
    by_path = {r.path: r for r in config_docs.schema_rows(schema)}
    threads = by_path["threads"]
    assert (threads.type, threads.default, threads.description) == ("integer ≥ 1", "`1`", "torch threads per job")
    assert by_path["name"].default == "*required*"
    assert by_path["rl.clip_high"].type == "number or null" and by_path["rl.clip_high"].default == "`null`"
    assert by_path["sudoku.reward"].type == "one of `success`, `shaped`"
    assert by_path["rl.ppo.gamma"].type == "number in [0, 1]"
    assert by_path["ahd.writer.system"].default == '`""`'


def test_write_is_atomic_and_matches_print(tmp_path, monkeypatch, capsys):
    target = tmp_path / "README.md"
    monkeypatch.setattr(config_docs, "README_PATH", target)
    assert config_docs.main(["--write"]) == 0
    assert config_docs.main([]) == 0
    assert capsys.readouterr().out == target.read_text()
    assert not [p for p in tmp_path.iterdir() if p != target], "a temporary file was left behind"
