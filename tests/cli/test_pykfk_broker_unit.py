"""``pykfk-broker --print-systemd-unit`` warns when the unit's ExecStart points where
the unit's own sandbox (PrivateTmp=yes, ProtectHome=yes) hides it from the service."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

from pykfk._core.segment import open_sealed_segments_limit, set_open_sealed_segments_limit
from pykfk.cli.broker import hidden_from_unit, max_map_count, size_sealed_segment_lru


def test_a_venv_under_tmp_gets_a_warning(tmp_path: Path) -> None:
    # A virtual environment under /tmp, as made for a quick try-out.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    script = env_dir / "bin" / "pykfk-broker"
    script.write_text(f"#!{python}\nimport sys\nfrom pykfk.cli.broker import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)

    result = subprocess.run([str(script), "--print-systemd-unit"], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert f"ExecStart={script} " in result.stdout
    assert result.stderr.startswith(f"pykfk-broker: warning: ExecStart runs {script}, under /tmp")
    assert "PrivateTmp=yes hides" in result.stderr and "/opt/pykfk" in result.stderr


def test_which_paths_the_unit_hides() -> None:
    assert hidden_from_unit("/opt/pykfk/bin/pykfk-broker") is None
    assert hidden_from_unit("/usr/local/bin/pykfk-broker") is None
    assert "ProtectHome=yes" in (hidden_from_unit("/home/ops/venv/bin/pykfk-broker") or "")
    assert "ProtectHome=yes" in (hidden_from_unit("/root/venv/bin/pykfk-broker") or "")
    assert "PrivateTmp=yes" in (hidden_from_unit("/var/tmp/venv/bin/pykfk-broker") or "")
    assert hidden_from_unit("/tmpfs/pykfk-broker") is None


def test_the_sealed_segment_lru_is_sized_from_open_files_and_mappings() -> None:
    saved = open_sealed_segments_limit()
    try:
        assert size_sealed_segment_lru(1 << 20) == 4096
        assert size_sealed_segment_lru(1024) == 128 == open_sealed_segments_limit()
        # two mappings a sealed segment, an eighth of what the kernel allows
        assert size_sealed_segment_lru(1 << 20, 65530) == 4095
        assert size_sealed_segment_lru(1 << 20, 16000) == 1000
        assert max_map_count() == int(Path("/proc/sys/vm/max_map_count").read_text())
    finally:
        set_open_sealed_segments_limit(saved)
