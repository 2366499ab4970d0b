r"""GAP's privacy plan: from public settings to the noise every client applies and the run's statement.

Everything here is public (options, rounds, local epochs, the model, the number of nodes), so clients and server
compute the same plan and nothing about a client's data enters it. Node level composes three parts (encoder
DP-SGD, ``K`` aggregation hops, classifier DP-SGD) with one shared noise multiplier (the hops' multiplied by
``aggregation_noise_scale``); edge level only the
aggregation hops (features and labels are not edge data, so the encoder and classifier train without noise).
Every client is counted as if it took part in every round (an upper bound under client sampling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from securefgl.privacy.accounting import (
    Mechanism,
    PrivacyStatement,
    calibrate_noise_multiplier,
)
from securefgl.privacy.aggregation import aggregation_sensitivity

__all__ = ["GAPPlan", "head_sensitivity", "make_plan", "resolve_hops"]


def resolve_hops(options: Any, model_name: str, model_layers: int) -> int:
    """``K``: the option, or the model's layers (0 for ``mlp``: the DP-MLP baseline)."""
    if options.hops is not None:
        return int(options.hops)
    return 0 if model_name == "mlp" else int(model_layers)


def head_sensitivity(degree_bound: int, hops: int) -> int:
    """How many clip norms ``C`` one node moves a full-batch step of the head on exact aggregates by.

    Removing a node removes its own example (``C``) and changes the exact ``k``-hop aggregates of the at most
    ``D^k`` nodes ``k`` hops away, ``k = 1..K``, each of whose clipped gradients moves by at most ``2C``:
    ``1 + 2 (D + D^2 + ... + D^K)``, i.e. ``2D + 1`` for one hop.
    """
    return 1 + 2 * sum(degree_bound**k for k in range(1, hops + 1))


@dataclass(frozen=True)
class GAPPlan:
    """The public privacy plan of a GAP run.

    Args:
        hops: ``K``.
        encoder_rounds: Rounds of the encoder phase.
        classifier_rounds: Rounds of the classifier phase (0 when ``K = 0``).
        noise_multiplier: ``z`` of the DP-SGD parts (0: no noise); the hops' is ``z`` times
            ``aggregation_noise_scale`` under node-level DP.
        aggregation_noise_std: :math:`\\sigma = z \\Delta` of each hop's Gaussian noise.
        noise_shares: ``m``: the clients whose noise shares make up one DP-SGD step's noise (node level).
        gradient_noise_share_std: Each client's share :math:`z C / \\sqrt m` of a DP-SGD step's noise.
        classifier_noise_share_std: Each client's noise share in a classifier step (the head's: scaled to its
            :func:`head_sensitivity` times ``C``, ``(2D + 1) C`` for one hop; the noisy head's: ``C`` times
            ``head_noise_scale``; else the DP-SGD one).
        classifier_sample_rate: Sampling rate of a classifier step (1 for either head's full batch).
        statement: The run's :class:`~securefgl.privacy.PrivacyStatement`.
    """

    hops: int
    encoder_rounds: int
    classifier_rounds: int
    noise_multiplier: float
    aggregation_noise_std: float
    noise_shares: int
    gradient_noise_share_std: float
    statement: PrivacyStatement
    classifier_noise_share_std: float = 0.0
    classifier_sample_rate: float = 1.0

    def dp_step(self, phase: str, encoder_sample_rate: float) -> tuple[float, float]:
        """``(sampling rate, noise share std)`` of one node-level DP step of ``phase``."""
        if phase == "encoder":
            return encoder_sample_rate, self.gradient_noise_share_std
        return self.classifier_sample_rate, self.classifier_noise_share_std


def _assumptions(options: Any, delta_default: bool, noise_shares: int, hops: int) -> list[str]:
    out = []
    head = head_sensitivity(options.degree_bound, hops)
    if options.privacy == "node":
        out += [
            f"degree bound D={options.degree_bound}: every node keeps at most D sampled neighbours; neighbouring "
            "graphs differ in one node and its edges after bounding (as in GAP's analysis)",
            f"DP-SGD: one step per round; Poisson sampling of each client's training nodes at rate "
            f"q={options.sample_rate:g}, per-node gradient clipping at C={options.clip:g}; the step's noise is the "
            f"sum of the shares of m={noise_shares} clients, released only inside the secure sum (a sum with fewer "
            "shares is refused); against the server colluding with c clients the noise variance is (m - c) / m "
            "of the stated one",
            *(
                [
                    "residual classifier: the classifier DP-SGD steps also train the encoder; a node's example "
                    "reads only its own features, its label and its own rows of the noised aggregates, so one "
                    "node still moves a step's sum by at most C"
                ]
                if options.classifier == "residual"
                else []
            ),
            *(
                [
                    "noisy head: full-batch DP gradient descent of the links on the frozen encoder's logits and "
                    "the noised aggregates, released once; a node's example reads only its own logits, label and "
                    "rows of them, so one node moves a step's sum by at most C; the model and the predictions a "
                    "client computes on its graph are covered"
                ]
                if options.classifier == "noisy-head"
                else []
            ),
            *(
                [
                    "head: full-batch DP gradient descent on the exact (un-noised) aggregates; removing a node "
                    "removes its own example and changes the k-hop aggregates of at most D^k others "
                    f"(k = 1..{hops}), so a step's clipped sum moves by at most (1 + 2 sum_k D^k)C = {head}C, "
                    "the noise's scale; this covers the released model; predictions a client computes on its "
                    "own graph read its neighbours' exact votes and are not covered if published"
                ]
                if options.classifier == "head"
                else []
            ),
            "not covered: the evaluation counts (correct/total per split) released for reporting; best-round "
            "selection (train.select_best) reads them, the final model does not",
        ]
    else:
        out += [
            "edge adjacency: one undirected edge removed in both directions (aggregation sensitivity sqrt(2)); "
            "node features and labels are not protected at this level",
        ]
    out += [
        "each node belongs to one client; a client aggregates its own subgraph only (edges across clients are "
        "not used), so one node's guarantee is its client's (parallel composition)",
        "every client counted as taking part in every round (an upper bound under client sampling)",
        "floating-point Gaussian noise",
    ]
    if delta_default:
        out.append("delta = 1 / (10 N) for the N nodes of the federation")
    return out


def make_plan(
    options: Any, *, model_name: str, model_layers: int, rounds: int, num_nodes: int, clients_per_round: int
) -> GAPPlan:
    """The plan of a run (noise calibrated to ``options.epsilon`` at ``options.delta``).

    Under node-level DP every round is one federated DP-SGD step (local epochs do not apply); otherwise the
    clients train ``train.local_epochs`` epochs per round without noise, as FedAvg.
    """
    hops = resolve_hops(options, model_name, model_layers)
    enc_rounds = options.encoder_rounds if options.encoder_rounds is not None else rounds
    cls_rounds = (options.classifier_rounds or rounds) if hops > 0 else 0
    delta = options.delta if options.delta is not None else 1.0 / (10 * max(1, num_nodes))
    shares = max(1, clients_per_round)
    agg_scale = options.aggregation_noise_scale
    head = options.classifier == "head" and hops > 0
    noisy_head = options.classifier == "noisy-head" and hops > 0
    if options.privacy == "node" and head:
        parts = [
            Mechanism("encoder DP-SGD", options.sample_rate, enc_rounds),
            Mechanism(
                f"head DP-GD (full batch, sensitivity (1 + 2 sum_k D^k)C = "
                f"{head_sensitivity(options.degree_bound, hops)}C)",
                1.0,
                cls_rounds,
                agg_scale,
            ),
        ]
    elif options.privacy == "node" and noisy_head:
        parts = [
            Mechanism("encoder DP-SGD", options.sample_rate, enc_rounds),
            Mechanism("aggregation perturbation", 1.0, hops, agg_scale),
            Mechanism("head DP-GD (full batch, sensitivity C)", 1.0, cls_rounds, options.head_noise_scale),
        ]
    elif options.privacy == "node":
        parts = [
            Mechanism("encoder DP-SGD", options.sample_rate, enc_rounds),
            Mechanism("aggregation perturbation", 1.0, hops, agg_scale),
            Mechanism("classifier DP-SGD", options.sample_rate, cls_rounds),
        ]
    else:
        parts = [Mechanism("aggregation perturbation", 1.0, hops)]
    if not options.private:
        statement = PrivacyStatement(
            options.privacy,
            math.inf if hops or options.privacy == "node" else 0.0,
            delta,
            noise_multiplier=0.0,
            assumptions=("no noise and no clipping",),
        )
        return GAPPlan(hops, enc_rounds, cls_rounds, 0.0, 0.0, shares, 0.0, statement)
    z = calibrate_noise_multiplier(options.epsilon, parts, delta)
    statement = PrivacyStatement.build(
        options.privacy,
        parts,
        noise_multiplier=z,
        delta=delta,
        assumptions=_assumptions(options, options.delta is None, shares, hops),
    )
    agg_z = z * agg_scale if options.privacy == "node" else z
    std = agg_z * aggregation_sensitivity(options.privacy, options.degree_bound) if hops else 0.0
    share = z * options.clip / math.sqrt(shares) if options.privacy == "node" else 0.0
    if options.privacy == "node" and head:
        head_share = agg_z * head_sensitivity(options.degree_bound, hops) * options.clip / math.sqrt(shares)
        return GAPPlan(hops, enc_rounds, cls_rounds, z, 0.0, shares, share, statement, head_share, 1.0)
    if options.privacy == "node" and noisy_head:
        head_share = z * options.head_noise_scale * options.clip / math.sqrt(shares)
        return GAPPlan(hops, enc_rounds, cls_rounds, z, std, shares, share, statement, head_share, 1.0)
    return GAPPlan(hops, enc_rounds, cls_rounds, z, std, shares, share, statement, share, options.sample_rate)
