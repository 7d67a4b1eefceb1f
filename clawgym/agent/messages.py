"""Small helpers on OpenAI chat messages, shared by the agent loop, the policy servers and SFT cleaning."""

from __future__ import annotations

from typing import Any


def text_of(content: Any) -> str:
    """The text of an OpenAI message content (None, a str, or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)
