"""The compatibility contract: every rejection, with its message, before anything is restored;
what each non-continuation label restores and how it records lineage."""

from __future__ import annotations

import copy
import itertools
import warnings

import numpy as np
import pytest
import torch

import _train as T
import resumable_data as rd
from resumable_data.checkpoint import read_checkpoint
from resumable_data.checkpoint.compat import RULES, Category
from resumable_data.plan import epoch_records


@pytest.fixture(scope="module")
def ckpt(reference):
    return reference["root"] / "save"


def _fresh(data_dir, tmp_path, **kw):
    return T.build(data_dir, tmp_path / "m.jsonl", run_id="new", seed=5, **kw)


def _refused(o, ckpt, label="faithful_continuation"):
    before = T.tensor_digest(o.model.state_dict().items())
    with pytest.raises(rd.CompatibilityError) as e:
        rd.load_checkpoint(ckpt, o.state, label=label, step=14)
    assert T.tensor_digest(o.model.state_dict().items()) == before, "nothing may change before a refusal"
    assert o.loader.cursor.delivered == 0
    return str(e.value)


def test_parameter_shape_change_is_refused_under_every_label(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path, hidden=32)
    for label in rd.RecoveryLabel:
        msg = _refused(o, ckpt, label)
        assert "model.parameters.fc1.weight" in msg and "[24, 12]" in msg and "[32, 12]" in msg
        assert "fix: build the model with the same parameter names" in msg


def test_reordered_vocabulary_is_caught_not_just_a_wrong_shape(ckpt, data_dir, tmp_path):
    vocab = [f"tok{i}" for i in range(T.VOCAB)]
    vocab[3], vocab[4] = vocab[4], vocab[3]  # same size, two ids swapped
    o = _fresh(data_dir, tmp_path, vocab={"vocab": vocab})
    for label in ("faithful_continuation", "warm_start", "data_change"):
        msg = _refused(o, ckpt, label)
        assert "feature_schema.fingerprint" in msg and "tokenizer / feature schema" in msg


def test_optimizer_settings_refused_as_continuation_allowed_as_reset(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path, lr=1e-3)
    msg = _refused(o, ckpt)
    assert "optimizer.param_groups.0.base_lr: saved 0.003 vs current 0.001" in msg
    assert "label='optimizer_reset'" in msg
    saved = read_checkpoint(ckpt, 14)
    info = rd.load_checkpoint(ckpt, o.state, label="optimizer_reset", step=14)
    assert info.report.ok and {d.severity for d in info.report.differences} == {rd.Severity.INFO}
    # parameters kept, optimizer and scheduler fresh, new run id, parent recorded, label recorded
    assert T.tensor_digest(sorted(o.model.state_dict().items())) == T.tensor_digest(sorted(saved.tree["model"].items()))
    assert all(not o.opt.state[p] for p in o.model.parameters())
    assert o.sched.last_epoch == 0 and o.scaler.get_scale() == 2.0 ** 10
    assert o.state.run_id != saved.meta.run_id
    assert o.state.parent_checkpoint_id == saved.checkpoint_id
    assert o.state.recovery_label is rd.RecoveryLabel.OPTIMIZER_RESET
    # the unfinished window's gradients are dropped, so its microbatches are delivered again
    assert o.loader.cursor.delivered == 12 and all(p.grad is None for p in o.model.parameters())
    assert o.metrics.run_id == o.state.run_id and o.metrics.label is rd.RecoveryLabel.OPTIMIZER_RESET
    # a reset is never reported as a continuation: the next checkpoint carries the label
    assert o.state.meta().recovery_label is rd.RecoveryLabel.OPTIMIZER_RESET


def test_scheduler_convention_and_schedule_code(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.state.scheduler_convention = rd.SchedulerConvention.APPLIED_UPDATE
    msg = _refused(o, ckpt)
    assert "scheduler.convention: saved 'attempted_update' vs current 'applied_update'" in msg
    o = _fresh(data_dir, tmp_path)
    o.sched.lr_lambdas[0] = lambda s: min(1.0, (s + 1) / 5)  # another warmup: a changed transition rule
    msg = _refused(o, ckpt)
    assert "scheduler.schedule: saved [" in msg and "build the scheduler as saved" in msg


def test_scaler_ema_and_callbacks_presence(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=7)
    o.state.scaler = o.scaler
    assert "scaler.settings.growth_interval: saved 3 vs current 7" in _refused(o, ckpt)
    o = _fresh(data_dir, tmp_path)
    o.state.ema = None
    msg = _refused(o, ckpt)
    assert "] ema: saved {" in msg and "vs current None (ema)" in msg and "pass (or drop) ema=" in msg


def test_dataset_change_needs_data_change_label(ckpt, tmp_path):
    other = tmp_path / "other"
    T.write_data(other)
    import pyarrow as pa
    # a new dataset version: one more record
    t = rd.ArrowShards(other).take(list(range(T.N_RECORDS)))
    t = pa.concat_tables([t, t.slice(0, 1)])
    new = tmp_path / "v2"
    rd.write_arrow_shards(t, new, num_shards=2)
    rd.pin(new)
    o = _fresh(new, tmp_path)
    msg = _refused(o, ckpt)
    assert "data.plan.dataset_version" in msg and "label='data_change'" in msg
    saved = read_checkpoint(ckpt, 14).tree["loader"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebased, not restarted: no "starts afresh" warning
        info = rd.load_checkpoint(ckpt, o.state, label="data_change", step=14)
    assert info.report.ok and o.opt.state[next(o.model.parameters())]  # optimizer continued
    assert o.state.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    # the stream continues at the same step, epoch and fraction of the new version's epoch
    # (docs/checkpoints.md), every batch as that rule predicts
    step = o.loader.cursor.delivered
    assert step == saved["cursor"]["committed"] > 0
    plan = o.loader.plan
    n_old, n_new, steps = T.N_RECORDS, T.N_RECORDS + 1, -(-T.N_RECORDS // T.BATCH)
    epoch, offset = step // steps, (step % steps) * T.BATCH
    p = epoch * n_new + offset * n_new // n_old
    for batch in itertools.islice(itertools.chain(o.loader, o.loader), 50):  # the rest of the epoch, then the next
        stop = min(p + T.BATCH, (p // n_new + 1) * n_new)
        e, off = divmod(p, n_new)
        want = epoch_records(n_new, plan.order, np.arange(off, off + stop - p), version_hash=plan.version_hash,
                                seed=7, epoch=e)
        assert batch["id"].tolist() == [r if r < n_old else 0 for r in want.tolist()]  # record 158: a copy of 0
        p = stop
        if o.loader.microstep_is_last:
            o.loader.commit(applied=True)
    assert p > (epoch + 1) * n_new  # the check ran past the rebased epoch into the next


def test_warm_start_restores_weights_only(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path, lr=1e-2)
    rd.load_checkpoint(ckpt, o.state, label="warm_start", step=14)
    saved = read_checkpoint(ckpt, 14)
    assert T.tensor_digest(sorted(o.model.state_dict().items())) == T.tensor_digest(sorted(saved.tree["model"].items()))
    assert o.loader.cursor.delivered == 0 and o.sched.last_epoch == 0
    assert all(not o.opt.state[p] for p in o.model.parameters())


def test_software_versions_patch_warns_minor_refuses(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    saved = read_checkpoint(ckpt, 14).meta.to_dict()
    cur = o.state.meta().to_dict()
    major, minor, patch = cur["software"]["torch"].split(".")[:3]
    s = copy.deepcopy(saved)
    s["software"]["torch"] = f"{major}.{minor}.{int(patch) + 1}"
    r = rd.check_compatible(s, cur, "faithful_continuation")
    assert r.ok and [d.path for d in r.warnings] == ["software.torch"]
    s["software"]["torch"] = f"{major}.{int(minor) + 1}.0"
    r = rd.check_compatible(s, cur, "faithful_continuation")
    assert not r.ok and "software.torch" in str(r) and "install the saved major.minor" in str(r)
    assert rd.check_compatible(s, cur, "warm_start").ok


def test_layout_change_only_as_elastic_reshard(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    saved = read_checkpoint(ckpt, 14).meta.to_dict()
    saved["data"]["layout"]["world_size"] = 2
    cur = o.state.meta()
    r = rd.check_compatible(saved, cur, "faithful_continuation")
    assert not r.ok and "data.layout.world_size: saved 2 vs current 1" in str(r) and "elastic_reshard" in str(r)
    assert rd.check_compatible(saved, cur, "elastic_reshard").ok


def test_unknown_schema_versions_and_labels_are_rejected(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    raw = read_checkpoint(ckpt, 14)
    meta = raw.meta.to_dict()
    meta["schema_version"] = 99
    with pytest.raises(rd.CheckpointError, match=r"schema_version.*99.*expected 1"):
        rd.check_compatible(meta, o.state.meta())
    tree = dict(raw.tree, schema_version=2)
    with pytest.raises(rd.CheckpointError, match="schema_version"):
        o.state.load_state_dict(tree)
    with pytest.raises(rd.ConfigError, match="label=.*faithful_continuation"):
        rd.check_compatible(raw.meta, o.state.meta(), "resume_please")
    assert rd.check_compatible(raw.meta, o.state.meta(), rd.RecoveryLabel.FAITHFUL_CONTINUATION).ok


def test_instrument_eta_belongs_to_the_recovery_spec():
    a = rd.instrument.QuadraticDescent(eta=0.5, x0=2)
    a.reset()
    a.step(), a.step()
    assert a.x == 0.5 and a.k == 2
    b = rd.instrument.QuadraticDescent(eta=0.25, x0=2)
    b.step(), b.step()
    assert b.x == 1.125
    a = rd.instrument.QuadraticDescent(eta=0.5, x0=2)
    a.step()
    x1 = a.state_dict()
    assert x1["x"] == 1.0
    c = rd.instrument.QuadraticDescent(eta=0.25, x0=2)
    with pytest.raises(rd.CompatibilityError) as e:
        c.load_state_dict(x1)
    assert "base_lr: saved 0.5 vs current 0.25" in str(e.value) and "optimizer_reset" in str(e.value)
    assert c.x == 2.0 and c.k == 0
    report = c.load_state_dict(x1, label="optimizer_reset")
    assert report.ok and c.x == 1.0 and c.k == 0 and c.recovery_label is rd.RecoveryLabel.OPTIMIZER_RESET
    assert c.step() == 0.75
    d = rd.instrument.QuadraticDescent(eta=0.5, x0=2)
    d.load_state_dict(x1)  # same eta: a faithful continuation reaches x2 = 0.5
    assert d.step() == 0.5 and d.k == 2
    with pytest.raises(rd.CheckpointError, match="schema_version"):
        d.load_state_dict(dict(x1, schema_version=7))


# -- one refusal per remaining category: exception type, category, saved vs current, fix -----------------
def _refusal(o, ckpt, path, saved, current, category, fix_fragment, allowed_under):
    """Refused as a continuation (nothing restored), with one line naming the path, both values,
    the category and its fix; allowed by check_compatible under ``allowed_under``."""
    msg = _refused(o, ckpt)
    assert msg.startswith("cannot resume this checkpoint: refused under label='faithful_continuation'")
    fix = RULES[Category(category)][1]
    assert f"[error] {path}: saved {saved!r} vs current {current!r} ({category}); fix: {fix}" in msg, msg
    assert fix_fragment in fix
    saved_meta = read_checkpoint(ckpt, 14).meta
    report = rd.check_compatible(saved_meta, o.state.meta(), allowed_under)
    assert report.ok and path in [d.path for d in report.differences]


def test_model_config_change(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.state.config = {"hidden": 24, "dropout": 0.5}  # same shapes, another config
    _refusal(o, ckpt, "model.config.dropout", 0.3, 0.5, "model_config", "pass the saved config", "optimizer_reset")


def test_architecture_change_with_the_same_parameters(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.model.drop = torch.nn.Identity()  # no parameter changes: only the module tree tells
    _refusal(o, ckpt, "model.modules.drop", "Dropout", "Identity", "architecture", "label='warm_start'", "warm_start")


@pytest.mark.parametrize("change, path, saved, current", [
    (dict(loader_seed=8), "data.plan.seed", 7, 8),
    (dict(shuffle_window=16), "data.plan.order.kind", "global", "window"),
    (dict(batch=8), "data.plan.global_batch", 4, 8),
    (dict(accumulation=2), "data.accumulation_steps", 4, 2),
], ids=["seed", "order", "batch_size", "accumulation"])
def test_data_stream_change(ckpt, data_dir, tmp_path, change, path, saved, current):
    o = _fresh(data_dir, tmp_path, **change)
    _refusal(o, ckpt, path, saved, current, "data_stream", "build the loader as saved", "data_change")
    assert rd.check_compatible(read_checkpoint(ckpt, 14).meta, o.state.meta(), "warm_start").ok


class _Counter:
    def __init__(self):
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, sd):
        self.n = sd["n"]


def test_callbacks_difference(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.state.callbacks = {"tokens_seen": _Counter()}  # the checkpoint was saved without callbacks
    _refusal(o, ckpt, "callbacks", [], ["tokens_seen"], "callbacks", "pass the same callbacks", "warm_start")


def test_optimizer_type_change(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.opt = torch.optim.Adam([{"params": g["params"], "weight_decay": g["weight_decay"]} for g in o.opt.param_groups],
                             lr=3e-3, betas=(0.9, 0.99))
    o.state.optimizer = o.opt
    _refusal(o, ckpt, "optimizer.type", "torch.optim.adamw.AdamW", "torch.optim.adam.Adam", "optimizer",
             "label='optimizer_reset'", "optimizer_reset")


def test_transition_rule_recovery_spec_change(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.state.recovery_spec = {"lr": "warmup 3, cosine 14"}  # the checkpoint was saved without a spec
    _refusal(o, ckpt, "recovery_spec", None, {"lr": "warmup 3, cosine 14"}, "transition_rule",
             "use the saved recovery spec", "optimizer_reset")
    # both sides with a spec: the changed rule itself is named
    saved = read_checkpoint(ckpt, 14).meta.to_dict()
    saved["recovery_spec"] = {"lr": "warmup 3, cosine 14", "eta": 0.5}
    cur = o.state.meta().to_dict()
    cur["recovery_spec"] = {"lr": "warmup 3, cosine 14", "eta": 0.25}
    r = rd.check_compatible(saved, cur)
    assert [str(d) for d in r.errors] == [
        "[error] recovery_spec.eta: saved 0.5 vs current 0.25 (transition_rule); fix: " + RULES[Category.TRANSITION][1]]
    with pytest.raises(rd.CompatibilityError, match=r"recovery_spec\.eta: saved 0\.5 vs current 0\.25"):
        r.raise_if_refused()
    assert rd.check_compatible(saved, cur, "optimizer_reset").ok


def test_parameter_dtype_change_is_a_weights_refusal(ckpt, data_dir, tmp_path):
    o = _fresh(data_dir, tmp_path)
    o.model.double()  # same names and shapes, another dtype: the saved moments and weights would be cast
    for label in rd.RecoveryLabel:
        msg = _refused(o, ckpt, label)
        assert "[error] model.parameters.fc1.weight.dtype: saved 'float32' vs current 'float64' (weights)" in msg, msg


# -- the seeding mode (contract v2): data.seed_per_sample ----------------------------------------------
def _everything(o) -> dict[str, str]:
    """A digest of every training object (test_restore.digest; the callbacks: a fresh counter)."""
    from test_restore import digest

    o.cb = _Counter()
    return digest(o)


@pytest.mark.parametrize("mode", [False, "lazy"], ids=["off", "lazy"])
def test_seeding_mode_change_refused_until_data_change(ckpt, data_dir, tmp_path, mode):
    """A checkpoint of an eager run against a current off / lazy loader: one sample_seeding difference,
    refused (nothing changed) under the labels that restore the loader, info under warm_start and a
    warning under data_change (which continues the data stream from its cursor under the new mode)."""
    o = _fresh(data_dir, tmp_path, seed_per_sample=mode)
    current = "off" if mode is False else "lazy"
    saved_meta = read_checkpoint(ckpt, 14).meta
    assert saved_meta.data["seed_per_sample"] == "eager" and o.state.meta().data["seed_per_sample"] == current
    before = _everything(o)
    with pytest.raises(rd.CompatibilityError) as e:
        rd.load_checkpoint(ckpt, o.state, step=14)
    assert _everything(o) == before, "nothing may change before a refusal"
    msg = str(e.value)
    assert msg.startswith("cannot resume this checkpoint: refused under label='faithful_continuation': 1 error(s)")
    assert (f"[error] data.seed_per_sample: saved 'eager' vs current {current!r} (sample_seeding); fix: build the "
            f"loader with seed_per_sample=rd.SampleSeeding.EAGER (the saved mode, 'eager'; the current run's is "
            f"{current!r}), or resume with label='data_change'") in msg, msg
    for label in rd.RecoveryLabel:
        r = rd.check_compatible(saved_meta, o.state.meta(), label)
        assert [d.path for d in r.differences] == ["data.seed_per_sample"]
        assert r.differences[0].category is Category.SAMPLE_SEEDING
        want = {rd.RecoveryLabel.DATA_CHANGE: rd.Severity.WARNING,  # a deliberate change, noted
                rd.RecoveryLabel.WARM_START: rd.Severity.INFO}.get(label, rd.Severity.ERROR)
        assert r.differences[0].severity is want, label
    with pytest.warns(RuntimeWarning, match="data.seed_per_sample"):
        info = rd.load_checkpoint(ckpt, o.state, label="data_change", step=14)
    assert info.report.ok and [d.path for d in info.report.warnings] == ["data.seed_per_sample"]
    saved_cursor = read_checkpoint(ckpt, 14).tree["loader"]["cursor"]
    # the stream continues from its cursor (the window's gradients are not restored: it is repeated)
    assert o.loader.cursor.delivered == saved_cursor["committed"] > 0
    assert o.loader.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    assert o.state.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    assert o.state.meta().data["seed_per_sample"] == current  # continued under the current mode


def test_same_seeding_mode_other_version_is_no_difference(ckpt, data_dir, tmp_path):
    """The fingerprint holds the mode only: the seeding version is the saved state's to decide."""
    o = _fresh(data_dir, tmp_path)
    saved = read_checkpoint(ckpt, 14).meta.to_dict()
    assert saved["data"]["seed_per_sample"] == "eager" and "sample_seeding" not in saved["data"]
    assert not rd.check_compatible(saved, o.state.meta()).differences
    from dataclasses import replace

    from resumable_data.loader.seeding.sample_seeding import SampleSeeding, SeedingRecord

    snap = o.loader.snapshot()
    v2, v3 = (replace(snap, sample_seeding=SeedingRecord(SampleSeeding.EAGER, v)).fingerprint_dict() for v in (2, 3))
    assert v2 == v3 == saved["data"] and v2["seed_per_sample"] == "eager"
    lazy = replace(snap, sample_seeding=SeedingRecord(SampleSeeding.LAZY, 2)).fingerprint_dict()
    assert lazy == {**v3, "seed_per_sample": "lazy"}
    assert "seed_per_sample" not in replace(snap, sample_seeding=None).fingerprint_dict()  # schema 1-3: not recorded


def test_metadata_without_the_seeding_key_compares_clean(ckpt, data_dir, tmp_path):
    """Metadata written before contract v2 records no mode: no difference, either side, any label;
    the loader's own restore still refuses the mode its state records, and nothing changes."""
    o = _fresh(data_dir, tmp_path, seed_per_sample=False)
    raw = read_checkpoint(ckpt, 14)
    old = copy.deepcopy(raw.meta.to_dict())  # to_dict shares the sections
    del old["data"]["seed_per_sample"]
    cur = o.state.meta().to_dict()
    for label in rd.RecoveryLabel:
        assert not rd.check_compatible(old, cur, label).differences
    cur_old = copy.deepcopy(cur)
    del cur_old["data"]["seed_per_sample"]
    assert not rd.check_compatible(raw.meta, cur_old).differences
    assert not rd.check_compatible(old, cur_old).differences
    before = _everything(o)
    tree = dict(raw.tree, meta=old)
    with pytest.raises(rd.ResumeError, match=r"seed_per_sample: saved 'eager' vs current 'off'") as e:
        o.state.load_state_dict(tree)
    assert not isinstance(e.value, rd.CompatibilityError)  # the loader's refusal, not the contract's
    assert _everything(o) == before, "nothing may change before a refusal"


@pytest.mark.parametrize("bad", ["sometimes", "EAGER", True, 1, None, ["eager"], {"mode": "eager"}])
def test_forged_seeding_mode_is_a_resume_error_naming_it(ckpt, data_dir, tmp_path, bad):
    o = _fresh(data_dir, tmp_path)
    raw = read_checkpoint(ckpt, 14)
    forged = copy.deepcopy(raw.meta.to_dict())  # to_dict shares the sections
    forged["data"]["seed_per_sample"] = bad
    for saved, current, side in ((forged, o.state.meta(), "saved"), (raw.meta, forged, "current")):
        with pytest.raises(rd.ResumeError, match=rf"^{side} meta\.data\.seed_per_sample=.*expected one of "
                                                 r"\['eager', 'lazy', 'off'\].*fix: pass an unmodified") as e:
            rd.check_compatible(saved, current)
        assert type(e.value) is rd.ResumeError
    with pytest.raises(rd.ResumeError, match=r"^data\.seed_per_sample="):
        rd.LoaderState.from_fingerprint(forged["data"])
    before = _everything(o)
    with pytest.raises(rd.ResumeError, match=r"saved meta\.data\.seed_per_sample"):
        o.state.load_state_dict(dict(raw.tree, meta=forged))
    assert _everything(o) == before, "nothing may change before a refusal"


# -- every torch scheduler resumes faithfully (its progress is not configuration) --------------------
_L = torch.optim.lr_scheduler
SCHEDULERS = {
    "StepLR": lambda o: _L.StepLR(o, 2),
    "MultiStepLR": lambda o: _L.MultiStepLR(o, [2, 4]),
    "ConstantLR": lambda o: _L.ConstantLR(o),
    "LinearLR": lambda o: _L.LinearLR(o),
    "ExponentialLR": lambda o: _L.ExponentialLR(o, 0.9),
    "PolynomialLR": lambda o: _L.PolynomialLR(o),
    "CosineAnnealingLR": lambda o: _L.CosineAnnealingLR(o, 10),
    "CosineAnnealingWarmRestarts": lambda o: _L.CosineAnnealingWarmRestarts(o, 2, T_mult=2),
    "CyclicLR": lambda o: _L.CyclicLR(o, 0.01, 0.1, step_size_up=2),
    "OneCycleLR": lambda o: _L.OneCycleLR(o, 0.1, total_steps=20),
    "SequentialLR": lambda o: _L.SequentialLR(o, [_L.ConstantLR(o), _L.ExponentialLR(o, 0.9)], milestones=[2]),
    "ChainedScheduler": lambda o: _L.ChainedScheduler([_L.ConstantLR(o), _L.ExponentialLR(o, 0.9)]),
    "ReduceLROnPlateau": lambda o: _L.ReduceLROnPlateau(o, patience=0, cooldown=1),
}
OPTIMIZERS = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), "adam": lambda ps: torch.optim.Adam(ps, lr=0.1)}


def _scheduled(sched: str, opt: str):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    o = OPTIMIZERS[opt](model.parameters())
    return rd.TrainingState(model=model, optimizer=o, scheduler=SCHEDULERS[sched](o), run_id="sched")


def _steps(ts, n: int, start: int) -> list:
    lrs = []
    for i in range(start, start + n):
        ts.model(torch.full((1, 3), 1.0 + i)).pow(2).sum().backward()
        ts.optimizer.step()
        ts.optimizer.zero_grad()
        if isinstance(ts.scheduler, _L.ReduceLROnPlateau):
            ts.scheduler.step(1.0 + i % 2)  # no improvement every other step: counts, reduces, cools down
        else:
            ts.scheduler.step()
        lrs.append([(g["lr"], g.get("momentum"), g.get("betas")) for g in ts.optimizer.param_groups])
    return lrs


@pytest.mark.parametrize(
    "sched,opt", [(s, "sgd") for s in SCHEDULERS] + [("OneCycleLR", "adam"), ("CyclicLR", "adam")]
)
def test_every_torch_scheduler_resumes_faithfully_after_stepping(tmp_path, sched, opt):
    """A plateau's best metric and bad-epoch count, a warm restart's position in its cycle, and the
    momentum (SGD) or beta1 (Adam) that CyclicLR / OneCycleLR cycle are progress: compared as
    configuration, they refused every faithful resume of such a run; ChainedScheduler's save raised
    AttributeError (it has no step count of its own)."""
    a = _scheduled(sched, opt)
    _steps(a, 5, 0)
    rd.save_checkpoint(tmp_path, a, step=5)
    want = _steps(a, 4, 5)
    b = _scheduled(sched, opt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no allowed difference either
        rd.load_checkpoint(tmp_path, b)
    assert _steps(b, 4, 5) == want
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))


def test_a_changed_cycled_momentum_range_is_still_refused(tmp_path):
    """Only the cycled value is progress: the range it cycles in (base/max momentum) and beta2 are
    configuration."""
    a = _scheduled("OneCycleLR", "adam")
    _steps(a, 3, 0)
    rd.save_checkpoint(tmp_path, a, step=3)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    o = torch.optim.Adam(model.parameters(), lr=0.1, betas=(0.9, 0.99))  # beta2 changed
    b = rd.TrainingState(model=model, optimizer=o, scheduler=_L.OneCycleLR(o, 0.1, total_steps=20), run_id="s")
    with pytest.raises(rd.CompatibilityError, match="betas"):
        rd.load_checkpoint(tmp_path, b)
    o = torch.optim.Adam(model.parameters(), lr=0.1)
    c = rd.TrainingState(model=model, optimizer=o, scheduler=_L.OneCycleLR(o, 0.1, total_steps=20, base_momentum=0.8),
                         run_id="s")
    with pytest.raises(rd.CompatibilityError, match="base_momentum"):
        rd.load_checkpoint(tmp_path, c)


def test_a_partial_tail_resumed_on_several_ranks_names_fixes_that_work(data_dir, tmp_path):
    def state(**kw):
        return rd.TrainingState(loader=rd.DataLoader(rd.ArrowShards(data_dir), shuffle=True, seed=0, **kw))

    saved = state(batch_size=4)  # one rank, no drop_last: tail='partial'
    it = iter(saved.loader)
    for _ in range(3):
        next(it)
    rd.save_checkpoint(tmp_path / "ck", saved, step=3)
    with pytest.raises(rd.CompatibilityError) as e:  # elastic_reshard, as the layout line says
        rd.resume_or_start(tmp_path / "ck", state(batch_size=2, sharding=rd.Sharding(2, 0)), label="elastic_reshard")
    msg = str(e.value)
    assert "[error] data.plan.tail: saved 'partial' vs current 'wrap' (data_stream); fix:" in msg, msg
    assert "resume this state on world_size 1" in msg and "label='data_change'/'warm_start'" in msg
    assert rd.resume_or_start(tmp_path / "ck", state(batch_size=4)) == 3  # the first fix, followed
    with pytest.warns(RuntimeWarning):  # the second: the data stream restarts, said in a warning
        rd.resume_or_start(tmp_path / "ck", state(batch_size=2, sharding=rd.Sharding(2, 0)), label="data_change")
