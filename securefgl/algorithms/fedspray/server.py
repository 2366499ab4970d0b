r"""FedSpray's server half: the public initial state, Eqs. 14-15 from the released sums, the run report.

Part of :mod:`securefgl.algorithms.fedspray` (the method is documented on
:class:`~securefgl.algorithms.fedspray.FedSpray`). The server state is built from public facts and the sums
only: this module imports no client half, training, data or engine code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from securefgl.algorithms.base import Broadcast, RoundState, Setting
from securefgl.algorithms.fedspray.encoder import ENCODER_KEYS, init_encoder, reference_encoder
from securefgl.algorithms.fedspray.options import FedSprayOptions, Hyper
from securefgl.algorithms.fedspray.schema import PROXY_KEY
from securefgl.errors import TrainingError
from securefgl.protocols.base import Sums

__all__ = ["FedSprayServer", "ServerReport", "server_update"]

log = logging.getLogger(__name__)


@dataclass
class ServerReport:
    """What a server step did, from public information and the sums only."""

    total_weight: float
    absent_classes: list[int]
    withheld_classes: list[int]
    updated_classes: list[int]
    encoder_kept: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_weight": self.total_weight,
            "absent_classes": self.absent_classes,
            "withheld_classes": self.withheld_classes,
            "updated_classes": self.updated_classes,
            "encoder_kept": self.encoder_kept,
        }


def server_update(
    sums: Mapping[str, Tensor], enc: Mapping[str, Tensor], proxies: Tensor, hp: Hyper
) -> tuple[dict[str, Tensor], Tensor, ServerReport]:
    r"""FedSpray's server step (Eqs. 14-15) computed from the released sums only.

    .. math::

        \omega_r = \omega_{\mathrm{ref}} + \frac{\sum_k N^{(k)}(\omega^{(k)} - \omega_{\mathrm{ref}})}{\sum_k N^{(k)}},
        \qquad
        S_{r,j} = S_{r-1,j} + \frac{\sum_k a^{(k)}_j (s^{(k)}_j - S_{r-1,j})}{\sum_k a^{(k)}_j},

    which equal :math:`\sum_k \frac{N^{(k)}}{N}\omega^{(k)}` and :math:`\sum_k \frac{a^{(k)}_j}{a_j}
    s^{(k)}_j`. A class no contributing client holds (:math:`\sum_k c_{k,j} = 0`), or whose row the
    release rule withheld (too few holders), keeps :math:`S_{r-1,j}`. With no labelled node anywhere
    (:math:`\sum_k N^{(k)} = 0`) the encoder is kept.

    Args:
        sums: The released sums (``Sums``); rows withheld by a row-wise rule are NaN and listed by
            ``sums.withheld_rows``.
        enc: The previous global encoder. proxies: ``(C, D)`` the previous global proxies.
        hp: Hyperparameters (``upload``, ``projector_init``).
    """
    total = float(sums["enc.weight"].double().sum())
    ref = reference_encoder(enc, hp.projector_init)
    if total > 0:
        new_enc = {}
        for k in ENCODER_KEYS:
            avg = sums[f"enc.{k}"].double() / total
            base = ref[k].double() if hp.upload == "delta" else 0.0
            new_enc[k] = (base + avg).to(enc[k].dtype)
    else:
        new_enc = {k: enc[k].clone() for k in ENCODER_KEYS}
    holders = sums["proxy.clients"].double()
    weight = sums["proxy.weight"].double()
    withheld_rows = getattr(sums, "withheld_rows", lambda name: None)("proxy.sum")
    withheld = torch.zeros_like(holders, dtype=torch.bool) if withheld_rows is None else withheld_rows.bool()
    absent = holders <= 0
    ok = ~absent & ~withheld & torch.isfinite(weight) & (weight > 0)
    new_proxies = proxies.clone()
    if bool(ok.any()):
        num = sums["proxy.sum"].double()[ok]
        avg = num / weight[ok][:, None]
        base = proxies.double()[ok] if hp.upload == "delta" else 0.0
        new_proxies[ok] = (base + avg).to(proxies.dtype)
    report = ServerReport(
        total_weight=total,
        absent_classes=absent.nonzero().flatten().tolist(),
        withheld_classes=(withheld & ~absent).nonzero().flatten().tolist(),
        updated_classes=ok.nonzero().flatten().tolist(),
        encoder_kept=total <= 0,
    )
    return new_enc, new_proxies, report


class FedSprayServer:
    """FedSpray's server-side steps (a mixin of :class:`~securefgl.algorithms.fedspray.FedSpray`)."""

    setting: Setting
    options: FedSprayOptions
    hyper: Hyper

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        """Public initial state: a random encoder and :math:`S_0[j] = 0.01\\, j\\, \\mathbf 1` (the code's)."""
        s, d = self.setting, self.options.proxy_dim
        enc = init_encoder(s.num_features, d, s.num_classes, generator=generator)
        proxies = (
            0.01 * torch.arange(s.num_classes, dtype=torch.float32)[:, None].expand(s.num_classes, d).clone()
        )
        return {"enc": enc, PROXY_KEY: proxies, "reports": []}

    def initial_broadcast(self, server: dict[str, Any]) -> Broadcast:
        return _broadcast(server, self.setting.device)

    def server_step(
        self, server: dict[str, Any], sums: Sums | Mapping[str, Sums], rs: RoundState
    ) -> Broadcast:
        """Eqs. 14-15 from the released sums only (see :func:`server_update`)."""
        if not isinstance(sums, Sums):
            raise TrainingError(
                f"fedspray's server step takes the released Sums only, got {type(sums).__name__}"
            )
        enc, proxies, report = server_update(sums, server["enc"], server[PROXY_KEY], self.hyper)
        server["enc"], server[PROXY_KEY] = enc, proxies
        entry = {"round": rs.global_round, **report.as_dict()}
        server["reports"].append(entry)
        if report.absent_classes:
            log.warning(
                "fedspray round %d: no contributing client holds class(es) %s; their proxies keep the previous value",
                rs.global_round,
                report.absent_classes,
            )
        if report.withheld_classes:
            log.warning(
                "fedspray round %d: class proxy row(s) %s withheld (fewer than %d holders); previous values kept",
                rs.global_round,
                report.withheld_classes,
                self.options.proxy_min_clients,
            )
        if report.encoder_kept:
            log.warning(
                "fedspray round %d: no labelled node among the contributors; encoder kept", rs.global_round
            )
        return _broadcast(server, self.setting.device)

    def run_report(self, server: dict[str, Any]) -> dict[str, Any]:
        """Per-class counts of rounds in which the proxy was absent / withheld (from the sums only)."""
        absent: dict[int, int] = {}
        withheld: dict[int, int] = {}
        for r in server["reports"]:
            for j in r["absent_classes"]:
                absent[j] = absent.get(j, 0) + 1
            for j in r["withheld_classes"]:
                withheld[j] = withheld.get(j, 0) + 1
        return {
            "rounds": len(server["reports"]),
            "absent_class_rounds": {str(k): v for k, v in sorted(absent.items())},
            "withheld_class_rounds": {str(k): v for k, v in sorted(withheld.items())},
            "encoder_kept_rounds": sum(1 for r in server["reports"] if r["encoder_kept"]),
        }


def _broadcast(server: Mapping[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    out = {f"enc.{k}": server["enc"][k].to(device) for k in ENCODER_KEYS}
    out[PROXY_KEY] = server[PROXY_KEY].to(device)
    return out
