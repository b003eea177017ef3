"""The package as a user gets it: an sdist and a manylinux wheel (tools/build_wheels.sh)
that installs and runs on a Python with no compiler on the path, outside the checkout,
and a clear error (not a silent fallback) when the compiled core is missing."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_broker_import_without_compiled_core_says_how_to_build(tmp_path: Path) -> None:
    # A copy of the Python sources with the core's Python files but none of its extensions.
    # (bytecode left out: a .pyc being rewritten by another process can vanish mid-copy)
    shutil.copytree(ROOT / "pykfk", tmp_path / "pykfk", ignore=shutil.ignore_patterns("__pycache__"))
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


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the manylinux wheel built from it by tools/build_wheels.sh."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        ["bash", str(ROOT / "tools" / "build_wheels.sh"), str(out)], env={**os.environ, "PYTHON": sys.executable},
        capture_output=True, text=True, timeout=900, check=False,
    )
    assert result.returncode == 0, result.stderr
    sdist, wheel = (Path(line) for line in result.stdout.split())
    return sdist, wheel


@pytest.fixture(scope="module")
def bare_venv(dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed by a pip that finds no
    compiler: PATH holds the venv's bin and an empty directory, CC and CXX fail, and
    only wheels are accepted (a dependency built from source would need a compiler)."""
    env_dir = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(env_dir, with_pip=True)
    env = _without_build_tools(env_dir)
    for compiler in ("cc", "gcc", "c++", "g++", "clang"):
        assert shutil.which(compiler, path=env["PATH"]) is None, compiler
    subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--only-binary=:all:", str(dists[1])],
        env=env, check=True, timeout=600,
    )
    return env_dir


def _without_build_tools(env_dir: Path) -> dict[str, str]:
    empty = env_dir.parent / "no-build-tools"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{env_dir / 'bin'}:{empty}", CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false")
    return env


@pytest.mark.slow
def test_the_sdist_carries_what_the_wheel_is_built_from(dists: tuple[Path, Path]) -> None:
    sdist, _wheel = dists
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    core = {f"src/_core/{p.name}" for p in (ROOT / "src" / "_core").iterdir()
            if p.suffix in (".pyx", ".pxd", ".pyi", ".h") or p.name in ("crc32.c", "batch.c")}
    assert core - names == set()
    assert {"setup.py", "pyproject.toml", "MANIFEST.in", "pykfk/service/pykfk-broker.service",
            "pykfk/service/server.properties"} <= names
    assert not [name for name in names if name.endswith(".so")]


@pytest.mark.slow
def test_the_wheel_is_manylinux_by_auditwheel_show(dists: tuple[Path, Path]) -> None:
    _sdist, wheel = dists
    assert re.fullmatch(r"pykfk-[^-]+-cp\d+-cp\d+-manylinux_\d+_\d+_x86_64\.whl", wheel.name), wheel.name
    tag = wheel.name.rsplit("-", 1)[1].removesuffix(".whl")
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)],
                           capture_output=True, text=True, timeout=120, check=True).stdout
    assert f'is consistent with the following platform tag: "{tag}"' in " ".join(shown.split())
    # Nothing was grafted in: the core needs only libc, which every manylinux host has.
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    assert not [name for name in names if ".libs/" in name]
    assert "pykfk/service/pykfk-broker.service" in names


@pytest.mark.slow
def test_wheel_works_from_outside_the_checkout(bare_venv: Path, tmp_path: Path) -> None:
    python = bare_venv / "bin" / "python"
    code = (
        "import pykfk, pykfk._core as core, pykfk.broker, pykfk_spark\n"
        "from pykfk._core import metadata, records, regions, segment, sendfile, structs, wire\n"
        "assert core.crc32c(b'123456789') == 0xE3069283\n"
        "assert pykfk.__file__.startswith(sys.prefix), pykfk.__file__\n"
        "batch = records.build_batch([(b'k', b'v', 1, [])])\n"
        "assert [r.value for r in records.iter_records(batch)] == [b'v']\n"
    )
    env = _without_build_tools(bare_venv)
    result = subprocess.run(
        [str(python), "-c", "import sys\n" + code], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    script = bare_venv / "bin" / "pykfk-broker"
    assert script.exists()
    bad = subprocess.run(
        [str(script), "--override", "no.such.setting=1"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert bad.returncode != 0 and "no.such.setting" in bad.stderr


@pytest.mark.slow
def test_the_installed_broker_serves_a_record_without_build_tools(bare_venv: Path, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    ready = tmp_path / "ready.json"
    with open(tmp_path / "broker.log", "wb") as log_file:
        broker = subprocess.Popen(
            [str(bare_venv / "bin" / "pykfk-broker"), "--ready-file", str(ready),
             "--override", f"log.dirs={tmp_path / 'data'}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
            cwd=tmp_path, env=_without_build_tools(bare_venv), stdout=subprocess.DEVNULL, stderr=log_file,
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and broker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), (tmp_path / "broker.log").read_text()
        bootstrap = f"127.0.0.1:{json.loads(ready.read_text())['port']}"
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("installed", key=b"k", value=b"from a wheel")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "installed", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("installed", 0, 0)])
            message = consumer.poll(30)
            assert message is not None and message.error() is None
            assert (message.key(), message.value(), message.offset()) == (b"k", b"from a wheel", 0)
        finally:
            consumer.close()
    finally:
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(60) == 0, (tmp_path / "broker.log").read_text()


@pytest.mark.slow
def test_the_installed_broker_prints_a_unit_that_systemd_accepts(bare_venv: Path, tmp_path: Path) -> None:
    script = bare_venv / "bin" / "pykfk-broker"
    unit = tmp_path / "pykfk-broker.service"
    unit.write_text(subprocess.run([str(script), "--print-systemd-unit"], env=_without_build_tools(bare_venv),
                                   capture_output=True, text=True, timeout=60, check=True).stdout)
    assert f"ExecStart={script} /etc/pykfk/server.properties" in unit.read_text().splitlines()
    systemd_analyze = shutil.which("systemd-analyze")
    assert systemd_analyze, "systemd-analyze is missing (Debian's systemd package; bash .ci/install)"
    verified = subprocess.run([systemd_analyze, "verify", str(unit)], capture_output=True, text=True,
                              timeout=60, check=False)
    assert (verified.returncode, verified.stdout, verified.stderr) == (0, "", "")


def test_every_package_of_the_tree_goes_into_the_wheel() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pykfk").rglob("__init__.py")}
    tree |= {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pykfk_spark").rglob("__init__.py")}
    assert tree - listed == set()
