"""`cpn up`: the local control plane in one command, on loopback, until Ctrl-C.

It starts, each under cpn.processes' supervision (no process outlives `cpn up`, however it ends):

1. a Prefect server (API and UI), its database in `$CPN_HOME/prefect`;
2. the `cpn` process work pool and the deployments of prefect.yaml, applied to it, and a worker;
3. an MLflow tracking server and UI on this cpn home's MLflow store;
4. `cpn run`: the HTTP intake and the live scheduling loop, on the config's clusters (simulated unless
   the config names real ones), estimating with the registered champion unless `--estimates` says
   otherwise. It starts once MLflow answers, so that the two never create the MLflow store at the same
   time; with no champion yet it trains one first (seconds, `logs/cpn-run.log` says how long).

The API asks for bearer tokens unless `--no-auth` is given: on its first start `cpn up` makes an admin
token for every namespace, keeps its hash in `$CPN_HOME/tokens.yaml` and the token itself in
`$CPN_HOME/token` (mode 0600), and says so.

With `--database postgresql://USER[:PASSWORD]@HOST[:PORT]` the job store, Prefect's database and MLflow's
backend store are three databases on that PostgreSQL server (made if missing) instead of SQLite files in the
cpn home; the URL's password is never printed.

It prints the URLs once each answers. Telemetry and update checks are off everywhere, so nothing waits
on the internet. Output of every service goes to `$CPN_HOME/logs/NAME.log`.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cli.policy_options import add_policy_arguments, policy_arguments, scheduler_policy
from config.runtime import RuntimeSettings, hide_password, runtime_settings
from config.settings import DEMO_DIR, REPO_ROOT, ConfigError, load_profile

TELEMETRY_OFF = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
}
"""Environment that turns off Prefect's and MLflow's telemetry (and Prefect's promotions)."""

WORK_POOL = "cpn"
"""The process work pool prefect.yaml's deployments run on."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `up` sub-command."""
    p = sub.add_parser(
        "up",
        help="start the local control plane: Prefect server, worker and deployments, MLflow, cpn run",
        description=(
            "Start a Prefect server with the deployments of prefect.yaml applied and a worker on their "
            "process pool, an MLflow tracking server and UI on this cpn home's store ($CPN_HOME, ~/.cpn by "
            "default), and `cpn run` (HTTP intake and the scheduling loop), all on 127.0.0.1. Prints the "
            "URLs once each answers; Ctrl-C (or SIGTERM) stops everything. Logs: $CPN_HOME/logs/."
        ),
    )
    p.add_argument("--prefect-port", type=int, default=4200, help="Prefect API and UI (default: %(default)s)")
    p.add_argument("--mlflow-port", type=int, default=5000, help="MLflow UI (default: %(default)s)")
    p.add_argument("--api-port", type=int, default=8080, help="cpn's HTTP API (default: %(default)s)")
    p.add_argument(
        "--config",
        default=str(DEMO_DIR),
        help="config folder of `cpn run` and of every deployment's flow runs (default: the built-in demo)",
    )
    add_policy_arguments(p)
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="simulated clusters run this many times faster than the wall clock (default: %(default)s)",
    )
    p.add_argument(
        "--estimates",
        default="champion",
        help="cpn run's runtime estimates (see `cpn run --help`; default: %(default)s)",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="serve cpn's API without tokens (anyone on this machine may submit and cancel); default: tokens",
    )
    p.add_argument(
        "--database",
        metavar="URL",
        help=(
            "a PostgreSQL server, postgresql://USER[:PASSWORD]@HOST[:PORT][/DB]: the job store, Prefect's "
            "database and MLflow's backend store go there, as databases cpn, prefect and mlflow (made if "
            "missing; DB, default postgres, is the one connected to for making them); default: SQLite "
            "files in the cpn home"
        ),
    )
    p.add_argument(
        "--database-prefix",
        default="",
        metavar="PREFIX",
        help="prefix of the three databases' names with --database, e.g. `team1_` (default: none)",
    )
    p.add_argument(
        "--timeout", type=float, default=180, help="seconds each service may take to answer (default: 180)"
    )
    p.set_defaults(func=run)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefect_server_argv(port: int, ui: bool = True) -> list[str]:
    """The command line of a Prefect server (API, and the UI unless `ui` is False) on 127.0.0.1:`port`."""
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    return argv if ui else [*argv, "--no-ui"]


SERVER_DATABASES = ("cpn", "prefect", "mlflow")
"""The databases `cpn up --database` keeps on the server (after the prefix): job store, Prefect, MLflow."""

DATABASE_PREFIX = re.compile(r"[a-z_][a-z0-9_]*")
"""What a --database-prefix may be: a lower-case identifier, so the names need no quoting anywhere."""


class DatabaseError(Exception):
    """--database names no usable PostgreSQL server; the message names the option, never a password."""


@dataclass(frozen=True)
class ServerDatabases:
    """The URLs of the three databases `cpn up --database` uses, each with the driver its user needs."""

    admin: str = field(repr=False)  # URLs may hold a password
    """The database connected to for making the others (libpq URL, psycopg)."""
    store: str = field(repr=False)
    """The job store (CPN_STORE; cpn's store connects with psycopg 3)."""
    prefect: str = field(repr=False)
    """Prefect's database (its server needs the asyncpg driver)."""
    mlflow: str = field(repr=False)
    """MLflow's backend store, for its server and its clients (SQLAlchemy with psycopg 3)."""
    names: tuple[str, ...]
    """The three databases' names: job store, Prefect, MLflow."""


def server_databases(server: str, prefix: str = "") -> ServerDatabases:
    """The databases on the PostgreSQL server at `server` (postgresql://USER[:PASSWORD]@HOST[:PORT][/DB]),
    named SERVER_DATABASES after `prefix`. Raises DatabaseError naming --database or --database-prefix."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not DATABASE_PREFIX.fullmatch(prefix or "_"):
        raise DatabaseError(f"--database-prefix {prefix!r}: use lower-case letters, digits and _")
    try:
        url = make_url(server)
    except (ArgumentError, ValueError):  # not repeated: it may hold a password
        raise DatabaseError(
            "--database: cannot read the URL; write it as postgresql://USER[:PASSWORD]@HOST[:PORT]"
        ) from None
    if url.get_backend_name() != "postgresql":
        raise DatabaseError(f"--database {hide_password(server)}: not a PostgreSQL URL (postgresql://...)")
    names = tuple(prefix + name for name in SERVER_DATABASES)

    def on(driver: str, database: str) -> str:
        return url.set(drivername=driver, database=database).render_as_string(hide_password=False)

    return ServerDatabases(
        admin=on("postgresql", url.database or "postgres"),
        store=on("postgresql", names[0]),
        prefect=on("postgresql+asyncpg", names[1]),
        mlflow=on("postgresql+psycopg", names[2]),
        names=names,
    )


def create_missing_databases(databases: ServerDatabases) -> list[str]:
    """Make those of the databases that the server lacks (CREATE DATABASE needs autocommit); returns
    the names made. Raises DatabaseError when the server cannot be reached or refuses."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(databases.admin, autocommit=True, connect_timeout=10) as admin:
            found = {
                row[0]
                for row in admin.execute(
                    "SELECT datname FROM pg_database WHERE datname = ANY(%s)", [list(databases.names)]
                )
            }
            missing = [name for name in databases.names if name not in found]
            for name in missing:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseError(f"--database {hide_password(databases.admin)}: {reason}") from None
    return missing


def service_env(
    prefect_url: str, mlflow_url: str, databases: ServerDatabases | None = None
) -> dict[str, str]:
    """The environment every service and flow run gets: this cpn home, the Prefect API, the MLflow UI,
    telemetry off; with `databases`, the job store, Prefect's and MLflow's stores on that server."""
    settings = runtime_settings()
    on_server = (
        {}
        if databases is None
        else {
            "CPN_STORE": databases.store,
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": databases.prefect,
            "CPN_TRACKING_URI": databases.mlflow,
        }
    )
    return {
        **os.environ,
        **TELEMETRY_OFF,
        "CPN_HOME": str(settings.home),
        "CPN_TRACKING_URI": settings.mlflow_uri,
        "CPN_MLFLOW_UI": mlflow_url,
        "PREFECT_HOME": str(settings.home / "prefect"),
        "PREFECT_API_URL": f"{prefect_url}/api",
        "PREFECT_UI_API_URL": f"{prefect_url}/api",
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "PYTHONUNBUFFERED": "1",
        **on_server,
    }


ADMIN_TOKEN_NAME = "admin"
"""Name of the token for every namespace that `cpn up` makes on its first start."""


def ensure_admin_token(settings: RuntimeSettings) -> str:
    """Make sure the API has a token: when the tokens file does not exist yet, make an admin token for
    every namespace, its hash in the tokens file and the token in the client token file (mode 0600).
    Returns what a person needs to know, in one line."""
    from cpn.auth import ALL_NAMESPACES, create_token

    tokens, client = settings.tokens_path, settings.client_token_path
    if tokens.exists():
        return f"API tokens from {tokens} (`cpn token create` makes more)"
    tokens.parent.mkdir(parents=True, exist_ok=True)
    token = create_token(tokens, ADMIN_TOKEN_NAME, [ALL_NAMESPACES])
    client.touch(mode=0o600)
    client.chmod(0o600)
    client.write_text(token + "\n")
    return (
        f"made an admin token for every namespace: it is in {client} (readable by you only), its hash in "
        f"{tokens}; clients send it as `Authorization: Bearer <token>`"
    )


def leftovers(prefect_url: str) -> list[str]:
    """The flow runs a stopped `cpn up` left holding slots, cancelled (cli.leftover_runs); a Prefect API
    that fails to answer is said and the start goes on (nothing is cancelled)."""
    import httpx

    from cli.leftover_runs import cancel_leftover_runs

    try:
        return cancel_leftover_runs(prefect_url)
    except httpx.HTTPError as exc:
        print(f"cpn up: could not look for flow runs a stopped cpn up left: {exc}", file=sys.stderr)
        return []


def ui_login(no_auth: bool, settings: RuntimeSettings) -> str:
    """How to log in to the web UI, after its address: with the token in the client token file."""
    return "" if no_auth else f" (log in with the token in {settings.client_token_path})"


def run(args: argparse.Namespace) -> int:
    """Start everything, wait until Ctrl-C/SIGTERM or a service dies; exit 2 on a busy port, 1 on a
    service that failed."""
    from cpn.processes import ServiceFailed, Stopped, Supervisor, stop_on_signals

    ports = {
        "--prefect-port": args.prefect_port,
        "--mlflow-port": args.mlflow_port,
        "--api-port": args.api_port,
    }
    if len(set(ports.values())) < len(ports):
        print("cpn up: --prefect-port, --mlflow-port and --api-port must differ", file=sys.stderr)
        return 2
    busy = [f"{flag} {port}" for flag, port in ports.items() if not _port_free(port)]
    if busy:
        print(f"cpn up: port in use: {', '.join(busy)}; choose another with that option", file=sys.stderr)
        return 2
    try:  # a bad config or setting fails before any server starts
        scheduler_policy(args, load_profile(args.config).policy)
    except (ConfigError, ValueError) as exc:
        print(f"cpn up: {exc}", file=sys.stderr)
        return 2
    databases = None
    if args.database:
        try:
            databases = server_databases(args.database, args.database_prefix)
            made = create_missing_databases(databases)
        except DatabaseError as exc:
            print(f"cpn up: {exc}", file=sys.stderr)
            return 2
        print(
            f"cpn up: job store, Prefect and MLflow in databases {', '.join(databases.names)} on "
            f"{hide_password(args.database)}" + (f" (made {', '.join(made)})" if made else ""),
            flush=True,
        )
    settings = runtime_settings()
    logs = settings.home / "logs"
    prefect_url = f"http://127.0.0.1:{args.prefect_port}"
    mlflow_url = f"http://127.0.0.1:{args.mlflow_port}"
    api_url = f"http://127.0.0.1:{args.api_port}"
    env = {
        **service_env(prefect_url, mlflow_url, databases),
        "CPN_CONFIG": str(Path(args.config).resolve()),
        "CPN_POLICY": args.policy or "",
        "CPN_POLICY_SET": ",".join(args.set),
    }
    if not args.no_auth:
        print(f"cpn up: {ensure_admin_token(settings)}", flush=True)
    py = sys.executable
    started = time.monotonic()

    def log(name: str) -> Path:
        return logs / f"{name}.log"

    try:
        with stop_on_signals(), Supervisor() as sup:
            prefect = sup.start(
                "prefect-server",
                [
                    py,
                    "-m",
                    "prefect",
                    "server",
                    "start",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(args.prefect_port),
                ],
                env=env,
                log_path=log("prefect-server"),
            )
            mlflow = sup.start(
                "mlflow",
                [
                    py,
                    "-m",
                    "mlflow",
                    "server",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(args.mlflow_port),
                    "--workers",
                    "1",
                ],  # fmt: skip
                # From the environment, not the command line: `ps` shows no password.
                env={**env, "MLFLOW_BACKEND_STORE_URI": env["CPN_TRACKING_URI"]},
                log_path=log("mlflow"),
            )
            run_argv = [
                py, "-c", "import sys; from cli import main; sys.exit(main())", "run",
                "--config", args.config, "--port", str(args.api_port), "--time-scale", str(args.time_scale),
                "--estimates", args.estimates, *policy_arguments(args),
            ]  # fmt: skip
            run_argv += ["--no-auth"] if args.no_auth else ["--tokens-file", str(settings.tokens_path)]
            sup.wait_ready(mlflow, f"{mlflow_url}/health", args.timeout)
            api = sup.start("cpn-run", run_argv, env=env, log_path=log("cpn-run"))
            sup.wait_ready(prefect, f"{prefect_url}/api/health", args.timeout)
            print(f"cpn up: Prefect server answers after {time.monotonic() - started:.1f} s", flush=True)
            if left := leftovers(prefect_url):  # before the worker: none of them is ours
                print(
                    f"cpn up: cancelled {len(left)} flow run(s) a stopped cpn up left pending or running, "
                    f"which held their deployments' concurrency slots: {', '.join(left[:5])}"
                    + (" ..." if len(left) > 5 else ""),
                    flush=True,
                )
            # The worker creates its process pool; the deployments are applied once the pool exists.
            worker = sup.start(
                "prefect-worker",
                [py, "-m", "prefect", "worker", "start", "--pool", WORK_POOL, "--type", "process"],
                env=env,
                cwd=REPO_ROOT,
                log_path=log("prefect-worker"),
                stop_signal=signal.SIGINT,
            )
            sup.wait_ready(worker, f"{prefect_url}/api/work_pools/{WORK_POOL}", args.timeout, ok=(200,))
            sup.run_step(
                "deploy",
                [py, "-m", "prefect", "--no-prompt", "deploy", "--all"],
                env=env,
                cwd=REPO_ROOT,
                log_path=log("deploy"),
            )
            print(f"cpn up: deployments applied after {time.monotonic() - started:.1f} s", flush=True)
            sup.wait_ready(api, f"{api_url}/healthz", args.timeout)
            total = time.monotonic() - started
            print(
                f"cpn up: ready after {total:.1f} s (logs in {logs})\n"
                f"  Prefect UI   {prefect_url}\n"
                f"  MLflow UI    {mlflow_url}\n"
                f"  cpn API      {api_url}\n"
                f"  cpn web UI   {api_url}/ui{ui_login(args.no_auth, settings)}\n"
                "Ctrl-C stops everything.",
                flush=True,
            )
            while not sup.failed():
                time.sleep(0.5)
            print(f"cpn up: {sup.failed()[0].describe_exit()}; stopping the rest", file=sys.stderr)
            return 1
    except ServiceFailed as exc:
        print(f"cpn up: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Stopped):
        print("cpn up: stopped", flush=True)
        return 0
