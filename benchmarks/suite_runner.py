"""Run a third-party unittest file against its own loader and against ``rd.DataLoader`` rebound in
its place: the machinery shared by ``benchmarks/torch_suite`` and ``benchmarks/torchdata_suite``.

A suite is a :class:`Suite`: the upstream file (git-ignored, checked by SHA-256 so a count always
describes the same file), the name its module is imported as, the modes (the first is the
baseline, the loader as it is) and a ``patch(module, mode)`` that rebinds names in the freshly
imported module. The rebinding is installed by an import hook (:func:`install`) that the suite's
``run.py`` sets up at import whenever :attr:`Suite.mode_env` is set, so processes the tests start
with ``spawn`` or ``forkserver`` (which import ``run.py`` as ``__mp_main__``) get it too.

Algorithm. Each mode runs in its own worker processes, one test id after another, each test
under a per-test limit (SIGALRM); every outcome is one JSON line (``<raw>/<mode>.jsonl``). A test
that times out or kills its process is recorded and the rest continue in a fresh process (the
whole process group goes, with whatever the tests started); a test that timed out runs once more
under a longer limit, so a slow, shared machine is told apart from a hang. A *derived* mode
(``rd-seeded``) runs only the tests that pass with the baseline and fail in the mode it derives
from; the others keep that mode's outcome. The report counts outcomes per mode and groups every
failure of a test that passes with the baseline by its cause (:attr:`Suite.causes`, first regex
match on ``"test id\\nExceptionType: message"``), marking the deliberate ones.

Cost. One process start (torch, and rd where rebound) per run of tests, plus one per test that
timed out or crashed; ``--resume`` keeps the records of an interrupted run.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
OK = frozenset({"pass", "xfail"})


@dataclass(frozen=True)
class Suite:
    """One third-party test file and how to run it (see the module docstring)."""

    name: str  #: results stem: ``<name>.md``, ``<name>.json``, ``<name>_raw/``
    script: Path  #: the suite's run.py (workers are started as ``python script --worker ...``)
    upstream: Path  #: the test file, unchanged
    module: str  #: the name it is imported as
    sha256: str
    commit: str
    repo: str  #: e.g. ``pytorch/pytorch``, for the report's heading
    title: str  #: e.g. ``PyTorch `test/test_dataloader.py```, for the report's heading
    mode_env: str  #: environment variable naming the mode in worker processes
    modes: tuple[str, ...]  #: the first is the baseline
    patch: Callable[[object, str], None]  #: rebinds names in the imported module for a mode
    causes: list[tuple[str, bool, str]] = field(default_factory=list)  #: (cause, deliberate, regex)
    derived: dict[str, str] = field(default_factory=dict)  #: mode -> the mode whose failures it reruns
    loader_attr: str = "DataLoader"  #: module attribute whose class counts constructions (``built``)
    readme: str = ""  #: where the README that says how to obtain the file is

    @property
    def baseline(self) -> str:
        return self.modes[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the rebinding (runs in the worker and, through __mp_main__, in processes it spawns) ---------
def drawn_seed(args: tuple, kwargs: dict) -> int | None:
    """``seed=`` drawn from torch's global generator for a loader built with neither ``seed=`` nor
    ``generator=`` (where torch's own unseeded shuffle draws from, at every ``iter()``)."""
    import torch

    # generator is the 12th positional argument after dataset
    if kwargs.get("generator") is None and kwargs.get("seed") is None and len(args) < 12:
        return int(torch.randint(0, 2**62, ()).item())
    return None


def fixed_seed_when_random(seed: int) -> Callable[[tuple, dict], int | None]:
    """``seed=seed`` for a loader that shuffles or samples at random (``shuffle=True``, a
    ``RandomSampler`` or ``WeightedRandomSampler`` without a generator) with neither ``seed=`` nor
    ``generator=``: what a user following rd's refusal (``fix: pass seed=1234``) writes."""

    def seed_for(args: tuple, kwargs: dict) -> int | None:
        import torch.utils.data as tud

        if kwargs.get("generator") is not None or kwargs.get("seed") is not None or len(args) >= 12:
            return None
        shuffle = kwargs.get("shuffle", args[1] if len(args) > 1 else None)
        sampler = kwargs.get("sampler", args[2] if len(args) > 2 else None)
        drawn = isinstance(sampler, (tud.RandomSampler, tud.WeightedRandomSampler)) and sampler.generator is None
        return seed if shuffle or drawn else None

    return seed_for


def rd_loader_class(seed_for: Callable[[tuple, dict], int | None] | None = None, allow_unpinned: bool = False):
    """``rd.DataLoader`` counting its constructions; ``seed_for(args, kwargs)`` (e.g.
    :func:`drawn_seed`) gives the ``seed=`` to add, or None; ``allow_unpinned`` loads states with
    ``allow_unpinned=True`` unless the caller says otherwise."""
    import resumable_data as rd

    class SuiteDataLoader(rd.DataLoader):
        """rd.DataLoader, counting constructions (and in a seeded mode adding a seed)."""

        built = 0

        def __init__(self, dataset, *args, **kwargs):
            type(self).built += 1
            seed = None if seed_for is None else seed_for(args, kwargs)
            if seed is not None:
                kwargs["seed"] = seed
            super().__init__(dataset, *args, **kwargs)

        if allow_unpinned:
            def load_state_dict(self, state, **kwargs):
                kwargs.setdefault("allow_unpinned", True)
                super().load_state_dict(state, **kwargs)

    SuiteDataLoader.__name__ = SuiteDataLoader.__qualname__ = "DataLoader"
    SuiteDataLoader.__module__ = rd.DataLoader.__module__
    return SuiteDataLoader


class AttributeView:
    """A module as the test module sees it: every attribute is the target's, except the overrides."""

    def __init__(self, target, overrides: dict):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name):
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._target, name)


def install(suite: Suite) -> None:
    """In a process whose ``suite.mode_env`` is set: make ``import suite.module`` load the upstream
    file and patch it for the mode (idempotent)."""
    import importlib.abc
    import importlib.util

    mode = os.environ.get(suite.mode_env)
    if not mode:
        return
    # torch's load_tests asserts that every TestCase is defined in the running script (here: run.py)
    os.environ["PYTORCH_DISABLE_RUNNING_SCRIPT_CHK"] = "1"
    if str(suite.upstream.parent) not in sys.path:
        sys.path.insert(0, str(suite.upstream.parent))

    class SuiteFinder(importlib.abc.MetaPathFinder):
        marker = suite.module

        def find_spec(self, name, path, target=None):
            if name != suite.module:
                return None
            spec = importlib.util.spec_from_file_location(suite.module, suite.upstream)
            inner = spec.loader

            class Loader(importlib.abc.Loader):
                def create_module(self, spec):
                    return None

                def exec_module(self, module):
                    inner.exec_module(module)
                    suite.patch(module, mode)

            spec.loader = Loader()
            return spec

    if not any(getattr(f, "marker", None) == suite.module for f in sys.meta_path):
        sys.meta_path.insert(0, SuiteFinder())


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
            self.outcome, self.detail, self.trace = "pass", "", ""

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
    test.run(r)
    return {"outcome": r.outcome, "detail": r.detail[:400], "trace": r.trace}


def worker(suite: Suite, ids: list[str], out: Path, timeout: int) -> None:
    import unittest

    module = __import__(suite.module)
    cls = getattr(module, suite.loader_attr)
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


def _ids_in(suite, prefix: str) -> list[str]:
    import unittest

    ids = []
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            ids += _ids_in(t, prefix)
        else:
            ids.append(t.id().removeprefix(prefix + "."))
    return ids


def print_ids(suite: Suite) -> None:
    import unittest

    print("\n".join(_ids_in(unittest.defaultTestLoader.loadTestsFromModule(__import__(suite.module)), suite.module)))


# -- parent ---------------------------------------------------------------------------------------
def list_tests(suite: Suite) -> list[str]:
    out = subprocess.run([sys.executable, str(suite.script), "--list"], capture_output=True, text=True,
                         env={**os.environ, suite.mode_env: suite.baseline}, check=True)
    return out.stdout.split()


def run_mode(suite: Suite, mode: str, ids: list[str], timeout: int, workdir: Path, resume: bool = False,
             retry_timeout: int = 0) -> dict[str, dict]:
    """Run ``ids`` in ``mode``; then, with ``retry_timeout``, run each test that timed out once
    more under that longer limit (a slow machine, not a hang, is then told apart)."""
    done = _run_mode(suite, mode, ids, timeout, workdir, resume)
    slow = [t for t in ids if done[t]["outcome"] == "timeout" and not done[t].get("retried")]
    if retry_timeout and slow:
        again = _run_mode(suite, mode + ".retry", slow, retry_timeout, workdir, resume)
        for t in slow:
            done[t] = {**again[t], "retried": True}
    return done


def _run_mode(suite: Suite, mode: str, ids: list[str], timeout: int, workdir: Path,
              resume: bool = False) -> dict[str, dict]:
    out = workdir / f"{mode}.jsonl"
    done: dict[str, dict] = {}
    if resume and out.exists():  # keep the records of an interrupted run
        done = {r["id"]: r for r in map(json.loads, out.read_text().splitlines()) if r["id"] in ids}
    else:
        out.unlink(missing_ok=True)
    env = {**os.environ, suite.mode_env: mode.removesuffix(".retry")}
    while len(done) < len(ids):
        todo = [t for t in ids if t not in done]
        lst = workdir / f"{mode}.todo"
        print(f"[{suite.name}] {mode}: {len(done)}/{len(ids)} done", flush=True)
        lst.write_text("\n".join(todo))
        proc = subprocess.Popen([sys.executable, str(suite.script), "--worker", str(lst), "--out", str(out),
                                 "--timeout", str(timeout)], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
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


def cause_of(causes: list[tuple[str, bool, str]], rec: dict) -> tuple[str, bool]:
    """The first cause whose regex matches ``id + "\\n" + detail``; else the detail's first line
    with numbers and addresses blanked (not deliberate)."""
    text = rec["id"] + "\n" + rec["detail"]
    for name, deliberate, rx in causes:
        if re.search(rx, text):
            return name, deliberate
    first = re.sub(r"0x[0-9a-f]+|\d+", "N", rec["detail"].splitlines()[0] if rec["detail"] else rec["outcome"])
    return first[:120], False


def report(suite: Suite, results: dict[str, dict[str, dict]], ids: list[str]) -> tuple[str, dict]:
    """The Markdown table and the JSON summary of ``results`` (mode -> test id -> record)."""
    base_mode = suite.baseline
    passing = {m: {t for t, r in res.items() if r["outcome"] in OK} for m, res in results.items()}
    lines = ["| mode | tests | pass | fail/error | skip | timeout/crash |", "|---|---:|---:|---:|---:|---:|"]
    for m, res in results.items():
        oc = [r["outcome"] for r in res.values()]
        lines.append(f"| {m} | {len(oc)} | {sum(o in OK for o in oc)} | {sum(o in ('fail', 'error', 'xpass') for o in oc)} "
                     f"| {oc.count('skip')} | {sum(o in ('timeout', 'crash') for o in oc)} |")
    summary: dict = {"commit": suite.commit, "sha256": suite.sha256, "tests": len(ids), "modes": {}}
    base = passing.get(base_mode, set())
    for m in results:
        if m == base_mode:
            continue
        lost = sorted(base - passing[m])
        groups: dict[tuple[str, bool], list[str]] = {}
        for t in lost:
            groups.setdefault(cause_of(suite.causes, results[m][t]), []).append(t)
        deliberate = sum(len(v) for (c, d), v in groups.items() if d)
        summary["modes"][m] = {
            f"pass_of_{base_mode}_passing": len(base & passing[m]), f"{base_mode}_passing": len(base),
            "deliberate": deliberate, "builds_rd_loader": len({t for t in base if results[m][t].get("built", 0)}),
            "groups": [{"cause": c, "deliberate": d, "tests": v}
                       for (c, d), v in sorted(groups.items(), key=lambda kv: (not kv[0][1], kv[0][0]))],
        }
        lines += ["", f"**{m}**: {len(base & passing[m])} of the {len(base)} tests that pass with {base_mode} pass "
                  f"({100 * len(base & passing[m]) / max(1, len(base)):.1f}%); {deliberate} fail by a deliberate "
                  f"difference, {len(lost) - deliberate} otherwise.", "", "| cause | deliberate | tests |", "|---|---|---|"]
        for g in summary["modes"][m]["groups"]:
            names: dict[str, int] = {}
            for t in g["tests"]:  # classes that share a base class share most names
                short = t.split(".")[-1]
                names[short] = names.get(short, 0) + 1
            shown = ", ".join(f"`{n}`" + (f" x{k}" if k > 1 else "") for n, k in names.items())
            lines.append(f"| {g['cause']} | {'yes' if g['deliberate'] else 'no'} | {len(g['tests'])}: {shown} |")
    return "\n".join(lines) + "\n", summary


def parse_args(suite: Suite, argv: list[str] | None = None, description: str = "") -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--modes", default=",".join(suite.modes))
    ap.add_argument("--timeout", type=int, default=60, help="seconds per test")
    ap.add_argument("--retry-timeout", type=int, default=240, help="seconds for one more try of a test that timed out")
    ap.add_argument("-k", action="append", default=[], help="only test ids containing this (repeatable)")
    ap.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--resume", action="store_true", help="keep the per-test records of an interrupted run")
    return ap.parse_args(argv)


def main(suite: Suite, argv: list[str] | None = None, description: str = "") -> None:
    """The suite's command line: ``--worker``/``--list`` inside worker processes, else a run that
    writes ``<results>/<name>.md`` / ``.json`` (only for a run of the whole file, without ``-k``)."""
    a = parse_args(suite, argv, description)
    if a.worker:
        worker(suite, Path(a.worker).read_text().split(), Path(a.out), a.timeout)
    if a.list:
        print_ids(suite)
        return
    if not suite.upstream.exists():
        sys.exit(f"missing {suite.upstream}: see {suite.readme} for how to obtain it")
    if sha256(suite.upstream) != suite.sha256:
        sys.exit(f"{suite.upstream} is not {suite.repo} {suite.upstream.name} at {suite.commit} (SHA-256 differs)")
    ids = [t for t in list_tests(suite) if not a.k or any(k in t for k in a.k)]
    results_dir = Path(a.results)
    work = results_dir / f"{suite.name}_raw"
    work.mkdir(parents=True, exist_ok=True)
    modes = a.modes.split(",")
    unknown = [m for m in modes if m not in suite.modes]
    if unknown:
        sys.exit(f"--modes {a.modes}: unknown {unknown}; expected some of {','.join(suite.modes)}")
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(modes)) as pool:  # the modes run side by side, each in its own processes
        futures = {m: pool.submit(run_mode, suite, m, ids, a.timeout, work, a.resume, a.retry_timeout)
                   for m in modes if m not in suite.derived}
        results = {m: f.result() for m, f in futures.items()}
    for m in (m for m in suite.modes if m in modes):  # a derived mode after the one it derives from
        src = suite.derived.get(m)
        if src is None:
            continue
        if suite.baseline not in results or src not in results:
            sys.exit(f"--modes {a.modes}: {m} needs {suite.baseline} and {src} in the same run")
        # only the tests that pass with the baseline and fail in src can change; the rest keep src's outcome
        todo = [t for t in ids if results[suite.baseline][t]["outcome"] in OK and results[src][t]["outcome"] not in OK]
        results[m] = {**results[src], **run_mode(suite, m, todo, a.timeout, work, a.resume, a.retry_timeout)}
    print(f"[{suite.name}] {len(ids)} tests x {len(modes)} modes in {time.monotonic() - t0:.0f}s", flush=True)
    text, summary = report(suite, results, ids)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rel = suite.script.relative_to(suite.script.parents[2]) if len(suite.script.parents) > 2 else suite.script
    head = (f"{suite.title} ({suite.repo} {suite.commit[:8]}), torch {__import__('torch').__version__}, "
            f"measured {stamp} by `python {rel}`.\n\n")
    print(head + text)
    if not a.k:
        (results_dir / f"{suite.name}.md").write_text(head + text)
        summary["measured"] = stamp
        summary["results"] = {m: {t: {k: r[k] for k in ("outcome", "detail", "built")} for t, r in res.items()}
                              for m, res in results.items()}
        (results_dir / f"{suite.name}.json").write_text(json.dumps(summary, indent=1) + "\n")
