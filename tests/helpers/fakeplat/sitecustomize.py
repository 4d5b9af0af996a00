"""Test-only hook: point legacy kimi-cli 1.50's Moonshot platforms at the suite's fake API.

kimi-cli 1.50 hard-codes ``https://api.moonshot.cn/v1`` / ``https://api.moonshot.ai/v1`` in
``kimi_cli.auth.platforms.PLATFORMS``; its ``/login`` (``/setup``) flow verifies the API key with
``GET {base_url}/models`` there, and saves that ``base_url`` in ``~/.kimi/config.toml``.

Usage (child process environment)::

    PYTHONPATH=<repo>/tests/helpers/fakeplat[:...]
    KIMI_FAKE_PLATFORM_BASE_URL=http://127.0.0.1:PORT/v1

Only when ``KIMI_FAKE_PLATFORM_BASE_URL`` is set, a ``sys.meta_path`` finder wraps the loader of
``kimi_cli.auth.platforms``; right after that module has executed, the ``moonshot-cn`` and ``moonshot-ai``
entries of ``PLATFORMS`` are replaced *in place* (other modules hold the same list object) and the
``_PLATFORM_BY_ID`` / ``_PLATFORM_BY_NAME`` lookups are rebuilt. Nothing is imported early, and any
process that never imports kimi-cli (e.g. the kimi-mcp server itself) is unaffected.

Because this file shadows any ``sitecustomize`` later on ``sys.path``, that one is executed too (chained).
"""

from __future__ import annotations

import os
import sys

ENV_VAR = "KIMI_FAKE_PLATFORM_BASE_URL"
TARGET_MODULE = "kimi_cli.auth.platforms"
PLATFORM_IDS = ("moonshot-cn", "moonshot-ai")


def patch_platforms(module: object, base_url: str) -> None:
    """Rewrite the Moonshot platforms of an executed ``kimi_cli.auth.platforms`` module."""
    platforms = getattr(module, "PLATFORMS", None)
    if not isinstance(platforms, list):
        return
    for index, platform in enumerate(platforms):
        if getattr(platform, "id", None) in PLATFORM_IDS:
            platforms[index] = platform._replace(base_url=base_url)
    for attr, key in (("_PLATFORM_BY_ID", "id"), ("_PLATFORM_BY_NAME", "name")):
        rebuilt = {getattr(p, key): p for p in platforms}
        current = getattr(module, attr, None)
        if isinstance(current, dict):
            current.clear()  # in place, in case someone imported the dict itself
            current.update(rebuilt)
        else:
            setattr(module, attr, rebuilt)
    module.__dict__["_KIMI_FAKE_PLATFORM_BASE_URL"] = base_url  # marker for debugging


class _PatchingLoader:
    """Delegates to the real loader and patches the module after it has executed."""

    def __init__(self, inner: object, base_url: str) -> None:
        self._inner = inner
        self._base_url = base_url

    def create_module(self, spec: object) -> object:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: object) -> None:
        self._inner.exec_module(module)  # type: ignore[attr-defined]
        patch_platforms(module, self._base_url)

    def __getattr__(self, name: str) -> object:  # get_source, is_package, get_resource_reader, ...
        return getattr(self._inner, name)


class _PlatformsFinder:
    """A meta path finder that only answers for ``kimi_cli.auth.platforms``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != TARGET_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _PlatformsFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and not isinstance(spec.loader, _PatchingLoader):
                spec.loader = _PatchingLoader(spec.loader, self.base_url)
            return spec
        return None

    def invalidate_caches(self) -> None:
        pass


def install(base_url: str) -> None:
    if not any(isinstance(f, _PlatformsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PlatformsFinder(base_url))


def _chain_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this file shadows (the first one later on sys.path), if any."""
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if p and os.path.realpath(p) != here]
    from importlib.machinery import PathFinder  # already loaded by the import system: cheap

    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec

    module = module_from_spec(spec)
    globals()["chained"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # same leniency as site.py
        print(f"Error in chained sitecustomize {spec.origin}: {exc!r}", file=sys.stderr)


chained = None
_base_url = os.environ.get(ENV_VAR)
if _base_url:
    install(_base_url)
_chain_next_sitecustomize()
