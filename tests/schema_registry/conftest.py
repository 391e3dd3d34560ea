"""Fixtures of the schema registry tests: a running broker, gateway and registry per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from registry_stack import Stack, running_stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path / "wh") as s:
        yield s


@pytest.fixture
def registry_http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.registry_url, timeout=30) as client:
        yield client
