"""Taxonomy: the six bench categories with their subcategories, and the atomic operations.

Subcategories follow ClawGym's synthesis seeds (shared/reference/formats.md), grouped under the six
ClawGym-Bench categories. Atomic operations are short tags (what a task family / skill *does*), each
belonging to one of ClawGym's operation categories; web retrieval exists in the taxonomy but is excluded
from offline tasks.
"""

from __future__ import annotations

from clawgym.tasks.model import CATEGORIES, CATEGORY_LABELS

SUBCATEGORIES: dict[str, list[str]] = {
    "productivity_collaboration": [
        "document writing and editing", "meeting notes and summaries", "table and record handling",
        "schedule and task management", "translation and text assistance", "message and email handling",
        "notifications, reminders, and follow-up", "team collaboration and synchronization",
        "meeting coordination and scheduling",
    ],
    "systems_automation": [
        "system status inspection", "environment configuration and deployment", "DevOps and continuous delivery",
        "incident response and reliability", "device and system control", "scheduled task execution",
        "event-triggered automation", "automated inspection and handling", "task routing and orchestration",
    ],
    "analysis_reasoning": [
        "data analysis and calculation", "classification, ranking, and scoring", "trend monitoring and detection",
        "transaction and financial analysis", "lifestyle decision support", "mathematical and logical reasoning",
        "scientific and engineering analysis", "critique, review, and judgment",
    ],
    "content_domain_support": [
        "general content writing", "marketing content planning", "social content creation",
        "SEO and page optimization", "email and communication writing", "legal and compliance review",
        "medical and health analysis", "financial analysis and support", "security and risk assessment",
    ],
    "planning_knowledge": [
        "task planning and decomposition", "information synthesis and summarization",
        "solution and architecture design", "curriculum and content design", "memory and knowledge organization",
        "research and information synthesis", "fact-checking and verification", "knowledge retrieval and grounding",
    ],
    "software_development": [
        "code generation and implementation", "code review and refactoring", "test writing and validation",
        "debugging and issue fixing", "prototype development and delivery", "algorithm design and problem solving",
        # cross-listed with systems_automation: build / dependency / CI work done inside a code repository
        "environment configuration and deployment", "DevOps and continuous delivery",
    ],
}

OPERATION_CATEGORIES: dict[str, list[str]] = {
    "web_information_retrieval": ["web_search", "web_fetch", "download"],
    "file_and_content_handling": ["read", "write", "edit", "redact"],
    "system_and_environment": ["inspect", "search", "run"],
    "data_extraction_and_analysis": ["extract", "parse", "transform", "filter", "sort", "rank", "dedupe", "join",
                                     "compute", "aggregate", "count", "compare", "classify", "match"],
    "communication_and_coordination": ["draft", "rewrite", "summarize", "schedule"],
    # short tags plus ClawGym's own phrasing of the development operations
    "development_and_execution": ["modify_code", "test", "verify", "debug", "run scripts", "inspect code",
                                  "modify code", "run tests", "analyze output"],
}
ATOMIC_OPERATIONS: dict[str, str] = {op: cat for cat, ops in OPERATION_CATEGORIES.items() for op in ops}
OFFLINE_EXCLUDED = frozenset(OPERATION_CATEGORIES["web_information_retrieval"])


def check_family(category: str, subcategory: str, operations: list[str]) -> list[str]:
    """Problems with a family's/skill's taxonomy labels ([] when fine)."""
    errs = []
    if category not in CATEGORIES:
        errs.append(f"unknown category {category!r}")
    elif subcategory not in SUBCATEGORIES[category]:
        errs.append(f"subcategory {subcategory!r} not in {category}")
    for op in operations:
        if op not in ATOMIC_OPERATIONS:
            errs.append(f"unknown operation {op!r}")
        elif op in OFFLINE_EXCLUDED:
            errs.append(f"operation {op!r} needs the network")
    return errs


def taxonomy_table() -> list[dict[str, str]]:
    """One row (category, label, subcategory) per subcategory of every category."""
    return [{"category": c, "label": CATEGORY_LABELS[c], "subcategory": s}
            for c in CATEGORIES for s in SUBCATEGORIES[c]]


__all__ = ["SUBCATEGORIES", "OPERATION_CATEGORIES", "ATOMIC_OPERATIONS", "OFFLINE_EXCLUDED", "check_family",
           "taxonomy_table", "CATEGORIES"]
