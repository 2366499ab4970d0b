"""AdaFGL (Li et al., ICDE 2024, https://arxiv.org/abs/2401.11750); see :mod:`.algorithm` for the method.

Files: ``options.py`` (:class:`AdaFGLOptions`, phase names, ablations), ``schema.py`` (what step 1
sums), ``client.py`` (the client half, :class:`AdaFGLClient`: step 1's local training and step 2),
``server.py`` (the server half, :class:`AdaFGLServer`: FedAvg's server step and the kept extractor),
``model.py`` (step 2's model of one client), ``algorithm.py`` (the registered :class:`AdaFGL`).
Private step-2 helpers of the client half: ``_local.py`` (one client end to end), ``_batched.py`` (the
training loop, over a batch of clients on the shared :mod:`securefgl.training` stack; one client is a batch
of one), ``_topology.py`` (topology correction, smoothing, HCS).
"""

from __future__ import annotations

from securefgl.algorithms.adafgl._local import (
    PreparedClient,
    StepTwoResult,
    client_homophily_report,
    prepare_client,
    train_prepared,
)
from securefgl.algorithms.adafgl._topology import adjacency, homophily_confidence_score
from securefgl.algorithms.adafgl.algorithm import AdaFGL
from securefgl.algorithms.adafgl.client import AdaFGLClient
from securefgl.algorithms.adafgl.options import (
    ABLATIONS,
    BLEND,
    STEP1,
    STEP2,
    AdaFGLOptions,
    ablation_options,
)
from securefgl.algorithms.adafgl.schema import extractor_schema
from securefgl.algorithms.adafgl.server import AdaFGLServer

__all__ = [
    "ABLATIONS",
    "BLEND",
    "STEP1",
    "STEP2",
    "AdaFGL",
    "AdaFGLClient",
    "AdaFGLOptions",
    "AdaFGLServer",
    "PreparedClient",
    "StepTwoResult",
    "ablation_options",
    "adjacency",
    "client_homophily_report",
    "extractor_schema",
    "homophily_confidence_score",
    "prepare_client",
    "train_prepared",
]
