"""The one module that touches torch's private DataLoader internals.

torch's ``DataLoader`` gives no public way to tell a multi-process pass from a single-process
one, to shut a broken worker pool down, to make a persistent-workers loader start a fresh pool,
or to recognise "a worker died" among the errors a pass raises. The loader needs all four to
turn a dead worker into :class:`rd.WorkerError` without losing its cursor. Every private name
it relies on is used here and nowhere else, and ``tests/loader/test_torch_compat.py`` asserts
that each exists in the installed torch with the expected shape, so an upgrade that moves one
fails loudly and names it.

It also widens the pipe of a multi-process pass's result queue (:func:`widen_result_pipe`): a
batch of a few hundred KB then crosses in one write instead of one 64 KiB pipe buffer at a time,
each a context switch between a worker and the main process (on a loaded 2-CPU machine that
doubled the 2-worker rate).

Fewer hand-offs per batch (:func:`synchronous_index_queues`, :func:`next_batch` and
:class:`WorkerInit`): the main process writes each request to its worker's index queue itself,
and a worker writes each result itself, instead of handing them to the queues' feeder threads
(each hand-off a GIL ping-pong between two threads, which on a loaded 2-CPU machine cost more
than the write); and the main process skips the profiler scope torch opens around every batch.
A message is written directly only when that write cannot block (the queue's write lock is free
and the message fits half the pipe's free room, measured with ``FIONREAD``); any other goes,
pickled once, through the queue's own feeder thread, so a worker never blocks in a write that a
main process which stopped reading will not drain (torch's shutdown would wait 5 s per worker).

Private names used: ``torch.utils.data.dataloader._MultiProcessingDataLoaderIter`` and its
``_shutdown_workers()``, ``_workers`` (the worker processes), ``_worker_result_queue`` (a
``multiprocessing`` queue: its ``_reader`` connection), ``_index_queues`` (``multiprocessing``
queues: ``_writer``, ``_wlock``, ``_sem``, ``_closed``, and of their feeder thread ``_thread``,
``_buffer``, ``_notempty`` and its condition's ``_waiters``), ``_sampler_iter``, ``_reset()``,
``_next_data()`` and ``_num_yielded`` (what ``__next__`` does); torch's ``_worker_loop``, which
calls ``init_fn(worker_id)`` with its result queue in the local ``data_queue``;
``DataLoader._iterator`` (the pass a persistent-workers loader reuses);
torch's message texts for dead and hung workers ("exited unexpectedly", "killed by signal",
"DataLoader timed out after") and for a dataset error re-raised from a worker ("Caught ...").
``torch._utils.ExceptionWrapper`` (what a worker sends for a failed batch; :func:`worker_exception`
makes one for one step of a request that carries several, :mod:`.step_groups`);
``torch.utils.data._utils.worker.WorkerInfo`` (made read-only by its ``__setattr__``): in a
worker, :class:`WorkerInit` points ``get_worker_info().dataset`` at the user's dataset instead of
rd's fetcher, as torch's DataLoader would. ``default_collate`` / ``default_convert`` are re-exported from their public ``torch.utils.data``
names. Cost: an ``isinstance`` and a few string tests, only on the error path.

SIGCHLD. torch installs a process-wide SIGCHLD handler that *raises* "DataLoader worker ... killed
by signal" from wherever the main thread happens to be when a worker dies: inside the user's
training step, a ``torch.save``, a ``finally`` block. :func:`install_sigchld_handler` installs,
before torch's, one that makes the same check without raising (and chains any non-torch handler
that was there) and marks torch's as set (``torch.utils.data._utils.signal_handling.
_SIGCHLD_handler_set``, ``_error_if_any_worker_fails``). The death then surfaces where it can be
handled: at the next ``next(loader)``, through torch's liveness check, as :class:`rd.WorkerError`,
whose message starts with torch's own sentence for each worker a signal ended
(:func:`killed_by_signal`: "DataLoader worker (pid N) is killed by signal: Segmentation fault.").
Plain torch ``DataLoader`` passes in the same process get their deaths reported the same way.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
import time
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any

from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader, default_collate, default_convert, get_worker_info
from torch.utils.data._utils import signal_handling as _signal_handling
from torch.utils.data._utils.collate import collate, collate_float_fn, collate_int_fn, default_collate_fn_map
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from resumable_data.errors import UsageError, describe

__all__ = [
    "WorkerInit",
    "collate",
    "collate_float_fn",
    "collate_int_fn",
    "default_collate",
    "default_collate_fn_map",
    "default_convert",
    "drop_persistent_iterator",
    "install_sigchld_handler",
    "is_exception",
    "is_multiprocess_iter",
    "killed_by_signal",
    "next_batch",
    "on_pool_exit",
    "shutdown_workers",
    "synchronous_index_queues",
    "widen_result_pipe",
    "worker_exception",
    "worker_fault",
]

_F_SETPIPE_SZ = 1031  # Linux fcntl commands (fcntl.F_SETPIPE_SZ from Python 3.10 on Linux)
_F_GETPIPE_SZ = 1032
RESULT_PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size for unprivileged processes


class WorkerInit:
    """The ``worker_init_fn`` rd gives torch: makes ``get_worker_info().dataset`` the user's dataset
    (the worker's copy; torch's would be rd's fetcher), then calls the user's ``worker_init_fn``.
    Picklable for spawn when the user's function is."""

    def __init__(self, user_fn: Any) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        info = get_worker_info()
        if info is None:  # torch calls worker_init_fn in its worker processes only
            raise UsageError(
                describe(
                    "get_worker_info()",
                    None,
                    "a torch WorkerInfo (this worker_init_fn runs in torch's worker processes)",
                    "let a torch DataLoader with num_workers > 0 call it",
                )
            )
        fetcher = info.dataset
        object.__setattr__(info, "dataset", getattr(fetcher, "dataset", fetcher))
        caller = sys._getframe(1)  # torch's _worker_loop, which holds the result queue
        if caller.f_code.co_name == "_worker_loop" and "data_queue" in caller.f_locals:
            q = caller.f_locals["data_queue"]
            if hasattr(q, "_writer") and hasattr(q, "_sem"):  # multiprocessing's Queue internals: CPython's, by version
                q.put = _sync_put(q)  # results leave without a feeder-thread hand-off
        if self.user_fn is not None:
            self.user_fn(worker_id)


def worker_exception() -> Any:
    """The exception being handled, as torch's worker sends one (``ExceptionWrapper``, "in DataLoader
    worker process N"; "in the main process" outside a worker): its ``reraise()`` raises it again
    with torch's text and traceback, wherever it is unpickled."""
    info = get_worker_info()
    return ExceptionWrapper(where="in the main process" if info is None else f"in DataLoader worker process {info.id}")


def is_exception(obj: Any) -> bool:
    """Whether ``obj`` is an exception a worker sent (:func:`worker_exception`, torch's ``ExceptionWrapper``)."""
    return isinstance(obj, ExceptionWrapper)


def worker_processes(it: Any) -> list:
    """The worker processes (``multiprocessing.Process``) of a pass of torch's ``DataLoader``;
    empty for a single-process pass."""
    return list(it._workers) if is_multiprocess_iter(it) else []


def is_multiprocess_iter(it: Any) -> bool:
    """Whether ``it`` is a pass of torch's ``DataLoader`` run by worker processes."""
    return isinstance(it, _MultiProcessingDataLoaderIter)


def shutdown_workers(it: Any) -> None:
    """Stop the worker processes of a multi-process pass now (persistent ones too); a no-op for
    any other iterator. Idempotent: torch's shutdown ignores a pool already shut down."""
    if is_multiprocess_iter(it):
        it._shutdown_workers()


def widen_result_pipe(it: Any, size: int = RESULT_PIPE_BYTES) -> int | None:
    """Grow the pipe that carries a multi-process pass's batches to ``size`` bytes; returns the
    new size, or None where that is not possible (another iterator, not Linux, a lower limit):
    then the pipe keeps its size, which only costs speed."""
    if not is_multiprocess_iter(it):
        return None
    try:
        import fcntl

        fd = it._worker_result_queue._reader.fileno()
        if fcntl.fcntl(fd, _F_GETPIPE_SZ) < size:
            fcntl.fcntl(fd, _F_SETPIPE_SZ, size)
        return fcntl.fcntl(fd, _F_GETPIPE_SZ)
    except (ImportError, OSError, AttributeError):
        return None


def next_batch(it: Any) -> Any:
    """``next(it)`` for a multi-process pass without torch's per-batch profiler scope
    (``record_function``: two dispatcher calls that release and retake the GIL; about a tenth of
    the main process's time per batch); any other iterator: plain ``next``. The rest is what
    torch's ``__next__`` does for a map-style dataset."""
    if not is_multiprocess_iter(it):
        return next(it)
    if it._sampler_iter is None:
        it._reset()
    data = it._next_data()
    it._num_yielded += 1
    return data


def synchronous_index_queues(it: Any) -> int:
    """Make the main process send a multi-process pass's requests itself instead of through each
    index queue's feeder thread; returns how many queues were changed (0 for another iterator).

    ``multiprocessing.Queue.put`` hands the object to a feeder thread that pickles and writes it:
    per batch a cross-thread hand-off whose GIL ping-pong with the main thread costs far more
    than the write on a loaded machine. A request is a few dozen bytes and at most
    ``prefetch_factor`` of them wait per worker, so the write never blocks; the queue's
    semaphore and write lock are used exactly as its feeder thread would use them, and the
    worker's ``get`` is unchanged. torch's first requests of a pass (put before this can run)
    still go through the feeder thread; a later request may reach its worker before one of those
    is written, which is harmless: each request carries its index and torch reorders results."""
    if not is_multiprocess_iter(it):
        return 0
    changed = 0
    for q in it._index_queues:
        if getattr(q, "_rd_sync", False):
            continue
        q.put = _sync_put(q)
        q._rd_sync = True
        changed += 1
    return changed


class _Pickled:
    """A message pickled already: it unpickles as the object it was pickled from, so a message the
    synchronous put hands to the feeder thread is not pickled twice (torch's tensor reductions
    register a file descriptor each time they run)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data  # ForkingPickler's bytes of the message

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return ForkingPickler.loads, (self.data,)


try:
    import fcntl as _fcntl
    import termios as _termios

    _IOCTL = True
except ImportError:  # not POSIX: a synchronous put never writes itself (see _pipe_room)
    _IOCTL = False


def _pipe_room(fd: int, cap: list[int], need: int) -> bool:
    """Whether ``need`` bytes can be written to the pipe ``fd`` now without blocking, keeping half
    its capacity in reserve for page rounding (the kernel packs writes into pages; a page a write
    leaves partly used is not filled by the next header); False where that cannot be known.
    ``cap`` caches the capacity, a lower bound re-read only when ``need`` does not fit (the main
    process may widen the pipe after this worker started)."""
    if not _IOCTL:
        return False
    try:
        unread = int.from_bytes(_fcntl.ioctl(fd, _termios.FIONREAD, b"\0\0\0\0"), sys.byteorder, signed=True)
        if need + unread <= cap[0] // 2:
            return True
        cap[0] = _fcntl.fcntl(fd, _F_GETPIPE_SZ)
    except (OSError, AttributeError):
        return False
    return need + unread <= cap[0] // 2


#: How long a direct put waits for another writer (another worker) to finish its write.
_LOCK_WAIT_S = 0.05


def _feeder_idle(q: Any) -> bool:
    """Whether everything ever handed to ``q``'s feeder thread has been written: no feeder thread
    started, or it waits for a message with its buffer empty (it waits only once it wrote all it
    took). Checked under the queue's ``_notempty`` lock, so the answer holds until this process
    puts again (one thread puts: torch's main thread, or a worker's)."""
    if q._thread is None:
        return True
    with q._notempty:
        return not q._buffer and len(q._notempty._waiters) > 0


def _sync_put(q: Any) -> Any:
    """``q.put`` that writes the message itself when the write cannot block and overtakes nothing:
    the feeder thread has written all it was handed (:func:`_feeder_idle`: torch's first requests
    of a pass, put before this replaced ``put``, and any message sent through it since), the
    queue's write lock is free and the message fits the pipe's free room. Otherwise (the feeder
    still holds a message, a message larger than the pipe, a reader that stopped reading) it goes
    through the queue's own ``put`` and feeder thread, so a worker never blocks in a write the main
    process will not read: torch's shutdown would wait 5 s per worker for it, then terminate it.
    Messages stay in the order they were put: a direct write never overtakes the feeder's, which
    torch's reset of persistent workers needs (a stale request written after the reset request
    would have its result taken for the new pass's)."""
    dumps, send, lock, sem = ForkingPickler.dumps, q._writer.send_bytes, q._wlock, q._sem
    feeder_put, fd, cap = q.put, q._writer.fileno(), [0]

    def put(obj: Any, block: bool = True, timeout: float | None = None) -> None:
        if q._closed:
            raise ValueError(f"Queue {q!r} is closed")
        data = dumps(obj)
        if _feeder_idle(q) and (lock is None or lock.acquire(True, _LOCK_WAIT_S)):
            try:
                if _pipe_room(fd, cap, len(data) + 4):  # 4: send_bytes' length header
                    if not sem.acquire(block, timeout):
                        raise queue.Full
                    send(data)  # the lock is held: no other writer, the room only grows
                    return
            finally:
                if lock is not None:
                    lock.release()
        feeder_put(_Pickled(bytes(data)), block, timeout)  # dumps gives a memoryview

    return put


_watched: weakref.WeakSet = weakref.WeakSet()


def on_pool_exit(it: Any, fn: Any) -> None:
    """Call ``fn(worker pids)`` once when the multi-process pass ``it`` is garbage collected
    (after torch's own ``__del__`` stopped its workers); a no-op for any other iterator."""
    if not is_multiprocess_iter(it) or it in _watched:
        return
    _watched.add(it)
    weakref.finalize(it, fn, [w.pid for w in it._workers])


def drop_persistent_iterator(torch_loader: DataLoader) -> None:
    """Forget the pass a ``persistent_workers=True`` loader keeps, so the next ``iter()`` starts a
    fresh worker pool (after the old one broke). Harmless for a loader without one."""
    torch_loader._iterator = None


def worker_fault(error: BaseException) -> str | None:
    """What happened to a worker process, if ``error`` is torch reporting a dead or hung one.

    A killed worker reaches the main process in one of three ways: torch's liveness check
    ("exited unexpectedly"), its SIGCHLD handler ("killed by signal"), or, when the dead worker
    was still passing a batch's tensors by file descriptor, a ConnectionError/EOFError from
    unpickling them. An exception raised by the dataset inside a worker is re-raised by torch as
    ``Caught ... in DataLoader worker process``: that is the user's error and is not translated
    (None), nor is anything else.
    """
    text = str(error)
    if text.startswith("Caught "):
        return None
    if isinstance(error, (ConnectionError, EOFError)):
        return "died while passing a batch to the main process"
    if text.startswith("DataLoader worker") and ("exited unexpectedly" in text or "killed by signal" in text):
        return "died"
    if text.startswith("DataLoader timed out after"):
        return "hung (no batch within timeout=)"
    return None


def killed_by_signal(it: Any, wait: float = 1.0) -> str:
    """torch's own sentence for each worker of ``it`` that a signal ended ("DataLoader worker (pid N)
    is killed by signal: Segmentation fault. "), or ''. rd's SIGCHLD handler does not raise torch's
    error, so the loader says it here; while no worker has ended yet, waits up to ``wait`` s (a worker
    whose pipe broke may still be dying)."""
    workers, out = worker_processes(it), []
    deadline = time.monotonic() + wait
    while workers and all(w.exitcode is None for w in workers) and time.monotonic() < deadline:
        time.sleep(0.01)  # a worker that broke its pipe may still be dying
    for w in workers:
        code = w.exitcode
        if code is not None and code < 0:
            try:
                name = signal.strsignal(-code) or f"signal {-code}"
            except ValueError:
                name = f"signal {-code}"
            out.append(f"DataLoader worker (pid {w.pid}) is killed by signal: {name}. ")
    return "".join(out)


_installed = False


def _closure_value(fn: Any, name: str) -> Any:
    """The value of ``fn``'s free variable ``name`` (None when it has none)."""
    try:
        cell = fn.__closure__[fn.__code__.co_freevars.index(name)]
        return cell.cell_contents
    except (AttributeError, ValueError, TypeError, IndexError):
        return None


def install_sigchld_handler() -> bool:
    """Install the non-raising SIGCHLD handler (see the module docstring) once per process;
    returns whether it is in place (False off the main thread or without SIGCHLD)."""
    global _installed
    if _installed:
        return True
    # the signal module has SIGCHLD on POSIX only (its names differ by platform)
    if not hasattr(signal, "SIGCHLD") or threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGCHLD)
    torch_own = callable(previous) and getattr(previous, "__module__", None) == _signal_handling.__name__
    chained = previous if callable(previous) and not torch_own else None
    if torch_own:  # torch's handler is in place already: keep chaining the handler it chained
        chained = _closure_value(previous, "previous_handler")

    def handler(signum: int, frame: Any) -> None:
        try:
            _signal_handling._error_if_any_worker_fails()
        except RuntimeError:
            pass  # reported by the liveness check at the next next(loader), as rd.WorkerError
        if chained is not None:
            chained(signum, frame)

    signal.signal(signal.SIGCHLD, handler)
    _signal_handling._SIGCHLD_handler_set = True
    _installed = True
    return True
