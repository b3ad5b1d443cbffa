"""Find, signal and reap the processes and System V IPC a PostgreSQL test cluster leaves.

pg_autoctl runs a tree: its supervisor forks a Postgres controller and a keeper, the
controller starts the postmaster, the postmaster forks backends that each call setsid().
A session or process group therefore does not hold them all; the parent links in /proc
do. A postmaster killed with SIGKILL leaves its small System V shared memory segment, and a
pg_autoctl killed with SIGKILL leaves the semaphore that serialises its log lines: both
stay until removed, so they are removed here once their owners are gone. A long-running
child also gets SIGTERM from the kernel when the thread that spawned it ends
(PR_SET_PDEATHSIG): a test run killed before stop() leaves no pg_autoctl running. Linux only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import os
import pwd
import signal
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PROC = Path("/proc")
REAP_POLL = 0.05  # seconds between two looks at whether processes are gone
IPC_RMID = 0  # the command of semctl(2) and shmctl(2) that removes an IPC object
PR_SET_PDEATHSIG = 1  # the prctl(2) option: a signal for when our parent thread ends
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up now: no dlopen after fork
LOG_SEMAPHORE_VAR = b"PG_AUTOCTL_LOG_SEMAPHORE="


class PgClusterError(Exception):
    """A cluster's process failed, outlived SIGKILL, or a state was not reached in time."""


def process_table() -> dict[int, tuple[int, str]]:
    """Return every live process as pid -> (parent pid, state letter)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it exited while we looked
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def is_alive(pid: int) -> bool:
    """Say whether a process exists and is not a zombie waiting to be reaped."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def descendants(roots: Iterable[int], table: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """Return the roots that are alive and every live process below them."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return {pid for pid in found if table[pid][1] not in ("Z", "X")}


def cmdline(pid: int) -> str:
    """Return a process's command line with spaces between arguments ('' when gone)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def pids_mentioning(text: str) -> set[int]:
    """Return the live processes whose command line contains the text."""
    return {pid for pid in process_table() if pid != os.getpid() and text in cmdline(pid)}


def postmaster_pid(pgdata: Path) -> int | None:
    """Return the pid in a data directory's postmaster.pid if that postmaster is alive."""
    lines = _postmaster_lines(pgdata)
    if not lines or not lines[0].strip().isdigit():
        return None
    pid = int(lines[0])
    # A pid is reused once its process is gone: trust it only while it runs this pgdata.
    return pid if is_alive(pid) and str(pgdata) in cmdline(pid) else None


def postmaster_shm_id(pgdata: Path) -> int | None:
    """Return the System V shared memory id a data directory's postmaster.pid names."""
    lines = _postmaster_lines(pgdata)
    if len(lines) < 7 or len(lines[6].split()) != 2:
        return None
    return int(lines[6].split()[1])


def _postmaster_lines(pgdata: Path) -> list[str]:
    try:
        return (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return []


def log_semaphore(pid: int) -> int | None:
    """Return the log semaphore id a pg_autoctl child inherited from its supervisor."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for item in environ.split(b"\0"):
        if item.startswith(LOG_SEMAPHORE_VAR):
            value = item[len(LOG_SEMAPHORE_VAR) :]
            return int(value) if value.isdigit() else None
    return None


def signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    """Send a signal to each process, ignoring those already gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


async def wait_gone(pids: Iterable[int], timeout: float) -> set[int]:
    """Wait until the processes are gone or the timeout (seconds) ends; return survivors."""
    deadline = time.monotonic() + timeout
    left = {pid for pid in pids if is_alive(pid)}
    while left and time.monotonic() < deadline:
        await asyncio.sleep(REAP_POLL)
        left = {pid for pid in left if is_alive(pid)}
    return left


async def terminate(pids: Iterable[int], grace: float) -> set[int]:
    """SIGTERM the processes, SIGKILL what is left after grace seconds; return survivors."""
    pids = set(pids)
    signal_all(pids, signal.SIGTERM)
    left = await wait_gone(pids, grace)
    if left:
        signal_all(left, signal.SIGKILL)
        left = await wait_gone(left, grace)
    return left


async def kill_now(pids: Iterable[int], timeout: float) -> set[int]:
    """Freeze the processes, then SIGKILL them all, so none reacts to another's death."""
    pids = set(pids)
    signal_all(pids, signal.SIGSTOP)
    signal_all(pids, signal.SIGKILL)
    return await wait_gone(pids, timeout)


def remove_semaphores(ids: Iterable[int], uid: int) -> list[int]:
    """Remove the System V semaphores that still exist and belong to uid; return them."""
    existing = _sysvipc_rows("sem", id_column=1, uid_column=4)
    removed = [semid for semid in ids if existing.get(semid) == uid]
    libc = ctypes.CDLL(None, use_errno=True)
    for semid in removed:
        libc.semctl(semid, 0, IPC_RMID)
    return removed


def remove_orphan_shm(ids: Iterable[int], uid: int) -> list[int]:
    """Remove the shared memory segments of uid that no process attaches; return them."""
    path = PROC / "sysvipc" / "shm"
    rows: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            rows[int(cols[1])] = (int(cols[6]), int(cols[7]))  # nattch, uid
    removed = [shmid for shmid in ids if rows.get(shmid) == (0, uid)]
    libc = ctypes.CDLL(None, use_errno=True)
    for shmid in removed:
        libc.shmctl(shmid, IPC_RMID, None)
    return removed


def _die_with_parent() -> None:
    # Runs in the child between fork and exec, after the switch of user (which would clear
    # it): if the test run dies without stop(), pg_autoctl gets SIGTERM and stops Postgres.
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def _sysvipc_rows(kind: str, id_column: int, uid_column: int) -> dict[int, int]:
    rows: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for line in (PROC / "sysvipc" / kind).read_text().splitlines()[1:]:
            cols = line.split()
            rows[int(cols[id_column])] = int(cols[uid_column])
    return rows


@dataclasses.dataclass(slots=True)
class Node:
    """One pg_autoctl node: its port, data directory, log and process."""

    name: str
    port: int
    pgdata: Path = Path()
    log: Path = Path()
    proc: asyncio.subprocess.Process | None = None
    wanted: bool = True  #: False once stopped or crashed on purpose

    @property
    def up(self) -> bool:
        """Say whether its pg_autoctl runs."""
        return self.proc is not None and self.proc.returncode is None


class OwnedProcesses:
    """Every process one cluster started, run as one OS user, and the IPC they leave."""

    def __init__(self, user: str | None, env: dict[str, str], cwd: Path) -> None:
        self.user = user  # None: run as ourselves
        self.uid = pwd.getpwnam(user).pw_uid if user else os.geteuid()
        self.env = env
        self.cwd = cwd
        self.spawned: list[asyncio.subprocess.Process] = []
        self.semaphores: set[int] = set()
        self.shm_ids: set[int] = set()

    @classmethod
    def in_new_directory(cls, base: Path, prefix: str, user: str | None) -> OwnedProcesses:
        """Make a fresh directory owned by user, whose HOME and XDG dirs live inside it."""
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root),  # pg_autoctl keeps its config and state under the XDG dirs
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_DATA_HOME": str(root / "share"),
            "XDG_RUNTIME_DIR": str(root / "run"),  # else its pid files go to /tmp/pg_autoctl
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        owned = cls(user, env, root)
        for path in (root, *(root / sub for sub in ("config", "share", "run", "logs"))):
            path.mkdir(exist_ok=True)
            os.chown(path, owned.uid, -1)
        return owned

    def _as_user(self) -> dict[str, Any]:
        if self.user is None:
            return {}
        return {"user": self.user, "group": self.user, "extra_groups": []}

    async def spawn(self, argv: list[str], log_path: Path) -> asyncio.subprocess.Process:
        """Start a long-running process in its own session, logging to a file."""
        with log_path.open("ab") as log:
            log.write(f"\n--- {' '.join(argv)}\n".encode())
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
                **self._as_user(),
            )
        self.spawned.append(proc)
        return proc

    async def command(self, argv: list[str], timeout: float) -> str:
        """Run a command to its end within timeout seconds; return its output or raise."""
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
            **self._as_user(),
        )
        self.spawned.append(proc)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            await terminate(descendants([proc.pid]), timeout)
            raise PgClusterError(f"{' '.join(argv)} took over {timeout} s") from None
        text = out.decode(errors="replace")
        if proc.returncode != 0:
            raise PgClusterError(f"{' '.join(argv)} exited with {proc.returncode}:\n{text[-2000:]}")
        return text

    def tree(self, node: Node) -> set[int]:
        """Return a node's pg_autoctl, its postmaster, and every process below them."""
        root = node.proc.pid if node.proc is not None and node.up else None
        return descendants([pid for pid in (root, postmaster_pid(node.pgdata)) if pid])

    def remember_ipc(self, pgdatas: Iterable[Path], pids: Iterable[int]) -> None:
        """Note the IPC objects these postmasters and pg_autoctl processes hold."""
        for pgdata in pgdatas:
            if (shm := postmaster_shm_id(pgdata)) is not None:
                self.shm_ids.add(shm)
        for pid in pids:
            if (sem := log_semaphore(pid)) is not None:
                self.semaphores.add(sem)

    async def sweep(self, directory: Path, pgdatas: list[Path], grace: float) -> set[int]:
        """End whatever is left below our processes or runs from directory; free its IPC."""
        roots = {p.pid for p in self.spawned} | pids_mentioning(str(directory))
        roots |= {pid for d in pgdatas if (pid := postmaster_pid(d)) is not None}
        leftovers = descendants(roots)
        self.remember_ipc(pgdatas, leftovers)
        left = await terminate(leftovers, grace)
        for proc in self.spawned:
            if proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), grace)
        remove_semaphores(self.semaphores, self.uid)
        remove_orphan_shm(self.shm_ids, self.uid)
        return left
