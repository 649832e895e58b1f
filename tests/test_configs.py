"""The 90-minute default (config/tiny.yaml) is the full tiny grid's (config/tiny_full.yaml)
Sudoku part with one seed and half-length runs, and nothing else: the same models, prompts,
environment, ES and RL settings, evaluation and memory probe, so a number of the default
reads as a shorter run of the full grid's recipe (docs/pipeline.md)."""

from pathlib import Path

import yaml

from esopt.config import load_config

ROOT = Path(__file__).resolve().parents[1]

# every key where the default differs from the full grid, with the default's value
CUT = {
    ("name",): "tiny",
    ("es", "seeds"): [0],
    ("es", "generations"): 40,
    ("rl", "seeds"): [0],
    ("rl", "steps"): 20,
}
FULL_ONLY = {"tool_agents", "web", "ahd"}  # the benchmarks with their own models


def leaves(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from leaves(v, path + (k,))
    else:
        yield path, d


def test_the_default_is_the_full_grids_sudoku_part_cut_to_one_seed_and_half_length():
    default = dict(leaves(load_config(ROOT / "config" / "tiny.yaml")))
    full = load_config(ROOT / "config" / "tiny_full.yaml")
    full_sudoku = dict(leaves({k: v for k, v in full.items() if k not in FULL_ONLY}))
    differ = {p: default.get(p) for p in default.keys() | full_sudoku.keys() if default.get(p) != full_sudoku.get(p)}
    assert differ == CUT
    assert full["es"]["generations"] == 2 * CUT["es", "generations"] and full["rl"]["steps"] == 2 * CUT["rl", "steps"]
    assert len(full["es"]["seeds"]) == 2 and FULL_ONLY <= full.keys()


def test_the_default_file_leaves_the_benchmarks_with_their_own_models_out():
    raw = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    assert not FULL_ONLY & raw.keys()  # no browser, OCR or sandbox needed by default
