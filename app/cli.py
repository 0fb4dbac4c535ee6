"""`speech-server`: serve the speech API."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any, NoReturn, get_args

import uvicorn
from fastapi import FastAPI

from app import __version__
from app.http_protocol import guarded_protocol, guarded_websocket_protocol
from app.lifecycle import Lifecycle
from app.logs import configure_logging
from app.server import create_app
from app.settings import (
    EngineName,
    InvalidSettings,
    Settings,
    load_settings,
    log_env_warnings,
    log_settings_warnings,
    settings_help,
    settings_set,
)

INTERRUPTED_STATUS = 128 + signal.SIGINT  # after SIGINT where it cannot kill the process, as a shell reports it
# After SIGTERM before the server served (its start, the engine's load). SIGINT ends the process the same way whenever
# it comes (by the signal, as a shell expects), and so does SIGTERM: 0, as after the drain once serving, since a stop
# the supervisor asked for and got is no failure, wherever in the start it came. 143 (128 + SIGTERM) would read as a
# crash to a restart policy or an alert on failed pods, for a pod deleted while it loaded.
STOPPED_STATUS = 0
STOPPED_STARTING = "stopped while the server was starting"
STOPPED_LOADING = "stopped while the engine was loading"
HURRIED_SHUTDOWN_S = 2  # after a second SIGTERM: the connections of stopped streams get this long to close

log = logging.getLogger(__name__)


class SpeechServer(uvicorn.Server):
    """uvicorn with a graceful drain on SIGTERM, and exit status 0 after it.

    On SIGTERM uvicorn would close its listener and re-raise the signal after shutting down (status -15, read by a
    supervisor as a crash). Instead the first SIGTERM starts a drain: /ready and new requests answer 503 at once,
    every request already accepted, streaming or queued for a slot, is served (up to SPEECH_DRAIN_TIMEOUT_S), and then
    the server shuts down and exits 0. A second SIGTERM ends the drain at once, as its timeout would (what still
    streams is stopped and told why), and gives connections `HURRIED_SHUTDOWN_S` to close, not the drain's time; the
    engine is still stopped. A third, or SIGINT once shutting down, stops waiting for anything (the engine included).

    SIGINT (Ctrl-C in a terminal) shuts down without a drain, and the process then ends by the signal, as a shell
    expects of a program it interrupted: uvicorn would raise the signal again once shut down, which Python reports as
    a KeyboardInterrupt traceback after the server's last log line. It ends as soon as the server has shut down (the
    engine closed): asyncio would first wait for every thread it ran work in, an engine's load among them (minutes on
    a GPU, where Ctrl-C came while it loaded).

    SIGTERM while the engine still loads drains as above (there is little to wait for: no speech before the engine is
    ready), and the process then ends with `STOPPED_STATUS` once the server has shut down, not waiting for the load
    either: a pod deleted while it loads would otherwise wait out its grace period and be killed."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sigterms = 0
        self.interrupted = False  # a SIGINT came: once shut down, the process ends by it

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)
        if self.interrupted:
            end_interrupted()
        if self.lifecycle.engine_loading:  # shut down by SIGTERM before the engine was ready
            end_stopped(STOPPED_LOADING)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._loop is not None and self.started:
            self._sigterms += 1  # counted here: a second one may come before the loop has begun the drain
            if self._sigterms == 1:
                self._loop.call_soon_threadsafe(self.lifecycle.begin_drain, self._drained)
            elif self._sigterms == 2:
                if not self.should_exit:  # the drain still waits: not for its whole time now
                    self.config.timeout_graceful_shutdown = HURRIED_SHUTDOWN_S
                self._loop.call_soon_threadsafe(self.lifecycle.hurry)
            else:  # a third: stop waiting for connections (uvicorn's own second SIGINT; the engine is not stopped)
                self.force_exit = True
            return
        super().handle_exit(sig, frame)
        if sig == signal.SIGINT:
            self.interrupted = True
        if sig in (signal.SIGTERM, signal.SIGINT) and sig in self._captured_signals:
            self._captured_signals.remove(sig)  # not raised again once shut down: `main` exits with its own status

    def _drained(self) -> None:
        if not self.lifecycle.idle:
            cut_off_stuck_writers(self.server_state.connections)
        self.should_exit = True


def end_interrupted() -> NoReturn:
    """End the process by SIGINT, as a program a shell interrupts is (a script then stops rather than going on to its
    next command): without a handler there is no traceback to print. Nothing is waited for: not asyncio's worker
    threads, nor other threads, nor exit handlers."""
    _flush_logs()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.raise_signal(signal.SIGINT)  # to this thread: it has ended the process before it returns
    os._exit(INTERRUPTED_STATUS)  # where the signal cannot kill it (the init process of a container)


def end_stopped(message: str) -> NoReturn:
    """End the process with `STOPPED_STATUS`, saying why in `message`, where a SIGTERM came before the server served:
    there is nothing left to do. As after Ctrl-C (`end_interrupted`), nothing is waited for: not the thread an
    engine's load runs in (minutes on a GPU; the engine itself was closed by the server's shutdown, where it had
    begun), nor other threads, nor exit handlers. An exit, not the signal's default action, which the kernel does not
    take for a container's init process."""
    log.info(message)
    _flush_logs()
    os._exit(STOPPED_STATUS)


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()


def _end_on_interrupt(sig: int, frame: FrameType | None) -> NoReturn:
    end_interrupted()


def _end_on_stop(sig: int, frame: FrameType | None) -> NoReturn:
    end_stopped(STOPPED_STARTING)


@contextlib.contextmanager
def signals_end_start() -> Iterator[None]:
    """Ctrl-C during the start, before the server handles signals itself, ends the process by SIGINT at once: there is
    nothing yet to shut down, and Python would print a KeyboardInterrupt traceback from wherever the start was.
    SIGTERM there ends it at once too, with `STOPPED_STATUS`, as SIGTERM once serving ends it. Once it serves, the
    server handles both itself (`SpeechServer`). The handlers that were there are put back on the way out (`main`
    called by a program of its own)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        yield
        return
    # handlers, not the default action: the kernel kills a PID namespace's init process (a container's, whose
    # entrypoint this server is) by no signal left to the default action, and Ctrl-C (docker run -it) did nothing,
    # nor did SIGTERM (a pod deleted while it started waited out its grace period)
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, _end_on_interrupt),
        signal.SIGTERM: signal.signal(signal.SIGTERM, _end_on_stop),
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cut_off_stuck_writers(connections: Iterable[Any]) -> None:
    """The connections whose writes wait on their clients, aborted: streams the drain stopped that could not end, each
    waiting on a client that reads as it plays behind the megabytes its socket holds (a stop is seen only between
    writes). Cut off, each ends as stopped by the drain; left open, uvicorn would wait for them, then cancel them as
    errors. The others are left to uvicorn's shutdown, which writes what they hold (a whole file, a voice's 201)."""
    for connection in list(connections):
        if getattr(connection, "writing_paused", False):
            connection.transport.abort()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="speech-server",
        description="OpenAI-compatible streaming text-to-speech server. Flags override SPEECH_* variables.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=settings_help(),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--host", help="address to listen on (SPEECH_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to listen on (SPEECH_PORT, default 8000)")
    parser.add_argument(
        "--engine", choices=list(get_args(EngineName)), help="speech engine (SPEECH_ENGINE, default auto)"
    )
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="log level (SPEECH_LOG_LEVEL, default info)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    with signals_end_start():
        args = parse_args(argv)
        try:
            settings = load_settings({k: v for k, v in vars(args).items() if v is not None})
            configure_logging(settings.log_level)
            log_env_warnings()  # once, now that logs go where the operator reads them
            log_settings_warnings(settings)
            # bound before the engine is made and loaded (minutes on a GPU): a port in use or a host that is no
            # address of this machine stops the start at once, in one line, where uvicorn would find it only after
            # the app's start and log it as a bare OSError
            sockets = listen(settings.host, settings.port, flags=vars(args))
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # engines load from local files only, never from a hub
            app = create_app(settings)
        except InvalidSettings as exc:  # one line naming the variable, not a traceback through the settings' parsing
            raise SystemExit(f"speech-server: {exc}") from None
        server = SpeechServer(server_config(app, settings), app.state.lifecycle)
        log.info("settings", extra={"set": settings_set(settings)})  # the defaults aside; API keys only counted
        log.info(
            f"listening on {url(settings.host, settings.port)}", extra={"host": settings.host, "port": settings.port}
        )
        # after a SIGINT, or a SIGTERM while the engine loaded, it does not return: the process ends once shut down
        server.run(sockets)


# what an operator can do about the commonest reasons a bind fails
_BIND_ADVICE = {
    errno.EADDRINUSE: ("port", "stop what holds it, or set another port"),
    errno.EACCES: ("port", "a port below 1024 needs privileges: set a higher one"),
    errno.EADDRNOTAVAIL: ("host", "not an address of this machine: set one of its addresses, or 0.0.0.0 for all"),
    errno.EINVAL: ("host", "set an address of this machine (an IPv6 link-local one with its %interface)"),
}
LISTEN_BACKLOG = 2048  # uvicorn's, which it sets again as it starts serving on the sockets


def listen(host: str, port: int, flags: dict[str, Any] | None = None) -> list[socket.socket]:
    """Sockets listening on every address `host` names on `port` (bound as uvicorn's event loop binds them: an IPv6
    socket IPv6 only, a family the kernel has not skipped), or `InvalidSettings` naming the setting (the flag where one
    was given) and what to do. Listening, not only bound: with SO_REUSEADDR a second bind to a port succeeds while no
    socket listens on it, so a second server started beside one still loading would bind too, and find the port taken
    only in uvicorn's start (where uvloop says nothing)."""

    def named(setting: str) -> str:
        variable = f"SPEECH_{setting.upper()}"
        return f"--{setting} ({variable})" if (flags or {}).get(setting) is not None else variable

    def refused(exc: OSError) -> InvalidSettings:
        for sock in sockets:
            sock.close()
        setting, advice = _BIND_ADVICE.get(exc.errno or 0, ("port", "set another host or port"))
        return InvalidSettings(f"{named(setting)}: cannot listen on {where}: {exc.strerror or exc}: {advice}")

    where = url(host, port)
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidSettings(
            f"{named('host')}: cannot listen on {where}: {exc.strerror}: set an address or a name of this machine"
        ) from None
    sockets: list[socket.socket] = []
    for family, kind, proto, address in dict.fromkeys((a[0], a[1], a[2], a[4]) for a in addresses):  # no repeats
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            if exc.errno == errno.EAFNOSUPPORT:  # IPv6 turned off in this kernel: its other addresses serve
                continue
            raise refused(exc) from None
        sockets.append(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart reuses a port left in TIME_WAIT
            if family == socket.AF_INET6:  # its IPv4 twin, where the name has one, on a socket of its own
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
        except OSError as exc:
            raise refused(exc) from None
    if not sockets:
        raise InvalidSettings(f"{named('host')}: cannot listen on {where}: no address of a family this machine has")
    return sockets


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def server_config(app: FastAPI, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration for serving `app` as `settings` say."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_graceful_shutdown=int(settings.drain_timeout_s) + 5,  # connections left after the drain
        timeout_keep_alive=settings.keep_alive_timeout_s,  # type: ignore[arg-type]
        ws_max_size=settings.max_body_bytes,  # the largest session.config (reference audio); beyond: close 1009
        # pings keep a proxy's idle timer fed, but a missing pong never ends a session: a client that plays its audio
        # as it reads answers one only after the audio sent before it, minutes later in a long reply. A client gone
        # is told by the write-stall bound (reading nothing) or the session's idle timeout
        ws_ping_timeout=None,
        http=guarded_protocol(settings.request_read_timeout_s, settings.client_stall_timeout_s),
        ws=guarded_websocket_protocol(settings.client_stall_timeout_s),
    )


if __name__ == "__main__":
    main()
