"""The generated message types (``pykfk/protocol/typed.py``) agree with the declarations
in ``pykfk/protocol/messages/`` and with the Structs the codec decodes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pykfk.protocol import typed, typegen
from pykfk.protocol.messages import API_SPECS
from pykfk.protocol.schema import ApiSpec, Field

REPO = Path(__file__).resolve().parents[2]


def test_committed_types_equal_a_fresh_generation() -> None:
    assert typegen.TARGET.read_text() == typegen.generate(), (
        "pykfk/protocol/typed.py differs from the declarations: run python -m pykfk.protocol.typegen")


def test_a_changed_declaration_changes_the_generated_types() -> None:
    heartbeat = API_SPECS[12]
    changed = ApiSpec(12, "Heartbeat", versions="0-4", flexible="4+",
                      request=[*heartbeat.request.fields, Field("member_epoch", "int32", "4+", default=-1)],
                      response=heartbeat.response.fields)
    text = typegen.generate([changed])
    assert "    member_epoch: int  # v4+, default -1\n" in text
    assert text != typegen.generate([heartbeat])


def test_decoded_requests_hold_exactly_the_typed_fields() -> None:
    """Every version of every request, decoded from a body of defaults, is a Struct whose
    keys are the attributes of its generated Protocol (nested structs alike)."""
    for spec in API_SPECS.values():
        protocol = getattr(typed, spec.name + "Request")
        for version in range(spec.min_version, spec.max_version + 1):
            body = spec.encode_request({}, version)
            decoded = spec.decode_request(body, 0, version)
            assert set(decoded) == set(protocol.__annotations__), (spec.name, version)
        response = getattr(typed, spec.name + "Response")
        assert set(response.__annotations__) == {f.name for f in spec.response.fields}


def test_mypy_checks_field_names_and_types(tmp_path: Path) -> None:
    """A misspelt request attribute, a wrong response key and a wrong value type are
    mypy errors; the correct uses are not."""
    module = tmp_path / "uses_types.py"
    module.write_text(textwrap.dedent("""\
        from pykfk.protocol.typed import HeartbeatRequest, HeartbeatResponse, MetadataResponse


        def good(request: HeartbeatRequest) -> HeartbeatResponse:
            instance: str | None = request.group_instance_id
            return {"error_code": len(request.group_id) + request.generation_id}


        def bad_name(request: HeartbeatRequest) -> HeartbeatResponse:
            return {"error_code": request.generation}


        def bad_key() -> HeartbeatResponse:
            return {"errorcode": 0}


        def bad_value() -> MetadataResponse:
            return {"topics": [{"name": "t", "partitions": [{"leader_id": "1"}]}]}
    """))
    root = tmp_path / "root"
    (root / "pykfk").mkdir(parents=True)
    for entry in (REPO / "pykfk").iterdir():
        if entry.name not in ("_core", "__pycache__"):
            (root / "pykfk" / entry.name).symlink_to(entry)
    (root / "pykfk" / "_core").symlink_to(REPO / "src" / "_core")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         "--follow-imports=silent", str(module)],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "MYPYPATH": str(root)},
    )
    errors = sorted(line.split(":")[1] for line in result.stdout.splitlines() if ": error:" in line)
    assert errors == ["10", "14", "18"], result.stdout + result.stderr
