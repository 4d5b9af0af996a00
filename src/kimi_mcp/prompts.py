"""Prompt templates sent to Kimi."""

from __future__ import annotations

from .workspace import ContextFile


def _context_block(files: list[ContextFile]) -> str:
    if not files:
        return ""
    parts = ["", "Context files (current contents, paths relative to the workspace):"]
    for item in files:
        parts.append(f'<file path="{item.path}">\n{item.text}\n</file>')
    return "\n".join(parts)


def code_task_prompt(task: str, context: list[ContextFile], constraints: str | None = None) -> str:
    lines = [task.strip()]
    if constraints and constraints.strip():
        lines += ["", "Constraints:", constraints.strip()]
    lines += [
        "",
        "Work inside the current directory (the workspace) only. When you are done, answer with a short "
        "summary of what you did.",
    ]
    return "\n".join(lines) + _context_block(context)
