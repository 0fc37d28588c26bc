"""Tokens live where people look: `$CPN_HOME`, and `cpn up` makes an admin token on its first start."""

from __future__ import annotations

import stat

from cli import main
from cli.up import ensure_admin_token
from config.runtime import runtime_settings
from cpn.auth import Authenticator, load_tokens


def test_token_create_writes_the_tokens_file_in_cpn_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CPN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CPN_TOKENS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["token", "create", "--name", "ci", "--namespace", "vision"]) == 0
    assert (tmp_path / "home" / "tokens.yaml").exists()
    assert not (tmp_path / ".cpn").exists()
    assert [e.name for e in load_tokens(tmp_path / "home" / "tokens.yaml")] == ["ci"]
    capsys.readouterr()
    assert main(["token", "list"]) == 0 and "ci\tvision" in capsys.readouterr().out


def test_up_makes_one_admin_token_on_first_start_readable_by_its_owner_only(tmp_path, monkeypatch):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    monkeypatch.delenv("CPN_TOKENS_FILE", raising=False)
    settings = runtime_settings()
    said = ensure_admin_token(settings)
    assert str(settings.client_token_path) in said
    token = settings.client_token_path.read_text().strip()
    assert stat.S_IMODE(settings.client_token_path.stat().st_mode) == 0o600
    principal = Authenticator(settings.tokens_path, None).authenticate(token)
    assert principal is not None and principal.namespaces is None  # every namespace
    again = ensure_admin_token(settings)  # a second start keeps the tokens it has
    assert "from" in again and settings.client_token_path.read_text().strip() == token
    assert len(load_tokens(settings.tokens_path)) == 1
