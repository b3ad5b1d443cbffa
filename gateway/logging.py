"""JSON log lines: one object per line on stderr, and one access line per request."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import time
from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

ACCESS_LOGGER = "onejob.access"
#: The console's requests say so (``X-Onejob-Client: console``): its reads, polled every
#: few seconds by each open page, are logged at DEBUG (they were 243 of a serve log's 401
#: lines); its writes and any refusal stay INFO.
CLIENT_HEADER = b"x-onejob-client"
CONSOLE = b"console"
JOB_ID_SCOPE_KEY = "onejob.job_id"
#: Set in the scope's state once the client hung up (``http.disconnect`` before the answer).
CLIENT_GONE_SCOPE_KEY = "onejob.client_gone"
#: When the request arrived (``time.perf_counter()``), for what is counted from then on
#: (``Prefer: wait``): set by the access log's middleware, the outermost.
STARTED_SCOPE_KEY = "onejob.started"
#: The database drivers log each statement with its parameters (job inputs, results, key
#: hashes) below these levels, so they are capped there whatever ``log_level`` says.
DRIVER_LOG_CAPS = {
    "sqlalchemy.engine": logging.WARNING,
    "sqlalchemy.pool": logging.WARNING,
    "aiosqlite": logging.WARNING,
    "asyncpg": logging.WARNING,
    "alembic": logging.INFO,
    # Alembic's plug-in set-up says seven lines at every start; a migration that runs
    # still logs at INFO (``alembic.runtime.migration``).
    "alembic.runtime.plugins": logging.WARNING,
    # httpx logs every request with its URL at INFO: a webhook receiver's URL may carry
    # its own token (``?token=...``), which must not reach the logs.
    "httpx": logging.WARNING,
}
#: What Alembic says before every run, migration or not: dropped, so a start that
#: migrates nothing says nothing; each migration it runs keeps its INFO line.
ALEMBIC_PREAMBLE = ("Context impl ", "Will assume ")
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object, with any ``extra=`` fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as a JSON line."""
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def _not_alembic_preamble(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(ALEMBIC_PREAMBLE)


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON lines; never a statement's parameters."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name, cap in DRIVER_LOG_CAPS.items():
        logger = logging.getLogger(name)
        logger.setLevel(max(cap, root.level))
        logger.handlers[:] = []
        logger.propagate = True
    migration = logging.getLogger("alembic.runtime.migration")
    if _not_alembic_preamble not in migration.filters:
        migration.addFilter(_not_alembic_preamble)
    logging.captureWarnings(True)  # Python warnings become JSON lines on ``py.warnings``
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Our access middleware logs each request once; uvicorn's would be a second line.
    logging.getLogger("uvicorn.access").disabled = True


def _from_console(scope: Scope) -> bool:
    """Say whether the request came from the operator console (its own header)."""
    return any(name == CLIENT_HEADER and value == CONSOLE for name, value in scope["headers"])


def access_log_middleware(app: ASGIApp) -> ASGIApp:
    """Log one line per HTTP request: method, path, status, duration, job id when known."""
    log = logging.getLogger(ACCESS_LOGGER)

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        scope.setdefault("state", {})[STARTED_SCOPE_KEY] = started
        status = 500

        async def receive_wrapper() -> ReceiveMessage:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.setdefault("state", {})[CLIENT_GONE_SCOPE_KEY] = True
            return message

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await app(scope, receive_wrapper, send_wrapper)
        finally:
            state: dict[str, Any] = scope.get("state") or {}
            level = logging.INFO
            if scope.get("method") == "GET" and status < 400 and _from_console(scope):
                level = logging.DEBUG
            log.log(
                level,
                "%s %s %s",
                scope.get("method"),
                scope.get("path"),
                status,
                extra={
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    "job_id": state.get(JOB_ID_SCOPE_KEY),
                },
            )

    return middleware
