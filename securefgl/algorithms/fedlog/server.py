r"""FedLoG's server half: the initial model, the secure averages from the released sums, the run report.

Part of :mod:`securefgl.algorithms.fedlog` (the method is documented on
:class:`~securefgl.algorithms.fedlog.FedLoG`). The server state is built from public facts and the sums only:
this module imports no client half, training, data or engine code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from securefgl.algorithms.base import Broadcast, RoundState, Setting
from securefgl.algorithms.fedlog.model import PromptGenerator, make_net
from securefgl.algorithms.fedlog.options import FedLoGOptions
from securefgl.algorithms.fedlog.schema import EVAL_NAMES
from securefgl.protocols.base import Sums

__all__ = ["FedLoGServer", "best_round"]


class FedLoGServer:
    """FedLoG's server-side steps (a mixin of :class:`~securefgl.algorithms.fedlog.FedLoG`)."""

    setting: Setting
    options: FedLoGOptions

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        net = make_net(self.setting, self.options, generator)
        return {
            "theta": {n: p.detach().clone() for n, p in net.state_dict().items()},
            "history": [],
            "classes": {},
        }

    def initial_broadcast(self, server: dict[str, Any]) -> Broadcast:
        return {f"theta.{n}": v for n, v in server["theta"].items()}

    def server_step(
        self, server: dict[str, Any], sums: Sums | Mapping[str, Sums], rs: RoundState
    ) -> Broadcast:
        main = sums["main"] if not isinstance(sums, Sums) else sums
        psi_sums = None if isinstance(sums, Sums) else sums.get("psi")
        den = float(main["theta.den"][0])
        if den > 0:
            server["theta"] = {n: (main[f"theta.{n}"].double() / den).float() for n in server["theta"]}
        out: dict[str, torch.Tensor] = {f"theta.{n}": v for n, v in server["theta"].items()}

        c_all = self.setting.num_classes
        holders = main["holders"].round().long()
        withheld = main.withheld_rows("xh.num")
        withheld = torch.zeros(c_all, dtype=torch.bool) if withheld is None else withheld.cpu().bool()
        xden = main["xh.den"]
        ok = [c for c in range(c_all) if not withheld[c] and int(holders[c]) > 0 and float(xden[c]) > 0]
        server["classes"] = {
            "absent": [c for c in range(c_all) if int(holders[c]) == 0],
            "withheld": [c for c in range(c_all) if int(holders[c]) > 0 and bool(withheld[c])],
            "synthetic": ok,
        }
        if ok:
            num = main["xh.num"][ok].double()
            syn = num / xden[ok].double().view(-1, 1, 1)
            m = syn.shape[1]
            out["syn.x"] = syn.reshape(len(ok) * m, -1).float()
            out["syn.y"] = torch.tensor(ok, dtype=torch.long).repeat_interleave(m)
        if psi_sums is not None:
            pden = psi_sums["psi.den"]
            prow = psi_sums.withheld_rows("psi.den")
            for c in range(c_all):
                if float(pden[c]) > 0 and not (prow is not None and bool(prow[c])):
                    for n in PromptGenerator(1).state_dict():
                        out[f"psi.{c}.{n}"] = (psi_sums[f"psi.{n}"][c].double() / float(pden[c])).float()

        cnt = main["eval.count"].double()
        cor = main["eval.correct"].double()
        rec: dict[str, Any] = {"round": rs.round}
        for i, name in enumerate(EVAL_NAMES):
            rec[name] = float(cor[i] / cnt[i]) if cnt[i] > 0 else None
            rec[f"{name}_n"] = int(cnt[i])
        nm = int(main["eval.nc_models"][0])
        rec["new_client"] = float(main["eval.nc_acc"][0]) / nm if nm > 0 else None
        server["history"].append(rec)
        return out

    def run_report(self, server: Any) -> dict[str, Any]:
        hist = server["history"]
        return {
            "fedlog": {
                "best": best_round(hist),
                "last": hist[-1] if hist else None,
                "classes": server["classes"],
                "history": hist,
            }
        }


def best_round(history: list[dict[str, Any]], key: str = "seen_val") -> dict[str, Any] | None:
    """The record with the best pooled Seen-Graph validation accuracy (spec §2.7); later rounds win ties.

    FedLoG selects its reported round this way, and the claim comparison
    (:func:`securefgl.experiments.claim_verdicts`) applies the same rule to the baselines so that every method
    is scored at a round chosen identically. Records whose ``key`` is ``None`` (no validation node anywhere)
    are skipped; ``None`` when no record has one.
    """
    best = None
    for rec in history:
        v = rec.get(key)
        if v is not None and (best is None or v >= best[key]):
            best = rec
    return best
