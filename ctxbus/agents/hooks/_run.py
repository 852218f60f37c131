"""`ctxbus hook claude-code`: one event in, one answer out, and never a broken host.

Whatever goes wrong (input that is no event, a store that cannot be opened, a bug) is
logged to the hook log and answered with `{}`, which Claude Code reads as "nothing to
add"; the exit code is always 0. NATS is used only when a URL is configured, and only
under a short deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ctxbus.agents.hooks._events import HookAnswer, UnknownEvent, parse_event
from ctxbus.agents.hooks._identity import hook_agent, hook_domain
from ctxbus.agents.hooks._session import CLAUDE_WINDOW, HookConfig, answer_event
from ctxbus.agents.hooks._stores import hooks_store
from ctxbus.bus import run_async
from ctxbus.schemas import Domain, describe_validation_error

if TYPE_CHECKING:
    from ctxbus.bus import BusConfig

__all__ = ["EMPTY_ANSWER", "run_claude_code"]

log = logging.getLogger(__name__)

EMPTY_ANSWER = "{}"


def run_claude_code(
    raw: bytes,
    *,
    env: Mapping[str, str],
    store_of: Callable[[Domain, str], Path],
    bus: Callable[[], BusConfig | None],
    window: int = CLAUDE_WINDOW,
) -> str:
    """The JSON answer to the hook event in `raw`; `{}` on any error (logged).

    :param store_of: the store of an agent on a domain (`AGENT.db`); the hooks keep
        theirs beside it (`hooks_store`).
    :param bus: the NATS settings, or None when no URL is configured (called once the
        event is known to need an agent).
    """
    started = time.perf_counter()
    name = "?"
    try:
        event = parse_event(raw)
        name = event.hook_event_name
        if isinstance(event, UnknownEvent):
            return EMPTY_ANSWER  # an event we do not handle: nothing opened, nothing to add
        domain = hook_domain(env, event.cwd)
        agent = hook_agent(env, event.session_id)
        store = hooks_store(store_of(domain, agent))
        config = HookConfig(domain=domain, agent=agent, store=store, bus=bus(), window=window)
        answer: HookAnswer = run_async(answer_event, config, event)
        text = answer.to_json()
    except ValidationError as exc:
        log.error("not a hook event: %s", describe_validation_error(exc, show_input=False))
        text = EMPTY_ANSWER
    except Exception:
        log.exception("hook %s failed; answered with an empty output", name)
        text = EMPTY_ANSWER
    log.info("%s answered in %.1f ms (%d bytes)", name, (time.perf_counter() - started) * 1000, len(text))
    return text
