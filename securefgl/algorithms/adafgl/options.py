"""AdaFGL's options (:class:`AdaFGLOptions`), its phase names and the ablation switches of spec §5.4."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from securefgl.errors import ConfigError

__all__ = ["ABLATIONS", "BLEND", "STEP1", "STEP2", "AdaFGLOptions", "ablation_options"]

#: Phase names of an AdaFGL run (``BLEND`` runs only with ``blend="select"``).
STEP1 = "federated"
STEP2 = "personalize"
BLEND = "blend"


#: The ablation switches of spec §5.4 (Tables VI-VII): name -> the options that turn the part off.
ABLATIONS: dict[str, dict[str, Any]] = {
    "w/o K.P.": {"knowledge_preserving": False},
    "w/o T.F.": {"feature_embedding": False},
    "w/o L.M.": {"message_passing": False},
    "w/o L.T.": {"topology_correction": False},
    "w/o HCS": {"adaptive_combination": False},
}


def ablation_options(name: str) -> dict[str, Any]:
    """The option overrides of one ablation of spec §5.4 (``"w/o K.P."``, ``"kp"``, ``"w/o HCS"``, ...)."""
    key = name.strip().lower().replace("w/o", "").replace(".", "").replace(" ", "").replace("_", "")
    for full, opts in ABLATIONS.items():
        if key == full.lower().replace("w/o", "").replace(".", "").replace(" ", ""):
            return dict(opts)
    raise ConfigError(f"unknown AdaFGL ablation {name!r}; valid choices: {', '.join(ABLATIONS)}")


def _check_range(name: str, value: float, lo: float, hi: float, *, lo_open: bool = False) -> None:
    ok = (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise ConfigError(f"adafgl option {name}={value!r} is out of range; valid: {bracket}{lo}, {hi}]")


@dataclass(frozen=True)
class AdaFGLOptions:
    """Options of AdaFGL; defaults are the spec's recommendations ([R], §4 and §7).

    Step 1 (the extractor) uses the run's model and training settings (``model``: GCN, hidden 64;
    ``train``: rounds 100, local epochs 5, Adam 1e-2 / 5e-4, fresh optimiser per round). The options here
    are step 1's FedAvg weight and step 2.

    Args:
        weighting: FedAvg weight :math:`n_i` of eq. (4): ``"nodes"`` (:math:`|V_i|`, [C1][C2], §7.6),
            ``"train"`` (train-node count) or ``"uniform"``.
        param_bound: public clip range of every extractor parameter in the upload (default: 16.0).
        alpha: :math:`\\alpha` of eq. (5) (default: 0.5).
        eq6: normalisation of eq. (6): ``"cosine"`` ([R], cosine similarity, zero diagonal) or ``"literal"``
            (:math:`P \\oslash dd^\\top - \\mathrm{diag}(P)` with degree :math:`d`).
        sim_threshold: binarise the cosine similarity at this value ([C1]: 0.999); ``None`` keeps weighted
            cosine values. Unused with ``eq6="literal"``.
        sim_topk: keep at most this many similar nodes per row (``None``: no cap below
            ``dense_max_nodes``).
        dense_max_nodes: clients above this size never materialise an ``N x N`` matrix: the similarity is
            computed in chunks and capped to ``sim_topk or large_client_topk`` per row, and message
            passing runs on the sparse support (§7.12).
        large_client_topk: the per-row cap used above ``dense_max_nodes`` when ``sim_topk`` is ``None``.
        sim_chunk_size: rows per chunk of the similarity computation.
        num_hops: :math:`K_p` of eq. (7); ``k = 0..K_p`` are concatenated (default: 3).
        hidden: hidden width of the step-2 MLPs (default: 64).
        dropout: step-2 dropout (default: 0.5).
        beta: :math:`\\beta` of eq. (11) (default: 0.2).
        lm_init: :math:`\\tilde P^{(0)}` of eq. (11): ``"similarity"`` (the binarised :math:`B`, [C1][C2]) or
            ``"corrected"`` (the full :math:`\\tilde P`, as in the paper).
        he_input: input of the message MLP: ``"smoothed_feats"`` ([C1][C2]) or ``"H_tilde"`` (paper).
        compat_c1_scaling: [C1]'s non-monotone negative branch :math:`-R/\\mu` (§7.16).
        knowledge_target: :math:`\\hat X` of eq. (8): ``"probs"`` (:math:`\\hat P`, [C1][C2]) or
            ``"logits"`` (the extractor's logits).
        knowledge_loss: ``"mse"`` (mean over nodes and classes, [C1][C2]) or ``"frobenius"`` (eq. (8)).
        compat_double_softmax: eq. (9) with :math:`\\mathrm{softmax}(\\hat P)` as [C1][C2] compute it.
        loss: ``"branches"`` (CE on each branch + knowledge, [C2]) or ``"mixture"`` (NLL of :math:`\\hat Y`).
        lp_steps: :math:`K` of eq. (15) (paper 5, code 10).
        lp_kappa: :math:`\\kappa` of eq. (15) (default: 0.5).
        lp_reinject: add :math:`Y^0` back on visible train nodes after every LP step ([C1]).
        hcs_mask_prob: fraction of train nodes hidden for HCS (default: 0.5).
        hcs_num_masks: average HCS over this many masks (default: 1).
        combine: ``"soft"`` (eq. (17), paper and [C2]) or ``"hard"`` ([C1]: one module by HCS threshold).
        hcs_hard_threshold: the threshold of ``combine="hard"`` (default: 0.9).
        epochs: step-2 epochs (default: 200).
        lr: step-2 Adam learning rate (default: 0.01).
        weight_decay: step-2 Adam weight decay (default: 5e-4).
        selection: ``"best_val"`` (keep the best-validation epoch, [C1]) or ``"last"``.
        extractor: the step-1 model step 2 starts from: ``"best_val"`` (the global model of the evaluated
            round with the best node-weighted validation accuracy, as [C1] saves and reloads it; evaluate every
            round, ``train.eval_every = 1``, to match it) or ``"last"`` (the final broadcast). Choosing the
            round needs each evaluated round's validation accuracy, a sum of two counts per client. With
            ``"last"`` the blend's weight 1 is exactly FedAvg's final model (REPRODUCTIONS.md, issue 27: on
            Actor structure non-iid at 20/40/40 the best-validation round is worse on test than the last).
        fallback: ``"none"`` (the paper: every client keeps its personalised model) or ``"extractor"``: a client
            whose own validation nodes are predicted better by the federated extractor (:math:`\\hat P`) than by
            its best personalised epoch keeps the extractor's prediction. Local only (the client's validation
            labels, nothing sent); it makes explicit the fall-back on the federated model that eqs. (9) and (17)
            intend where local topology does not help (issue 27). Measured on Squirrel, Louvain, 60/20/20, seeds
            0-2, CPU: 41.2 against 41.7 without it (FedAvg-GCN 42.7); a client's validation nodes are too few to
            choose between the two reliably. (default: ``"none"``)
        blend: ``"none"`` (the paper: each client predicts with :math:`\\hat Y` of eq. (17)) or ``"select"``: each
            client predicts with :math:`(1-\\gamma)\\hat Y + \\gamma \\hat P`, the personalised model blended
            with the federated extractor, where :math:`\\gamma` is the weight of ``blend_grid`` with the most
            validation nodes right over all clients, chosen by the server from one secure sum of per-client
            counts (a ``blend`` phase of one round). Eq. (17) gives :math:`\\hat P` the weight HCS/2, which on
            heterophilous clients (HCS near 0.2) all but drops the federated knowledge that eq. (9) keeps;
            choosing :math:`\\gamma` on the pooled validation nodes restores it where it helps (issue 27). Each
            blend is kept at its own best-validation epoch, as :math:`\\hat Y` is, so that no weight is favoured
            by the epoch choice. ``"none"`` and ``"select"`` give the same :math:`\\hat Y` (the ``personalize``
            phase's evaluation). (default: ``"none"``)
        blend_grid: the weights :math:`\\gamma \\in [0, 1]` tried by ``blend="select"``; ties go to the first
            (default: ``(0.0, 0.25, 0.5, 0.75, 1.0)``: 0 is the paper's prediction, 1 the extractor's).
        blend_alpha: with ``blend="select"``, ``None`` (default) takes the grid weight with the most pooled
            validation nodes right; a level :math:`\\alpha \\in (0, 1)` keeps the extractor (weight 1, which must
            be in the grid) unless another weight beats it in a one-sided McNemar test on the pooled validation
            nodes: weight :math:`g` qualifies when :math:`c_g - c_1 > z\\sqrt{d_g}`, with :math:`d_g` the
            validation nodes on which exactly one of the two is right and :math:`z = \\Phi^{-1}(1 - \\alpha/m)`
            for the :math:`m` other weights (Bonferroni); the qualifying weight with the most nodes right wins.
            This is the paper's intent that step 2 fall back on the federated extractor where local topology
            does not help, with "help" measured against the noise of the validation counts (issue 27: on Actor
            structure non-iid at 60/20/20 the plain maximum picks 0.5, worse than the extractor on test). The
            clients also upload :math:`d_g` per weight (``blend.val_discordant``, a count vector).
        blend_holdout: with ``blend="select"``, ``None`` (default): step 2 picks its epochs and the server its
            weight on the same validation nodes; a fraction in (0, 1): that share of each client's validation
            nodes (a fixed draw per client, like the data split) is kept out of step 2's epoch selection and only
            the held-out nodes are counted for the weight, so that no weight's count is inflated by the choice of
            its own best epoch (each client picks it on ~150 nodes, which lifts :math:`\\hat Y`'s validation
            accuracy several points above its test accuracy; the extractor's weight 1 has no epoch to pick).
        knowledge_preserving: ablation "w/o K.P." when False (drop eq. (8)).
        feature_embedding: ablation "w/o T.F." when False (drop :math:`H_f`).
        message_passing: ablation "w/o L.M." when False (drop :math:`H_m`).
        topology_correction: ablation "w/o L.T." when False (:math:`\\tilde P = A`).
        adaptive_combination: ablation "w/o HCS" when False (:math:`\\hat Y = (\\hat Y_{ho}+\\hat Y_{he})/2`).
    """

    weighting: Literal["nodes", "train", "uniform"] = "nodes"
    param_bound: float = 16.0
    alpha: float = 0.5
    eq6: Literal["cosine", "literal"] = "cosine"
    sim_threshold: float | None = 0.999
    sim_topk: int | None = None
    dense_max_nodes: int = 4096
    large_client_topk: int = 64
    sim_chunk_size: int = 1024
    num_hops: int = 3
    hidden: int = 64
    dropout: float = 0.5
    beta: float = 0.2
    lm_init: Literal["similarity", "corrected"] = "similarity"
    he_input: Literal["smoothed_feats", "H_tilde"] = "smoothed_feats"
    compat_c1_scaling: bool = False
    knowledge_target: Literal["probs", "logits"] = "probs"
    knowledge_loss: Literal["mse", "frobenius"] = "mse"
    compat_double_softmax: bool = False
    loss: Literal["branches", "mixture"] = "branches"
    lp_steps: int = 5
    lp_kappa: float = 0.5
    lp_reinject: bool = False
    hcs_mask_prob: float = 0.5
    hcs_num_masks: int = 1
    combine: Literal["soft", "hard"] = "soft"
    hcs_hard_threshold: float = 0.9
    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    selection: Literal["best_val", "last"] = "best_val"
    extractor: Literal["best_val", "last"] = "best_val"
    fallback: Literal["none", "extractor"] = "none"
    blend: Literal["none", "select"] = "none"
    blend_grid: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    blend_alpha: float | None = None
    blend_holdout: float | None = None
    knowledge_preserving: bool = True
    feature_embedding: bool = True
    message_passing: bool = True
    topology_correction: bool = True
    adaptive_combination: bool = True

    def __post_init__(self) -> None:
        _check_range("param_bound", self.param_bound, 0.0, float("inf"), lo_open=True)
        _check_range("alpha", self.alpha, 0.0, 1.0)
        _check_range("beta", self.beta, 0.0, 1.0)
        _check_range("dropout", self.dropout, 0.0, 1.0)
        if self.dropout >= 1.0:
            raise ConfigError(f"adafgl option dropout={self.dropout!r} is out of range; valid: [0, 1)")
        if self.sim_threshold is not None:
            _check_range("sim_threshold", self.sim_threshold, -1.0, 1.0)
        for name in ("sim_topk",):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"adafgl option {name}={v!r} must be a positive integer or None")
        for name in ("dense_max_nodes", "large_client_topk", "sim_chunk_size", "hidden", "hcs_num_masks"):
            if getattr(self, name) < 1:
                raise ConfigError(f"adafgl option {name}={getattr(self, name)!r} must be a positive integer")
        for name in ("num_hops", "lp_steps", "epochs"):
            if getattr(self, name) < 0:
                raise ConfigError(f"adafgl option {name}={getattr(self, name)!r} must be >= 0")
        _check_range("lp_kappa", self.lp_kappa, 0.0, 1.0)
        _check_range("hcs_mask_prob", self.hcs_mask_prob, 0.0, 1.0, lo_open=True)
        if self.hcs_mask_prob >= 1.0:
            raise ConfigError(
                f"adafgl option hcs_mask_prob={self.hcs_mask_prob!r} is out of range; valid: (0, 1)"
            )
        _check_range("hcs_hard_threshold", self.hcs_hard_threshold, 0.0, 1.0)
        if self.fallback not in ("none", "extractor"):
            raise ConfigError(
                f"adafgl option fallback={self.fallback!r} is invalid; valid: 'none', 'extractor'"
            )
        if self.blend not in ("none", "select"):
            raise ConfigError(f"adafgl option blend={self.blend!r} is invalid; valid: 'none', 'select'")
        if not self.blend_grid:
            raise ConfigError("adafgl option blend_grid is empty; give at least one weight in [0, 1]")
        for g in self.blend_grid:
            _check_range("blend_grid entry", g, 0.0, 1.0)
        if self.blend_alpha is not None:
            if not 0.0 < self.blend_alpha < 1.0:
                raise ConfigError(
                    f"adafgl option blend_alpha={self.blend_alpha!r} is out of range; valid: (0, 1)"
                )
            if 1.0 not in self.blend_grid or len(self.blend_grid) < 2:
                raise ConfigError(
                    f"adafgl option blend_alpha needs the extractor's weight 1.0 and another weight in blend_grid; "
                    f"got blend_grid={tuple(self.blend_grid)!r}"
                )
        if self.blend_holdout is not None:
            if not 0.0 < self.blend_holdout < 1.0:
                raise ConfigError(
                    f"adafgl option blend_holdout={self.blend_holdout!r} is out of range; valid: (0, 1) or None"
                )
            if self.blend != "select":
                raise ConfigError(
                    f"adafgl option blend_holdout={self.blend_holdout!r} needs blend='select' (got {self.blend!r})"
                )
        _check_range("lr", self.lr, 0.0, float("inf"), lo_open=True)
        _check_range("weight_decay", self.weight_decay, 0.0, float("inf"))

    def replace(self, **changes: Any) -> AdaFGLOptions:
        """A validated copy with some options changed."""
        return dataclasses.replace(self, **changes)
