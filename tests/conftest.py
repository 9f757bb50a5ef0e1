"""Test-wide fixtures: `target` runs a test once per target of tests/targets.py that can run on
this machine (the others skip, naming the missing tool)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.targets import TARGETS, require  # noqa: E402


@pytest.fixture(params=[pytest.param(t.name, marks=t.marks) for t in TARGETS])
def target(request):
    """A TargetUnderTest (tests/targets.py) that runs here; skips with the reason otherwise."""
    return require(request.param)
