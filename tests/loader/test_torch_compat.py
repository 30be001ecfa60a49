"""torch's private DataLoader internals that ``loader/torch_compat.py`` relies on, checked against
the installed torch (an upgrade that moves one fails here, by name), and ``worker_fault`` against
the messages torch really produces for a killed, a hung and a failing worker."""

import inspect
import os
import pickle
import signal
import time

import pytest
import torch
import torch.utils.data as tud
import torch.utils.data.dataloader as tdl

from resumable_data.loader import torch_compat


class _Items(tud.Dataset):
    def __init__(self, mode="ok"):
        self.mode = mode

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode == "hang":
            time.sleep(2.0)
        if self.mode == "raise":
            raise ValueError("cannot decode record 3")
        return i


def test_the_private_names_exist_with_the_expected_shape():
    cls = getattr(tdl, "_MultiProcessingDataLoaderIter", None)
    assert isinstance(cls, type), "torch.utils.data.dataloader._MultiProcessingDataLoaderIter is gone"
    shutdown = getattr(cls, "_shutdown_workers", None)
    assert callable(shutdown), "_MultiProcessingDataLoaderIter._shutdown_workers is gone"
    assert list(inspect.signature(shutdown).parameters) == ["self"], "_shutdown_workers() takes arguments now"
    assert "_iterator" in vars(tud.DataLoader([1, 2])), "DataLoader._iterator (the persistent pass) is gone"
    assert tud.DataLoader([1, 2])._iterator is None
    from torch.utils.data._utils import signal_handling

    assert isinstance(getattr(signal_handling, "_SIGCHLD_handler_set", None), bool), \
        "torch.utils.data._utils.signal_handling._SIGCHLD_handler_set is gone"
    assert callable(getattr(signal_handling, "_error_if_any_worker_fails", None)), \
        "torch.utils.data._utils.signal_handling._error_if_any_worker_fails is gone"
    assert callable(getattr(signal_handling, "_set_SIGCHLD_handler", None))
    from torch.utils.data._utils.worker import WorkerInfo  # WorkerInit rebinds its read-only .dataset

    info = WorkerInfo(id=0, num_workers=1, seed=0, dataset="fetcher")
    object.__setattr__(info, "dataset", "user")
    assert info.dataset == "user"
    assert torch_compat.default_collate([1, 2]).tolist() == [1, 2]
    assert torch_compat.default_convert([1, 2]) == [1, 2]
    # sample_collate replaces two entries of torch's collate map: the map, its keys and the two functions
    params = list(inspect.signature(torch_compat.collate).parameters)
    assert params[0] == "batch" and "collate_fn_map" in params, "collate(batch, *, collate_fn_map) changed"
    assert torch_compat.default_collate_fn_map[int] is torch_compat.collate_int_fn
    assert torch_compat.default_collate_fn_map[float] is torch_compat.collate_float_fn
    assert torch_compat.collate([3, 4], collate_fn_map=torch_compat.default_collate_fn_map).tolist() == [3, 4]
    # a failed step of a request of several steps travels as torch's ExceptionWrapper (torch._utils)
    try:
        raise KeyError("step 3")
    except KeyError:
        wrapped = pickle.loads(pickle.dumps(torch_compat.worker_exception()))
    assert torch_compat.is_exception(wrapped) and not torch_compat.is_exception(KeyError())
    with pytest.raises(KeyError, match="Caught KeyError in the main process"):
        wrapped.reraise()


def test_iterators_are_told_apart_and_shut_down():
    assert not torch_compat.is_multiprocess_iter(iter(tud.DataLoader(_Items(), num_workers=0)))
    torch_compat.shutdown_workers(iter(tud.DataLoader(_Items(), num_workers=0)))  # a no-op
    it = iter(tud.DataLoader(_Items(), num_workers=1))
    assert torch_compat.is_multiprocess_iter(it)
    assert next(it).tolist() == [0]
    torch_compat.shutdown_workers(it)
    assert not any(w.is_alive() for w in it._workers)
    torch_compat.shutdown_workers(it)  # idempotent


def test_a_persistent_pass_is_dropped_so_the_next_iter_starts_fresh():
    loader = tud.DataLoader(_Items(), num_workers=1, persistent_workers=True)
    first = iter(loader)
    assert loader._iterator is first and next(first).tolist() == [0]
    torch_compat.shutdown_workers(first)
    torch_compat.drop_persistent_iterator(loader)
    assert loader._iterator is None
    second = iter(loader)
    assert second is not first and [b.item() for b in second] == list(range(8))
    torch_compat.shutdown_workers(second)


def _wait_dead(pid, limit=60.0):
    """Until worker ``pid`` has ended (dead, not reaped: torch's liveness check still sees it go)."""
    deadline = time.monotonic() + limit  # a loaded machine: the worker starts, then kills itself
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        assert time.monotonic() < deadline, "the worker did not die"
        time.sleep(0.02)


def _first_error(mode, **kw):
    it = iter(tud.DataLoader(_Items(mode), num_workers=1, **kw))
    sigchld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # torch's handler would raise asynchronously
    try:
        if mode == "kill":  # dead before next(): with timeout=1 a worker still starting was "timed out"
            _wait_dead(it._workers[0].pid)
        with pytest.raises(Exception) as info:
            next(it)
        return it, info.value
    finally:
        torch_compat.shutdown_workers(it)
        signal.signal(signal.SIGCHLD, sigchld)


def test_a_killed_worker_is_a_fault():
    it, error = _first_error("kill", timeout=1)  # torch's liveness check
    assert "exited unexpectedly" in str(error), str(error)
    assert torch_compat.worker_fault(error) == "died"
    # torch's SIGCHLD handler text, raised synchronously by the check that handler calls
    it = iter(tud.DataLoader(_Items("kill"), num_workers=1))
    sigchld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        _wait_dead(it._workers[0].pid)
        with pytest.raises(RuntimeError) as info:
            torch._C._error_if_any_worker_fails()
        assert "killed by signal" in str(info.value), str(info.value)
        assert torch_compat.worker_fault(info.value) == "died"
    finally:
        torch_compat.shutdown_workers(it)
        signal.signal(signal.SIGCHLD, sigchld)


def test_a_hung_worker_is_a_fault():
    _, error = _first_error("hang", timeout=0.3)
    assert str(error).startswith("DataLoader timed out after"), str(error)
    assert torch_compat.worker_fault(error) == "hung (no batch within timeout=)"


def test_a_dataset_error_in_a_worker_is_not_a_fault():
    _, error = _first_error("raise")
    assert isinstance(error, ValueError) and str(error).startswith("Caught ValueError"), str(error)
    assert torch_compat.worker_fault(error) is None


@pytest.mark.parametrize("error, expected", [
    (ConnectionResetError("reset by peer"), "died while passing a batch to the main process"),
    (EOFError(), "died while passing a batch to the main process"),
    (RuntimeError("CUDA out of memory"), None),
    (RuntimeError("Caught ConnectionResetError in DataLoader worker process 0."), None),
])
def test_worker_fault_on_other_errors(error, expected):
    assert torch_compat.worker_fault(error) == expected


def test_the_result_pipe_is_widened_and_batches_still_arrive_in_order():
    import sys

    it = iter(tud.DataLoader(_Items(), num_workers=2, batch_size=2))
    assert hasattr(it, "_worker_result_queue") and hasattr(it._worker_result_queue, "_reader"), \
        "_MultiProcessingDataLoaderIter._worker_result_queue._reader is gone"
    size = torch_compat.widen_result_pipe(it)
    limit = "/proc/sys/fs/pipe-max-size"
    if sys.platform.startswith("linux") and os.path.exists(limit) and int(open(limit).read()) >= torch_compat.RESULT_PIPE_BYTES:
        assert size is not None and size >= torch_compat.RESULT_PIPE_BYTES
    assert [b.tolist() for b in it] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert torch_compat.widen_result_pipe(iter(tud.DataLoader(_Items(), num_workers=0))) is None


def test_the_sigchld_handler_keeps_the_handler_torch_was_chaining(monkeypatch):
    """Installed after torch's (a plain torch loader ran first), rd's handler still calls the
    user's SIGCHLD handler that torch's was chaining, and never raises."""
    from torch.utils.data._utils import signal_handling

    calls = []
    saved = signal.getsignal(signal.SIGCHLD)
    monkeypatch.setattr(torch_compat, "_installed", False)
    monkeypatch.setattr(signal_handling, "_SIGCHLD_handler_set", False)
    try:
        signal.signal(signal.SIGCHLD, lambda signum, frame: calls.append(signum))
        signal_handling._set_SIGCHLD_handler()  # torch's, chaining the user's
        assert torch_compat.install_sigchld_handler()
        handler = signal.getsignal(signal.SIGCHLD)
        assert getattr(handler, "__module__", None) == torch_compat.__name__
        handler(signal.SIGCHLD, None)
        assert calls == [signal.SIGCHLD]
    finally:
        signal.signal(signal.SIGCHLD, saved)


def test_the_worker_loop_and_the_iterator_have_what_the_fast_path_relies_on():
    from torch.utils.data._utils import worker

    params = inspect.signature(worker._worker_loop).parameters
    assert "data_queue" in params and "init_fn" in params, "torch's _worker_loop lost data_queue/init_fn"
    assert "init_fn(worker_id)" in inspect.getsource(worker._worker_loop), "_worker_loop no longer calls init_fn itself"
    cls = tdl._MultiProcessingDataLoaderIter
    for name in ("_next_data", "_reset"):
        assert callable(getattr(cls, name, None)), f"_MultiProcessingDataLoaderIter.{name} is gone"
    src = inspect.getsource(tdl._BaseDataLoaderIter.__next__)
    assert "self._sampler_iter is None" in src and "self._next_data()" in src and "self._num_yielded += 1" in src, \
        "torch's __next__ changed: update torch_compat.next_batch"


def _worker_loop(init_fn, data_queue):  # the name and the locals of torch's own loop
    init_fn(0)
    return data_queue


def test_worker_init_makes_the_result_queue_synchronous(monkeypatch):
    import multiprocessing as mp
    import types

    info = types.SimpleNamespace(dataset=types.SimpleNamespace(dataset="user's"))
    monkeypatch.setattr(torch_compat, "get_worker_info", lambda: info)
    q = _worker_loop(torch_compat.WorkerInit(None), mp.get_context("fork").Queue())
    assert info.dataset == "user's"
    q.put(("batch", 1))
    assert q._thread is None, "a feeder thread started: put() was not replaced"
    assert q.get(timeout=5) == ("batch", 1)
    q.close()


def test_index_queues_are_made_synchronous_and_batches_still_arrive_in_order():
    loader = tud.DataLoader(_Items(), batch_size=None, num_workers=2, prefetch_factor=2)
    it = iter(loader)
    assert torch_compat.synchronous_index_queues(it) == 2
    assert torch_compat.synchronous_index_queues(it) == 0  # once per queue
    assert [torch_compat.next_batch(it) for _ in range(8)] == list(range(8))
    with pytest.raises(StopIteration):
        torch_compat.next_batch(it)
    torch_compat.shutdown_workers(it)


def test_a_synchronous_put_that_does_not_fit_the_pipe_goes_through_the_feeder_thread():
    import multiprocessing as mp
    import threading

    q = mp.get_context("fork").Queue()
    q.put = torch_compat._sync_put(q)
    small, big = ("small", 1), ("big", "x" * (4 * fcntl_pipe_size(q)))
    done = threading.Thread(target=lambda: (q.put(small), q.put(big), q.put(small)), daemon=True)
    done.start()
    done.join(10)
    assert not done.is_alive(), "put() blocked in send_bytes on a message larger than the pipe's free space"
    got = [q.get(timeout=10) for _ in range(3)]
    assert got == [small, big, small]  # in order: a later small put never overtakes the feeder's big one
    q.close()


def test_puts_after_one_went_to_the_feeder_keep_their_order():
    """A stale result overtaking a persistent worker's reset reply would be taken for the new
    pass's: every message after the first one handed to the feeder thread follows it."""
    import multiprocessing as mp

    q = mp.get_context("fork").Queue()
    q.put = torch_compat._sync_put(q)
    big = ("big", "x" * (4 * fcntl_pipe_size(q)))
    q.put(big)
    for i in range(50):
        q.put(("small", i))
    got = [q.get(timeout=10) for _ in range(51)]
    assert got == [big] + [("small", i) for i in range(50)]
    q.close()


class _SlowToPickle:
    """Pickles slowly: the feeder thread has taken it from its buffer but not written it yet."""

    def __init__(self, tag):
        self.tag = tag

    def __reduce__(self):
        time.sleep(0.5)
        return str, (self.tag,)


def test_puts_after_the_switch_wait_for_what_the_feeder_still_holds_from_before_it():
    """torch puts a pass's first requests through the feeder thread before rd replaces ``put``; a
    persistent worker's reset request written directly would overtake one of them still being
    pickled or written, and the stale request's result would then be taken for the new pass's
    (torch: KeyError or 'Invalid iterator state')."""
    import multiprocessing as mp

    q = mp.get_context("fork").Queue()
    q.put(_SlowToPickle("before"))  # the feeder pops it at once, then pickles it for 0.5 s
    deadline = time.monotonic() + 5
    while q._buffer and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not q._buffer, "the feeder thread did not take the message"
    q.put = torch_compat._sync_put(q)
    q.put(("after", 1))
    got = [q.get(timeout=10) for _ in range(2)]
    assert got == ["before", ("after", 1)]
    q.put(("later", 2))  # the feeder is idle again: a direct write is safe and still in order
    assert q.get(timeout=10) == ("later", 2)
    q.close()


def fcntl_pipe_size(q):
    import fcntl

    return fcntl.fcntl(q._writer.fileno(), 1032)  # F_GETPIPE_SZ


def _long_strings(items):  # no out-of-band buffers: the whole ~4 MB batch travels inline
    return ["x" * 1000 + str(i) for i in items for _ in range(1000)]


class _Ints(tud.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return i


def test_closing_a_pass_whose_inline_batches_exceed_the_pipe_does_not_wait_for_the_join_timeout():
    import resumable_data as rd

    dl = rd.DataLoader(_Ints(), batch_size=4, seed=1, dataset_version="v", collate_fn=_long_strings,
                       num_workers=2)
    it = iter(dl)
    first = next(it)
    assert len(first) == 4000 and all(isinstance(s, str) and len(s) > 1000 for s in first)
    time.sleep(1.0)  # the workers fill their prefetch and block if their writes can block
    start = time.monotonic()
    it.close()
    assert time.monotonic() - start < 3.0, "a worker blocked writing a batch: torch waited its 5 s join timeout"
