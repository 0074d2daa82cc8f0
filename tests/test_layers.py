"""The machinery's layers only look down, and its imports form no circle.

Read from the template's machinery (byte for byte what every bake gets), as text: every import,
those inside functions and under TYPE_CHECKING included, since an import that moved into a function
to dodge a circle is still a circle. The layers are the folders, lowest first: core (no Spark),
job, operations, then the command handlers and the testing surface on top. Inside job/ the wings
stand the same way: reaching Spark lowest, then the endpoints, reading the query, the guard, and
running on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MACHINERY = (
    Path(__file__).resolve().parents[1]
    / "{{cookiecutter.project_slug}}"
    / "{{cookiecutter.package_name}}"
    / "machinery"
)
LAYERS = {"core": 0, "job": 1, "operations": 2, "commands": 3, "testing": 3}
JOB_WINGS = {"spark": 0, "endpoints": 1, "plan": 2, "guard": 3, "run": 4}
SPARK = ("pyspark", "py4j", "delta")


def modules() -> dict[str, Path]:
    found = {}
    for path in MACHINERY.rglob("*.py"):
        parts = list(path.relative_to(MACHINERY).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


def imports(module: str) -> list[tuple[str, int]]:
    """(imported module, line) of every import in module, function-level ones included: the machinery's
    own modules by their name under machinery, others by their top-level package."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append(((node.module or "").split(".")[0], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] + ([node.module] if node.module else [])
            for alias in node.names:
                name = ".".join([*base, alias.name])
                found.append((name if name in MODULES else ".".join(base), node.lineno))
    return found


def layer(module: str) -> int | None:
    return LAYERS.get(module.split(".")[0])


def wing(module: str) -> str | None:
    """The wing of job/ a module is in (None outside job/, and for job/'s own __init__)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "job" and len(parts) > 1 else None


def edges() -> dict[str, set[str]]:
    return {module: {name for name, _ in imports(module) if name in MODULES and name != module} for module in MODULES}


def test_every_module_is_in_a_layer():
    assert [module for module in MODULES if module and layer(module) is None] == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m))
def test_imports_only_look_down(module):
    upward = [
        f"{module} imports {name} (line {line}), a higher layer"
        for name, line in imports(module)
        if name in MODULES and name and layer(name) is not None and layer(name) > layer(module)
    ]
    assert upward == []


def test_every_module_of_job_is_in_a_wing():
    assert [module for module in MODULES if module.startswith("job.") and wing(module) not in JOB_WINGS] == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if wing(m) is not None))
def test_wings_only_look_down(module):
    """A wing of job/ imports its own modules and those of the wings below it, never one above."""
    own = wing(module)
    upward = [
        f"{module} imports {name} (line {line}), of the wing {wing(name)}, above {own}"
        for name, line in imports(module)
        if wing(name) in JOB_WINGS and JOB_WINGS[wing(name)] > JOB_WINGS[own]
    ]
    assert upward == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("core")))
def test_the_core_imports_no_spark(module):
    assert [f"{name} (line {line})" for name, line in imports(module) if name in SPARK] == []


def test_no_circle_of_imports():
    graph = edges()
    circles, state = [], dict.fromkeys(graph, 0)  # 0 not seen, 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for name in sorted(graph[module]):
            if state[name] == 1:
                circles.append(" -> ".join([*path[path.index(name) :], name]))
            elif state[name] == 0:
                visit(name, [*path, name])
        state[module] = 2

    for module in sorted(graph):
        if state[module] == 0:
            visit(module, [module])
    assert circles == []
