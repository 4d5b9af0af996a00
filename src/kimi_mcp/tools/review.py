"""kimi_review: a read-only review of a git range (the working tree, the index, a commit, ``A..B`` /
``A...B``). Kimi gets the range's diff (cut by file to the message limit, secret files withheld) and reads
files as it needs, in plan mode with every write rejected, like the other read-only tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastmcp import Context
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from pydantic import Field

from .. import prompts, review
from ..adapter.dry_run import typed_message
from ..adapter.pipeline import Backend, Call, Reply, RunOptions, current_backend, not_blank, run_tool
from ..adapter.tasks import TASK
from ..message import estimated_tokens
from ..models import ReviewResult
from ._params import READ_OPTIONS, reads, run_options

MARGIN_TOKENS = 200  # what typing the message may add (a guard line, Kimi Code's note on tabs) and more

Range = Annotated[
    str,
    Field(
        min_length=1,
        max_length=500,
        description="What to review: 'working_tree' (uncommitted changes against HEAD, untracked files "
        "included), 'staged' (the index against HEAD), a commit (HEAD, a sha, a tag: against its first "
        "parent), 'A..B' (B against A) or 'A...B' (B against its merge base with A: a branch against its base)",
    ),
]


@tool(
    description=(
        "Read-only: ask Kimi to review a git range of the workspace (the working tree, the staged changes, a "
        "commit, or A..B / A...B such as main...feature). Kimi gets the diff and reads files as it needs; it "
        "cannot write files or run commands. Returns findings (file, line, severity critical/major/minor/nit, "
        "title, detail, suggestion) on files of the diff, a verdict (approve, request_changes, comment), a "
        "summary and what was reviewed (commits, files, insertions, deletions)."
    ),
    annotations=reads("Kimi: review a git range"),
    task=TASK,
    output_schema=ReviewResult.model_json_schema(),
)
@run_options(READ_OPTIONS)
async def kimi_review(
    ctx: Context,
    range: Range = "working_tree",  # noqa: A002 - the argument's name in the tool's schema
    focus: Annotated[str | None, Field(description="What to look at in particular")] = None,
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    arguments: dict[str, Any] = {"range": range.strip(), "focus": focus}

    def prompt(call: Call, ws: Path) -> str:
        found = review.review_diff(ws, range, call.settings.max_context_bytes)
        return review_message(call, found, focus, arguments)

    return await run_tool(
        ctx, backend, ReviewResult, prompt, shared, tool="kimi_review", arguments=arguments, read_only=True,
        check=not_blank(range=range),
    )  # fmt: skip


def review_message(call: Call, found: review.ReviewDiff, focus: str | None, arguments: dict[str, Any]) -> str:
    """Kimi's message for the range's diff ``found``: as many files' diffs as fit in the message limit (what
    is left out, and the secret files, named); the call and the job's ``arguments`` learn what went in."""
    shown = [f for f in found.files if not f.secret]
    withheld = [f.path for f in found.files if f.secret]

    def text(diff: str, not_shown: list[str]) -> str:
        return prompts.review_prompt(
            found.range, found.subjects, diff, focus, not_shown=not_shown, withheld=withheld
        )

    limit = call.settings.max_message_tokens
    frame = estimated_tokens(typed_message(text("", [f.path for f in shown]), limit)[0])
    kept, left = review.cut(shown, limit - frame - MARGIN_TOKENS)
    call.files_sent, call.redacted, call.left_out = [f.path for f in kept], withheld, left
    call.preview = {"reviewed": found.reviewed()}
    if left:
        call.warnings.append(
            f"{len(left)} file(s) of the diff left out of Kimi's message (over KIMI_MCP_MAX_MESSAGE_TOKENS, "
            f"see truncated; Kimi may read them itself): {', '.join(item.path for item in left)}"
        )
    if withheld:
        call.warnings.append(f"secret files of the diff, not sent to Kimi: {', '.join(withheld)}")
    arguments |= {
        "reviewed": found.reviewed(),
        "diff_files": [f.path for f in found.files],
        "left_out": [item.model_dump() for item in left],
    }
    return text("".join(f.text for f in kept), [item.path for item in left])
