"""The Kimi dialects: find the binary, tell which dialect it speaks (``_probe``), and build its driver."""

from __future__ import annotations

from ._probe import check_node, find_binary, installed_version, probe
from ._stores import session_dirs, session_roots
from .base import Driver, KimiInstall, ScreenState, WireEvent
from .kimi_code import KimiCodeDriver
from .legacy import LegacyDriver

__all__ = [
    "Driver",
    "KimiInstall",
    "ScreenState",
    "WireEvent",
    "check_node",
    "driver_class",
    "find_binary",
    "installed_version",
    "make_driver",
    "probe",
    "session_dirs",
    "session_roots",
]


def make_driver(install: KimiInstall) -> Driver:
    """The driver for the dialect ``install`` speaks (one instance per session)."""
    return driver_class(install.dialect)(install)


def driver_class(dialect: str) -> type[Driver]:
    """The driver class of a dialect's name (``KimiInstall.dialect``), for what needs no install: its files."""
    return LegacyDriver if dialect == "legacy" else KimiCodeDriver
