"""The OpenClaw core tool surface, executed inside a clawgym Sandbox.

Names and argument schemas follow OpenClaw (formats.md): ``read{path,offset,limit}``,
``write{path,content}``, ``edit{path,oldText,newText}`` (OpenClaw's ``{path, edits:[{oldText,newText}]}``
is accepted too), ``exec{command,workdir,timeout}`` (``timeoutSeconds`` accepted), ``ls{path}`` and
``apply_patch{input}`` in the ``*** Begin Patch`` format. Trajectories from our loop and from the real
OpenClaw therefore train the same model.

Every tool returns a :class:`ToolResult`; nothing raises for agent mistakes (a bad path, a missing
argument, an edit that does not match): those are ``is_error=True`` results the model sees. Only a
broken sandbox (:class:`~clawgym.sandbox.SandboxError`) propagates, because that is infra.

The semantics live in :mod:`clawgym.agent.toolcore` (stdlib only), which the synthesis gates' replay driver
also runs inside a sandbox: a reference solution is applied the same way by both.
"""

from __future__ import annotations

from collections.abc import Iterable

from clawgym.agent import toolcore
from clawgym.agent.toolcore import (  # noqa: F401  (the public surface, re-exported)
    EXEC_DEFAULT_TIMEOUT_S,
    EXEC_MAX_TIMEOUT_S,
    MAX_OUTPUT_CHARS,
    READ_DEFAULT_LINES,
    TOOL_NAMES,
    PatchError,
    ToolArgError,
    ToolResult,
    apply_hunks,
    parse_arguments,
    parse_patch,
    truncate_output,
)
from clawgym.sandbox.base import Sandbox, SandboxError


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False},
        },
    }


TOOL_SCHEMAS: list[dict] = [
    _fn("read",
        "Read the contents of a file. Output is truncated to 2000 lines or 50KB; use offset/limit "
        "for large files.",
        {"path": {"type": "string", "description": "Path to the file to read (relative or absolute)"},
         "offset": {"type": "number", "description": "Line number to start reading from (1-indexed)"},
         "limit": {"type": "number", "description": "Maximum number of lines to read"}},
        ["path"]),
    _fn("write",
        "Write content to a file. Creates the file if it doesn't exist, overwrites if it does. "
        "Automatically creates parent directories.",
        {"path": {"type": "string", "description": "Path to the file to write (relative or absolute)"},
         "content": {"type": "string", "description": "Content to write to the file"}},
        ["path", "content"]),
    _fn("edit",
        "Edit a file by replacing exact text. The oldText must match exactly (including whitespace) "
        "and occur exactly once. Use this for precise, surgical edits.",
        {"path": {"type": "string", "description": "Path to the file to edit (relative or absolute)"},
         "oldText": {"type": "string", "description": "Exact text to find and replace (must match exactly)"},
         "newText": {"type": "string", "description": "New text to replace the old text with"},
         "edits": {"type": "array", "description": "Several replacements applied in order",
                   "items": {"type": "object",
                             "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                             "required": ["oldText", "newText"]}}},
        ["path"]),
    _fn("exec",
        "Execute a shell command in the workspace. Returns stdout and stderr. Output is truncated "
        "to 50KB.",
        {"command": {"type": "string", "description": "Shell command to execute"},
         "workdir": {"type": "string", "description": "Working directory (defaults to the workspace)"},
         "timeout": {"type": "number", "description": "Timeout in seconds (optional)"}},
        ["command"]),
    _fn("ls",
        "List directory contents (directories end with '/').",
        {"path": {"type": "string", "description": "Directory to list (defaults to the workspace)"}},
        []),
    _fn("apply_patch",
        "Apply a patch to one or more files using the apply_patch format. The input should include "
        "*** Begin Patch and *** End Patch markers.",
        {"input": {"type": "string",
                   "description": "Patch content using the *** Begin Patch/End Patch format."}},
        ["input"]),
]


def execute_tool(sandbox: Sandbox, name: str, arguments: dict | str | None,
                 max_timeout_s: float | None = None) -> ToolResult:
    """Run one tool call inside the sandbox. Agent mistakes come back as is_error results;
    SandboxError (infra) propagates. `max_timeout_s` caps the time a command may run (exec's own
    ``timeout`` argument, default 120 s, is lowered to it): the loop passes the rollout's tool time limit
    or the wall time it has left, whichever is smaller."""
    return toolcore.execute(sandbox, name, arguments, max_timeout_s, infra=(SandboxError,))


def apply_reference(sandbox: Sandbox, tool_calls: Iterable) -> list[ToolResult]:
    """Replay an oracle solution (clawgym.tasks.ToolCall objects or {name, arguments} dicts)."""
    return toolcore.replay(sandbox, tool_calls, infra=(SandboxError,))


__all__ = ["TOOL_SCHEMAS", "TOOL_NAMES", "ToolResult", "execute_tool", "apply_reference", "parse_patch",
           "truncate_output", "MAX_OUTPUT_CHARS"]
