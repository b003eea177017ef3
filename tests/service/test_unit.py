"""The systemd unit and example configuration shipped in the package: systemd-analyze
verify accepts the unit as ``pykfk-broker --print-systemd-unit`` writes it (and its
security check rates it OK), and the example server.properties is a valid
configuration under the unit's state directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from pykfk.config import BrokerConfig
from pykfk.service import UNIT_EXEC_PATH, example_config_text, unit_file_text

TIMEOUT_S = 60


def _broker_cli(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "pykfk.broker", *args], capture_output=True, text=True,
                            timeout=TIMEOUT_S, check=True)
    return result.stdout


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    systemd_analyze = shutil.which("systemd-analyze")
    assert systemd_analyze, "systemd-analyze is missing (Debian's systemd package; bash .ci/install)"
    return subprocess.run([systemd_analyze, "verify", str(unit)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


def _settings(unit_text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in unit_text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    unit = tmp_path / "pykfk-broker.service"
    unit.write_text(_broker_cli("--print-systemd-unit"), encoding="utf-8")
    result = _verify(unit)
    # verify exits 0 even for unknown keys or bad values it ignores: it must say nothing.
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_unit_is_hardened(tmp_path):
    """systemd's own exposure score (0 safest, 10 worst) stays in its "OK" band (below 4)."""
    unit = tmp_path / "pykfk-broker.service"
    unit.write_text(_broker_cli("--print-systemd-unit"), encoding="utf-8")
    result = subprocess.run([shutil.which("systemd-analyze") or "systemd-analyze", "security", "--offline=yes",
                             "--threshold=39", str(unit)], capture_output=True, text=True, timeout=TIMEOUT_S,
                            check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


def test_systemd_analyze_would_catch_a_bad_unit(tmp_path):
    unit = tmp_path / "pykfk-broker.service"
    unit.write_text(_broker_cli("--print-systemd-unit").replace("Type=notify", "Type=notify\nRestartt=always"))
    assert "Restartt" in _verify(unit).stderr
    unit.write_text(unit_file_text(executable=str(tmp_path / "missing" / "pykfk-broker")))
    assert _verify(unit).returncode != 0


def test_the_printed_unit_runs_this_installation(tmp_path):
    printed = _broker_cli("--print-systemd-unit")
    (exec_start,) = _settings(printed)["ExecStart"]
    executable, config = exec_start.split()
    assert Path(executable).name == "pykfk-broker" and Path(executable).is_file()
    assert config == "/etc/pykfk/server.properties"
    assert printed == unit_file_text().replace(UNIT_EXEC_PATH, executable)


def test_the_unit_runs_a_notify_service_as_its_own_user():
    settings = _settings(unit_file_text())
    for key, value in {
        "Type": "notify", "NotifyAccess": "main", "User": "pykfk", "Group": "pykfk",
        "StateDirectory": "pykfk", "Restart": "on-failure", "ExecReload": "/bin/kill -HUP $MAINPID",
        "LimitNOFILE": "1048576", "ProtectSystem": "strict", "WantedBy": "multi-user.target",
    }.items():
        assert settings[key] == [value], key


def test_the_example_config_is_valid_and_keeps_data_in_the_state_directory(tmp_path):
    text = _broker_cli("--print-example-config")
    assert text == example_config_text()
    path = tmp_path / "server.properties"
    path.write_text(text, encoding="utf-8")
    config = BrokerConfig.load(str(path))
    assert config.log_dirs == ["/var/lib/pykfk/data"]  # StateDirectory=pykfk
    assert [str(listener) for listener in config.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
