"""pytest plugin shipped with pykfk: fixtures that give tests a real broker.

Registered through the ``pytest11`` entry point, so any project that installs pykfk can
ask for the ``pykfk_broker`` fixture.
"""
