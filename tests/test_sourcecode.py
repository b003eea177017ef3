"""Lint and types as tests (asyncpg's idea): ``mypy --strict`` on the broker's packages
and ``ruff`` on the tree run wherever the suite runs, CI included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Checked with --strict (pyproject.toml [tool.mypy]); add a package here once it is clean.
STRICT_PACKAGES = ["protocol", "server", "log", "cluster", "group", "metrics", "txn", "mirror"]
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
