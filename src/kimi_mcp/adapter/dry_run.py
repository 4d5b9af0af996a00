"""A dry run (``dry_run=true`` on any Kimi tool): the call is checked and its prompt built exactly as for a
real call (the same arguments, workspace, files, secret files redacted, a diff cut to the message limit), then
it stops: no job, no Kimi, no isolated copy. The result says what the call would do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..message import MessageRules, check_size, estimated_tokens, prepare
from ..models import DryRunInfo, TaskResult, Usage
from ..scope import TokenMeter
from .isolation import Isolation

if TYPE_CHECKING:
    from .pipeline import Call

NOTE = "dry run: nothing was started or stored; dry_run says what the call would do"


def typed_message(prompt: str, max_tokens: int) -> tuple[str, MessageRules]:
    """``prompt`` as it would be typed into Kimi, with the rules of the dialect that counts it dearer (Kimi
    Code: a tab becomes a mark of one token), and those rules (``max_tokens``: the message limit)."""
    rules = MessageRules(keeps_tabs=False, max_tokens=max_tokens)
    return prepare(prompt, rules), rules


def preview(
    call: Call, prompt: str, *, model: str | None, isolation: Isolation, meter: TokenMeter
) -> TaskResult:
    """The dry run's result for ``call`` with ``prompt``: refused with ``BadInput`` as the real call would be
    when the message is over the limit (``KIMI_MCP_MAX_MESSAGE_TOKENS``)."""
    settings = call.settings
    message, rules = typed_message(prompt, settings.max_message_tokens)
    check_size(message, rules)
    tokens = estimated_tokens(message)
    chosen = model or settings.model
    price = settings.prices.get(chosen or "")
    info = DryRunInfo(
        prompt_chars=len(message), prompt_tokens=tokens, files_sent=list(call.files_sent),
        redacted=list(call.redacted), truncated=list(call.left_out), workspace=str(call.workspace),
        model=chosen, isolation=isolation.mode, runs_on="worker" if settings.broker else "local",
        max_tokens=meter.max_tokens,
    )  # fmt: skip
    cost = None if price is None else round(tokens * price[0] / 1_000_000, 6)
    return call.cls(
        success=True, status="done", workspace=str(call.workspace), dry_run=info,
        usage=Usage(input_tokens=tokens, cost_usd=cost), notes=[NOTE, *call.warnings], **call.preview,
    )  # fmt: skip
