r"""What FedLoG sums: the round's sum requests (:class:`~securefgl.algorithms.base.SumRequest`, spec §3).

Public: the client half builds its contributions to these blocks, the server half reads their sums, and the
engine asks :meth:`FedLoG.requests <securefgl.algorithms.fedlog.FedLoG.requests>` for them. Every round has
the sum ``"main"``; round 0 also has ``"psi"`` (the prompt generators, with ``prompt_mode="paper"``):

======================  ================  ===================================================================
block                   shape             per client :math:`k`
======================  ================  ===================================================================
``theta.<name>``        model parameter   :math:`a_k\,\mathrm{clip}(\theta_k)`
``theta.den``           ``(1,)``          :math:`a_k` (count)
``xh.num``              ``(C, m, F)``     :math:`\rho_{k,c}\,\pi_{k,c}(\mathrm{clip}(X^H_k[c]))`, rows
                                          released under the minimum-contributors rule (``min_holders``)
``xh.den``              ``(C,)``          :math:`\rho_{k,c}`, released row-wise likewise
``holders``             ``(C,)``          :math:`1[\rho_{k,c} > 0]` (count)
``eval.correct``        ``(4,)``          correct predictions per :data:`EVAL_NAMES` set (count)
``eval.count``          ``(4,)``          nodes per :data:`EVAL_NAMES` set (count)
``eval.nc_acc``         ``(1,)``          the local model's New-Client accuracy
``eval.nc_models``      ``(1,)``          1 when the client has a New-Client set (count)
``psi.<name>``          ``(C, *param)``   :math:`\rho_{k,c}\,\mathrm{clip}(\psi_k)` (round 0, ``"psi"``)
``psi.den``             ``(C,)``          :math:`\rho_{k,c}` (round 0, ``"psi"``)
``psi.holders``         ``(C,)``          :math:`1[\rho_{k,c} > 0]` (count; round 0, ``"psi"``)
======================  ================  ===================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from securefgl.algorithms.base import RoundState, Setting, SumRequest
from securefgl.algorithms.fedlog.model import FedLoGNet, PromptGenerator
from securefgl.protocols.encoding import BlockSpec, SumSchema

if TYPE_CHECKING:
    from securefgl.algorithms.fedlog.options import FedLoGOptions

__all__ = ["EVAL_NAMES", "max_clients", "round_requests", "theta_names", "weight_bound"]

#: The four evaluation sets counted in ``eval.correct`` / ``eval.count``, in block order.
EVAL_NAMES = ("seen_val", "seen_test", "unseen_node", "missing_class")


def theta_names(setting: Setting, options: FedLoGOptions) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the model's parameters (the ``theta.*`` blocks), in state-dict order."""
    net = FedLoGNet(
        setting.num_features,
        options.hidden,
        options.out_dim,
        0.0,
        options.classifier_mode,
    )
    return [(n, tuple(v.shape)) for n, v in net.state_dict().items()]


def weight_bound(setting: Setting, options: FedLoGOptions) -> int:
    """Public bound on a client's model weight :math:`a_k`: 1, or the count bound (``weighting="train"``)."""
    return 1 if options.weighting == "uniform" else setting.count_bound


def max_clients(setting: Setting, rs: RoundState) -> int:
    """The most clients a sum of round ``rs`` may have."""
    return max(setting.max_clients_per_round, len(rs.clients), 1)


def round_requests(setting: Setting, options: FedLoGOptions, rs: RoundState) -> list[SumRequest]:
    """The sums of round ``rs``: ``"main"`` every round, ``"psi"`` in round 0 with ``prompt_mode="paper"``."""
    c, m, f = setting.num_classes, options.num_proto, setting.num_features
    k = max_clients(setting, rs)
    mh = options.min_holders
    wb = weight_bound(setting, options)
    blocks = [
        BlockSpec(f"theta.{n}", s, bound=wb * options.param_bound) for n, s in theta_names(setting, options)
    ]
    blocks += [
        BlockSpec("theta.den", (1,), kind="count", bound=wb),
        BlockSpec("xh.num", (c, m, f), bound=options.x_bound, min_contributors=mh, counted_by="holders"),
        BlockSpec("xh.den", (c,), bound=1.0, min_contributors=mh, counted_by="holders"),
        BlockSpec("holders", (c,), kind="count", bound=1),
        BlockSpec("eval.correct", (4,), kind="count", bound=setting.count_bound),
        BlockSpec("eval.count", (4,), kind="count", bound=setting.count_bound),
        BlockSpec("eval.nc_acc", (1,), bound=1.0),
        BlockSpec("eval.nc_models", (1,), kind="count", bound=1),
    ]
    out = [SumRequest("main", SumSchema(blocks, max_clients=k))]
    if rs.round == 0 and options.prompt_mode == "paper":
        psi = PromptGenerator(f)
        pblocks = [
            BlockSpec(
                f"psi.{n}",
                (c, *v.shape),
                bound=options.psi_bound,
                min_contributors=mh,
                counted_by="psi.holders",
            )
            for n, v in psi.state_dict().items()
        ]
        pblocks += [
            BlockSpec("psi.den", (c,), bound=1.0, min_contributors=mh, counted_by="psi.holders"),
            BlockSpec("psi.holders", (c,), kind="count", bound=1),
        ]
        out.append(SumRequest("psi", SumSchema(pblocks, max_clients=k)))
    return out
