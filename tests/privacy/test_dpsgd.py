"""Per-node clipping really bounds each node's influence on the DP-SGD sum (Opacus underneath)."""

from __future__ import annotations

import pytest
import torch

from securefgl.errors import ConfigError
from securefgl.privacy import dp_gradient_sum


def _module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _sum(
    module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float, noise: float = 0.0
) -> torch.Tensor:
    grads, _ = dp_gradient_sum(
        module,
        [x],
        y,
        sample_rate=1.0,
        clip=clip,
        noise_std=noise,
        sampling_generator=torch.Generator().manual_seed(0),
        noise_generator=torch.Generator().manual_seed(1),
    )
    return torch.cat([g.flatten() for g in grads.values()])


def test_one_outlier_node_moves_the_sum_by_at_most_the_clip_norm() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 5, generator=g)
    y = torch.randint(0, 3, (20,), generator=g)
    module = _module()
    outlier = x.clone()
    outlier[7] = 1e4  # a node with absurd features and so an enormous raw gradient
    clip = 0.5
    with_outlier = _sum(module, outlier, y, clip)
    without = _sum(module, torch.cat([x[:7], x[8:]]), torch.cat([y[:7], y[8:]]), clip)
    assert (with_outlier - without).norm() <= clip * (1 + 1e-5)
    # without clipping the outlier would dominate: its raw gradient is orders of magnitude above the clip
    loss = torch.nn.functional.cross_entropy(module(outlier[7:8]), y[7:8], reduction="sum")
    raw = torch.cat([p.flatten() for p in torch.autograd.grad(loss, list(module.parameters()))])
    assert raw.norm() > 100 * clip


def test_the_sum_is_the_clipped_per_node_gradients_and_parameters_are_untouched() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 5, generator=g)
    y = torch.randint(0, 3, (6,), generator=g)
    module = _module()
    before = [p.detach().clone() for p in module.parameters()]
    got = _sum(module, x, y, clip=0.1)
    want = torch.zeros_like(got)
    for i in range(6):
        loss = torch.nn.functional.cross_entropy(module(x[i : i + 1]), y[i : i + 1], reduction="sum")
        gi = torch.cat([p.flatten() for p in torch.autograd.grad(loss, list(module.parameters()))])
        want += gi * min(1.0, 0.1 / float(gi.norm()))
    assert torch.allclose(got, want, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
    assert all(getattr(p, "grad_sample", None) is None and p.grad is None for p in module.parameters())


def test_noise_has_the_requested_standard_deviation() -> None:
    module = torch.nn.Linear(50, 40)
    x = torch.zeros(0, 50)  # an empty batch still takes its noised step
    y = torch.zeros(0, dtype=torch.long)
    grads, _ = dp_gradient_sum(
        module,
        [x],
        y,
        sample_rate=0.5,
        clip=1.0,
        noise_std=2.0,
        sampling_generator=torch.Generator().manual_seed(0),
        noise_generator=torch.Generator().manual_seed(3),
    )
    flat = torch.cat([g.flatten() for g in grads.values()])
    assert flat.std().item() == pytest.approx(2.0, rel=0.05)


def test_bad_arguments_are_named() -> None:
    m = _module()
    x, y = torch.zeros(2, 5), torch.zeros(2, dtype=torch.long)
    kw = {"sampling_generator": torch.Generator(), "noise_generator": torch.Generator()}
    with pytest.raises(ConfigError, match="sample_rate"):
        dp_gradient_sum(m, [x], y, sample_rate=0.0, clip=1.0, noise_std=0.0, **kw)
    with pytest.raises(ConfigError, match="clip"):
        dp_gradient_sum(m, [x], y, sample_rate=1.0, clip=0.0, noise_std=0.0, **kw)
