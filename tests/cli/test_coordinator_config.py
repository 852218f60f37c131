"""The coordinators the commands start have a brief budget, as the design asks."""

from __future__ import annotations

from ctxbus.coordinator._config import DEFAULT_BRIEF_BUDGET
from ctxbus.coordinator.cli._common import coordinator_config


def test_commands_give_coordinators_a_brief_budget_counted_in_real_tokens() -> None:
    config = coordinator_config("c1")
    assert config.coordinator_id == "c1"
    assert config.brief_budget_tokens == DEFAULT_BRIEF_BUDGET
    assert config.count_tokens is not None and config.count_tokens("tiktoken counts this") == 5


def test_a_zero_budget_never_folds() -> None:
    config = coordinator_config(None, 0)
    assert config.brief_budget_tokens is None and config.count_tokens is None
