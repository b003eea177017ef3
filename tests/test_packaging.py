"""The package as a user gets it: a wheel that works outside the checkout, and a clear
error (not a silent fallback) when the compiled core is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_broker_import_without_compiled_core_says_how_to_build(tmp_path: Path) -> None:
    # A copy of the Python sources with the core's Python files but none of its extensions.
    shutil.copytree(ROOT / "pykfk", tmp_path / "pykfk")
    core = tmp_path / "pykfk" / "_core"
    core.mkdir()
    for source in (ROOT / "src" / "_core").glob("*.py"):
        shutil.copy(source, core)
    # -S keeps the editable install of this checkout (a site hook) out of the way.
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import pykfk.broker"
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert "compiled core is missing" in result.stderr
    assert "pip install" in result.stderr


@pytest.mark.slow
def test_wheel_works_from_outside_the_checkout(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True, timeout=900,
    )
    (wheel,) = wheels.glob("pykfk-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900)
    code = (
        "import pykfk, pykfk._core as core, pykfk.broker, pykfk_spark\n"
        "from pykfk._core import records, segment, sendfile, wire\n"
        "assert core.crc32c(b'123456789') == 0xE3069283\n"
        "assert pykfk.__file__.startswith(sys.prefix), pykfk.__file__\n"
        "batch = records.build_batch([(b'k', b'v', 1, [])])\n"
        "assert [r.value for r in records.iter_records(batch)] == [b'v']\n"
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [str(python), "-c", "import sys\n" + code], cwd=work, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    script = env_dir / "bin" / "pykfk-broker"
    assert script.exists()
    bad = subprocess.run(
        [str(script), "--override", "no.such.setting=1"], cwd=work, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert bad.returncode != 0 and "no.such.setting" in bad.stderr


def test_every_package_of_the_tree_goes_into_the_wheel() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pykfk").rglob("__init__.py")}
    tree |= {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pykfk_spark").rglob("__init__.py")}
    assert tree - listed == set()
