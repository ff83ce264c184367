"""Helpers the test modules share: mocks, fake agents, harnesses and fixtures.

No test module imports another (``tests/test_guards.py`` holds it); whatever two test modules
need lives here. ``tests/`` is on ``sys.path`` (pytest's rootdir-relative import mode), so a
test module imports ``from support.X import ...``. ``fake_agent.py`` is run as a script by
path (``conftest.FAKE_AGENT``, ``hostile_support.FAKE_AGENT``, ``benchmarks/run.py``).
"""
