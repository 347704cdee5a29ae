"""A test whose tool the install provides never passes as a skip under CI (issue #16)."""

import pytest

from tests.prerequisites import require


def test_a_missing_tool_skips_on_a_developer_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="shellcheck is not installed"):
        require("shellcheck is not installed")


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_a_missing_tool_fails_under_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=r"shellcheck is not installed.*tools/install\.sh"):
        require("shellcheck is not installed")


def test_nothing_missing_is_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    require(None)
    require("")
