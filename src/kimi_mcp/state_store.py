"""The server's FastMCP, whose session state store is made at its first write (start-up speed).

FastMCP reads its session state store (``FastMCP._state_store``: a ``PydanticAdapter`` over a ``MemoryStore``
of the ``py-key-value`` package) at every tool call and tool list, for session visibility rules and
``Context.get_state``, and that package's import (beartype's with it) costs more than a tenth of a second
of a first call. kimi-mcp never writes session state on that path (its request-scoped state is
``serializable=False``), and a store nothing was written to holds nothing: so reads answer "nothing" here
until the first write, which makes FastMCP's own store; from then on every read and write goes to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp import FastMCP


class LazyStateStore:
    """FastMCP's state store, made by ``make()`` at the first use other than a read."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._store: Any = None

    @property
    def made(self) -> bool:
        """Whether FastMCP's own store exists (something other than a read used it)."""
        return self._store is not None

    async def get(self, key: str, *, collection: str | None = None, default: Any = None) -> Any:
        """The value under ``key`` (``default`` before anything was ever written)."""
        if self._store is None:
            return default
        return await self._store.get(key=key, collection=collection, default=default)

    def __getattr__(self, name: str) -> Any:  # put, delete, ttl, ...: FastMCP's store from now on
        if self._store is None:
            self._store = self._make()
        return getattr(self._store, name)


class KimiFastMCP(FastMCP):
    """FastMCP with :class:`LazyStateStore` as its session state store."""

    @property
    def _state_store(self) -> Any:  # FastMCP's private property, pinned with its version (fastmcp==4.1.4)
        lazy = self.__dict__.get("_kimi_state_store")
        if lazy is None:
            lazy = LazyStateStore(lambda: FastMCP._state_store.fget(self))  # type: ignore[attr-defined]
            self.__dict__["_kimi_state_store"] = lazy
        return lazy
