"""Pipeline configuration: YAML validated against workflow/schemas/config.schema.yaml.

The Snakefile validates the same file with the same schema; the CLI validates again
so that `esopt ...` run by hand stops on a bad config with a message naming the key.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    pass


def _with_defaults(validator_cls):
    # jsonschema's documented recipe: fill "default" values while validating.
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


def load_schema() -> dict[str, Any]:
    if not SCHEMA_PATH.exists():
        raise ConfigError(f"config schema not found at {SCHEMA_PATH}; install esopt from a checkout with `pip install -e .`")
    return yaml.safe_load(SCHEMA_PATH.read_text())


def validate_config(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Validate (and fill defaults in) a copy of `config`; errors name the offending key."""
    config = copy.deepcopy(config)
    validator = _with_defaults(jsonschema.Draft7Validator)(load_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:10]:
            where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
            lines.append(f"  {where}: {e.message}")
        raise ConfigError(f"{source} is not a valid esopt config:\n" + "\n".join(lines))
    es = config["es"]
    if es["sigma"]["schedule"] == "cosine" and "sigmaT" not in es["sigma"]:
        raise ConfigError(f"{source}: es.sigma.sigmaT is required for the cosine schedule")
    if config["model"]["source"] == "tiny" and not {"tiny", "warmstart"} <= set(config["model"]):
        raise ConfigError(f"{source}: model.source 'tiny' needs model.tiny and model.warmstart blocks")
    if config["model"]["source"] == "hub" and "hub" not in config["model"]:
        raise ConfigError(f"{source}: model.source 'hub' needs model.hub.repo_id and model.hub.revision")
    if config["model"]["source"] == "local" and not config["model"].get("local_path"):
        raise ConfigError(f"{source}: model.source 'local' needs model.local_path")
    return config


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping, got {type(raw).__name__}")
    return validate_config(raw, str(path))


def config_sha256(config: dict[str, Any]) -> str:
    """Hash of the resolved config (defaults filled, keys sorted)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
