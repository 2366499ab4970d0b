"""FedSpray's batched Adam: one optimizer over the stacked private parameters of a round's clients.

Client side, private to :mod:`securefgl.algorithms.fedspray` (see :mod:`securefgl.algorithms.fedspray._pack`
for the batched layout).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from securefgl.errors import ConfigError

__all__ = ["BatchedAdam"]


class BatchedAdam:
    """Adam (Kingma & Ba, 2015) over stacked per-client parameters, with a per-client step counter.

    Every parameter has the client on its first axis (or, with ``owners``, one client index per row, for
    per-node proxies). ``step(active)`` updates only the active clients' entries, each with its own bias
    correction, so stepping the batch equals stepping every active client's own ``torch.optim.Adam``
    (``amsgrad=False``; ``weight_decay`` is the L2 penalty added to the gradient, as there).

    Args:
        params: Leaf tensors with ``requires_grad``.
        lr: Learning rate.
        steps: ``(K,)`` float64 step counts so far.
        exp_avg, exp_avg_sq: Moments matching ``params`` (zeros when ``None``).
        owners: Per parameter, ``None`` (first axis = client) or a ``(rows,)`` client index per row.
        weight_decay: L2 penalty. (default: ``0.0``)
        betas: (default: ``(0.9, 0.999)``). eps: (default: ``1e-8``).
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float,
        *,
        steps: Tensor,
        exp_avg: Sequence[Tensor] | None = None,
        exp_avg_sq: Sequence[Tensor] | None = None,
        owners: Sequence[Tensor | None] | None = None,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        if not math.isfinite(lr) or lr <= 0:
            raise ConfigError(f"learning rate must be positive and finite, got {lr!r}")
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), betas, float(eps), float(weight_decay)
        self.steps = steps
        self.exp_avg = list(exp_avg) if exp_avg is not None else [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = (
            list(exp_avg_sq) if exp_avg_sq is not None else [torch.zeros_like(p) for p in self.params]
        )
        self.owners = list(owners) if owners is not None else [None] * len(self.params)
        self._torch: torch.optim.Adam | None = None

    def reset(self) -> None:
        """Forget the moments and the step counts, as a freshly built optimizer."""
        self.steps.zero_()
        for m, v in zip(self.exp_avg, self.exp_avg_sq, strict=True):
            m.zero_()
            v.zero_()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, active: Tensor | None = None) -> None:
        """One Adam step for the clients in ``active`` (``(K,)`` bool; every client when ``None``)."""
        b1, b2 = self.betas
        act = torch.ones_like(self.steps, dtype=torch.bool) if active is None else active
        self.steps += act.to(self.steps.dtype)
        if bool(act.all()) and bool((self.steps == self.steps[0]).all()):
            self._uniform_step(float(self.steps[0]))
            return
        t = self.steps.clamp(min=1)
        step_size = (self.lr / (1 - b1**t)).float()
        bc2_sqrt = (1 - b2**t).sqrt().float()
        for p, m, v, owner in zip(self.params, self.exp_avg, self.exp_avg_sq, self.owners, strict=True):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            if self.weight_decay:
                g = g + self.weight_decay * p
            shape = (-1,) + (1,) * (p.dim() - 1)
            a = (act if owner is None else act[owner]).view(shape)
            ss = (step_size if owner is None else step_size[owner]).view(shape)
            bc = (bc2_sqrt if owner is None else bc2_sqrt[owner]).view(shape)
            m.copy_(torch.where(a, m * b1 + g * (1 - b1), m))
            v.copy_(torch.where(a, v * b2 + g * g * (1 - b2), v))
            p.sub_(torch.where(a, ss * m / (v.sqrt() / bc + self.eps), torch.zeros_like(p)))

    def _uniform_step(self, t: float) -> None:
        """Every client active with the same step count: one ``torch.optim.Adam`` step (fused when possible).

        The optimizer works on this object's moment tensors in place, so the state stays here.
        """
        if self._torch is None:
            try:
                opt = torch.optim.Adam(
                    self.params,
                    lr=self.lr,
                    betas=self.betas,
                    eps=self.eps,
                    weight_decay=self.weight_decay,
                    fused=True,
                )
            except (RuntimeError, ValueError):  # pragma: no cover - fused kernel unavailable on this device
                opt = torch.optim.Adam(
                    self.params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay
                )
            for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
                opt.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": m,
                    "exp_avg_sq": v,
                }
            self._torch = opt
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            self._torch.state[p]["step"].fill_(t - 1)
        self._torch.step()

    def _uniform_step_reference(self, t: float) -> None:
        """The same step written out (kept as the reference the tests compare against)."""
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1**t)
        bc2_sqrt = math.sqrt(1 - b2**t)
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = v.sqrt().div_(bc2_sqrt).add_(self.eps)
            p.addcdiv_(m, denom, value=-step_size)
