"""docs/protocol.md is generated from the handler registry and must match it."""

from __future__ import annotations

from pathlib import Path

from pykfk.server.api_table import main, protocol_reference_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_the_committed_protocol_reference_is_up_to_date():
    assert DOC.read_text(encoding="utf-8") == protocol_reference_markdown(), (
        "regenerate it: python -m pykfk.server.api_table --markdown > docs/protocol.md")


def test_every_served_api_is_listed_with_its_versions():
    text = protocol_reference_markdown()
    assert "| 3 | Metadata | 0-13 | v9 |" in text
    assert "| 17 | SaslHandshake | 0-1 | - |" in text


def test_the_command_needs_its_flag(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err
