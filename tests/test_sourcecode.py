"""Lint and types as tests (asyncpg's idea): ``mypy --strict`` on the broker's packages
and ``ruff`` on the tree run wherever the suite runs, CI included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Checked with --strict (pyproject.toml [tool.mypy]): every package and module of pykfk.
STRICT_PACKAGES = ["protocol", "server", "log", "cluster", "group", "metrics", "txn", "mirror", "security",
                   "service", "_reference", "client", "cli", "errors.py", "config.py", "clock.py",
                   "__init__.py", "producer.py", "audit.py", "consumer.py", "broker.py", "testing.py"]
LINTED = ["pykfk", "src", "tests", "bench", "pykfk_spark", "tools", "fuzz"]


def _typing_root(tmp_path: Path) -> Path:
    """A tree where ``pykfk/_core`` is the checkout's ``src/_core`` (the package mapping
    pip applies), so mypy reads the core's ``.pyi`` stubs whatever the install."""
    root = tmp_path / "typing-root"
    package = root / "pykfk"
    package.mkdir(parents=True)
    for entry in (REPO / "pykfk").iterdir():
        if entry.name not in ("_core", "__pycache__"):
            (package / entry.name).symlink_to(entry)
    (package / "_core").symlink_to(REPO / "src" / "_core")
    (root / "pyproject.toml").symlink_to(REPO / "pyproject.toml")
    return root


def test_mypy_strict(tmp_path: Path) -> None:
    root = _typing_root(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache"),
         *(f"pykfk/{name}" for name in STRICT_PACKAGES)],
        cwd=root, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "MYPYPATH": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff() -> None:
    paths = [p for p in LINTED if (REPO / p).exists()]
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *paths],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- imports: no circles, none up the layers of docs/architecture.md -----------------------

# Circles between files still to be broken, each named once; the test fails when one
# more appears or when a listed one is gone (then strike it here).
KNOWN_CIRCLES: set[frozenset[str]] = set()
# Modules any layer may import (docs/architecture.md says why).
ANY_LAYER = {"pykfk.metrics.stats"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "src":  # src/_core is installed as pykfk._core
        parts[:2] = ["pykfk", "_core"]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source_modules() -> dict[str, Path]:
    paths = [*(REPO / "pykfk").rglob("*.py"), *(REPO / "pykfk_spark").rglob("*.py"), *(REPO / "src").rglob("*.py")]
    return {_module_name(p): p for p in paths}


def _module_level_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The pykfk modules ``name`` imports in its module-level statements (those under
    ``if TYPE_CHECKING:`` included: a circle for the type checker is a circle). An
    ``if __name__ == "__main__":`` block is left out: it runs only when the file is the
    script, a module of another name, so it closes no circle."""
    import ast

    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            elif isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                continue
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return {m for m in found if m in modules and m != name}


def _import_graph() -> dict[str, set[str]]:
    modules = _source_modules()
    return {name: _module_level_imports(name, path, modules) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _layers() -> list[list[str]]:
    """The module prefixes of each row of docs/architecture.md's layer table, in order."""
    import re

    text = (REPO / "docs" / "architecture.md").read_text()
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "---"):
            continue
        paths = re.findall(r"`((?:pykfk|src|pykfk_spark)[\w/.]*)`", cells[1])
        rows.append([_module_name(REPO / p.rstrip("/") / "__init__.py") if p.endswith("/")
                     else _module_name(REPO / p) for p in paths])
    return rows


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    for rank, prefixes in enumerate(layers):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def test_no_import_circles_between_files() -> None:
    circles = _circles(_import_graph())
    assert not circles - KNOWN_CIRCLES, f"new import circles: {sorted(map(sorted, circles - KNOWN_CIRCLES))}"
    assert not KNOWN_CIRCLES - circles, f"broken, strike from KNOWN_CIRCLES: {sorted(map(sorted, KNOWN_CIRCLES - circles))}"


def test_imports_follow_the_layers_of_the_architecture_page() -> None:
    layers = _layers()
    assert len(layers) >= 10, layers
    graph = _import_graph()
    unplaced = sorted(m for m in graph if _layer_of(m, layers) is None and m != "pykfk")
    assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                    if target not in ANY_LAYER and source != "pykfk"
                    and (_layer_of(target, layers) or 0) > (_layer_of(source, layers) or 0))
    assert not upward, f"imports running up the layers: {upward}"
    for module in ANY_LAYER:
        assert not graph[module], f"{module} imports {graph[module]}: it may not, any layer imports it"


def test_the_compiled_core_imports_only_its_own_modules() -> None:
    """The core is the bottom layer: its Cython sources (which the import graph above does
    not parse) import nothing of pykfk outside pykfk._core."""
    import re

    upward = [f"{path.name}:{n}: {line.strip()}" for path in sorted((REPO / "src" / "_core").glob("*.py*"))
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if re.match(r"\s*(from|import|cimport)\s+pykfk\.(?!_core\b)", line)]
    assert not upward, upward
