"""The code a command runs: the esopt modules it imports, transitively, read from the source.

A command's code files are what Snakemake lists as a job's `code` input, so editing one
reruns exactly the jobs that run it. They are derived here, never written by hand:

- every `import esopt.X` / `from esopt.X import Y` anywhere in a module (function bodies
  too: most commands import lazily), relative imports resolved; `from P import Y` counts
  the module P.Y when Y is one;
- the `__init__.py` of every package on the way (importing esopt.a.b runs esopt/a/__init__);
- a string literal that names an esopt module ("esopt.envs.math", for importlib) or a file
  beside the module ("run_aco_tsp.py", a script shipped into the sandbox by path);
- a package that exports names lazily (a module-level `EXPORTS = {name: module}` dict and
  a PEP 562 `__getattr__`, as esopt.es does): `from P import name` counts the module that
  defines the name, `import P` every module of EXPORTS (any may be read as P.name), and a
  module that only passes through P (importing P.sub) none of them. Imports under
  `if TYPE_CHECKING:` never run and do not count.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import esopt

PACKAGE_DIR = Path(esopt.__file__).resolve().parent
_MODULE_NAME = re.compile(r"esopt(\.\w+)+")
_SIBLING_FILE = re.compile(r"\w+\.py")


def module_file(name: str) -> Path | None:
    """esopt.a.b -> .../esopt/a/b.py or .../esopt/a/b/__init__.py (None: not a module of esopt)."""
    parts = name.split(".")
    if parts[0] != "esopt":
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def module_name(path: str | Path) -> str:
    """The dotted name of a file of the package (…/esopt/a/__init__.py -> esopt.a)."""
    rel = Path(path).resolve().relative_to(PACKAGE_DIR).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["esopt", *parts])


def all_modules() -> list[str]:
    """Every module of the package, sorted."""
    return sorted(module_name(f) for f in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in f.parts)


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _source_of(path: Path) -> str:
    if path.suffix == ".ipynb":  # a notebook: its code cells, shell and magic lines left out
        cells = json.loads(path.read_text())["cells"]
        lines = [ln for c in cells if c["cell_type"] == "code" for ln in "".join(c["source"]).splitlines()]
        return "\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!")))
    return path.read_text()


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_exports(node: ast.AST) -> bool:
    return (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "EXPORTS")


def _nodes(tree: ast.Module):
    """Every node of the tree but the bodies of `if TYPE_CHECKING:` (else branches kept) and
    the module's EXPORTS table (its names count where they are imported, not here)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _is_type_checking(node):
            todo += node.orelse
        elif not (_is_exports(node) and node in tree.body):
            todo += ast.iter_child_nodes(node)


@cache
def lazy_exports(name: str) -> dict[str, str]:
    """A package's lazily exported names and the modules that define them (its EXPORTS)."""
    f = module_file(name)
    if f is None or f.name != "__init__.py":
        return {}
    for node in ast.parse(f.read_text(), str(f)).body:
        if _is_exports(node):
            return dict(ast.literal_eval(node.value))
    return {}


def direct_dependencies(path: Path, name: str | None = None) -> tuple[set[str], set[Path]]:
    """(esopt modules, sibling files) that one source file (a module or a notebook) names."""
    is_package = path.name == "__init__.py"
    current = name or (module_name(path) if path.suffix == ".py" else "")
    modules: set[str] = set()
    files: set[Path] = set()
    for node in _nodes(ast.parse(_source_of(path), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:  # P.name may be read after `import P`: all of P's lazy exports
                modules.add(a.name)
                modules.update(lazy_exports(a.name).values())
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, current, is_package)
            modules.add(base)
            for a in node.names:
                if a.name == "*":  # the package's __all__, its lazy exports among them
                    modules.update(lazy_exports(base).values())
                    continue
                sub = f"{base}.{a.name}"
                if module_file(sub) is not None:
                    modules.add(sub)
                    modules.update(lazy_exports(sub).values())
                elif a.name in lazy_exports(base):
                    modules.add(lazy_exports(base)[a.name])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_NAME.fullmatch(node.value):
                modules.add(node.value)
            elif _SIBLING_FILE.fullmatch(node.value) and (path.parent / node.value).is_file():
                files.add((path.parent / node.value).resolve())
    found = {m for n in modules for m in _with_parents(n) if module_file(m) is not None}
    return found, files


@cache
def _module_dependencies(name: str) -> tuple[frozenset[str], frozenset[Path]]:
    """direct_dependencies of one module, parsed once per process (every command's closure
    shares most modules; parsing them again for each took most of a Snakefile's parse)."""
    mods, files = direct_dependencies(module_file(name), name)
    return frozenset(mods), frozenset(files)


@cache
def _closure(name: str) -> frozenset[Path]:
    seen: set[str] = set()
    files: set[Path] = set()
    todo = [name]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        f = module_file(m)
        files.add(f.resolve())
        mods, extra = _module_dependencies(m)
        files |= extra
        todo += sorted(mods - seen)
    return frozenset(files)


def code_files(*sources: str | Path) -> list[Path]:
    """Every file of the package that the given modules (dotted names) or source files
    (a notebook) import, transitively, themselves included; sorted."""
    out: set[Path] = set()
    for src in sources:
        if isinstance(src, Path) or not _MODULE_NAME.fullmatch(str(src)):
            path = Path(src).resolve()
            mods, extra = direct_dependencies(path)
            out |= extra
            for m in mods:
                out |= _closure(m)
        else:
            if module_file(str(src)) is None:
                raise ValueError(f"{src}: not a module of esopt (looked under {PACKAGE_DIR})")
            out |= _closure(str(src))
    return sorted(out)
