"""torch's private optimizer / scheduler / AMP names that ``checkpoint/torch_compat.py`` relies on,
checked against the installed torch (an upgrade that moves one fails here, by name)."""

import torch

from resumable_data.checkpoint import torch_compat


def _sgd():
    p = torch.nn.Parameter(torch.ones(3))
    return p, torch.optim.SGD([p], lr=0.1, momentum=0.9)


def test_the_optimizer_private_names_exist():
    p, opt = _sgd()
    for name in torch_compat.STEP_HOOKS:
        assert isinstance(vars(opt).get(name), dict), f"torch.optim.Optimizer.{name} is gone"
    torch.optim.lr_scheduler.StepLR(opt, 1)
    p.grad = torch.ones(3)
    opt.step()
    assert vars(opt).get(torch_compat.OPT_CALLED) is True, "the LR scheduler no longer sets Optimizer._opt_called"


def test_unobserved_step_hides_the_hooks_and_restores_the_flag():
    p, opt = _sgd()
    seen = []
    opt.register_step_pre_hook(lambda *a: seen.append("pre"))
    opt.register_step_post_hook(lambda *a: seen.append("post"))
    torch.optim.lr_scheduler.StepLR(opt, 1)
    p.grad = torch.ones(3)
    assert torch_compat.OPT_CALLED not in vars(opt)
    with torch_compat.unobserved_step(opt):
        opt.step()
    assert seen == [] and torch_compat.OPT_CALLED not in vars(opt)
    opt.step()
    assert seen == ["pre", "post"] and vars(opt)[torch_compat.OPT_CALLED] is True
    with torch_compat.unobserved_step(opt):
        opt.__dict__.pop(torch_compat.OPT_CALLED)
    assert vars(opt)[torch_compat.OPT_CALLED] is True


def test_the_scaler_private_names_exist():
    p, opt = _sgd()
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    assert torch_compat.scaler_device(scaler) == "cpu", "GradScaler._device is gone"
    assert torch_compat.found_inf(scaler, opt) is None  # no step yet
    for bad, skipped in ((1.0, False), (float("inf"), True)):
        opt.zero_grad()
        scaler.scale((p * bad).sum()).backward()
        scaler.step(opt)
        states = getattr(scaler, "_per_optimizer_states", None)
        assert isinstance(states, dict) and "found_inf_per_device" in states[id(opt)], \
            "GradScaler._per_optimizer_states[id(opt)]['found_inf_per_device'] is gone"
        assert torch_compat.found_inf(scaler, opt) is skipped
        scaler.update()


def test_every_private_scheduler_state_key_is_known_progress():
    _, opt = _sgd()
    for sched in (torch.optim.lr_scheduler.StepLR(opt, 2), torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0),
                  torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10)):
        private = {k for k in sched.state_dict() if k.startswith("_")}
        assert private <= torch_compat.SCHEDULER_PROGRESS_KEYS, (
            f"{type(sched).__name__}.state_dict() has new private keys {sorted(private - torch_compat.SCHEDULER_PROGRESS_KEYS)}: "
            "add them to SCHEDULER_PROGRESS_KEYS if they are progress")
