"""`cpn token create|list|revoke`: the API tokens of `cpn serve` and `cpn run` (model: docs/security.md).

The tokens file keeps SHA-256 hashes only; a token is printed once, when it is made.
Exit status: 0 done; 2 bad arguments or an unusable tokens file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cpn.auth import ALL_NAMESPACES, TokenFileError, create_token, load_tokens, revoke_token


def tokens_path(arg: str | None) -> Path:
    """The tokens file: `--tokens-file`, else `$CPN_TOKENS_FILE`, else `tokens.yaml` in `$CPN_HOME`."""
    from config.runtime import runtime_settings  # pydantic-settings: not for every command's start

    return Path(arg) if arg else runtime_settings().tokens_path


def tokens_file_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--tokens-file` to a command."""
    parser.add_argument(
        "--tokens-file",
        metavar="PATH",
        help="API tokens file (default: $CPN_TOKENS_FILE, else tokens.yaml in $CPN_HOME, ~/.cpn by default)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add `token` and its sub-commands."""
    token = sub.add_parser("token", help="make, list and revoke API tokens of `cpn serve`")
    token_sub = token.add_subparsers(dest="token", metavar="ACTION", required=True)

    p = token_sub.add_parser(
        "create",
        help="make a token for some namespaces and print it (once)",
        description=(
            "Make a random token allowed to submit and read the jobs of the given namespaces, add its "
            "SHA-256 to the tokens file and print the token. Rotate by creating a new token, handing it "
            "over, then revoking the old one; a running server picks the change up within a second."
        ),
    )
    p.add_argument("--name", required=True, help="who holds the token (unique; shown in the server log)")
    p.add_argument(
        "--namespace",
        action="append",
        required=True,
        metavar="NS",
        help=f"a namespace the token may use (repeat for several; {ALL_NAMESPACES!r} for every namespace)",
    )
    tokens_file_argument(p)
    p.set_defaults(func=run_create)

    p = token_sub.add_parser("list", help="list the tokens (names and namespaces, never the tokens)")
    tokens_file_argument(p)
    p.set_defaults(func=run_list)

    p = token_sub.add_parser("revoke", help="remove a token; a running server refuses it within a second")
    p.add_argument("name", help="the token's name")
    tokens_file_argument(p)
    p.set_defaults(func=run_revoke)


def _fail(message: str) -> int:
    print(f"cpn token: {message}", file=sys.stderr)
    return 2


def run_create(args: argparse.Namespace) -> int:
    """Create a token and print it."""
    path = tokens_path(args.tokens_file)
    try:
        token = create_token(path, args.name, args.namespace)
    except (TokenFileError, OSError) as exc:
        return _fail(str(exc))
    print(token)
    print(
        f"token {args.name!r} for {', '.join(args.namespace)} added to {path}; it is shown only now. "
        "Clients send it as `Authorization: Bearer <token>`.",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Print the tokens' names, namespaces and creation times."""
    path = tokens_path(args.tokens_file)
    if not path.exists():
        print(f"no tokens: {path} does not exist; make one with `cpn token create`")
        return 0
    try:
        entries = load_tokens(path)
    except TokenFileError as exc:
        return _fail(str(exc))
    for e in entries:
        print(f"{e.name}\t{','.join(e.namespaces)}\t{e.created or '-'}")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    """Remove a token from the file."""
    path = tokens_path(args.tokens_file)
    try:
        revoke_token(path, args.name)
    except TokenFileError as exc:
        return _fail(str(exc))
    print(f"token {args.name!r} revoked in {path}")
    return 0
