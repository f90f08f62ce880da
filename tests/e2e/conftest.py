"""Fixtures for end-to-end launches."""

from __future__ import annotations

import pytest
from launching import BIN


@pytest.fixture
def hpcdist() -> str:
    """The installed console script."""
    return str(BIN / "hpcdist")
