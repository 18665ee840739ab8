"""Entry point of `sglnode sim`: parse SGLang's flags, replay startup, serve until stopped or crashed."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TextIO

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from sglnode.planning.planner import PlanResult
from sglnode.planning.presets import PresetError
from sglnode.readiness import loglines
from sglnode.sim.config import ENV_HELP, SimConfig, SimConfigError, build_config
from sglnode.sim.engine import SimEngine
from sglnode.sim.flags import SGLANG_PROG, build_sglang_parser, strip_launcher
from sglnode.sim.http_api import build_app, build_bootstrap_app
from sglnode.sim.log import SimLog
from sglnode.sim.startup import (
    Startup,
    StartupFailed,
    banner,
    frame,
    kill_self,
    scheduler_frame,
    traceback_text,
)
from sglnode.upstream import catalog

EXIT_USAGE = 2
EXIT_BIND_FAILED = 1  # uvicorn exits 1 when it cannot bind (uvicorn/server.py: sys.exit(1))
WARMUP_MAX_NEW_TOKENS = 8  # SGLang's warmup request (http_server.py _execute_server_warmup)
WARMUP_TIMEOUT_S = 60.0
RUNTIME_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of {total:.2f} GiB of which 18.56 MiB is free."
)


def env_epilog() -> str:
    lines = ["Simulator-only settings (environment variables, so the command line stays SGLang's):"]
    lines += [f"  {name:<24} {text}" for name, text in ENV_HELP.items()]
    lines.append("This is a TEST DOUBLE of SGLang: no GPU, no model, simulated numbers only.")
    return "\n".join(lines)


def crash_runtime(log: SimLog, plan: PlanResult, reason: str, die: Callable[[], None] = kill_self) -> None:
    """An injected mid-run crash: a decode-time CUDA OOM in the scheduler, then SGLang's teardown."""
    log.plain(f"sglnode sim: injecting a crash ({reason})")
    text = traceback_text(
        [scheduler_frame(), frame("scheduler_event_loop_overlap", "batch_result = self.run_batch(batch)")],
        RUNTIME_OOM.format(total=plan.gpu.memory_gb),
    )
    log.info(loglines.SCHEDULER_EXCEPTION.render(traceback=text))
    log.info(loglines.SIGQUIT.text, rank_tag="")
    pid = os.getpid()
    log.info(loglines.KILL_PROCESS_TREE.render(parent_pid=pid, include_parent=True, getpid=pid), rank_tag="")
    die()


async def _warmup(config: SimConfig, port: int) -> None:
    host = "127.0.0.1" if config.host in ("0.0.0.0", "::", "") else config.host
    payload = {
        "text": "The capital city of France is",
        "sampling_params": {"max_new_tokens": WARMUP_MAX_NEW_TOKENS},
    }
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    timeout = aiohttp.ClientTimeout(total=WARMUP_TIMEOUT_S)
    url = f"http://{host}:{port}/generate"
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, json=payload, headers=headers) as response,
    ):
        await response.read()


def _bound_port(site: web.TCPSite) -> int:
    server = site._server  # aiohttp keeps the asyncio server here; needed to report port 0's real port
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else 0


class ServerErrorLog(logging.Handler):
    """aiohttp's server errors, printed like uvicorn's: a garbled request is one warning line.

    The router probes each worker with an HTTP/2 (gRPC) preface first; uvicorn answers that with
    "Invalid HTTP request received.", where aiohttp would dump a traceback.
    """

    def __init__(self, log: SimLog) -> None:
        super().__init__()
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, BadHttpMessage):
            self._log.plain("WARNING:  Invalid HTTP request received.")
            return
        self._log.plain(logging.Formatter().format(record))


def _route_server_errors(log: SimLog) -> None:
    logger = logging.getLogger("aiohttp.server")
    logger.handlers = [ServerErrorLog(log)]
    logger.propagate = False


async def serve(config: SimConfig, plan: PlanResult, log: SimLog, max_running_requests: int) -> int:
    _route_server_errors(log)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def on_crash(reason: str) -> None:
        crash_runtime(log, plan, reason)

    engine = SimEngine(config, plan, log, max_running_requests, on_crash=on_crash)
    runners: list[web.AppRunner] = []
    try:
        if config.disaggregation_mode == "prefill":
            # SGLang's prefill side starts its KV bootstrap server while the scheduler initialises.
            boot_site = await _listen(
                build_bootstrap_app(engine), config.host, config.bootstrap_port, runners
            )
            log.plain(f"sglnode sim: bootstrap server listening on {config.host}:{_bound_port(boot_site)}")
        site = await _listen(build_app(engine), config.host, config.port, runners)
    except BindError as exc:
        # uvicorn's own line (uvicorn/server.py startup), then exit 1 as SGLang's server process does.
        log.plain(f"ERROR:    {exc}")
        await engine.close()
        for item in reversed(runners):
            await item.cleanup()
        return EXIT_BIND_FAILED
    port = _bound_port(site)
    log.plain(f"INFO:     Started server process [{os.getpid()}]")
    log.plain("INFO:     Waiting for application startup.")
    log.plain("INFO:     Application startup complete.")
    log.plain(loglines.UVICORN_RUNNING.format(host=config.host, port=port))
    crash_task: asyncio.Task[None] | None = None
    try:
        engine.ready = True  # warmup goes through the normal path
        if not config.skip_warmup:
            engine.ready = False
            await _warmup(config, port)
            engine.ready = True
        log.info(loglines.SERVER_READY.text, rank_tag="")
        if config.faults.crash_after_s is not None:
            crash_task = asyncio.create_task(_crash_later(config.faults.crash_after_s, on_crash))
        await stop.wait()
    finally:
        if crash_task:
            crash_task.cancel()
        await engine.close()
        for item in reversed(runners):
            await item.cleanup()
    return 0


class BindError(Exception):
    """A port the server must listen on is taken (or not ours to take)."""


async def _listen(app: web.Application, host: str, port: int, runners: list[web.AppRunner]) -> web.TCPSite:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    runners.append(runner)
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        # asyncio words it as uvicorn prints it: "[Errno 98] error while attempting to bind on address
        # ('0.0.0.0', <port>): address already in use".
        raise BindError(str(exc)) from exc
    return site


async def _crash_later(delay_s: float, on_crash: Callable[[str], None]) -> None:
    await asyncio.sleep(delay_s)
    on_crash(f"crash_after_s:{delay_s:g}")


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run_sim(argv: list[str], env: Mapping[str, str] | None = None, stream: TextIO | None = None) -> int:
    env = os.environ if env is None else env
    parser = build_sglang_parser(epilog=env_epilog())
    namespace = parser.parse_args(strip_launcher(argv))  # exits 2 on unknown flags, like SGLang
    try:
        config = build_config(namespace, env)
    except SimConfigError as exc:
        print(f"{SGLANG_PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # As PID 1 in a container a signal without a handler is ignored: make `docker stop` work
    # during startup too (the server loop installs its own graceful handler later).
    previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        return _start_and_serve(config, namespace, SimLog(stream))
    finally:
        signal.signal(signal.SIGTERM, previous)


def _start_and_serve(config: SimConfig, namespace: argparse.Namespace, log: SimLog) -> int:
    log.plain(banner(config))
    flags = ", ".join(f"{key}={value!r}" for key, value in sorted(vars(namespace).items()) if value)
    log.info(catalog.get("server_args").render(_server_args_for_logging=f"ServerArgs({flags})"), rank_tag="")
    startup = Startup(config, log)
    try:
        plan = startup.run()
    except StartupFailed:
        return 1
    except (PresetError, ValueError) as exc:
        # A preset that does not exist or a flag value SGLang's typed parser would refuse.
        print(f"{SGLANG_PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(serve(config, plan, log, startup.max_running_requests(plan)))
    return 0
