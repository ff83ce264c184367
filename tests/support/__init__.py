"""Helpers the test modules share: mocks, fake agents, harnesses and fixtures.

No test module imports another (``tests/test_guards.py`` holds it); whatever two test modules
need lives here. ``tests/`` is on ``sys.path`` (pytest's rootdir-relative import mode), so a
test module imports ``from support.X import ...``; scripts run by path (``fake_agent.py``)
take their path from ``support.FAKE_AGENT`` or ``conftest.FAKE_AGENT``.
"""
