"""The rules the attack suite tests: each is one promise a defence makes, in one sentence.

Every attack test (tests/conftest.py ATTACK_MODULES, `bash scripts/attacks.sh`) carries exactly one of these ids as
`@pytest.mark.rule("id")`: on the test, on its module (`pytestmark`), or -- for the tests parametrized over a list
of named attacks (tests/verify/test_reward_hacking.py, tests/attacks/test_export_every_path.py) -- through that module's
`ATTACK_RULES` (attack name -> rule id), which tests/conftest.py turns into the mark of each parametrized case.
tests/attacks/test_attack_suite.py checks that every attack has exactly one known rule and every rule at least
one attack; `bash scripts/attacks.sh` ends with the table rule -> attacks run, held, failed, skipped.
"""

from __future__ import annotations

RULES: dict[str, str] = {
    # -- the verifier and the workspace it reads (the clean room) --------------------------------------------------
    "workspace_is_data":
        "The verifier reads the workspace only as exported data: files and folders; a link becomes the bytes of "
        "the workspace file it names, else it is dropped, so nothing reaches outside or the verifier's own files.",
    "stdlib_not_shadowed":
        "Workspace files cannot shadow the stdlib or an installed package in the verifier: a protected name (and "
        "a pytest plugin) resolves only from the trusted directories.",
    "no_planted_startup_code":
        "Nothing the agent planted runs when a verifier interpreter or shell starts or imports a workspace module: "
        "no user site, .pth, site/usercustomize, shell startup file or agent-compiled .pyc.",
    "harness_config_neutralised":
        "Harness configuration written by the agent (conftest.py, pytest options in any file and spelling, git "
        "config and hooks) is neutralised before the check runs; the task's own is kept.",
    "verifier_files_sealed":
        "The verifier's own files (reward/) are written by the host into the room and sealed: the agent can "
        "neither plant, replace, link nor append to them.",
    "no_leftover_process":
        "No process the agent left behind reaches verification: a leftover daemon can neither forge the result "
        "nor kill the verifier.",
    "verifier_processes_out_of_reach":
        "Agent code a check runs or imports cannot read or write the verifier's processes, pipes or result "
        "(non-dumpable verifiers, a nonce-tagged private result channel, imports in a child).",
    "failure_is_never_infra":
        "An agent-caused failure is scored as the agent's, never infra: infra is decided by which component "
        "raised, never by text, and no tree, name, IPC or link flood of the agent's makes the harness fail.",
    "destroyed_workspace_is_the_agents":
        "A deleted or replaced workspace is the agent's outcome: an empty workspace, scored, never infra, never "
        "the link's target or the image's copy.",
    "honest_work_keeps_its_score":
        "The defences cost honest work nothing: an untouched or honestly solved workspace scores what it scores "
        "without them, on every path.",
    "attacks_are_armed":
        "Each planted attack is real: checked in place without the export and the guard, it raises the score.",
    "one_export_every_path":
        "Every way a workspace reaches a verifier (rollout, GRPO reward, OpenClaw runtime, Harbor handover) goes "
        "through the one export and the same guard.",
    # -- the rubric judge --------------------------------------------------------------------------------------------
    "judge_verdict_nonce_bound":
        "The judge's verdict is bounded by a nonce: agent text is quoted material it cannot close, and the verdict "
        "is only the judge's own one-JSON reply carrying a fresh nonce.",
    "judge_failure_is_infra":
        "Any judge failure (down, unreachable, a malformed verdict) is infra and a misconfigured judge spec a clear "
        "error before the agent runs, never a 0 for the agent.",
    "judging_pays_for_nothing":
        "A rule no judge can score is unjudged, never credit, and a run with no agent output scores 0 without "
        "asking the judge.",
    # -- what is recorded and trained -------------------------------------------------------------------------------
    "control_text_is_text":
        "Control-token text (in model output, a tool result or an instruction) is never trained as control ids; a "
        "row that cannot be encoded exactly is left out, counted.",
    "token_ids_are_a_claim":
        "Token ids an endpoint returns are kept only when they decode to what happened (the reply run, the "
        "context recorded, in vocabulary); else the row is re-tokenized with a counted reason.",
    "endpoint_shape_never_breaks_the_record":
        "An endpoint's odd JSON, stream chunks or usage never crash the record, lose the trajectory or refund the "
        "token budget.",
    "call_id_pairs_one_result":
        "A tool-call id pairs one call with its one result: an ambiguous, repeated or foreign id pairs with none "
        "and is listed as divergence; the task's own turns are all kept.",
    "proxy_channel_is_the_rollouts":
        "Only a rollout's own forwarder talks to its recording proxy: the agent can neither replace the forwarder "
        "nor reach another rollout's socket or session, nor make a forged conversation its trajectory.",
    "rollout_bounded":
        "A rollout cannot exceed its bounds: wall time, tool calls per turn, reply, message, argument and record "
        "sizes are capped; it ends `limit`, still scored.",
    # -- tasks ----------------------------------------------------------------------------------------------------
    "hacker_gate":
        "A task whose checks pay a cheap exploit (copied inputs, a placeholder, an echo) above its untouched score "
        "is rejected when synthesized and flagged when imported.",
    "import_stays_inside":
        "An untrusted task folder, id, name or key reaches nothing outside it: links, hard links and path-like "
        "names are refused; import and export read and write only inside their folders.",
    "import_bounded":
        "An untrusted task folder or Parquet file is read within caps and in linear time; what breaks a cap or a "
        "parser is one clear error, never a hang, a crash or a partial read.",
    "imported_fields_are_data":
        "An imported task's fields are data: file modes, timeouts, workspace paths and instructions are sanitised "
        "or refused, never a set-id file, a shell line or a rewritten grader.",
}
