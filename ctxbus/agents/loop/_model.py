"""The model behind a loop: any OpenAI-compatible Chat Completions endpoint, through the
official `openai` SDK (OpenAI, vLLM, Ollama, llama.cpp's server, LiteLLM, ...).

The SDK's own retries are off: this module retries, so that every try is counted and
logged and the last error says what happened. Retried: 408, 409, 429 and 5xx answers,
timeouts and connections that fail (an endpoint that is down), with exponential backoff
and jitter, or the server's `Retry-After` when it sends one (capped). Not retried: any
other 4xx (the request is wrong, or the key): that is raised at once, with the server's
message.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import anyio

from ctxbus.schemas import CtxbusError, UsageError

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletion

__all__ = [
    "API_KEY_VARIABLES",
    "ModelClient",
    "ModelError",
    "ModelRefused",
    "ModelUnavailable",
    "RetryPolicy",
    "TurnUsage",
    "api_key_from_env",
]

log = logging.getLogger(__name__)

API_KEY_VARIABLES: Final = ("CTXBUS_MODEL_API_KEY", "OPENAI_API_KEY")
"""Where the API key is looked for, in this order."""
_NO_KEY: Final = "no-key"
"""Sent when no key is set: local servers (vLLM, Ollama, llama.cpp) take any, the SDK needs one."""
_RETRIED_STATUS: Final = frozenset({408, 409, 429})


class ModelError(CtxbusError):
    """Raised when the model cannot be asked: base class of the two below."""


class ModelUnavailable(ModelError):
    """Raised when the endpoint did not answer (down, timing out, overloaded) after every retry."""


class ModelRefused(ModelError):
    """Raised when the endpoint refused the request (a 4xx other than 408/409/429)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a model call."""

    attempts: int = 6
    """Tries in all, the first included."""
    initial: float = 0.5
    """Seconds before the second try; doubled each time after."""
    maximum: float = 20.0
    """Seconds at most between two tries (a `Retry-After` included)."""
    timeout: float = 600.0
    """Seconds one try may take (a long completion on a slow local server takes minutes)."""

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial < 0 or self.maximum < self.initial or not self.timeout > 0:
            raise UsageError(f"a retry policy needs attempts >= 1 and 0 <= initial <= maximum, got {self}")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed try `attempt` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.maximum)
        base = min(self.initial * 2.0 ** (attempt - 1), self.maximum)
        return base * (0.5 + random.random() / 2)  # jitter: agents that failed together retry apart


@dataclass(frozen=True)
class TurnUsage:
    """What one model call cost, as the endpoint reported it (0 where it reports nothing)."""

    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens the endpoint served from its prefix cache (`prompt_tokens_details`)."""
    completion_tokens: int
    attempts: int
    """Tries the call took (1 when the first was answered)."""

    @classmethod
    def of(cls, completion: ChatCompletion, *, attempts: int) -> TurnUsage:
        usage = completion.usage
        if usage is None:
            return cls(prompt_tokens=0, cached_tokens=0, completion_tokens=0, attempts=attempts)
        details = usage.prompt_tokens_details
        return cls(
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
            completion_tokens=usage.completion_tokens,
            attempts=attempts,
        )


def api_key_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from `CTXBUS_MODEL_API_KEY`, else `OPENAI_API_KEY`; None if neither is set."""
    env = os.environ if environ is None else environ
    return next((env[name] for name in API_KEY_VARIABLES if env.get(name)), None)


def _openai() -> Any:
    try:
        import openai
    except ImportError:
        raise UsageError(
            "the agent loop talks to the model through the openai SDK, which is not installed "
            "(a dependency of ctxbus): pip install openai"
        ) from None
    return openai


class ModelClient:
    """One model on one endpoint: `complete(messages, tools)` with retries."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        user: str | None = None,
    ) -> None:
        """:param api_key: the endpoint's key; `api_key_from_env()` by default, or a
            placeholder for local servers that need none.
        :param user: sent as the request's `user` (the agent's name): endpoints use it
            to tell callers apart, for caching and abuse checks.
        :raises UsageError: if the openai SDK is not installed.
        """
        openai = _openai()
        self.base_url = base_url
        self.model = model
        self.retry = retry or RetryPolicy()
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._user = user
        self._client: AsyncOpenAI = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or api_key_from_env() or _NO_KEY,
            max_retries=0,
            timeout=self.retry.timeout,
        )

    def __repr__(self) -> str:
        return f"<ModelClient {self.model} at {self.base_url}>"

    async def close(self) -> None:
        """Close the connections to the endpoint."""
        await self._client.close()

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> tuple[ChatCompletion, TurnUsage]:
        """One chat completion, retried as the policy says.

        :raises ModelUnavailable: if no try was answered (the last error named).
        :raises ModelRefused: if the endpoint refused the request.
        """
        openai = _openai()
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = list(tools)
        if self._max_tokens is not None:
            extra["max_tokens"] = self._max_tokens
        if self._temperature is not None:
            extra["temperature"] = self._temperature
        if self._user is not None:
            extra["user"] = self._user
        last = ""
        for attempt in range(1, self.retry.attempts + 1):
            retry_after: float | None = None
            try:
                completion = await self._client.chat.completions.create(
                    model=self.model, messages=cast(Any, list(messages)), **extra
                )
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status not in _RETRIED_STATUS and status < 500:
                    raise ModelRefused(
                        f"the model endpoint {self.base_url} refused the request ({status}): {_message(exc)}",
                        status=status,
                    ) from None
                last = f"HTTP {status}: {_message(exc)}"
                retry_after = _retry_after(exc.response.headers.get("retry-after"))
            except openai.APITimeoutError:
                last = f"no answer within {self.retry.timeout:g}s"
            except openai.APIConnectionError as exc:
                last = f"cannot connect ({exc.__cause__ or exc})"
            else:
                if not completion.choices:
                    raise ModelRefused(f"the model endpoint {self.base_url} answered with no choices", status=200)
                return completion, TurnUsage.of(completion, attempts=attempt)
            if attempt < self.retry.attempts:
                wait = self.retry.delay(attempt, retry_after)
                log.warning("model call %d/%d failed (%s); retrying in %.1fs", attempt, self.retry.attempts, last, wait)
                await anyio.sleep(wait)
        raise ModelUnavailable(
            f"the model endpoint {self.base_url} did not answer after {self.retry.attempts} tries: {last}"
        )


def _message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
    return str(exc.message)


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
