"""Flower's own SecAgg+ workflow on a payload of ``d`` float32 (the reference of ``benchmarks/deploy.py``).

Copied into the Flower project that ``benchmarks/deploy.py`` submits to the same SuperLink and SuperNodes as the
deployed securefgl run: every client uploads a random vector of ``d`` values through ``secaggplus_mod`` (or in
plaintext with ``secagg = false``), the server aggregates with ``SecAggPlusWorkflow`` (FedAvg, evaluation off),
and the ServerApp writes its wall time to ``out``.
"""

from __future__ import annotations

import json
import time

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow


class _Uploader(NumPyClient):
    def __init__(self, d: int) -> None:
        self.d = d

    def fit(self, parameters, config):  # type: ignore[no-untyped-def]
        return [np.random.default_rng().uniform(-1, 1, self.d).astype(np.float32)], 1, {}


def _client_fn(context: Context):  # type: ignore[no-untyped-def]
    return _Uploader(int(context.run_config["d"])).to_client()


client_app = ClientApp(client_fn=_client_fn, mods=[secaggplus_mod])
plain_client_app = ClientApp(client_fn=_client_fn)
server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    n, rounds, d = int(rc["clients"]), int(rc["rounds"]), int(rc["d"])
    strategy = FedAvg(
        fraction_fit=1.0,
        fraction_evaluate=0.0,
        min_fit_clients=n,
        min_available_clients=n,
        initial_parameters=ndarrays_to_parameters([np.zeros(d, np.float32)]),
    )
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    fit = (
        SecAggPlusWorkflow(num_shares=n, reconstruction_threshold=max(2, n // 2 + 1))
        if bool(rc["secagg"])
        else None
    )
    workflow = DefaultWorkflow(fit_workflow=fit) if fit is not None else DefaultWorkflow()
    t0 = time.perf_counter()
    workflow(grid, legacy)
    with open(str(rc["out"]), "w") as f:
        json.dump({"seconds": time.perf_counter() - t0, "rounds": rounds, "d": d, "clients": n}, f)
