"""Every speed shortcut around a library, in one place: what it skips, what it relies on.

Each shortcut was measured to pay for itself (the figure is here, the measurement in
docs/decisions.md) and each has a plain path, the library used as its documentation says,
that its setting turns on (``[shortcuts]`` in ``gateway.settings``; ``ONEJOB_SHORTCUTS=off``
turns them all off). The plain path is the way back when an upgrade breaks a shortcut, and
the break-point tests and a scenario subset run both ways in CI.

``Shortcut.private`` names what a shortcut (or, in ``HARDENING``, a protection that has no
public way to do it) takes from a dependency that is not its public API, and is the only
allow-list of such names: a shipped module may take another library's private name (a
``_`` module or name, or one of a module its library keeps internal, such as
``sqlalchemy.util``) only in a file of the ``code`` of a shortcut that declares it.
``tests/unit/test_private_names.py`` reads every shipped module (``ast``) and fails,
naming file:line, on any other use, and on a declared name its files no longer take;
``tests/unit/test_shortcuts.py`` fails, naming the shortcut, when one of them is gone from
its library. The dependencies they come from have upper bounds in pyproject.toml.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Shortcut:
    """One way around a library, and the way back."""

    setting: str  #: its key in ``[shortcuts]`` (None: always on, see ``HARDENING``)
    code: str  #: where it lives
    skips: str  #: what the library would do instead (the plain path)
    measured: str  #: what it bought, side by side, on this project's host
    decision: str  #: its record in docs/decisions.md
    #: Names it takes that are not the library's public API: ``module:Class.attribute``,
    #: or ``module:Class#attribute`` for an attribute each instance sets in ``__init__``.
    private: tuple[str, ...] = ()


SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut(
        setting="direct_route",
        code="gateway/http/direct.py",
        skips="Litestar's router, HTTPRoute.handle, the kwargs model and response handler "
        "for POST /v1/jobs",
        measured="about a fifth of a creation's gateway CPU (py-spy, 16 connections)",
        decision="`POST /v1/jobs` skips Litestar's router, not Litestar",
        private=(
            "litestar._asgi.utils:is_valid_host",
            # Not underscored, not documented: the router inside Litestar's own handler stack.
            "litestar.app:Litestar#asgi_router",
            "litestar.app:Litestar#asgi_handler",
        ),
    ),
    Shortcut(
        setting="write_batching",
        code="gateway/http/edge.py (OneWritePerTurn); gateway/dispatch/outcomes.py (two loop "
        "turns after a decision, so its waiters' answers go in that turn's write)",
        skips="uvicorn's transport.write of each response piece at once",
        measured="creation at 16 connections: 1.17x the req/s at 0.92x the gateway's CPU",
        decision="A connection's writes of one loop turn go out at the turn's end",
        private=("uvicorn.protocols.http.httptools_impl:HttpToolsProtocol.connection_made",),
    ),
    Shortcut(
        setting="provider_pool",
        code="providers/http1_pool.py; providers/http1_connection.py; providers/client.py",
        skips="httpx's own transport (httpcore) and AsyncClient.send's auth, redirect, "
        "cookie and hook layers",
        measured="744 against 1,340 us of CPU per provider call, one call at a time",
        decision="The provider client sends over its own HTTP/1.1 pool, behind httpx's "
        "transport interface",
        private=(
            "httpx:AsyncClient._init_transport",
            "httpx:AsyncClient._transport_for_url",
            "httpcore._utils:is_socket_readable",
        ),
    ),
    Shortcut(
        setting="bare_connections",
        code="gateway/store/pg_bare.py (checkout, KeptConnections); "
        "gateway/store/sqlite_bare.py; gateway/store/database.py (alone, statements)",
        skips="SQLAlchemy's Connection around the pooled driver connection, for the "
        "one-statement PostgreSQL paths and SQLite's creation and winning decision",
        measured="PostgreSQL ~20 against ~250 us of CPU around a statement; SQLite creation "
        "~0.6 against ~2.3 ms of CPU",
        decision="One-statement PostgreSQL paths take the pooled asyncpg connection bare",
        private=("sqlalchemy.util.concurrency:greenlet_spawn",),
    ),
    Shortcut(
        setting="creation_batches",
        code="gateway/store/creation_batches.py",
        skips="one creation statement per request",
        measured="PostgreSQL's cost per created job 0.13 against 0.28 ms (batches of ~6)",
        decision="PostgreSQL creations go as a group commit: one statement per process on the wire",
    ),
    Shortcut(
        setting="sqlite_inline",
        code="gateway/store/sqlite_inline.py",
        skips="aiosqlite's thread per connection (a thread hop per call)",
        measured="a SQLite sync job: half the gateway CPU (12-15 ms against 5-7 ms)",
        decision="SQLite statements run on the event loop's thread, not on aiosqlite's",
        private=(
            "aiosqlite.core:Connection._execute",
            "aiosqlite.core:Connection._connect",
            # A dunder, so not a private name, but aiosqlite's starts the thread: replaced.
            "aiosqlite.core:Connection.__await__",
            "aiosqlite.core:Connection#_connection",
            "aiosqlite.core:Connection#_connector",
            "aiosqlite.core:Connection#_running",
            "aiosqlite.core:Connection#_tx",
        ),
    ),
    Shortcut(
        setting="first_attempt_in_process",
        code="gateway/service/jobs.py (reserve a runner slot, run the claimed attempt); "
        "gateway/dispatch/first_attempts.py (reserve, run_claimed)",
        skips="the queue: a NOTIFY, a runner's wake-up and a claim transaction per job",
        measured="a sync job's claim transaction and wake-up saved (issue 9)",
        decision="The first attempt is claimed in the creating transaction (issue 9)",
    ),
    Shortcut(
        setting="prompt_meanwhile",
        code="gateway/dispatch/attempt.py (Prompt); gateway/store/pg_bare.py (fetch)",
        skips="rendering the first attempt's prompt after its creation committed",
        measured="sync at 1 connection: p50 0.967x (duel, 5 rounds)",
        decision="A first attempt's prompt is rendered while its creation is on the wire",
    ),
)

#: Private names used for a protection, not for speed: no plain path to turn on.
HARDENING: tuple[Shortcut, ...] = (
    Shortcut(
        setting="",
        code="gateway/http/edge.py (EdgeProtocol)",
        skips="nothing: uvicorn has no header deadline nor header count and size limits, "
        "and answers what llhttp refuses in plain text",
        measured="-",
        decision="The HTTP edge is uvicorn + httptools with a protocol subclass, not "
        "another server",
        private=(
            "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol.on_header",
            "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol.send_400_response",
            "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol.on_response_complete",
            "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol#pipeline",
            "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol#flow",
            "uvicorn.protocols.http.httptools_impl:RequestResponseCycle#more_body",
            "uvicorn.protocols.http.httptools_impl:STATUS_LINE",
        ),
    ),
    Shortcut(
        setting="",
        code="gateway/http/openapi.py",
        skips="nothing: Litestar has no public hook for a struct's schema",
        measured="-",
        decision="Response structs document the answers; the views still build them",
        private=(
            "litestar._openapi.schema_generation:SchemaCreator",
            "litestar._openapi.schema_generation.plugins.struct:StructSchemaPlugin",
        ),
    ),
    Shortcut(
        setting="",
        code="gateway/server.py (GatewayServer)",
        skips="nothing: uvicorn has no hook at a stop signal (it waits for every request in "
        "flight before the app's shutdown) and raises a captured SIGINT again after it",
        measured="-",
        decision="Other libraries' private names are taken in the shortcuts only, and a "
        "test reads the code for them (issue 44)",
        # Not underscored, not documented: uvicorn.Server's documented API is serve/run.
        private=(
            "uvicorn.server:Server.handle_exit",
            "uvicorn.server:Server.capture_signals",
        ),
    ),
    Shortcut(
        setting="",
        code="gateway/store/pg_connections.py (socket_of)",
        skips="nothing: asyncpg cannot set TCP keepalives or TCP_USER_TIMEOUT",
        measured="-",
        decision="Every database wait has a deadline; a connection that waited is "
        "terminated (issue 36)",
        private=("asyncpg.connection:Connection._transport",),
    ),
)
