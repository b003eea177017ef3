"""python -m fuzz TARGET [libFuzzer options] [corpus dirs]

Runs a target of ``fuzz.targets`` under atheris with Python coverage of pykfk. With no
corpus directory given it uses (and grows) ``fuzz/corpus/TARGET``; failing inputs are
written to ``fuzz/crashes/``. Examples::

    python -m fuzz request -runs=1000000
    python -m fuzz batches -max_total_time=600
    python -m fuzz seed        # (re)write the seed inputs of every target
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] == "seed":
        from fuzz.seeds import write_seeds

        write_seeds(HERE / "corpus")
        return 0
    import atheris

    with atheris.instrument_imports(include=["pykfk", "fuzz"]):
        from fuzz.targets import TARGETS
    name, options = argv[0], argv[1:]
    if name not in TARGETS:
        print(f"unknown target {name!r}; targets: {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    corpus = HERE / "corpus" / name
    crashes = HERE / "crashes"
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(exist_ok=True)
    if not any(not o.startswith("-") for o in options):
        options.append(str(corpus))
    prefix = [] if any(o.startswith("-artifact_prefix=") for o in options) else [
        f"-artifact_prefix={crashes}{os.sep}{name}-"]
    args = [sys.argv[0], *prefix, "-max_len=65536", *options]
    atheris.Setup(args, TARGETS[name])
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
