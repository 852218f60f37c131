"""Which ctxbus agent a Claude Code hook event belongs to, and where its store is.

- `CTXBUS_DOMAIN` (`user/session/task`) and `CTXBUS_AGENT` win when set, as for every
  ctxbus command: set both to let a Claude Code session share a brief with other
  agents on a task.
- Without `CTXBUS_DOMAIN`, the domain is the project's: `<login>/<project>/claude-code`,
  where `<project>` is the project directory's name and a short digest of its full
  path (`$CLAUDE_PROJECT_DIR`, else the event's `cwd`), so two checkouts named alike
  never share a brief.
- Without `CTXBUS_AGENT`, the agent is the host session's: `claude-` and the first 12
  characters of Claude Code's session id. A new session is a new agent with an empty
  store; a resumed or compacted one keeps its id, so it finds its store again.

Names are cut to what a domain token allows (`[A-Za-z0-9_-]`, at most 64 characters).
"""

from __future__ import annotations

import getpass
import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

from ctxbus.schemas import Domain, InvalidDomain, validate_token

__all__ = ["hook_agent", "hook_domain", "token_of"]

_NOT_TOKEN = re.compile(r"[^A-Za-z0-9_-]+")
_TOKEN_MAX = 64


def token_of(text: str, *, fallback: str) -> str:
    """`text` as a domain token: other characters become '-', cut to 64 characters."""
    token = _NOT_TOKEN.sub("-", text).strip("-")[:_TOKEN_MAX].strip("-")
    return token or fallback


def hook_domain(env: Mapping[str, str], cwd: str) -> Domain:
    """The task a hook event belongs to (see the module's docstring).

    :raises InvalidDomain: if `CTXBUS_DOMAIN` is set but not `user/session/task`.
    """
    configured = env.get("CTXBUS_DOMAIN")
    if configured:
        return Domain.parse(configured)
    project = Path(env.get("CLAUDE_PROJECT_DIR") or cwd or ".").resolve()
    digest = hashlib.sha256(str(project).encode()).hexdigest()[:8]
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        login = "user"
    name = token_of(project.name, fallback="project")[: _TOKEN_MAX - 9]
    return Domain.parse(f"{token_of(login, fallback='user')}/{name}-{digest}/claude-code")


def hook_agent(env: Mapping[str, str], session_id: str) -> str:
    """The agent a hook event belongs to (see the module's docstring).

    :raises InvalidDomain: if `CTXBUS_AGENT` is set but not a valid name.
    """
    configured = env.get("CTXBUS_AGENT")
    if configured:
        return validate_token(configured, field="CTXBUS_AGENT")
    token = token_of(session_id, fallback="")
    if not token:
        raise InvalidDomain(f"session id {session_id!r} has no letters or digits to name an agent after")
    return f"claude-{token[:12]}"
