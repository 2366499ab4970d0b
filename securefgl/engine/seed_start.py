"""The start of a seed: the run's public facts (:func:`make_setting`), its clients, the server's state and first
broadcast, and the client-sampling generator (:func:`start_seed`), every random stream spawned from the seed.

The simulation (:mod:`securefgl.engine.runner`), the audit's replays and a deployment's workers start a seed
the same way, so they agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from securefgl.algorithms.base import Algorithm, Client, Setting
from securefgl.algorithms.registry import get_algorithm
from securefgl.config.run import RunConfig
from securefgl.data.cross_edges import attach_cross_edges
from securefgl.engine.seeding import seed_streams, torch_generator

__all__ = ["federation_edge_index", "make_setting", "setting_for", "start_seed"]


def federation_edge_index(fg: Any) -> torch.Tensor:
    """``(2, E)`` every edge the clients hold (their local edges and the cross-client edges), global ids."""
    parts = [c.global_id[c.edge_index] for c in fg.clients]
    cross = getattr(fg, "cross_edges", None)
    if cross is not None and cross.numel():
        parts.append(cross)
    edges = torch.cat([p.long() for p in parts], dim=1) if parts else torch.zeros(2, 0, dtype=torch.long)
    return torch.unique(torch.cat([edges, edges.flip(0)], dim=1), dim=1)


def setting_for(
    facts: Any, config: RunConfig, device: torch.device | str, public_edge_index: torch.Tensor | None = None
) -> Setting:
    """The run's :class:`Setting` from the federation's public facts (``num_features``, ``num_classes``,
    ``num_clients``, ``num_nodes``: a federated graph's, or a deployment's facts file)."""
    return Setting(
        num_features=facts.num_features,
        num_classes=facts.num_classes,
        num_clients=facts.num_clients,
        num_nodes=facts.num_nodes,
        count_bound=int(facts.num_nodes),
        model=config.model,
        train=config.train,
        device=torch.device(device),
        max_clients_per_round=facts.num_clients,
        protocol=config.protocol.spec,
        public_edge_index=public_edge_index,
    )


def make_setting(config: RunConfig, fg: Any, device: torch.device | str) -> Setting:
    """The public facts of a run (:class:`Setting`) for ``config`` on the federated graph ``fg``."""
    public_edges = None
    if get_algorithm(config.algorithm.name).server_knows_edges(config.algorithm.options):
        public_edges = federation_edge_index(fg)
    return setting_for(fg, config, device, public_edges)


def _to(value: Any, device: torch.device) -> Any:
    return value.to(device) if hasattr(value, "to") else value


def start_seed(
    algorithm: Algorithm, fg: Any, seed: int, device: torch.device, *, isolated: bool = False
) -> tuple[list[Client], Any, Any, np.random.Generator]:
    """Clients, server state, first broadcast and the client-sampling generator of one seed.

    Every random stream of a seed (per-client generators, the client batch's workspace generator, the
    server's initialisation, client sampling) is spawned here from ``seed``, so a run and its audit replay
    agree.

    Args:
        algorithm: The algorithm (its ``init_client``, ``init_server`` and ``initial_broadcast`` run here).
        fg: The federated graph.
        seed: The training seed.
        device: Where the clients' tensors live.
        isolated: ``False`` (the simulation): all clients form one client batch and share its workspace
            (batched layouts, the batch generator). ``True`` (a deployment's layout): every client is a batch
            of one, with a workspace and a batch generator of its own, so nothing on a client can reach
            another client. (default: ``False``)
    """
    s_clients, s_server, s_sampling, s_work = seed_streams(seed)
    torch_gen = torch_generator
    if isolated:
        workspaces = [{"generator": torch_gen(ss, device)} for ss in s_work.spawn(fg.num_clients)]
    else:
        workspaces = [{"generator": torch_gen(s_work, device)}] * fg.num_clients
    if algorithm.needs_cross_edges:
        fg = attach_cross_edges(fg)
    held_later = fg.client_eval or [{} for _ in fg.clients]
    clients = [
        Client(
            i,
            data.to(device),
            torch_gen(ss, device),
            eval_data={k: _to(v, device) for k, v in later.items()},
            workspace=ws,
        )
        for i, (data, ss, later, ws) in enumerate(
            zip(fg.clients, s_clients.spawn(fg.num_clients), held_later, workspaces, strict=True)
        )
    ]
    if algorithm.needs_global_graph:
        for ws in {id(w): w for w in workspaces}.values():
            ws["global_data"] = fg.global_data().to(device)
    for c in clients:
        algorithm.init_client(c)
    server = algorithm.init_server(torch_gen(s_server, torch.device("cpu")))
    return clients, server, algorithm.initial_broadcast(server), np.random.default_rng(s_sampling)
