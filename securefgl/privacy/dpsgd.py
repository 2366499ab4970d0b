r"""One DP-SGD step's gradient sum on a client's nodes, with Opacus, noised as one share of a secure sum.

Federated DP-SGD with distributed noise: in every step each client

1. samples each of its training nodes independently with probability ``q`` (Poisson; the sampling the
   accountant assumes; an empty batch still contributes its noise share),
2. computes per-node gradients with Opacus's :class:`~opacus.GradSampleModule` and clips each to L2 norm ``C``
   (Opacus's :class:`~opacus.optimizers.DPOptimizer`),
3. adds its share :math:`\mathcal{N}(0, \sigma^2 / m)` of the noise and uploads the sum through the secure sum.

The server sees only :math:`\sum_k \big(\sum_{v \in B_k} \mathrm{clip}_C(g_v) + Z_k\big)`, whose noise has
variance :math:`\sigma^2 = z^2 C^2` once ``m`` shares are in it: the sampled Gaussian mechanism of one DP-SGD
step over all the federation's nodes, with the noise of one step rather than one per client. One node moves the
sum by at most ``C`` whatever its features or label. The module must be built of layers Opacus has per-sample
rules for (``torch.nn.Linear`` here) and take one row per node.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from securefgl.errors import ConfigError

__all__ = ["dp_gradient_sum"]


def dp_gradient_sum(
    module: torch.nn.Module,
    inputs: list[torch.Tensor],
    labels: torch.Tensor,
    *,
    sample_rate: float,
    clip: float,
    noise_std: float,
    sampling_generator: torch.Generator,
    noise_generator: torch.Generator | None,
) -> tuple[dict[str, torch.Tensor], float]:
    """The clipped per-node gradient sum of one Poisson batch plus Gaussian noise of std ``noise_std``.

    Args:
        module: The model; its parameters are not changed.
        inputs: Tensors of one row per training node, passed to ``module`` as separate arguments.
        labels: ``(n,)`` class labels.
        sample_rate: Poisson rate ``q`` in ``(0, 1]``.
        clip: Per-node L2 clipping norm ``C > 0``.
        noise_std: Standard deviation of the noise on every entry (this client's share; 0: none).
        sampling_generator: Randomness of the batch.
        noise_generator: Randomness of the noise.

    Returns:
        ``({parameter name: gradient sum + noise}, mean loss of the batch)``.
    """
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    if not 0.0 < sample_rate <= 1.0:
        raise ConfigError(f"DP-SGD sample_rate must be in (0, 1], got {sample_rate}")
    if not clip > 0:
        raise ConfigError(f"DP-SGD clip must be > 0, got {clip}")
    if noise_std < 0 or not math.isfinite(noise_std):
        raise ConfigError(f"DP-SGD noise_std must be a finite number >= 0, got {noise_std}")
    n = int(labels.shape[0])
    pick = (torch.rand(n, generator=sampling_generator, device=sampling_generator.device) < sample_rate).to(
        labels.device
    )
    gsm = GradSampleModule(module)
    # expected_batch_size=1 with summed losses: Opacus leaves the noised sum unscaled (no division by a
    # batch size, which would itself depend on the data).
    opt = DPOptimizer(
        torch.optim.SGD(list(gsm.parameters()), lr=0.0),
        noise_multiplier=noise_std / clip,
        max_grad_norm=clip,
        expected_batch_size=1,
        loss_reduction="sum",
        generator=noise_generator,
    )
    gsm.train()
    try:
        with warnings.catch_warnings():
            # Opacus's hooks fire on outputs when the inputs need no gradient: expected here.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            opt.zero_grad(set_to_none=True)
            out = gsm(*(x[pick] for x in inputs))
            loss = F.cross_entropy(out, labels[pick], reduction="sum")
            loss.backward()
            opt.pre_step()  # clip per node, sum, add noise (Opacus)
        grads = {name: p.grad.detach().clone() for name, p in module.named_parameters()}  # type: ignore[union-attr]
    finally:
        gsm.remove_hooks()
        for p in module.parameters():
            p.grad_sample = None  # type: ignore[attr-defined]
            p.grad = None
    return grads, float(loss.detach()) / max(1, int(pick.sum()))
