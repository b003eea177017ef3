"""``python -m pykfk.mirror``: the same as ``pykfk-mirror``."""

from pykfk.mirror.cli import main

main()
