"""What one call needs built from the settings: the Kimi session, its message, the tracker's options."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Settings
from ..drivers import KimiInstall, make_driver
from ..drivers.base import LoginOptions
from ..message import check_size, prepare
from ..scope import Scope
from ..session import ApprovalPolicy, KimiSession
from ..task import TaskRequest
from ._pool import StandbyKey

if TYPE_CHECKING:
    from ..models import Usage
    from ..tracker import TrackerOptions


def tracker_options(settings: Settings) -> TrackerOptions:
    # the tracker loads with a call's run, not for a standby a first call starts while the server still
    # loads (start-up speed: with the SDK importing beside it, 0.06 s before that Kimi's spawn)
    from ..tracker import TrackerOptions

    return TrackerOptions(
        extra_excluded_dirs=frozenset(settings.exclude_dirs),
        max_file_chars=settings.max_file_chars,
        max_total_chars=settings.max_total_chars,
        watch=settings.tracker_watch,
        fork=settings.tracker_fork,
        spill=settings.tracker_spill,
    )


def login_options(settings: Settings, env: dict[str, str], model: str | None = None) -> LoginOptions | None:
    """The automated login's options (``model``: the call's, else ``KIMI_MCP_MODEL``)."""
    key = env.get("MOONSHOT_API_KEY", "").strip()
    if not key:
        return None
    return LoginOptions(
        api_key=key, platform=settings.platform, model=model or settings.model, thinking=settings.thinking
    )


def new_session(
    install: KimiInstall,
    workspace: Path,
    read_only: bool,
    settings: Settings,
    env: dict[str, str],
    *,
    scope: Scope,
    resume: str | None = None,
    model: str | None = None,
    login_model: str | None = None,
) -> KimiSession:
    """An unstarted session for one workspace and mode (``resume``: continue that Kimi conversation;
    ``model``: the alias Kimi starts with; ``login_model``: the model an automated login picks)."""
    return KimiSession(
        make_driver(install),
        workspace,
        env=env,
        policy=ApprovalPolicy(workspace, read_only, settings.allow_shell),
        scope=scope,
        startup_timeout=settings.startup_timeout,
        transcript_dir=settings.transcript_dir,
        login=login_options(settings, env, login_model),
        resume=resume,
        model=model,
    )


def call_session(
    install: KimiInstall,
    request: TaskRequest,
    settings: Settings,
    env: dict[str, str],
    scope: Scope,
    model: str | None,
) -> KimiSession:
    """An unstarted Kimi of its own for one call (``model``: the alias it starts with); a follow-up's resumes
    its conversation."""
    return new_session(
        install, request.workspace, request.read_only, settings, env,
        scope=scope, resume=request.session_id, model=model, login_model=request.model,
    )  # fmt: skip


def standby_key(
    binary: str,
    install: KimiInstall,
    workspace: Path,
    read_only: bool,
    settings: Settings,
    model: str | None = None,
) -> StandbyKey:
    lists = make_driver(install).lists_workspace_at_startup
    return StandbyKey(binary, install.version, str(workspace), read_only, settings.allow_shell, lists, model)


def model_alias(
    install: KimiInstall, requested: str | None, settings: Settings, env: dict[str, str]
) -> str | None:
    """The alias Kimi starts with (``-m``) for the call's model, else ``KIMI_MCP_MODEL``; ``None``: Kimi's
    default. An unknown model is the caller's error (``BadInput`` listing what Kimi offers)."""
    wanted = requested or settings.model
    if not wanted:
        return None
    source = "model" if requested else "KIMI_MCP_MODEL"
    return make_driver(install).model_flag(wanted, env, source)


def model_run(install: KimiInstall, alias: str | None, env: dict[str, str]) -> str | None:
    """The model a Kimi started with ``-m alias`` (``None``: no flag) runs: that alias, else Kimi's default
    (``None`` when Kimi has none yet: the automated login picks it). Standbys and live sessions are matched
    by it, so naming Kimi's default and naming no model are the same Kimi."""
    return alias or make_driver(install).default_alias(env)


def start_flag(install: KimiInstall, model: str | None, env: dict[str, str]) -> str | None:
    """The ``-m`` alias that starts a Kimi running ``model`` (see :func:`model_run`)."""
    return make_driver(install).model_flag(model, env) if model else None


def message(
    prompt: str, workspace: Path, install: KimiInstall, env: dict[str, str], settings: Settings
) -> str:
    """The prompt as the one inert message typed into this Kimi (see ``message``); refused with
    ``BadInput`` if it cannot arrive whole."""
    rules = make_driver(install).message_rules(workspace, env, settings.max_message_tokens)
    text = prepare(prompt, rules)
    check_size(text, rules)
    return text


def cost(usage: Usage, model: str | None, settings: Settings) -> float | None:
    """What ``usage`` cost at the model's price in ``KIMI_MCP_PRICES`` (None: no price for it)."""
    price = settings.prices.get(model or "")
    if price is None:
        return None
    return round((usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000, 6)
