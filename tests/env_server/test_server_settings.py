"""The server's settings as a deployment sets them: through REGROW_SERVER_* variables."""

import pytest

from env_server.settings import ServerSettings


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_api_token_counts_as_unset(monkeypatch, empty):
    # a stack file passes `${REGROW_SERVER_API_TOKEN:-}`: unset there must not lock /episodes behind a blank token
    monkeypatch.setenv("REGROW_SERVER_API_TOKEN", empty)
    assert ServerSettings().api_token is None


def test_a_set_api_token_is_kept(monkeypatch):
    monkeypatch.setenv("REGROW_SERVER_API_TOKEN", "s3cret")
    token = ServerSettings().api_token
    assert token is not None and token.get_secret_value() == "s3cret"
