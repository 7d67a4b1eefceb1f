"""Moved to the `clawgym.serve` package (issue 25). This re-export keeps `from clawgym.train.serve import ...`
working while other modules move their imports; it goes away at the end of the session. Import from
`clawgym.serve` (ModelServer, free_port) or its modules (`clawgym.serve.launcher`, `.token_ids`, ...)."""

from clawgym.sandbox.spawner import die_with_parent as _die_with_parent  # noqa: F401 (tests)
from clawgym.sandbox.spawner import popen_die_with_parent  # noqa: F401
from clawgym.serve.auth import AUTH_ENV, install_auth  # noqa: F401
from clawgym.serve.cb_attention import (  # noqa: F401
    _PADDED_KV,
    cb_cache_update,
    cb_sdpa_attention,
    install_cb_attention,
    uninstall_cb_attention,
)
from clawgym.serve.launcher import CPU_CB_ARGS, LAUNCHER_FLAGS, MALLOC_ENV, ModelServer, free_port  # noqa: F401
from clawgym.serve.packed_linear import (  # noqa: F401
    _PACKED,
    install_packed_linear,
    packed_linear_forward,
    uninstall_packed_linear,
)
from clawgym.serve.safe_tools import (  # noqa: F401
    SafeResponseParser,
    install_safe_tool_parsing,
    uninstall_safe_tool_parsing,
)
from clawgym.serve.token_ids import install_token_ids, uninstall_token_ids  # noqa: F401

__all__ = ["ModelServer", "free_port"]
