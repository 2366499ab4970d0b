"""A client's upload for one sum: taken from its step's output, checked finite, rounded onto the sum's grid.

The same steps in the simulation (:mod:`securefgl.engine.runner`) and on a deployed client
(:mod:`securefgl.deploy.client`), so both hand their protocol the same values.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from securefgl.engine.evaluation import EVAL_KEY, evaluation_contribution
from securefgl.engine.metrics import ClientMetrics
from securefgl.errors import NonFiniteError, TrainingError
from securefgl.protocols.encoding import SumSchema

__all__ = ["check_finite_upload", "contribution_for", "evaluation_upload", "grid_rng", "prepare_upload"]


def grid_rng(seed: int, global_round: int, client: int, key: str) -> np.random.Generator:
    """The client's stream for rounding its upload onto the sum's grid (``protocol.grid_upload``).

    Its own stream, so rounding consumes nothing from the training generators; a function of the seed,
    the round, the client and the request only, so every protocol sees the same rounded upload.
    """
    tag = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return np.random.default_rng(np.random.SeedSequence([seed, 0x6121D, global_round, client, tag]))


def contribution_for(out: Any, key: str, single: bool, cid: int) -> Mapping[str, Any]:
    """Client ``cid``'s contribution to sum ``key`` from its step's output (the whole output when the round
    has a ``single`` sum, else ``out[key]``).

    Raises:
        TrainingError: the client produced nothing for that sum.
    """
    if out is None or (not single and key not in out):
        got = "" if out is None or single else f"; got {sorted(out)}"
        raise TrainingError(f"client {cid} produced no contribution for sum {key!r}{got}")
    return out if single else out[key]


def check_finite_upload(cid: int, contribution: Mapping[str, Any], phase: str, rnd: int) -> None:
    """Refuse an upload with a NaN or an infinity, naming the block, the client and the round.

    Raises:
        NonFiniteError: a floating block is not finite.
    """
    for name, value in contribution.items():
        t = torch.as_tensor(value)
        if not t.is_floating_point() or not t.numel():
            continue
        # one pass, no mask: a NaN propagates to both ends, an infinity shows at one (9x isfinite().all())
        lo, hi = torch.aminmax(t.detach())
        if not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
            raise NonFiniteError(
                f"upload block {name!r} of client {cid} is not finite in round {rnd} of phase {phase!r}"
            )


def prepare_upload(
    out: Any,
    key: str,
    schema: SumSchema,
    *,
    single: bool,
    cid: int,
    seed: int,
    global_round: int,
    phase: str,
    rnd: int,
    grid: bool,
    skip_dp: bool,
) -> Mapping[str, Any]:
    """Client ``cid``'s upload to sum ``key``: :func:`contribution_for`, :func:`check_finite_upload`, then (with
    ``grid``, ``protocol.grid_upload``) :meth:`SumSchema.round_to_grid` from :func:`grid_rng`; ``skip_dp``
    leaves the DP blocks to a ``+dp`` protocol."""
    contrib = contribution_for(out, key, single, cid)
    check_finite_upload(cid, contrib, phase, rnd)
    if grid:
        contrib = schema.round_to_grid(contrib, grid_rng(seed, global_round, cid, key), skip_dp=skip_dp)
    return contrib


def evaluation_upload(
    metrics: ClientMetrics, schema: SumSchema, *, grid: bool, seed: int, global_round: int, cid: int
) -> Mapping[str, Any]:
    """Client ``cid``'s upload to an evaluation sum from its own metrics (:func:`evaluation_contribution`),
    on the evaluation schema's grid with ``grid`` (``protocol.grid_upload``)."""
    contrib = evaluation_contribution(metrics)
    if grid:
        contrib = schema.round_to_grid(contrib, grid_rng(seed, global_round, cid, EVAL_KEY))
    return contrib
