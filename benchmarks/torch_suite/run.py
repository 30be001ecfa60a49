"""Run PyTorch's own ``test/test_dataloader.py`` against torch's DataLoader and against ``rd.DataLoader``.

``python benchmarks/torch_suite/run.py [--modes torch,rd,rd-seeded] [--timeout 90] [-k SUBSTR]``

The test file is third-party input and is not committed: put pytorch/pytorch's
``test/test_dataloader.py`` (commit 74436f90, 118,841 characters, BSD-3-Clause; see
``benchmarks/torch_suite/README.md``) at ``benchmarks/torch_suite/upstream/test_dataloader.py``.
The runner checks its SHA-256 so a count is always of the same suite.

Modes, each in its own processes:

* ``torch``: the file as it is;
* ``rd``: the module's global ``DataLoader`` and its ``torch.utils.data.DataLoader`` references
  are ``rd.DataLoader``; samplers, datasets, collation, ``get_worker_info`` stay torch's. The
  rebinding is installed by an import hook, so processes the tests spawn get it too;
* ``rd-seeded``: as ``rd``, and a loader built with neither ``generator=`` nor ``seed=`` gets
  ``seed=`` drawn from torch's global generator at construction (torch draws an unseeded shuffle
  or random sampler from that generator too, at every ``iter()``). It measures which failures
  are only rd's refusal to shuffle without a known seed; it runs only the tests that pass with
  torch and fail with ``rd`` (the others keep their ``rd`` outcome).

Each test runs under a per-test timeout (SIGALRM, ``--timeout``, 60 s); a test that times out or
kills its process is recorded and the rest continue in a fresh process; a test that timed out
runs once more under ``--retry-timeout`` (240 s), so a slow, shared machine is told apart from a
hang. The output is a Markdown table: passing
per mode, and the rd failures grouped by cause (:data:`CAUSES`, the deliberate differences are
marked), written to ``benchmarks/results/torch_suite.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
UPSTREAM_DIR = HERE / "upstream"
UPSTREAM = UPSTREAM_DIR / "test_dataloader.py"
MODULE = "test_dataloader"
SHA256 = "5184d2bf8bb8a88dd27a4a9c5d6df2a41dd28f38c2230f087bcbc48f9c9cf5eb"
COMMIT = "74436f9025609987bbc69c617564f98635b67807"
MODE_ENV = "RD_TORCH_SUITE_MODE"
MODES = ("torch", "rd", "rd-seeded")
RESULTS = HERE.parent / "results"

#: (cause, deliberate, regex on "test id" + newline + "ExceptionType: message"); first match wins.
#: The deliberate ones are the documented differences of docs/dropin.md.
CAUSES: list[tuple[str, bool, str]] = [
    ("IterableDataset refused", True, r"not a torch IterableDataset|DataLoader with IterableDataset"),
    ("shuffle or random sampler without seed= or generator= refused", True, r"seed=None: expected an integer seed"),
    ("sampler whose order is drawn as it goes refused", True, r"sampler='\w+': expected None, a torch SequentialSampler"),
    ("batch_sampler with batches of different sizes refused", True, r"expected lists of one length"),
    ("dataset grew after the loader was built", True, r"test_growing_dataset"),
    ("seed_per_sample: worker_init_fn's seed does not reach __getitem__", True, r"test_worker_init_fn\n"),
    ("timeout", False, r"\nTimeout"),
    ("process crashed", False, r"\nCrash"),
]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the rebinding (runs in the worker and, through __mp_main__, in processes it spawns) ---------
def _rd_loader_class(seeded: bool):
    import torch

    import resumable_data as rd

    class SuiteDataLoader(rd.DataLoader):
        """rd.DataLoader, counting constructions (and in rd-seeded mode adding a drawn seed)."""

        built = 0

        def __init__(self, dataset, *args, **kwargs):
            type(self).built += 1
            # generator is the 12th positional argument after dataset
            if seeded and kwargs.get("generator") is None and kwargs.get("seed") is None and len(args) < 12:
                kwargs["seed"] = int(torch.randint(0, 2**62, ()).item())
            super().__init__(dataset, *args, **kwargs)

    SuiteDataLoader.__name__ = SuiteDataLoader.__qualname__ = "DataLoader"
    SuiteDataLoader.__module__ = rd.DataLoader.__module__
    return SuiteDataLoader


class _TorchView:
    """``torch`` as the test module sees it: every attribute is torch's, except that
    ``torch.utils.data.DataLoader`` is the rebound class."""

    def __init__(self, target, overrides: dict):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name):
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._target, name)


def _patch(module) -> None:
    import torch

    mode = os.environ.get(MODE_ENV, "torch")
    if mode == "torch":
        return
    cls = _rd_loader_class(seeded=mode == "rd-seeded")
    data = _TorchView(torch.utils.data, {"DataLoader": cls})
    utils = _TorchView(torch.utils, {"data": data})
    module.DataLoader = cls
    module.torch = _TorchView(torch, {"utils": utils})


def _install_import_hook() -> None:
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != MODULE:
                return None
            spec = importlib.util.spec_from_file_location(MODULE, UPSTREAM)
            inner = spec.loader

            class Loader(importlib.abc.Loader):
                def create_module(self, spec):
                    return None

                def exec_module(self, module):
                    inner.exec_module(module)
                    _patch(module)

            spec.loader = Loader()
            return spec

    if not any(type(f).__name__ == "Finder" and f.__module__ == __name__ for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())


if os.environ.get(MODE_ENV):
    # torch's load_tests asserts that every TestCase is defined in the running script (here: run.py)
    os.environ["PYTORCH_DISABLE_RUNNING_SCRIPT_CHK"] = "1"
    sys.path.insert(0, str(UPSTREAM_DIR))
    _install_import_hook()


# -- worker: run test ids, one JSON line each -----------------------------------------------------
class _Timeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


def _outcome(test) -> dict:
    import unittest

    class Result(unittest.TestResult):
        def __init__(self):
            super().__init__()
            self.outcome, self.detail = "pass", ""

        def _set(self, outcome, err=None):
            self.outcome = outcome
            if err is not None:
                etype, value, tb = err
                # torch's TestCase appends "To execute this test, run ..." after a blank line
                self.detail = f"{etype.__name__}: {value}".strip().split("\n\nTo execute this test")[0]
                self.trace = "".join(traceback.format_exception(etype, value, tb))[-3000:]

        def addFailure(self, test, err):
            self._set("fail", err)

        def addError(self, test, err):
            if err[0] is _Timeout:
                self.outcome, self.detail = "timeout", "Timeout"
                return
            self._set("error", err)

        def addSkip(self, test, reason):
            self.outcome, self.detail = "skip", reason

        def addExpectedFailure(self, test, err):
            self.outcome = "xfail"

        def addUnexpectedSuccess(self, test):
            self.outcome = "xpass"

        def addSubTest(self, test, subtest, err):
            if err is not None and self.outcome == "pass":
                self._set("fail" if issubclass(err[0], test.failureException) else "error", err)

    r = Result()
    r.trace = ""
    test.run(r)
    return {"outcome": r.outcome, "detail": r.detail[:400], "trace": r.trace}


def worker(ids: list[str], out: Path, timeout: int) -> None:
    import unittest

    module = __import__(MODULE)
    cls = module.DataLoader
    signal.signal(signal.SIGALRM, _on_alarm)
    for tid in ids:
        test = unittest.defaultTestLoader.loadTestsFromName(tid, module)
        before = getattr(cls, "built", 0)
        t0 = time.monotonic()
        signal.alarm(timeout)
        try:
            rec = _outcome(test)
        except _Timeout:
            rec = {"outcome": "timeout", "detail": "Timeout", "trace": ""}
        finally:
            signal.alarm(0)
        rec.update(id=tid, seconds=round(time.monotonic() - t0, 2), built=getattr(cls, "built", 0) - before)
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        if rec["outcome"] == "timeout":
            os._exit(3)  # hung workers or queues may remain: continue in a fresh process
    os._exit(0)


# -- parent ---------------------------------------------------------------------------------------
def list_tests() -> list[str]:
    out = subprocess.run([sys.executable, __file__, "--list"], capture_output=True, text=True,
                         env={**os.environ, MODE_ENV: "torch"}, check=True)
    return out.stdout.split()


def _ids_in(suite) -> list[str]:
    import unittest

    ids = []
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            ids += _ids_in(t)
        else:
            ids.append(t.id().removeprefix(MODULE + "."))
    return ids


def run_mode(mode: str, ids: list[str], timeout: int, workdir: Path, resume: bool = False,
             retry_timeout: int = 0) -> dict[str, dict]:
    """Run ``ids`` in ``mode``; then, with ``retry_timeout``, run each test that timed out once
    more under that longer limit (a slow machine, not a hang, is then told apart)."""
    done = _run_mode(mode, ids, timeout, workdir, resume)
    slow = [t for t in ids if done[t]["outcome"] == "timeout" and not done[t].get("retried")]
    if retry_timeout and slow:
        again = _run_mode(mode + ".retry", slow, retry_timeout, workdir, resume)
        for t in slow:
            done[t] = {**again[t], "retried": True}
    return done


def _run_mode(mode: str, ids: list[str], timeout: int, workdir: Path, resume: bool = False) -> dict[str, dict]:
    out = workdir / f"{mode}.jsonl"
    done: dict[str, dict] = {}
    if resume and out.exists():  # keep the records of an interrupted run
        done = {r["id"]: r for r in map(json.loads, out.read_text().splitlines()) if r["id"] in ids}
    else:
        out.unlink(missing_ok=True)
    env = {**os.environ, MODE_ENV: mode.removesuffix(".retry")}
    while len(done) < len(ids):
        todo = [t for t in ids if t not in done]
        lst = workdir / f"{mode}.todo"
        print(f"[torch_suite] {mode}: {len(done)}/{len(ids)} done", flush=True)
        lst.write_text("\n".join(todo))
        proc = subprocess.Popen([sys.executable, __file__, "--worker", str(lst), "--out", str(out), "--timeout",
                                 str(timeout)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout * len(todo) + 60)
        except subprocess.TimeoutExpired:
            pass
        try:  # what the tests started (spawned processes, workers) goes with their worker process
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for line in out.read_text().splitlines() if out.exists() else []:
            rec = json.loads(line)
            done[rec["id"]] = rec
        nxt = next((t for t in ids if t not in done), None)
        if nxt is not None and nxt == todo[0]:  # died inside this test without a record
            done[nxt] = {"id": nxt, "outcome": "crash", "detail": "Crash: the test process died", "trace": "",
                         "built": -1, "seconds": 0}
            with out.open("a") as f:
                f.write(json.dumps(done[nxt]) + "\n")
    return done


def cause_of(rec: dict) -> tuple[str, bool]:
    text = rec["id"] + "\n" + rec["detail"]
    for name, deliberate, rx in CAUSES:
        if re.search(rx, text):
            return name, deliberate
    first = re.sub(r"0x[0-9a-f]+|\d+", "N", rec["detail"].splitlines()[0] if rec["detail"] else rec["outcome"])
    return first[:120], False


def report(results: dict[str, dict[str, dict]], ids: list[str]) -> tuple[str, dict]:
    ok = {"pass", "xfail"}
    passing = {m: {t for t, r in res.items() if r["outcome"] in ok} for m, res in results.items()}
    lines = ["| mode | tests | pass | fail/error | skip | timeout/crash |", "|---|---:|---:|---:|---:|---:|"]
    for m, res in results.items():
        oc = [r["outcome"] for r in res.values()]
        lines.append(f"| {m} | {len(oc)} | {sum(o in ok for o in oc)} | {sum(o in ('fail', 'error', 'xpass') for o in oc)} "
                     f"| {oc.count('skip')} | {sum(o in ('timeout', 'crash') for o in oc)} |")
    summary: dict = {"commit": COMMIT, "sha256": SHA256, "tests": len(ids), "modes": {}}
    base = passing.get("torch", set())
    for m in results:
        if m == "torch":
            continue
        lost = sorted(base - passing[m])
        groups: dict[tuple[str, bool], list[str]] = {}
        for t in lost:
            groups.setdefault(cause_of(results[m][t]), []).append(t)
        builds = {t for t in base if results["torch"][t].get("built", 0) != 0 or results[m][t].get("built", 0) != 0}
        deliberate = sum(len(v) for (c, d), v in groups.items() if d)
        summary["modes"][m] = {
            "pass_of_torch_passing": len(base & passing[m]), "torch_passing": len(base),
            "deliberate": deliberate, "builds_rd_loader": len({t for t in base if results[m][t].get("built", 0)}),
            "groups": [{"cause": c, "deliberate": d, "tests": v} for (c, d), v in sorted(groups.items(), key=lambda kv: (not kv[0][1], kv[0][0]))],
        }
        del builds
        lines += ["", f"**{m}**: {len(base & passing[m])} of the {len(base)} tests that pass with torch pass "
                  f"({100 * len(base & passing[m]) / max(1, len(base)):.1f}%); {deliberate} fail by a deliberate difference, "
                  f"{len(lost) - deliberate} otherwise.", "", "| cause | deliberate | tests |", "|---|---|---|"]
        for g in summary["modes"][m]["groups"]:
            names: dict[str, int] = {}
            for t in g["tests"]:  # TestDataLoader and TestDataLoaderPersistentWorkers share most names
                names[t.split(".")[-1]] = names.get(t.split(".")[-1], 0) + 1
            shown = ", ".join(f"`{n}`" + (f" x{k}" if k > 1 else "") for n, k in names.items())
            lines.append(f"| {g['cause']} | {'yes' if g['deliberate'] else 'no'} | {len(g['tests'])}: {shown} |")
    return "\n".join(lines) + "\n", summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--timeout", type=int, default=60, help="seconds per test")
    ap.add_argument("--retry-timeout", type=int, default=240, help="seconds for one more try of a test that timed out")
    ap.add_argument("-k", action="append", default=[], help="only test ids containing this (repeatable)")
    ap.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--resume", action="store_true", help="keep the per-test records of an interrupted run")
    a = ap.parse_args()
    if a.worker:
        worker(Path(a.worker).read_text().split(), Path(a.out), a.timeout)
    if a.list:
        import unittest

        print("\n".join(_ids_in(unittest.defaultTestLoader.loadTestsFromModule(__import__(MODULE)))))
        return
    if not UPSTREAM.exists():
        sys.exit(f"missing {UPSTREAM}: see benchmarks/torch_suite/README.md for how to obtain it")
    if _sha256(UPSTREAM) != SHA256:
        sys.exit(f"{UPSTREAM} is not pytorch/pytorch test/test_dataloader.py at {COMMIT} (SHA-256 differs)")
    ids = [t for t in list_tests() if not a.k or any(k in t for k in a.k)]
    results_dir = Path(a.results)
    work = results_dir / "torch_suite_raw"
    work.mkdir(parents=True, exist_ok=True)
    modes = a.modes.split(",")
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(modes)) as pool:  # the modes run side by side, each in its own processes
        futures = {m: pool.submit(run_mode, m, ids, a.timeout, work, a.resume, a.retry_timeout)
                   for m in modes if m != "rd-seeded"}
        results = {m: f.result() for m, f in futures.items()}
    if "rd-seeded" in modes:
        # only the tests that pass with torch and fail with rd can change; the rest keep rd's outcome
        todo = [t for t in ids if results["torch"][t]["outcome"] in ("pass", "xfail")
                and results["rd"][t]["outcome"] not in ("pass", "xfail")]
        results["rd-seeded"] = {**results["rd"], **run_mode("rd-seeded", todo, a.timeout, work, a.resume,
                                                             a.retry_timeout)}
    print(f"[torch_suite] {len(ids)} tests x {len(modes)} modes in {time.monotonic() - t0:.0f}s", flush=True)
    text, summary = report(results, ids)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = (f"PyTorch `test/test_dataloader.py` (pytorch/pytorch {COMMIT[:8]}), torch "
            f"{__import__('torch').__version__}, measured {stamp} by `python benchmarks/torch_suite/run.py`.\n\n")
    print(head + text)
    if not a.k:
        (results_dir / "torch_suite.md").write_text(head + text)
        summary["measured"] = stamp
        summary["results"] = {m: {t: {k: r[k] for k in ("outcome", "detail", "built")} for t, r in res.items()}
                              for m, res in results.items()}
        (results_dir / "torch_suite.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
