"""Pilot tests are coroutines: anyio's pytest plugin (installed with starlette) runs them."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
