"""The models a Kimi offers, read from its environment and its own config file (nothing is run): which
alias it runs by default, and which ``-m`` alias a requested model is."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, ClassVar

from ..errors import BadInput


class KimiModels:
    """The model helpers of a :class:`~kimi_mcp.drivers.base.Driver` (mixed into it): its config file lies
    next to its ``sessions_root``, and ``model_variable`` sets a model without one."""

    @classmethod
    def sessions_root(cls, env: dict[str, str]) -> Path:
        """The folder holding this Kimi's sessions (each driver says where)."""
        raise NotImplementedError

    #: the environment variable that configures the model without a config file
    model_variable: ClassVar[str] = "KIMI_MODEL_NAME"

    def configured_model(self, env: dict[str, str]) -> str | None:
        """The model this Kimi would use without logging in, and where it is set: the environment, else
        ``default_model`` in its config file; ``None`` when it is not logged in (read only, nothing is run)."""
        alias = self.default_alias(env)
        if alias is None:
            return None
        return f"{alias} (from {self.model_variable if env.get(self.model_variable) else self._config_path(env)})"

    def default_alias(self, env: dict[str, str]) -> str | None:
        """The model alias this Kimi runs without ``-m``: the environment's model, else ``default_model`` in
        its config file; ``None`` when it has none yet (read only, nothing is run)."""
        if env.get(self.model_variable):
            return env[self.model_variable]
        model = (self._config(env) or {}).get("default_model")
        return str(model) if model else None

    def _config_path(self, env: dict[str, str]) -> Path:
        return self.sessions_root(env).parent / "config.toml"

    def _config(self, env: dict[str, str]) -> dict[str, Any] | None:
        """Kimi's own config file, or ``None`` when there is none or it cannot be read."""
        try:
            return tomllib.loads(self._config_path(env).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def models(self, env: dict[str, str]) -> dict[str, str]:
        """The models this Kimi offers: alias (what ``-m`` takes: a key of ``[models]`` in its config file)
        → the provider's model name. A model set in the environment (:attr:`model_variable`) is the only
        one: both dialects then use it whatever ``-m`` says, so it is listed under its own name."""
        if env.get(self.model_variable):
            return {env[self.model_variable]: env[self.model_variable]}
        config = self._config(env)
        if config is None:
            return {}
        table = config.get("models")
        if not isinstance(table, dict):
            return {}
        return {
            str(alias): str(entry.get("model") or alias) if isinstance(entry, dict) else str(alias)
            for alias, entry in table.items()
        }

    def model_flag(self, requested: str, env: dict[str, str], source: str = "model") -> str | None:
        """The alias to pass with ``-m`` for the model ``requested`` (an alias, or a provider's model name
        that one alias has; ``source`` names where it came from in the error), or ``None`` when no flag is
        needed (the environment's model, or Kimi has no model yet: the automated login picks it).
        Raises ``BadInput`` listing what Kimi offers."""
        offered = self.models(env)
        if not offered:
            return None
        if env.get(self.model_variable) and requested == env[self.model_variable]:
            return None
        matches = [requested] if requested in offered else [
            alias for alias, name in offered.items() if requested in (name, alias.rsplit("/", 1)[-1])
        ]  # fmt: skip
        if len(matches) == 1 and not env.get(self.model_variable):
            return matches[0]
        where = (
            f"{self.model_variable} in the server's environment"
            if env.get(self.model_variable)
            else str(self._config_path(env))
        )
        listed = ", ".join(f"{a} ({n})" if n != a else a for a, n in sorted(offered.items()))
        raise BadInput(
            f"{source} {requested!r} is {'ambiguous' if matches else 'not one of the models'} this Kimi "
            f"offers: {listed}",
            details={"model": requested, "available": sorted(offered), "configured_in": where},
            suggestion="Pass one of the available models (or leave model unset for Kimi's default); "
            "add a model to Kimi with its own /login or /provider.",
        )
