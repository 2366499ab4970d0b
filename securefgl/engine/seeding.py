"""The random streams of one seed, split by party.

:func:`securefgl.engine.runner.start_seed` spawns every stream of a seed from one ``SeedSequence`` (here); a
deployment draws the same streams where they are used: each client its own generator and its own batch generator (the ``isolated=True`` layout,
a batch of one), the server its initialisation generator and its client-sampling generator. So a deployed run
and an in-process run with the same seed start from the same state (``tests/deploy`` checks it).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["client_generators", "sampling_rng", "seed_streams", "server_generator", "torch_generator"]


def seed_streams(seed: int) -> list[np.random.SeedSequence]:
    """The four streams of a seed: clients, server initialisation, client sampling, client workspaces."""
    return np.random.SeedSequence([seed, 0x5EC]).spawn(4)


def torch_generator(ss: np.random.SeedSequence, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
    return g


def client_generators(
    seed: int, client: int, num_clients: int, device: torch.device
) -> tuple[torch.Generator, torch.Generator]:
    """Client ``client``'s own generator and its batch (workspace) generator."""
    s_clients, _, _, s_work = seed_streams(seed)
    return (
        torch_generator(s_clients.spawn(num_clients)[client], device),
        torch_generator(s_work.spawn(num_clients)[client], device),
    )


def server_generator(seed: int) -> torch.Generator:
    """The generator of ``algorithm.init_server`` (CPU): public, derived from the run seed alone, so any party
    (a client replaying the server step, :mod:`securefgl.engine.broadcast_check`) rebuilds the initial state."""
    return torch_generator(seed_streams(seed)[1], torch.device("cpu"))


def sampling_rng(seed: int) -> np.random.Generator:
    """The server's client-sampling generator (also draws nothing else in a deployment)."""
    return np.random.default_rng(seed_streams(seed)[2])
