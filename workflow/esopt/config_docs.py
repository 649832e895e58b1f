"""config/README.md, generated from the config schema (workflow/schemas/config.schema.yaml).

    python -m esopt.config_docs           # print the markdown
    python -m esopt.config_docs --write   # rewrite config/README.md (atomically)

Every key of the schema becomes one row: its dotted path, type, default and the
schema's `description` (empty where the schema has none). `$ref`s are resolved (keys
beside a `$ref` override the definition's), objects are walked into, the objects of
an array appear as `path[].key`, entries of a map (`additionalProperties` or
`patternProperties` holding a schema) as `path.<name>.key`, and the object
alternatives of a `oneOf` are walked into like objects.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"
README_PATH = Path(__file__).resolve().parents[2] / "config" / "README.md"
COMMAND = "python -m esopt.config_docs --write"

# Names of map entries, by the map's dotted path (or, failing that, its last key);
# any other map's entries are `<name>`, or `<key>` inside another map entry.
PLACEHOLDERS_BY_PATH = {
    "es.by_horizon": "<H>",
    "reference.sudoku": "<method>",
    "reference.sudoku.<method>": "<H>",
    "reference.population": "<model>",
    "reference.population.<model>": "<G>",
    "reference.sigma_ablation": "<method>",
    "reference.wall_clock_h": "<method>",
    "reference.tool_agents": "<set>",
}
PLACEHOLDERS_BY_KEY = {"eval": "<set>", "tasks": "<task>"}


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


def load_schema(path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text())


def resolve(node: Any, root: dict[str, Any]) -> dict[str, Any]:
    """`node` with its `$ref` (to `#/definitions/...`, possibly chained) merged in;
    keys beside the `$ref` win over the definition's."""
    if not isinstance(node, dict):
        return {}
    seen: set[str] = set()
    while "$ref" in node:
        ref = node["$ref"]
        if ref in seen or not ref.startswith("#/"):
            raise ValueError(f"cannot resolve $ref {ref!r}")
        seen.add(ref)
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _code(value: Any) -> str:
    return f"`{_literal(value)}`"


def _bounds(node: dict[str, Any]) -> str:
    low = next(((k, node[k]) for k in ("minimum", "exclusiveMinimum") if k in node), None)
    high = next(((k, node[k]) for k in ("maximum", "exclusiveMaximum") if k in node), None)
    if low and high:
        return (f"in {'[' if low[0] == 'minimum' else '('}{_literal(low[1])}, "
                f"{_literal(high[1])}{']' if high[0] == 'maximum' else ')'}")
    if low:
        return f"{'≥' if low[0] == 'minimum' else '>'} {_literal(low[1])}"
    if high:
        return f"{'≤' if high[0] == 'maximum' else '<'} {_literal(high[1])}"
    return ""


def _is_map(node: dict[str, Any]) -> bool:
    return isinstance(node.get("additionalProperties"), dict) or bool(node.get("patternProperties"))


def _single_type(t: str, node: dict[str, Any], root: dict[str, Any]) -> str:
    if t in ("integer", "number"):
        b = _bounds(node)
        return f"{t} {b}" if b else t
    if t == "string":
        return f"string matching `{node['pattern']}`" if "pattern" in node else "string"
    if t == "array":
        items = resolve(node.get("items"), root)
        text = f"array of {type_of(items, root)}" if items else "array"
        extra = []
        if node.get("minItems"):
            extra.append(f"at least {node['minItems']}")
        if node.get("uniqueItems"):
            extra.append("unique")
        return f"{text} ({', '.join(extra)})" if extra else text
    if t == "object":
        if _is_map(node):
            values = [resolve(v, root) for v in _map_values(node)]
            text = "map to " + " or ".join(dict.fromkeys(type_of(v, root) for v in values))
            extra = []
            if "propertyNames" in node and "pattern" in node["propertyNames"]:
                extra.append(f"names matching `{node['propertyNames']['pattern']}`")
            for pattern in node.get("patternProperties") or {}:
                extra.append(f"names matching `{pattern}`")
            if node.get("minProperties"):
                extra.append(f"at least {node['minProperties']}")
            return f"{text} ({', '.join(extra)})" if extra else text
        return "object"
    return t


def type_of(node: dict[str, Any], root: dict[str, Any]) -> str:
    node = resolve(node, root)
    if "enum" in node:
        return "one of " + ", ".join(_code(v) for v in node["enum"])
    for key in ("oneOf", "anyOf"):
        if key in node:
            return " or ".join(type_of(alt, root) for alt in node[key])
    t = node.get("type")
    if t is None:
        if "properties" in node or _is_map(node):
            t = "object"
        elif "items" in node:
            t = "array"
        else:
            return "any"
    types = t if isinstance(t, list) else [t]
    return " or ".join(_single_type(x, node, root) for x in types)


def _map_values(node: dict[str, Any]) -> list[Any]:
    values = list((node.get("patternProperties") or {}).values())
    if isinstance(node.get("additionalProperties"), dict):
        values.append(node["additionalProperties"])
    return values


def _placeholder(path: str) -> str:
    if path in PLACEHOLDERS_BY_PATH:
        return PLACEHOLDERS_BY_PATH[path]
    last = path.rsplit(".", 1)[-1]
    if last in PLACEHOLDERS_BY_KEY:
        return PLACEHOLDERS_BY_KEY[last]
    return "<key>" if last.startswith("<") else "<name>"


def _children(path: str, node: dict[str, Any], root: dict[str, Any]) -> Iterator[Row]:
    """Rows below `node` (already resolved), whose own row is at `path`."""
    required = set(node.get("required", []))
    for key, sub in (node.get("properties") or {}).items():
        yield from rows(f"{path}.{key}" if path else key, sub, root, key in required)
    if _is_map(node):
        name = f"{path}.{_placeholder(path)}"
        for value in _map_values(node):
            yield from rows(name, value, root, False)
    items = resolve(node.get("items"), root)
    if items:
        yield from _children(f"{path}[]", items, root)
    for key in ("oneOf", "anyOf"):
        for alt in node.get(key, []):
            yield from _children(path, resolve(alt, root), root)


def rows(path: str, node: Any, root: dict[str, Any], required: bool) -> Iterator[Row]:
    """The row of the key at `path` (schema `node`), then the rows of its sub-keys."""
    node = resolve(node, root)
    if "default" in node:
        default = _code(node["default"])
    elif required:
        default = "*required*"
    else:
        default = ""
    description = " ".join(str(node.get("description", "")).split())
    yield Row(path, type_of(node, root), default, description)
    yield from _children(path, node, root)


def schema_rows(schema: dict[str, Any]) -> list[Row]:
    return list(_children("", schema, schema))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _sections(schema: dict[str, Any]) -> dict[str, list[Row]]:
    """Rows by top-level key; "" holds the top-level keys that are not objects."""
    top = schema.get("properties") or {}
    sections: dict[str, list[Row]] = {"": []}
    for key in top:
        if type_of(top[key], schema).startswith(("object", "map")):
            sections[key] = []
    for row in schema_rows(schema):
        key = re.split(r"[.\[]", row.path, maxsplit=1)[0]
        sections[key if key in sections else ""].append(row)
    return {k: v for k, v in sections.items() if v}


def render(schema: dict[str, Any]) -> str:
    out = [
        "# Configuration keys",
        "",
        f"<!-- Generated from workflow/schemas/config.schema.yaml by `{COMMAND}`; do not edit by hand. -->",
        "",
        "The pipeline and every `esopt` command read one YAML file (`config/tiny.yaml` by",
        "default; `config/tiny_full.yaml`, `config/smoke.yaml`, `config/horizons.yaml` and",
        "`config/paper.yaml` beside it; your own with",
        "`snakemake --configfile FILE`). It is validated against",
        "[`workflow/schemas/config.schema.yaml`](../workflow/schemas/config.schema.yaml): an",
        "unknown key or a wrong type stops the run with the key's name, and the defaults below",
        "are filled in for keys the file leaves out.",
        "",
        "Paths are dotted; `a[].b` is key `b` of each object in the list `a`, and `a.<name>.b`",
        "is key `b` of an entry of the map `a` (the entry's name is yours to choose, within the",
        "stated pattern). *required* means the key must be present whenever its parent is.",
    ]
    for section, section_rows in _sections(schema).items():
        out += ["", f"## `{section}`" if section else "## Top level", ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for row in section_rows:
            out.append(f"| `{_cell(row.path)}` | {_cell(row.type)} | {_cell(row.default)} | {_cell(row.description)} |")
    return "\n".join(out) + "\n"


def undescribed(schema: dict[str, Any]) -> list[str]:
    """Dotted paths of the keys the schema gives no description."""
    return [r.path for r in schema_rows(schema) if not r.description]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m esopt.config_docs", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {README_PATH} instead of printing")
    parser.add_argument("--schema", default=str(SCHEMA_PATH), help="the config schema (default: the package's)")
    args = parser.parse_args(argv)
    text = render(load_schema(args.schema))
    if args.write:
        from esopt.io import write_text_atomic

        write_text_atomic(README_PATH, text)
        print(f"wrote {README_PATH}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
