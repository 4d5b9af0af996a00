"""Process-wide state stays sane: exit signals and warning filters (issue 13, items 12 and 13)."""

from __future__ import annotations

import asyncio
import signal
import types
import warnings

import pytest
from mcp.shared.exceptions import MCPDeprecationWarning
from typing_extensions import deprecated

from kimi_mcp import server
from kimi_mcp.adapter import client as _mcp


def test_any_exit_signal_ignores_every_other_during_cleanup() -> None:
    saved = {s: signal.getsignal(s) for s in server._EXIT_SIGNALS}
    try:
        with pytest.raises(SystemExit):
            server._exit_on_signal(signal.SIGTERM, None)
        assert all(signal.getsignal(s) == signal.SIG_IGN for s in server._EXIT_SIGNALS)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        server._signalled.clear()


class _Session:
    client_capabilities = types.SimpleNamespace(roots=True)

    @deprecated("roots are deprecated", category=MCPDeprecationWarning)
    async def list_roots(self):
        await asyncio.sleep(0.05)  # another call interleaves here
        return types.SimpleNamespace(roots=[types.SimpleNamespace(uri="file:///tmp/project")])


def test_asking_for_roots_leaves_the_warning_filters_alone() -> None:
    ctx = types.SimpleNamespace(input_responses=None, session=_Session(), _is_modern_protocol=lambda: False)

    async def both():
        return await asyncio.gather(_mcp.client_roots(ctx), _mcp.client_roots(ctx))

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        assert asyncio.run(both()) == [["/tmp/project"], ["/tmp/project"]]
        assert warnings.filters == before  # no filter left behind by interleaved calls
    assert not [w for w in seen if issubclass(w.category, MCPDeprecationWarning)]
