"""The embedded OpenAI-compatible model server: `transformers serve` with clawgym's patches.

- `launcher`: `ModelServer` (start / health / teardown of one server process per model folder) and the script
  the server process runs (`python clawgym/serve/launcher.py [flags] serve MODEL ...`), which installs the
  patches named by its flags before handing over to `transformers serve`;
- one module per patch, each declaring the library release it targets and refusing another (`compat`):
  `safe_tools` (badly written tool calls answered as text), `token_ids` (prompt / completion token ids and
  log-probabilities, streamed or not), `structured` (response_format / tool_choice by constrained decoding),
  `cb_attention` (per-sequence attention for continuous batching on CPU), `packed_linear` (oneDNN linear layers
  with pre-packed weights on CPU), `context_limit` (a request over the model's context window answered 400 at once),
  `served_prefix` (a re-sent conversation generated from the ids the server sampled, not a re-tokenization);
  `patching` (what they share: replacing a library attribute by a wrapper, once, and putting the stock one back);
  `auth` (the bearer token).

This package imports no training code (TRL, datasets): the server process stays light.
"""

from clawgym.serve.launcher import CPU_CB_ARGS, MALLOC_ENV, ModelServer, free_port

__all__ = ["CPU_CB_ARGS", "MALLOC_ENV", "ModelServer", "free_port"]
