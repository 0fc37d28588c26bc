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

It prints the URLs once each answers. Telemetry and update checks are off everywhere, so nothing waits
on the internet. Output of every service goes to `$CPN_HOME/logs/NAME.log`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path

from config.runtime import RuntimeSettings, runtime_settings
from config.settings import DEMO_DIR, REPO_ROOT

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
    p.add_argument("--config", default=str(DEMO_DIR), help="config folder (default: the built-in demo)")
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


def service_env(prefect_url: str, mlflow_url: str) -> dict[str, str]:
    """The environment every service and flow run gets: this cpn home, the Prefect API, the MLflow UI,
    telemetry off."""
    settings = runtime_settings()
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
    settings = runtime_settings()
    logs = settings.home / "logs"
    prefect_url = f"http://127.0.0.1:{args.prefect_port}"
    mlflow_url = f"http://127.0.0.1:{args.mlflow_port}"
    api_url = f"http://127.0.0.1:{args.api_port}"
    env = service_env(prefect_url, mlflow_url)
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
                    "--backend-store-uri",
                    settings.mlflow_uri,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(args.mlflow_port),
                    "--workers",
                    "1",
                ],  # fmt: skip
                env=env,
                log_path=log("mlflow"),
            )
            run_argv = [
                py, "-c", "import sys; from cli import main; sys.exit(main())", "run",
                "--config", args.config, "--port", str(args.api_port), "--time-scale", str(args.time_scale),
                "--estimates", args.estimates,
            ]  # fmt: skip
            run_argv += ["--no-auth"] if args.no_auth else ["--tokens-file", str(settings.tokens_path)]
            sup.wait_ready(mlflow, f"{mlflow_url}/health", args.timeout)
            api = sup.start("cpn-run", run_argv, env=env, log_path=log("cpn-run"))
            sup.wait_ready(prefect, f"{prefect_url}/api/health", args.timeout)
            print(f"cpn up: Prefect server answers after {time.monotonic() - started:.1f} s", flush=True)
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
