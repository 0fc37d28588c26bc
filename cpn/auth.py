"""Who may use the HTTP API: bearer tokens, each allowed to read and write some namespaces.

Tokens are random (`new_token`: 256 bits, prefixed `cpn_`) and stored only as their
SHA-256, in a tokens file (YAML, mode 0600)::

    tokens:
      - name: vision-ci              # who holds it; unique; appears in the server log
        sha256: 5f2c...              # hash_token(token)
        namespaces: [team-vision]    # or ["*"]: every namespace
        created: "2026-11-23T14:00:00Z"

`cpn token create` makes a token, adds its hash and prints the token once; `cpn token
revoke` removes one. The server reads the file again when it changes, so rotation is:
create a new token, hand it over, revoke the old one; no restart. `CPN_API_TOKEN`, when
set, is one more token allowed every namespace (for a single operator or a test).

A fast hash is enough because tokens are random, not passwords: nobody can guess one
whose hash is in the file, and the hash alone does not authenticate.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from cpn.safe_yaml import DEFAULT_LIMITS

ALL_NAMESPACES = "*"
"""The namespace entry that allows every namespace."""

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Host names a loopback-only server answers to."""

_NAMESPACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


class TokenFileError(ValueError):
    """The tokens file cannot be read or is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: the token's name and the namespaces it may read and write."""

    name: str
    namespaces: frozenset[str] | None
    """None: every namespace."""

    def may(self, namespace: str) -> bool:
        """Whether this caller may read and write jobs of `namespace`."""
        return self.namespaces is None or namespace in self.namespaces


HIDDEN_JOB = "a job of another namespace"
"""What another namespace's job id reads as in a text shown to a namespace token (docs/security.md)."""
_JOB_ID_IN_TEXT = re.compile(
    r"(?<![\w./-])([a-z0-9](?:[a-z0-9-]*[a-z0-9])?)/([a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?![\w/-])"
)
"""A word shaped like a job id, `namespace/name` (DNS-1123 both); `cluster/node` has the same shape."""


def hide_other_jobs(text: str, principal: Principal, jobs: Callable[[list[str]], Collection[str]]) -> str:
    """`text` with every id of a job `principal` may not read replaced by HIDDEN_JOB.

    The store keeps one text per job (a waiting reason, why a prediction moved, a transition's reason)
    that may name other jobs ("preempted for vision/train-3"); a namespace token must not learn those ids.
    `jobs` says which of some `namespace/name` words are job ids (the store's), so that a
    `cluster/node` in the same text stays as it is."""
    if principal.namespaces is None or "/" not in text:
        return text
    foreign = {m.group(0) for m in _JOB_ID_IN_TEXT.finditer(text) if m.group(1) not in principal.namespaces}
    hidden = set(jobs(sorted(foreign))) if foreign else set()
    if not hidden:
        return text
    return _JOB_ID_IN_TEXT.sub(lambda m: HIDDEN_JOB if m.group(0) in hidden else m.group(0), text)


ANONYMOUS = Principal("anonymous (no authentication)", None)
"""The caller of a server started with --no-auth: every namespace, loopback only."""


@dataclass(frozen=True)
class TokenEntry:
    """One line of the tokens file."""

    name: str
    sha256: str
    namespaces: tuple[str, ...]
    created: str = ""

    def principal(self) -> Principal:
        """The caller this token authenticates."""
        every = ALL_NAMESPACES in self.namespaces
        return Principal(self.name, None if every else frozenset(self.namespaces))


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as kept in the tokens file."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return "cpn_" + secrets.token_urlsafe(32)


def load_tokens(path: str | Path) -> list[TokenEntry]:
    """The entries of a tokens file; TokenFileError when it is missing or malformed."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TokenFileError(f"{path}: cannot read the tokens file ({exc})") from None
    raw = data.get("tokens", []) if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise TokenFileError(f"{path}: expected a mapping with a list `tokens`; see docs/security.md")
    entries, names = [], set()
    for i, item in enumerate(raw, start=1):
        where = f"{path}: token {i}"
        if not isinstance(item, dict):
            raise TokenFileError(f"{where}: expected a mapping with name, sha256 and namespaces")
        name, digest, namespaces = item.get("name"), item.get("sha256"), item.get("namespaces")
        if not isinstance(name, str) or not name or name in names:
            raise TokenFileError(f"{where}: `name` must be a non-empty text, unique in the file")
        if (
            not isinstance(digest, str)
            or len(digest) != 64
            or not all(c in "0123456789abcdef" for c in digest)
        ):
            raise TokenFileError(f"{where} ({name}): `sha256` must be 64 lowercase hex digits")
        if not isinstance(namespaces, list) or not namespaces:
            raise TokenFileError(f'{where} ({name}): `namespaces` must be a non-empty list (or ["*"])')
        for ns in namespaces:
            _check_namespace(ns, f"{where} ({name})")
        names.add(name)
        entries.append(TokenEntry(name, digest, tuple(namespaces), str(item.get("created", ""))))
    return entries


def _check_namespace(namespace: object, where: str) -> None:
    if namespace == ALL_NAMESPACES:
        return
    if (
        not isinstance(namespace, str)
        or not 0 < len(namespace) <= 63
        or not set(namespace) <= _NAMESPACE_CHARS
        or namespace[0] == "-"
        or namespace[-1] == "-"
    ):
        raise TokenFileError(f'{where}: {namespace!r} is not a namespace (a DNS-1123 label) nor "*"')


def save_tokens(path: str | Path, entries: Iterable[TokenEntry]) -> None:
    """Write the tokens file atomically (a reader never sees half of it), readable by its owner only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "tokens": [
            {"name": e.name, "sha256": e.sha256, "namespaces": list(e.namespaces), "created": e.created}
            for e in entries
        ]
    }
    fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("# cpn API tokens: SHA-256 hashes only. Manage with `cpn token`.\n")
            yaml.safe_dump(data, out, sort_keys=False)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create_token(path: str | Path, name: str, namespaces: Iterable[str]) -> str:
    """Add a new token named `name` for `namespaces` to the tokens file; returns the token (shown once)."""
    path = Path(path)
    entries = load_tokens(path) if path.exists() else []
    namespaces = tuple(dict.fromkeys(namespaces))
    if not namespaces:
        raise TokenFileError("give at least one namespace (or * for every namespace)")
    for ns in namespaces:
        _check_namespace(ns, "namespace")
    if any(e.name == name for e in entries):
        raise TokenFileError(f"{path}: a token named {name!r} exists; revoke it first or pick another name")
    if not name.strip():
        raise TokenFileError("a token needs a name (who holds it)")
    token = new_token()
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    save_tokens(path, [*entries, TokenEntry(name, hash_token(token), namespaces, created)])
    return token


def revoke_token(path: str | Path, name: str) -> None:
    """Remove the token named `name` from the tokens file; TokenFileError when there is none."""
    entries = load_tokens(path)
    kept = [e for e in entries if e.name != name]
    if len(kept) == len(entries):
        raise TokenFileError(f"{path}: no token named {name!r}; `cpn token list` shows them")
    save_tokens(path, kept)


class Authenticator:
    """Maps bearer tokens to Principals, from a tokens file (re-read when it changes) and/or one env token."""

    RELOAD_EVERY_S = 1.0
    """How often, at most, the tokens file is checked for changes."""

    def __init__(self, tokens_file: str | Path | None = None, env_token: str | None = None) -> None:
        self.tokens_file = Path(tokens_file) if tokens_file else None
        self._env_hash = hash_token(env_token) if env_token else None
        self._by_hash: dict[str, Principal] = {}
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        if self.tokens_file is not None:
            self._reload(force=True)

    def _reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self.RELOAD_EVERY_S:
            return
        with self._lock:
            self._checked = now
            try:
                stat = self.tokens_file.stat()
            except OSError as exc:
                if force:
                    raise TokenFileError(f"{self.tokens_file}: cannot read the tokens file ({exc})") from None
                self._by_hash, self._stamp = {}, None  # deleted: nobody gets in by file
                return
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            try:
                entries = load_tokens(self.tokens_file)
            except TokenFileError:
                if force:
                    raise
                return  # half-edited by hand: keep the last good tokens
            self._by_hash = {e.sha256: e.principal() for e in entries}
            self._stamp = stamp

    def authenticate(self, token: str) -> Principal | None:
        """The caller holding `token`; None for an unknown token."""
        digest = hash_token(token)
        if self._env_hash is not None and secrets.compare_digest(digest, self._env_hash):
            return Principal("CPN_API_TOKEN", None)
        if self.tokens_file is None:
            return None
        self._reload()
        return self._by_hash.get(digest)


@dataclass(frozen=True)
class ApiSecurity:
    """How the HTTP API admits requests: who (tokens), from where (Host, Origin), and how much (body size).

    `authenticator` None means no authentication: every caller may do everything,
    which is only safe on loopback (`cpn serve --no-auth` binds nothing else).
    """

    authenticator: Authenticator | None
    allowed_hosts: frozenset[str] = LOOPBACK_HOSTS
    """Host names (without port) the server answers to; any other `Host` header is refused (DNS rebinding)."""
    allowed_origins: frozenset[str] = frozenset()
    """Browser origins (`https://ui.example.com`) may call the API; other cross-site requests are refused."""
    max_body_bytes: int = DEFAULT_LIMITS.max_bytes
    """Largest request body accepted; larger ones get 413."""

    @classmethod
    def no_auth(cls, allowed_hosts: Iterable[str] = LOOPBACK_HOSTS, **kwargs: object) -> ApiSecurity:
        """No tokens: for tests and for a loopback-only `cpn serve --no-auth`."""
        return cls(None, frozenset(allowed_hosts), **kwargs)
