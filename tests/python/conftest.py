"""Shared by the dvar Python tests: the package from the source tree, the
library CMake built (DVAR_LIBRARY), the source tree's fixtures."""

import os
import sys

import numpy as np
import pytest

SOURCE = os.environ.get("DVAR_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "python"))

SANITIZED = os.environ.get("DVAR_SANITIZED") == "1"


def fixture_path(*parts):
    return os.path.join(SOURCE, "fixtures", *parts)


@pytest.fixture
def rng():
    return np.random.default_rng(20261125)


def rss_anon():
    """Resident anonymous memory of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")
