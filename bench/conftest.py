"""Shared pytest setup for bench/: collects bench_*.py and prints each bench's figures.

pytest only collects test_*.py by default; the hook below adds bench_*.py under bench/
(files named on the command line are collected by pytest itself). Figures passed to the
``report`` fixture are printed after the run, so they show without ``-s`` and sit next to
pytest-benchmark's table.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

_REPORT_KEY = pytest.StashKey[list[str]]()


def pytest_collect_file(file_path, parent):  # type: ignore[no-untyped-def]
    if (
        file_path.suffix == ".py"
        and file_path.name.startswith("bench_")
        and not parent.session.isinitpath(file_path)
    ):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REPORT_KEY] = []


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a line of figures for the end-of-run summary (and print it now, for -s)."""
    lines = request.config.stash[_REPORT_KEY]

    def add(line: str) -> None:
        lines.append(f"{request.node.name}: {line}")
        print(line)

    return add


def pytest_terminal_summary(  # type: ignore[no-untyped-def]
    terminalreporter, exitstatus: int, config: pytest.Config
) -> None:
    lines = config.stash.get(_REPORT_KEY, [])
    if lines:
        terminalreporter.section("bench figures")
        for line in lines:
            terminalreporter.write_line(line)
