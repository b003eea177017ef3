"""``python -m pykfk.mirror``: the same as ``pykfk-mirror`` (its commands live with the
other commands, in ``pykfk.cli.mirror``)."""

if __name__ == "__main__":
    from pykfk.cli.mirror import main

    main()
