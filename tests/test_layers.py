"""The package's layers (README, Layout): every module imports only its own layer and those below."""

import importlib
import subprocess
import sys

from esopt.provenance.imports import all_modules, direct_dependencies, module_file

# bottom to top; the root modules (esopt.config, esopt.io, esopt.seeding, ...) are below all
LAYERS = ["spec", "es", "envs", "agent", "rl", "prompt", "ahd", "models", "runs", "provenance", "cluster", "report", "cli"]


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else -1


def test_imports_point_down_the_layers():
    upward = [f"{m} imports {d}" for m in all_modules() for d in sorted(direct_dependencies(module_file(m), m)[0])
              if layer(d) > layer(m)]
    assert upward == []


def test_no_command_imports_another_command():
    cross = [f"{m} imports {d}" for m in all_modules() if m.startswith("esopt.cli.")
             for d in sorted(direct_dependencies(module_file(m), m)[0])
             if d.startswith("esopt.cli.") and d not in (m, "esopt.cli", "esopt.cli.common")]
    assert cross == []


def test_the_layer_table_names_every_package():
    packages = {m.split(".")[1] for m in all_modules() if m.count(".") >= 1 and module_file(m).name == "__init__.py"
                and m.count(".") == 1}
    assert packages == set(LAYERS)


def test_no_module_imports_itself_back():
    """No import cycle between modules, function-level imports included (a package's
    __init__, which re-exports its modules, is left out: importing a module runs it first)."""
    import graphlib

    modules = [m for m in all_modules() if module_file(m).name != "__init__.py"]
    graph = {m: direct_dependencies(module_file(m), m)[0] & set(modules) for m in modules}
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
        cycle = None
    except graphlib.CycleError as e:
        cycle = e.args[1]
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_a_lazy_package_counts_what_is_taken_from_it_not_what_passes_through():
    """esopt.es exports its names lazily (EXPORTS): the population engine imports esopt.es.noise
    and esopt.es.lowrank only, so a trainer edit does not rerun evaluations; a module that
    takes ESTrainer from the package depends on the trainer; `import esopt.es`, on all."""
    import esopt.es
    from esopt.provenance.imports import code_files, lazy_exports

    def files(module):
        return {str(f.relative_to(module_file("esopt").parent)) for f in code_files(module)}

    assert lazy_exports("esopt.es") == esopt.es.EXPORTS and lazy_exports("esopt.es.noise") == {}
    assert "es/trainer.py" not in files("esopt.agent.population")
    assert {"es/__init__.py", "es/noise.py", "es/lowrank.py"} <= files("esopt.agent.population")
    assert "es/trainer.py" in files("esopt.runs.periodic")  # from esopt.es import ESTrainer
    assert "es/trainer.py" not in files("esopt.cli.replay")  # from esopt.es import History
    for name, module in esopt.es.EXPORTS.items():  # the table says where each name is defined
        assert getattr(esopt.es, name) is getattr(importlib.import_module(module), name)
    assert sorted(esopt.es.__all__) == sorted(esopt.es.EXPORTS)


def test_the_scanner_follows_exports_star_imports_and_skips_type_checking(tmp_path):
    def deps(source):
        (tmp_path / "m.py").write_text(source)
        return direct_dependencies(tmp_path / "m.py", "m")[0]

    every = set(__import__("esopt.es").es.EXPORTS.values())
    typed = deps("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from esopt.rl import trainer\n"
                 "else:\n    from esopt.es import History\n")
    assert "esopt.rl.trainer" not in typed and {"esopt.es", "esopt.es.history"} <= typed
    assert "esopt.es.trainer" not in typed
    assert every <= deps("from esopt.es import *\n") and every <= deps("import esopt.es\n")
    assert every <= deps("from esopt import es\n")


def test_importing_one_module_of_esopt_es_does_not_run_the_trainer():
    code = ("import sys, esopt.es.noise, esopt.agent.population\n"
            "assert 'esopt.es.trainer' not in sys.modules, 'trainer imported'\n"
            "from esopt.es import ESTrainer, perturb\n"
            "assert 'esopt.es.trainer' in sys.modules and perturb.Perturber is not None\n")
    subprocess.run([sys.executable, "-c", code], check=True)
