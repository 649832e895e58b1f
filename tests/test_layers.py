"""The package's layers (README, Layout): every module imports only its own layer and those below."""

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
