r"""Optimisers over stacked per-client parameters: K independent optimisers in one set of tensor ops.

A stacked leaf ``W`` of shape ``(K, ...)`` holds K clients' copies of one parameter. Adam and SGD act
element-wise, so one update over the stack equals K separate updates, provided every client keeps its own
step count (Adam's bias correction) when clients join rounds at different times. :class:`StackedOptimizer`
does exactly that, with the update rules of :class:`torch.optim.Adam` and :class:`torch.optim.SGD`
(L2 ``weight_decay`` added to the gradient, no dampening, no Nesterov):

.. math::
    g \leftarrow \nabla + \lambda W,\quad m \leftarrow \beta_1 m + (1-\beta_1) g,\quad
    v \leftarrow \beta_2 v + (1-\beta_2) g^2,\quad
    W \leftarrow W - \frac{\eta}{1-\beta_1^{t_k}}\,\frac{m}{\sqrt{v}/\sqrt{1-\beta_2^{t_k}} + \epsilon}

with :math:`t_k` client ``k``'s own step count.

A leaf may also hold per-node rows (FedSpray's structure proxies): ``segments`` then says which rows
belong to which client, and each client's rows are stepped with that client's step count.

The state of every client can be kept between rounds (``persistent`` optimiser state: each client's
optimiser lives on across the rounds it takes part in, as in common FGL code bases) in an
:class:`OptimizerStore`, indexed by client id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["OptimizerStore", "StackedOptimizer"]

_BETAS = (0.9, 0.999)
_EPS = 1e-8


@dataclass
class OptimizerStore:
    """Per-client optimiser state kept between rounds, as stacked rows over all clients seen so far.

    Args:
        rows: Client id -> row index in the stacked state tensors.
        buffers: Buffer name (``"<param>.exp_avg"``, ...) -> ``(R, ...)`` tensor.
        steps: ``(R,)`` per-client step counts.
    """

    rows: dict[int, int] = field(default_factory=dict)
    buffers: dict[str, Tensor] = field(default_factory=dict)
    steps: Tensor | None = None

    def gather(
        self, ids: Sequence[int], like: Mapping[str, Tensor], names: Sequence[str]
    ) -> tuple[dict[str, Tensor], Tensor]:
        """The state of clients ``ids`` (zeros and step 0 for a client never seen), stacked in that order.

        When ``ids`` are exactly the stored rows in order (every client in every round), the stored tensors
        themselves are returned and updated in place: no copy.
        """
        k = len(ids)
        if (
            self.steps is not None
            and len(self.rows) == k
            and all(self.rows.get(i) == r for r, i in enumerate(ids))
            and all(n in self.buffers for n in names)
        ):
            return {n: self.buffers[n] for n in names}, self.steps
        device = next(iter(like.values())).device
        known = [self.rows.get(i, -1) for i in ids]
        idx = torch.tensor([max(r, 0) for r in known], device=device, dtype=torch.long)
        fresh = torch.tensor([r < 0 for r in known], device=device)
        out: dict[str, Tensor] = {}
        for n in names:
            param = n.rsplit(".", 1)[0]
            shape = (k, *like[param].shape[1:])
            if n in self.buffers:
                buf = self.buffers[n].index_select(0, idx)
                buf[fresh] = 0
            else:
                buf = torch.zeros(shape, dtype=like[param].dtype, device=device)
            out[n] = buf
        steps = (
            self.steps.index_select(0, idx.to(self.steps.device)).to(device)
            if self.steps is not None
            else None
        )
        if steps is None:
            steps = torch.zeros(k, dtype=torch.float64, device=device)
        else:
            steps = steps.clone()
            steps[fresh] = 0
        return out, steps

    def scatter(self, ids: Sequence[int], buffers: Mapping[str, Tensor], steps: Tensor) -> None:
        """Store the state of clients ``ids`` (rows of ``buffers`` and ``steps`` in that order)."""
        for i in ids:
            if i not in self.rows:
                self.rows[i] = len(self.rows)
        total = len(self.rows)
        idx = torch.tensor([self.rows[i] for i in ids], device=steps.device, dtype=torch.long)
        for n, v in buffers.items():
            cur = self.buffers.get(n)
            if cur is v:  # updated in place (see gather)
                continue
            if cur is None or cur.shape[0] < total:
                grown = torch.zeros((total, *v.shape[1:]), dtype=v.dtype, device=v.device)
                if cur is not None:
                    grown[: cur.shape[0]] = cur
                cur = grown
            cur.index_copy_(0, idx, v.detach())
            self.buffers[n] = cur
        if steps is self.steps:
            return
        if self.steps is None or self.steps.shape[0] < total:
            grown = torch.zeros(total, dtype=torch.float64, device=steps.device)
            if self.steps is not None:
                grown[: self.steps.shape[0]] = self.steps
            self.steps = grown
        self.steps.index_copy_(0, idx, steps)


class StackedOptimizer:
    """Adam or SGD over stacked ``(K, ...)`` leaves, one independent optimiser per client.

    The one optimiser of the training stack: FedAvg-style batched training, FedSpray's three optimisers
    and a client trained alone (a batch of one) all step through it.

    Args:
        leaves: Name -> stacked leaf tensor (``requires_grad``).
        name: ``"adam"`` or ``"sgd"``.
        lr: Learning rate.
        weight_decay: L2 penalty added to the gradient.
        momentum: SGD momentum (0: plain SGD).
        state: Initial buffers (``"<param>.exp_avg"``, ``"<param>.exp_avg_sq"`` or ``"<param>.momentum"``)
            and per-row step counts, as returned by :meth:`OptimizerStore.gather`; ``None`` starts fresh.
        segments: Leaf name -> ``(first, end)`` rows of each client, for leaves whose first axis is not the
            client (per-node parameters); other leaves have one row per client.
    """

    def __init__(
        self,
        leaves: Mapping[str, Tensor],
        name: str,
        lr: float,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        state: tuple[dict[str, Tensor], Tensor] | None = None,
        segments: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    ) -> None:
        if name not in ("adam", "sgd"):
            raise ValueError(f"unknown optimizer {name!r}; valid: 'adam', 'sgd'")
        self.leaves = dict(leaves)
        self.name, self.lr, self.weight_decay, self.momentum = name, lr, weight_decay, momentum
        self.segments = {n: list(v) for n, v in (segments or {}).items()}
        unknown = sorted(set(self.segments) - set(self.leaves))
        if unknown:
            raise ValueError(f"segments name unknown leaves {unknown}; leaves: {sorted(self.leaves)}")
        first_name = next(iter(self.leaves))
        first = self.leaves[first_name]
        k = len(self.segments[first_name]) if first_name in self.segments else first.shape[0]
        if state is None:
            names = self.buffer_names()
            self.buffers = {
                n: torch.zeros_like(self.leaves[n.rsplit(".", 1)[0]], memory_format=torch.contiguous_format)
                for n in names
            }
            self.steps = torch.zeros(k, dtype=torch.float64, device=first.device)
        else:  # used in place: the caller hands over (or shares) these tensors
            self.buffers = dict(state[0])
            self.steps = state[1]

    def buffer_names(self) -> list[str]:
        """Names of the state buffers this optimiser keeps."""
        return self.names_for(self.leaves, self.name, self.momentum)

    @staticmethod
    def names_for(leaves: Mapping[str, Tensor], name: str, momentum: float = 0.0) -> list[str]:
        """Names of the state buffers of optimiser ``name`` over ``leaves``."""
        if name == "adam":
            return [f"{p}.{b}" for p in leaves for b in ("exp_avg", "exp_avg_sq")]
        if momentum > 0:
            return [f"{p}.momentum" for p in leaves]
        return []

    def zero_grad(self) -> None:
        for p in self.leaves.values():
            p.grad = None

    @torch.no_grad()
    def reset(self) -> None:
        """Forget the moments and the step counts, as a freshly built optimiser."""
        self.steps.zero_()
        for buf in self.buffers.values():
            buf.zero_()

    def _rows(self, name: str, tensor: Tensor) -> list[Tensor]:
        """One view of ``tensor`` (a leaf, its gradient or a buffer) per client."""
        if name in self.segments:
            return [tensor[s:e] for s, e in self.segments[name]]
        return list(tensor.unbind(0))

    def _per_row(self, name: str, flags: Tensor, like: Tensor) -> Tensor:
        """Per-client ``flags`` broadcast to the rows of leaf ``name``."""
        if name in self.segments:
            lengths = torch.tensor([e - s for s, e in self.segments[name]], device=flags.device)
            flags = flags.repeat_interleave(lengths)
        return flags.view((-1,) + (1,) * (like.dim() - 1))

    @torch.no_grad()
    def step(self) -> None:
        """One update of every row."""
        self.steps += 1
        if self.name == "adam":
            self._adam()
        else:
            self._sgd()

    def _adam(self) -> None:
        b1, b2 = _BETAS
        names = [n for n, p in self.leaves.items() if p.grad is not None]
        if not names:
            return
        first = self.steps[0]
        if bool((self.steps == first).all()):
            # every row has taken the same number of steps: one fused kernel per stacked tensor
            params = [self.leaves[n] for n in names]
            step = [torch.tensor(float(first), dtype=torch.float32, device=params[0].device) for _ in names]
            rows_p, rows_g = params, [p.grad for p in params]
            rows_m = [self.buffers[f"{n}.exp_avg"] for n in names]
            rows_v = [self.buffers[f"{n}.exp_avg_sq"] for n in names]
        else:
            # clients at different step counts (sampled at different times): one view per client
            rows_p, rows_g, rows_m, rows_v, step = [], [], [], [], []
            per_row = [torch.tensor(float(t), dtype=torch.float32) for t in self.steps.tolist()]
            for n in names:
                p = self.leaves[n]
                rows_p += self._rows(n, p)
                rows_g += self._rows(n, p.grad)
                rows_m += self._rows(n, self.buffers[f"{n}.exp_avg"])
                rows_v += self._rows(n, self.buffers[f"{n}.exp_avg_sq"])
                step += [t.to(p.device) for t in per_row]
        torch._fused_adam_(
            rows_p,
            rows_g,
            rows_m,
            rows_v,
            [],
            step,
            amsgrad=False,
            lr=self.lr,
            beta1=b1,
            beta2=b2,
            weight_decay=self.weight_decay,
            eps=_EPS,
            maximize=False,
        )

    def _sgd(self) -> None:
        for n, p in self.leaves.items():
            if p.grad is None:
                continue
            g = p.grad
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            if self.momentum > 0:
                buf = self.buffers[f"{n}.momentum"]
                fresh = self._per_row(n, self.steps == 1, p)
                buf.mul_(self.momentum).add_(g)
                if bool(fresh.any()):
                    buf.copy_(torch.where(fresh, g, buf))
                g = buf
            p.sub_(g, alpha=self.lr)

    def state(self) -> tuple[dict[str, Tensor], Tensor]:
        """``(buffers, steps)`` for :meth:`OptimizerStore.scatter`."""
        return self.buffers, self.steps
