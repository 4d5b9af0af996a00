"""The automated first-run login: a Kimi that is not logged in is logged in with MOONSHOT_API_KEY by its
driver's login script, typed through the terminal (the drivers' ``Console``)."""

from __future__ import annotations

from .._logging import for_client, get_logger
from ..drivers.base import Console, Driver, LoginOptions
from ..errors import AuthError, KimiMCPError
from ..scope import Scope

log = get_logger("session")


def not_logged_in(driver: Driver) -> AuthError:
    """The error for a Kimi that is not logged in when there is no key to log it in with."""
    return AuthError(
        "Kimi is not logged in (no model configured) and MOONSHOT_API_KEY is not set",
        details={"dialect": driver.name},
        suggestion=(
            "Either set MOONSHOT_API_KEY in the server's environment (or its .env) so kimi-mcp logs "
            "Kimi in automatically, or run `kimi` once by hand and log in with /login."
        ),
    )


def automated_login(driver: Driver, console: Console, options: LoginOptions, scope: Scope) -> str:
    """Run the driver's login script for the call of ``scope`` (told what happens); returns the model
    chosen. What a failed login's error says is masked (it may quote the key)."""
    scope.progress(f"Kimi is not logged in; logging in to {options.platform} with MOONSHOT_API_KEY")
    log.info(
        "running the automated login (%s, platform %s)",
        driver.name,
        options.platform,
        extra=for_client(scope.job_id),
    )
    try:
        model = driver.login(console, options)
    except KimiMCPError as exc:
        exc.message = scope.redactor(exc.message)
        exc.details = {k: scope.redactor(v) if isinstance(v, str) else v for k, v in exc.details.items()}
        raise
    scope.progress(f"logged in; model {model}")
    log.info("automated login done; model %s", model, extra=for_client(scope.job_id))
    return model
