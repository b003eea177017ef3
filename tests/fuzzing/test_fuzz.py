"""The fuzz targets over every kept input (seeds, what runs found, past crashes), and a
short coverage-guided run of each target under atheris, so the harness never rots."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.targets import TARGETS

FUZZ = Path(__file__).parents[2] / "fuzz"
KEPT = sorted(
    [(target, path) for target in TARGETS for path in (FUZZ / "corpus" / target).glob("*")]
    + [(path.name.split("-", 1)[0], path) for path in (FUZZ / "crashes").glob("*-*")]
)


def test_every_target_has_a_corpus():
    assert {target for target, _ in KEPT} == set(TARGETS)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_kept_inputs_are_refused_cleanly(target):
    for name, path in KEPT:
        if name == target:
            TARGETS[target](path.read_bytes())


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_short_fuzzing_run_finds_nothing(target, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(FUZZ / "corpus" / target, corpus)
    result = subprocess.run(
        [sys.executable, "-m", "fuzz", target, "-runs=20000", "-seed=1", f"-artifact_prefix={tmp_path}/", str(corpus)],
        cwd=FUZZ.parent, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Done 20000 runs" in result.stderr
    assert not list(tmp_path.glob("crash-*"))
