"""Tests of AdaFGL (the package securefgl.algorithms.adafgl, its model and its private helpers).

Module tests use tiny graphs whose expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import math

import pytest
import torch

from securefgl.algorithms.adafgl import ABLATIONS, AdaFGLOptions, ablation_options
from securefgl.algorithms.adafgl._batched import BatchClient, train_local_batched
from securefgl.algorithms.adafgl._local import client_homophily_report, local_personalization
from securefgl.algorithms.adafgl._topology import (
    _strict_argmax_correct,
    adjacency,
    correct_topology,
    homophily_confidence_score,
    label_propagation,
    prediction_similarity,
    smoothed_features,
    sym_normalize,
)
from securefgl.algorithms.adafgl.model import (
    AdaFGLLocalModel,
    LearnableMessagePassing,
    LocalStepOptions,
    PReLUMLP,
    SmoothedFeatures,
    _scale_signed,
    combine_predictions,
)
from securefgl.errors import ConfigError, NonFiniteError


@pytest.fixture(autouse=True)
def _one_thread():
    """These graphs are tiny: intra-op threads only add synchronisation cost on a shared, busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _undirected(pairs: list[tuple[int, int]]) -> torch.Tensor:
    if not pairs:
        return torch.zeros(2, 0, dtype=torch.long)
    e = torch.tensor(pairs, dtype=torch.long).T
    return torch.cat([e, e.flip(0)], dim=1)


# Path 0-1-2-3 plus isolated node 4.
PATH = _undirected([(0, 1), (1, 2), (2, 3)])
# One-hot predictions for classes a, a, b, b and a 50/50 node.
PROBS = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.5, 0.5]])


# ---------------------------------------------------------------- adjacency / operators -------------


def test_adjacency_symmetrises_and_drops_loops_and_duplicates():
    ei = torch.tensor([[0, 0, 1, 2, 2], [1, 1, 1, 0, 2]])  # 0->1 twice, loop 1-1, 2->0, loop 2-2
    a = adjacency(ei, 3).to_dense()
    assert torch.equal(a, torch.tensor([[0.0, 1, 1], [1, 0, 0], [1, 0, 0]]))


def test_adjacency_rejects_out_of_range_ids():
    with pytest.raises(ConfigError, match="outside"):
        adjacency(torch.tensor([[0], [5]]), 3)


def test_sym_normalize_by_hand():
    # Path 0-1-2 with self-loops: degrees 2, 3, 2 -> entries 1/2, 1/sqrt(6), 1/3.
    op = sym_normalize(adjacency(_undirected([(0, 1), (1, 2)]), 3)).to_dense()
    s6 = 1 / math.sqrt(6)
    expected = torch.tensor([[0.5, s6, 0.0], [s6, 1 / 3, s6], [0.0, s6, 0.5]])
    assert torch.allclose(op, expected, atol=1e-6)


def test_sym_normalize_isolated_and_nonpositive_rows_are_finite():
    a = adjacency(torch.zeros(2, 0, dtype=torch.long), 3)
    assert torch.equal(sym_normalize(a).to_dense(), torch.eye(3))
    # A row whose weights cancel the self-loop (degree 0) gets a zero scale, not Inf.
    m = torch.sparse_coo_tensor(torch.tensor([[0], [0]]), torch.tensor([-1.0]), (2, 2), check_invariants=True)
    out = sym_normalize(m).to_dense()
    assert torch.isfinite(out).all() and out[0, 0] == 0 and out[1, 1] == 1


# ---------------------------------------------------------------- similarity / topology correction --


def test_prediction_similarity_threshold_binarises_same_confident_class():
    # cos(one-hot a, one-hot a) = 1 > 0.999; cos(one-hot, [.5, .5]) = 0.707 < 0.999; diagonal zero.
    b = prediction_similarity(PROBS).to_dense()
    expected = torch.zeros(5, 5)
    expected[0, 1] = expected[1, 0] = expected[2, 3] = expected[3, 2] = 1.0
    assert torch.equal(b, expected)


def test_prediction_similarity_weighted_topk_and_chunks():
    w = prediction_similarity(PROBS, threshold=None).to_dense()
    r = 1 / math.sqrt(2)
    assert torch.allclose(w[4, :4], torch.full((4,), r)) and w[0, 1] == 1.0 and w[0, 2] == 0.0
    assert torch.equal(w.diag(), torch.zeros(5)) and torch.equal(w, w.T)
    # Chunked computation gives the same matrix.
    assert torch.equal(prediction_similarity(PROBS, threshold=None, chunk_size=2).to_dense(), w)
    # top-1 per row, then symmetrised by union: row 4's best (ties at 0.707) may add one entry.
    t = prediction_similarity(PROBS, threshold=None, topk=1).to_dense()
    assert torch.equal(t, t.T)
    assert t[0, 1] == 1.0 and t[2, 3] == 1.0
    assert int((t[4] > 0).sum()) >= 1


def test_prediction_similarity_large_client_path_is_capped():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(40, 3, generator=_gen(1)) * 0.01, dim=1)  # all nearly uniform
    full = prediction_similarity(probs, threshold=0.5)
    capped = prediction_similarity(
        probs, threshold=0.5, dense_max_nodes=10, large_client_topk=3, chunk_size=7
    )
    assert full._nnz() == 40 * 39
    dense = capped.to_dense()
    assert torch.equal(dense, dense.T)
    # Each row keeps its own 3 and receives at most the entries of the rows that chose it.
    assert capped._nnz() <= 2 * 40 * 3 and capped._nnz() >= 40 * 3
    assert torch.equal(dense, prediction_similarity(probs, threshold=0.5, topk=3, chunk_size=40).to_dense())


def test_correct_topology_cosine_by_hand():
    a = adjacency(PATH, 5)
    tc = correct_topology(a, PROBS, alpha=0.25)
    p = tc.corrected.to_dense()
    # P = 0.25 A + 0.75 B: edge 0-1 is in both (1.0), 1-2 only in A (0.25), 2-3 in both (1.0).
    assert p[0, 1] == pytest.approx(1.0) and p[1, 2] == pytest.approx(0.25) and p[2, 3] == pytest.approx(1.0)
    assert p[0, 2] == 0 and p[4].abs().sum() == 0
    # Operator: row 1 has P-degree 1.25 + self-loop = 2.25; row 0: 1 + 1 = 2.
    op = tc.operator.to_dense()
    assert op[0, 1] == pytest.approx(1 / math.sqrt(2 * 2.25))
    assert op[4, 4] == pytest.approx(1.0)


def test_correct_topology_literal_eq6_by_hand():
    a = adjacency(PATH, 5)
    tc = correct_topology(a, PROBS, alpha=0.5, normalization="literal")
    p = tc.corrected.to_dense()
    # P = .5 A + .5 PP^T. Row 0: A-part .5 (to 1) + .5 (1 + 1 + 0 + 0 + .5) = 1.75; row 1: 1 + 1.25 = 2.25.
    d0, d1 = math.sqrt(1.75), math.sqrt(2.25)
    assert p[0, 1] == pytest.approx((0.5 + 0.5) / (d0 * d1), abs=1e-6)
    # Diagonal: P_00 / d0^2 - P_00 = 0.5 / 1.75 - 0.5.
    assert p[0, 0] == pytest.approx(0.5 / 1.75 - 0.5, abs=1e-6)


def test_correct_topology_disabled_is_plain_adjacency():
    a = adjacency(PATH, 5)
    tc = correct_topology(a, PROBS, enabled=False)
    assert torch.equal(tc.corrected.to_dense(), a.to_dense())
    assert torch.allclose(tc.operator.to_dense(), sym_normalize(a).to_dense())


def test_smoothed_features_by_hand():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    op = sym_normalize(adjacency(_undirected([(0, 1), (1, 2)]), 3))
    xs = smoothed_features(op, x, num_hops=2)
    assert xs.shape == (3, 6)
    assert torch.equal(xs[:, :2], x)
    s6 = 1 / math.sqrt(6)
    # hop 1, node 0: 0.5 * x0 + s6 * x1 = (0.5, s6)
    assert torch.allclose(xs[0, 2:4], torch.tensor([0.5, s6]), atol=1e-6)
    assert torch.allclose(xs[:, 4:6], op.to_dense() @ op.to_dense() @ x, atol=1e-6)
    # No edges: the operator is the identity, every hop repeats X.
    iso = sym_normalize(adjacency(torch.zeros(2, 0, dtype=torch.long), 3))
    assert torch.equal(smoothed_features(iso, x, 3), x.repeat(1, 4))


# ---------------------------------------------------------------- label propagation / HCS -----------


def test_label_propagation_one_step_by_hand_and_isolated_node_keeps_its_init():
    a = adjacency(_undirected([(0, 1)]), 3)
    op = sym_normalize(a)  # nodes 0, 1: degree 2 -> every entry 1/2; node 2 isolated -> 1
    y0 = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])
    y1 = label_propagation(op, y0, steps=1, kappa=0.5)
    # node 1: 0.5 * (.5, .5) + 0.5 * (0.5 * (1, 0) + 0.5 * (.5, .5)) = (0.625, 0.375)
    assert torch.allclose(y1[1], torch.tensor([0.625, 0.375]))
    assert torch.allclose(label_propagation(op, y0, steps=7)[2], torch.tensor([0.5, 0.5]))
    # Re-injection adds Y^0 on the chosen rows after each step.
    re = label_propagation(op, y0, steps=1, reinject=torch.tensor([True, False, False]))
    assert torch.allclose(re[0], y1[0] + y0[0])


def test_strict_argmax_counts_ties_as_incorrect():
    scores = torch.tensor([[0.5, 0.5], [0.7, 0.3], [0.2, 0.8]])
    ok = _strict_argmax_correct(scores, torch.tensor([0, 0, 0]))
    assert ok.tolist() == [False, True, False]


def _two_cliques() -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)] + [
        (i, j) for i in range(4, 8) for j in range(i + 1, 8)
    ]
    return _undirected(pairs), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])


def test_hcs_homophilous_is_one_heterophilous_is_zero():
    ei, y = _two_cliques()
    train = torch.ones(8, dtype=torch.bool)
    assert homophily_confidence_score(adjacency(ei, 8), y, train, 2, generator=_gen()) == 1.0
    # Complete bipartite between the classes: every neighbour has the other label. After one LP step a
    # hidden node holds kappa * uniform + (1 - kappa) * (its own uniform + >= 1 visible opposite one-hot
    # + uniform hidden opposites) / norm, so the opposite class strictly wins: HCS = 0 for every mask.
    bip = _undirected([(i, j) for i in range(4) for j in range(4, 8)])
    assert (
        homophily_confidence_score(adjacency(bip, 8), y, train, 2, generator=_gen(), num_masks=8, steps=1)
        == 0.0
    )


def test_hcs_degenerate_clients():
    ei, y = _two_cliques()
    a = adjacency(ei, 8)
    one = torch.zeros(8, dtype=torch.bool)
    one[0] = True
    # Fewer than 2 train nodes: the spec's default 0.5.
    assert homophily_confidence_score(a, y, one, 2, generator=_gen()) == 0.5
    assert homophily_confidence_score(a, y, torch.zeros(8, dtype=torch.bool), 2, generator=_gen()) == 0.5
    # No edges: hidden nodes stay uniform -> ties -> incorrect -> 0 (not NaN).
    empty = adjacency(torch.zeros(2, 0, dtype=torch.long), 8)
    assert homophily_confidence_score(empty, y, torch.ones(8, dtype=torch.bool), 2, generator=_gen()) == 0.0
    # A single class on a connected graph: every hidden node is recovered.
    assert (
        homophily_confidence_score(
            a, torch.zeros(8, dtype=torch.long), torch.ones(8, dtype=torch.bool), 2, generator=_gen()
        )
        == 1.0
    )
    with pytest.raises(ConfigError, match="hcs_mask_prob"):
        homophily_confidence_score(a, y, torch.ones(8, dtype=torch.bool), 2, generator=_gen(), mask_prob=1.0)


def test_hcs_is_seeded():
    ei, y = _two_cliques()
    a = adjacency(ei[:, ::3], 8)
    train = torch.ones(8, dtype=torch.bool)
    v1 = homophily_confidence_score(a, y, train, 2, generator=_gen(5), num_masks=3)
    v2 = homophily_confidence_score(a, y, train, 2, generator=_gen(5), num_masks=3)
    assert v1 == v2 and 0.0 <= v1 <= 1.0


# ---------------------------------------------------------------- learned modules -------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_smoothed_input_factored_equals_materialised(sparse):
    from securefgl.algorithms.adafgl.model import SmoothedFeatures, SmoothedInput

    g = _gen(3)
    x = torch.randn(9, 5, generator=g)
    if sparse:
        x = torch.where(x.abs() > 1.0, x, torch.zeros_like(x))
        x[4] = 0.0  # a node without any feature
    op = sym_normalize(adjacency(_undirected([(0, 1), (1, 2), (2, 3), (5, 6), (6, 7), (7, 5)]), 9))
    feats = SmoothedFeatures(x, op, 3)
    assert (feats._bags is not None) == sparse
    dense = feats.dense()
    assert torch.allclose(dense, smoothed_features(op, x, 3), atol=1e-6)
    layer = SmoothedInput(5, 3, {"a": 4, "b": 6}, generator=_gen(0))
    with torch.no_grad():
        layer.bias.copy_(torch.randn(10, generator=g))
    fact, mat = layer(feats), layer(dense)
    for name, bias in (("a", layer.bias[:4]), ("b", layer.bias[4:])):
        ref = dense @ layer.linear_weight(name).T + bias
        assert torch.allclose(fact[name], ref, atol=1e-5)
        assert torch.allclose(mat[name], ref, atol=1e-5)
    # Gradients agree too.
    fact["b"].square().sum().backward()
    g1 = layer.weight.grad.clone()
    layer.weight.grad = None
    layer(dense)["b"].square().sum().backward()
    assert torch.allclose(g1, layer.weight.grad, atol=1e-4)


def test_scale_signed_by_hand_and_degenerate():
    r = torch.tensor([0.0, 1.0, 2.0, 3.0])  # mu = 1.5, max = 3
    assert torch.allclose(_scale_signed(r, False), torch.tensor([-1.0, -1 / 3, 1 / 3, 1.0]))
    # [C1]: -R/mu below the mean (non-monotone: 0 -> 0 but 1 -> -2/3).
    assert torch.allclose(_scale_signed(r, True), torch.tensor([0.0, -2 / 3, 1 / 3, 1.0]))
    flat = _scale_signed(torch.zeros(4), False)
    assert torch.equal(flat, torch.zeros(4))


def test_message_passing_dense_equals_sparse_with_full_support():
    torch.manual_seed(0)
    n, c = 6, 3
    h = torch.randn(n, c, generator=_gen(2))
    p0 = (torch.rand(n, n, generator=_gen(3)) > 0.5).float()
    p0 = ((p0 + p0.T) > 0).float() * (1 - torch.eye(n))
    lmp = LearnableMessagePassing(beta=0.3)
    dense = lmp(h, p0)
    full = torch.ones(n, n).nonzero().T
    sparse = torch.sparse_coo_tensor(full, p0[full[0], full[1]], (n, n), check_invariants=True).coalesce()
    assert torch.allclose(dense, lmp(h, sparse), atol=1e-6)
    assert dense.shape == (n, c) and torch.isfinite(dense).all()
    # Output is ((softmax(pos) - softmax(neg)) + H_m) / 2 -> differs from H_m by at most 0.5 per entry.
    assert ((dense - h / 2).abs() <= 0.5 + 1e-6).all()


def test_message_passing_by_hand_on_two_nodes():
    # Two nodes, identical logits -> cos = 1 off-diagonal (diag zeroed); P0 = 0.
    # R = 0.8 * [[0, 1], [1, 0]]: mu = 0.4, max = 0.8 -> R_s = [[-1, 1], [1, -1]] -> diag set to 1 -> all 1.
    # PReLU(1) = 1 and PReLU(-1) = -0.25: H_pos = softmax(2 h), H_neg = softmax(-0.5 h).
    h = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    lmp = LearnableMessagePassing(beta=0.2)
    out = lmp(h, torch.zeros(2, 2))
    expect = ((torch.softmax(2 * h, 1) - torch.softmax(-0.5 * h, 1)) + h) / 2
    assert torch.allclose(out, expect, atol=1e-6)


def test_mlp_shapes_init_and_seeded_dropout():
    mlp = PReLUMLP((5, 8, 3), dropout=0.5, generator=_gen(0))
    same = PReLUMLP((5, 8, 3), dropout=0.5, generator=_gen(0))
    assert torch.equal(mlp.first.weight, same.first.weight)
    assert torch.equal(mlp.first.bias, torch.zeros(8))
    bound = math.sqrt(2.0) * math.sqrt(6.0 / (5 + 8))  # Xavier-uniform, gain relu
    assert mlp.first.weight.abs().max() <= bound
    x = torch.randn(4, 5, generator=_gen(1))
    mlp.train()
    a, b = mlp(x, _gen(7)), mlp(x, _gen(7))
    assert torch.equal(a, b) and a.shape == (4, 3)
    mlp.eval()
    assert torch.equal(mlp(x), mlp(x))
    assert "PReLUMLP([5, 8, 3]" in repr(mlp)


def test_local_model_ablation_outputs():
    x, xs = torch.randn(5, 4, generator=_gen(1)), torch.randn(5, 16, generator=_gen(2))
    p0 = torch.zeros(5, 5)
    full = AdaFGLLocalModel(4, 3, num_hops=3, hidden=8, generator=_gen())
    assert set(full(x, xs, p0)) == {"ho", "he", "f", "m"}
    no_tf = AdaFGLLocalModel(4, 3, num_hops=3, hidden=8, feature_embedding=False, generator=_gen())
    assert set(no_tf(x, xs, p0)) == {"ho", "he", "m"}
    no_lm = AdaFGLLocalModel(4, 3, num_hops=3, hidden=8, message_passing=False, generator=_gen())
    assert set(no_lm(x, xs, None)) == {"ho", "he", "f"}
    paper = AdaFGLLocalModel(4, 3, num_hops=3, hidden=8, he_input="H_tilde", generator=_gen())
    assert paper(x, xs, p0)["m"].shape == (5, 3)
    with pytest.raises(ConfigError, match="he_input"):
        AdaFGLLocalModel(4, 3, he_input="bogus")  # type: ignore[arg-type]


def test_combine_predictions_by_hand():
    zero = torch.zeros(1, 2)  # softmax -> (.5, .5)
    big = torch.tensor([[math.log(3.0), 0.0]])  # softmax -> (.75, .25)
    p_hat = torch.tensor([[1.0, 0.0]])
    logits = {"ho": big, "f": zero, "he": zero, "m": zero}
    y_ho = torch.tensor([[0.875, 0.125]])  # ((.75, .25) + (1, 0)) / 2
    y_he = torch.tensor([[0.5, 0.5]])
    assert torch.allclose(combine_predictions(logits, p_hat, 0.25), 0.25 * y_ho + 0.75 * y_he)
    assert torch.allclose(combine_predictions(logits, p_hat, 0.95, mode="hard"), y_ho)
    assert torch.allclose(combine_predictions(logits, p_hat, 0.85, mode="hard"), y_he)
    assert torch.allclose(combine_predictions(logits, p_hat, 0.0, mode="mean"), (y_ho + y_he) / 2)
    # [C1][C2] compat: softmax applied to P-hat again: softmax(1, 0) = (e/(e+1), 1/(e+1)).
    e = math.e
    dbl = combine_predictions({"ho": big}, p_hat, 1.0, compat_double_softmax=True)
    assert torch.allclose(dbl, torch.tensor([[(0.75 + e / (e + 1)) / 2, (0.25 + 1 / (e + 1)) / 2]]))
    with pytest.raises(ConfigError, match="combine mode"):
        combine_predictions(logits, p_hat, 0.5, mode="bogus")  # type: ignore[arg-type]


# ---------------------------------------------------------------- local training --------------------


def _toy_client(n: int = 40, seed: int = 0, hetero: bool = False):
    """Two classes with informative features; edges homophilous (or all heterophilous)."""
    g = _gen(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, 6, generator=g) * 0.5
    x[:, 0] += y.float() * 2 - 1
    pairs = []
    for i in range(n):
        for j in range(i + 1, n):
            same = bool(y[i] == y[j])
            if same != hetero and torch.rand(1, generator=g).item() < 0.15:
                pairs.append((i, j))
    perm = torch.randperm(n, generator=g)
    train = torch.zeros(n, dtype=torch.bool)
    val = torch.zeros(n, dtype=torch.bool)
    test = torch.zeros(n, dtype=torch.bool)
    train[perm[: n // 2]] = True
    val[perm[n // 2 : 3 * n // 4]] = True
    test[perm[3 * n // 4 :]] = True
    return x, _undirected(pairs), y, (train, val, test)


def test_local_personalization_learns_on_toy_graph():
    hcs = {}
    for hetero in (False, True):
        x, ei, y, masks = _toy_client(hetero=hetero)
        # A mediocre extractor: the right class with 70 % confidence on 80 % of the nodes.
        p_hat = torch.full((40, 2), 0.3)
        p_hat[torch.arange(40), y] = 0.7
        flip = torch.arange(40) % 5 == 0
        p_hat[flip] = p_hat[flip].flip(1)
        opts = AdaFGLOptions(epochs=40, hidden=16)
        res = local_personalization(
            x, ei, y, masks, p_hat, p_hat.log(), opts, num_classes=2, generator=_gen()
        )
        out = res.outcome
        assert out.probs.shape == (40, 2) and torch.allclose(out.probs.sum(1), torch.ones(40), atol=1e-5)
        assert out.test_total == 10 and out.test_correct >= 8
        assert res.dense_message_passing
        hcs[hetero] = res.hcs
    # HCS tracks homophily: high on the homophilous client, lower on the heterophilous one.
    assert hcs[False] > 0.9 and hcs[True] < hcs[False]


def test_local_personalization_degenerate_clients_never_nan():
    x, ei, y, masks = _toy_client(n=12)
    p_hat = torch.full((12, 2), 0.5)
    empty = torch.zeros(2, 0, dtype=torch.long)
    no_train = (torch.zeros(12, dtype=torch.bool), masks[1], masks[2])
    for opts in (AdaFGLOptions(epochs=5, hidden=8), AdaFGLOptions(epochs=5, hidden=8, loss="mixture")):
        for edges, m, labels in (
            (empty, masks, y),
            (ei, no_train, y),
            (ei, masks, torch.zeros(12, dtype=torch.long)),
        ):
            res = local_personalization(
                x, edges, labels, m, p_hat, p_hat.log(), opts, num_classes=2, generator=_gen()
            )
            assert torch.isfinite(res.outcome.probs).all() and math.isfinite(res.hcs)
    # The same degenerate clients trained together (batched path), and the literal eq. (6).
    from securefgl.algorithms.adafgl._local import prepare_client, train_prepared

    for opts in (AdaFGLOptions(epochs=4, hidden=8), AdaFGLOptions(epochs=4, hidden=8, eq6="literal")):
        cases = ((empty, masks, y), (ei, no_train, y), (ei, masks, torch.zeros(12, dtype=torch.long)))
        gens = [_gen(i) for i in range(3)]
        prepared = [
            prepare_client(x, e, lab, m, p_hat, p_hat.log(), opts, num_classes=2, generator=g)
            for (e, m, lab), g in zip(cases, gens, strict=True)
        ]
        for r in train_prepared(prepared, opts, num_classes=2, generators=gens, batched=True):
            assert torch.isfinite(r.outcome.probs).all() and math.isfinite(r.hcs)
    res = local_personalization(
        x,
        empty,
        y,
        masks,
        p_hat,
        p_hat.log(),
        AdaFGLOptions(epochs=3, hidden=8),
        num_classes=2,
        generator=_gen(),
    )
    assert res.hcs == 0.0  # no edges: everything goes to the topology-independent module


def test_local_personalization_large_client_path_matches_semantics():
    x, ei, y, masks = _toy_client(n=30)
    p_hat = torch.softmax(torch.randn(30, 2, generator=_gen(4)), dim=1)
    small = AdaFGLOptions(epochs=3, hidden=8, sim_threshold=0.9)
    large = small.replace(dense_max_nodes=10, large_client_topk=5, sim_chunk_size=7)
    res = local_personalization(x, ei, y, masks, p_hat, p_hat.log(), large, num_classes=2, generator=_gen())
    assert not res.dense_message_passing and torch.isfinite(res.outcome.probs).all()
    assert res.similarity_edges <= 2 * 30 * 5


def _batch_client(x, y, masks, p0, p_hat, hcs, *, cid=0, seed=0, hops=3):
    """A step-2 client over a path-like smoothing operator (the learned part is what these tests check)."""
    n = x.size(0)
    op = sym_normalize(adjacency(_undirected([(i, i + 1) for i in range(n - 1)]), n))
    return BatchClient(
        id=cid,
        x=x,
        feats=SmoothedFeatures(x, op, hops),
        p0=p0,
        p_hat=p_hat,
        target=p_hat,
        y=y,
        masks=masks,
        hcs=hcs,
        init_generator=_gen(seed),
    )


def test_train_local_raises_on_non_finite_loss():
    x, ei, y, masks = _toy_client(n=10)
    x[0, 0] = float("nan")
    p_hat = torch.full((10, 2), 0.5)
    client = _batch_client(x, y, masks, None, p_hat, 0.5, cid=3)
    with pytest.raises(NonFiniteError, match=r"client\(s\) \[3\] at epoch 1"):
        train_local_batched(
            [client],
            LocalStepOptions(epochs=2, hidden=4, message_passing=False),
            num_classes=2,
            generator=_gen(),
        )


def test_hard_switch_trains_one_module_only():
    # Under the hard switch the unselected module is neither trained nor used: with HCS below the
    # threshold the prediction cannot depend on P-hat (it only enters the homophilous module); above it,
    # it does.
    x, ei, y, masks = _toy_client(n=20)
    p_a = torch.full((20, 2), 0.5)
    p_b = torch.softmax(torch.randn(20, 2, generator=_gen(9)), dim=1)
    opts = LocalStepOptions(epochs=3, hidden=4, combine="hard")

    def run(hcs: float, p_hat: torch.Tensor) -> torch.Tensor:
        client = _batch_client(x, y, masks, torch.zeros(20, 20), p_hat, hcs)
        client.target = p_a
        (out,) = train_local_batched([client], opts, num_classes=2, generator=_gen())
        return out.probs

    assert torch.equal(run(0.5, p_a), run(0.5, p_b))
    assert not torch.allclose(run(0.95, p_a), run(0.95, p_b))


def _p0(n: int, seed: int, sparse: bool, full_support: bool = False) -> torch.Tensor:
    p0 = (torch.rand(n, n, generator=_gen(seed)) > 0.6).float()
    p0 = ((p0 + p0.T) > 0).float() * (1 - torch.eye(n)) * 0.5
    if not sparse:
        return p0
    idx = torch.ones(n, n).nonzero().T if full_support else p0.nonzero().T
    return torch.sparse_coo_tensor(idx, p0[idx[0], idx[1]], (n, n)).coalesce()


@pytest.mark.parametrize("sparse_p0", [False, True])
@pytest.mark.parametrize(
    "overrides",
    [{}, {"he_input": "H_tilde", "compat_c1_scaling": True}, {"feature_embedding": False}],
)
def test_batched_forward_equals_the_one_client_model(overrides, sparse_p0):
    """The stacked forward pass of a batch computes, for every client, the forward pass of that client's
    :class:`AdaFGLLocalModel` (the readable definition), with dense or sparse (large-client) message passing."""
    from securefgl.algorithms.adafgl import _batched

    opts = LocalStepOptions(hidden=8, dropout=0.0, **overrides)
    clients = []
    for i, n in enumerate((12, 9, 15)):
        x, _, y, masks = _toy_client(n=n, seed=i)
        x = torch.where(x.abs() < 0.4, torch.zeros_like(x), x)
        p_hat = torch.softmax(torch.randn(n, 2, generator=_gen(20 + i)), dim=1)
        clients.append(_batch_client(x, y, masks, _p0(n, 30 + i, sparse_p0), p_hat, 0.5, cid=i, seed=i))
    st = _batched._stack_models(clients, opts, 6, 2)
    b = _batched._Batch(clients)
    pad = _batched._pad_inputs(clients, b, opts)
    out = _batched._forward(st, b, pad.p0, False, None)
    for k, c in enumerate(clients):
        model = _batched._local_model(6, 2, opts, _gen(k)).eval()
        ref = model(c.x, c.feats, c.p0)
        assert set(ref) == set(out)
        for name, logits in ref.items():
            assert torch.allclose(out[name][k, : c.x.size(0)], logits, atol=1e-5), (name, k)


def test_large_clients_message_passing_on_full_support_equals_dense():
    """Sparse message passing over every pair (the large-client path) trains like the dense one."""
    opts = LocalStepOptions(epochs=4, hidden=8, dropout=0.0)
    results = {}
    for sparse in (False, True):
        clients = []
        for i, n in enumerate((14, 10)):
            x, _, y, masks = _toy_client(n=n, seed=i)
            p_hat = torch.softmax(torch.randn(n, 2, generator=_gen(20 + i)), dim=1)
            p0 = _p0(n, 30 + i, sparse, full_support=True)
            clients.append(_batch_client(x, y, masks, p0, p_hat, 0.6, cid=i, seed=i))
        results[sparse] = train_local_batched(clients, opts, num_classes=2, generator=None)
    for dense, sparse in zip(results[False], results[True], strict=True):
        assert torch.allclose(dense.probs, sparse.probs, atol=1e-5)
        assert dense.best_epoch == sparse.best_epoch


def test_a_batch_mixing_dense_and_sparse_message_passing_is_refused():
    x, _, y, masks = _toy_client(n=8)
    p_hat = torch.full((8, 2), 0.5)
    clients = [
        _batch_client(x, y, masks, _p0(8, 1, sparse), p_hat, 0.5, cid=i) for i, sparse in enumerate((0, 1))
    ]
    with pytest.raises(ConfigError, match=r"all dense or all sparse, got \['dense', 'sparse'\]"):
        train_local_batched(clients, LocalStepOptions(epochs=1, hidden=4), num_classes=2, generator=None)


def test_homophily_report_undefined_values_are_none():
    rep = client_homophily_report(torch.zeros(2, 0, dtype=torch.long), torch.tensor([0, 1, 1]), 3)
    assert rep["edge_homophily"] is None and rep["undefined"]["edge_homophily"] == "no edges"
    assert rep["isolated_nodes"] == 3 and rep["label_histogram"] == [1, 2, 0]
    ei, y = _two_cliques()
    rep = client_homophily_report(ei, y, 2)
    assert rep["edge_homophily"] == 1.0 and rep["node_homophily"] == 1.0 and rep["num_edges"] == 12


# ---------------------------------------------------------------- options ---------------------------


def test_options_validation_and_ablations():
    with pytest.raises(ConfigError, match="alpha"):
        AdaFGLOptions(alpha=1.5)
    with pytest.raises(ConfigError, match="hcs_mask_prob"):
        AdaFGLOptions(hcs_mask_prob=0.0)
    with pytest.raises(ConfigError, match="sim_topk"):
        AdaFGLOptions(sim_topk=0)
    assert ablation_options("w/o K.P.") == {"knowledge_preserving": False}
    assert ablation_options("hcs") == {"adaptive_combination": False}
    assert ablation_options("LT") == {"topology_correction": False}
    for name in ABLATIONS:
        AdaFGLOptions(**ablation_options(name))
    with pytest.raises(ConfigError, match="valid choices"):
        ablation_options("w/o everything")


# ---------------------------------------------------------------- wiring: step 1 / step 2 / end to end


def _fed_graph(method: str = "metis", clients: int = 3, **params):
    from securefgl.data import make_csbm, partition_graph

    data = make_csbm(
        num_nodes=240, num_classes=3, avg_degree=6.0, homophily=0.7, num_features=12, signal=1.0, seed=0
    )
    return partition_graph(data, method, clients, seed=0, split=(0.3, 0.3, 0.4), cache=False, **params)


def _run_config(protocol: str, rounds: int, options: dict | None = None):
    from securefgl.config import RunConfig, build

    return build(
        RunConfig,
        {
            "protocol": {"name": protocol},
            "algorithm": {"name": "adafgl", "options": options or {}},
            "model": {"name": "gcn", "hidden": 16, "layers": 2, "dropout": 0.5},
            "train": {"rounds": rounds, "local_epochs": 2, "lr": 0.01, "eval_every": rounds},
            "device": "cpu",
        },
    )


def _step1_params(protocol_name: str, fg, rounds: int) -> tuple[dict, list]:
    """Step 1 through the Algorithm interface and a real protocol, with fixed client generators."""
    from securefgl.algorithms.base import Client, RoundState, Setting
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.protocols.registry import get_protocol

    cfg = _run_config(protocol_name, rounds)
    setting = Setting(
        num_features=fg.num_features,
        num_classes=fg.num_classes,
        num_clients=fg.num_clients,
        num_nodes=fg.num_nodes,
        count_bound=fg.num_nodes,
        model=cfg.model,
        train=cfg.train,
        max_clients_per_round=fg.num_clients,
    )
    algo = create_algorithm("adafgl", setting, {})
    workspace = {"generator": _gen(100)}
    clients = [Client(i, d, _gen(10 + i), workspace=workspace) for i, d in enumerate(fg.clients)]
    for c in clients:
        algo.init_client(c)
    server = algo.init_server(_gen(99))
    broadcast = algo.initial_broadcast(server)
    protocol = get_protocol(protocol_name)
    errors = []
    for r in range(rounds):
        rs = RoundState("federated", r, r, tuple(range(len(clients))), broadcast, rounds)
        schema = algo.schema(rs)
        contribs = algo.client_steps(clients, rs)
        sums, _ = protocol.aggregate(schema, contribs, round_index=r)
        errors.append((sums.max_abs_error, float(sums["n"][0])))
        broadcast = algo.server_step(server, sums, rs)
    return dict(broadcast), errors


def test_step1_uploads_only_weighted_params_and_node_count():
    from securefgl.algorithms.base import RoundState

    fg = _fed_graph()
    params, _ = _step1_params("plaintext", fg, 1)
    from securefgl.algorithms.base import Client, Setting
    from securefgl.algorithms.registry import create_algorithm

    cfg = _run_config("plaintext", 1)
    setting = Setting(
        fg.num_features,
        fg.num_classes,
        fg.num_clients,
        fg.num_nodes,
        fg.num_nodes,
        cfg.model,
        cfg.train,
        max_clients_per_round=fg.num_clients,
    )
    algo = create_algorithm("adafgl", setting, {})
    clients = [Client(i, d, _gen(i), workspace={"generator": _gen(5)}) for i, d in enumerate(fg.clients)]
    rs = RoundState("federated", 0, 0, (0, 1, 2), params, 1)
    schema = algo.schema(rs)
    out = algo.client_steps(clients, rs)
    names = {f"w.{k}" for k in params} | {"n"}
    assert set(schema.names) == names
    for c in clients:
        assert set(out[c.id]) == names
        # n_k = |V_k| (spec §7.6), and every numerator block is n_k * clip(W_k).
        assert int(out[c.id]["n"][0]) == c.num_nodes
    bounded = all(
        float(out[c.id][f"w.{k}"].abs().max()) <= c.num_nodes * 16.0 + 1e-3 for c in clients for k in params
    )
    assert bounded


def test_step1_secagg_equals_plaintext_up_to_quantisation():
    fg = _fed_graph()
    rounds = 3
    plain, _ = _step1_params("plaintext", fg, rounds)
    sec, errors = _step1_params("secagg", fg, rounds)
    # Per round the secure sum differs from the plain sum by at most max_abs_error per element; divided by
    # the node count the broadcast moves by at most that / n. After a few rounds of (smooth) training the
    # gap stays at that scale.
    per_round = max(max(e.values()) / den for e, den in errors)
    assert per_round < 1e-5
    for k in plain:
        diff = float((plain[k] - sec[k]).abs().max())
        assert diff < 1e-3, (k, diff)
    # ... and the two are not trivially identical objects: secagg really quantised.
    assert any(not torch.equal(plain[k], sec[k]) for k in plain)


def test_secagg_and_plaintext_runs_are_identical():
    """Uploads rounded onto the grid by the clients (protocol.grid_upload): step 1, the extractor chosen by
    validation and so step 2 agree to the bit under plaintext and SecAgg."""
    from securefgl.engine.runner import run_seed

    fg = _fed_graph()
    opts = {"epochs": 3, "hidden": 8}
    plain = run_seed(_run_config("plaintext", 3, opts), fg, 0, torch.device("cpu"))
    sec = run_seed(_run_config("secagg", 3, opts), fg, 0, torch.device("cpu"))
    assert [r.loss for r in plain.rounds] == [r.loss for r in sec.rounds]
    assert plain.final.phase == sec.final.phase == "personalize"
    assert plain.final.overall == sec.final.overall


def test_step2_sends_nothing(monkeypatch):
    from securefgl.algorithms.adafgl import AdaFGL
    from securefgl.engine.hooks import RunHooks
    from securefgl.engine.runner import run_seed

    events: list[str] = []

    def on_aggregate(ev) -> None:
        kind = "eval" if ev.is_evaluation else "train"
        events.append(f"{kind}:{ev.rs.global_round}:{ev.transcript.total_bytes_received('server')}")

    real_personalize = AdaFGL.personalize_clients

    def personalize(self, clients, broadcast, phase):
        events.append("step2:start")
        real_personalize(self, clients, broadcast, phase)
        events.append("step2:end")

    monkeypatch.setattr(AdaFGL, "personalize_clients", personalize)
    fg = _fed_graph()
    rounds = 3
    cfg = _run_config("secagg", rounds, {"epochs": 5, "hidden": 8})
    res = run_seed(cfg, fg, 0, torch.device("cpu"), hooks=RunHooks(on_aggregate=on_aggregate))
    start = events.index("step2:start")
    trained = [e for e in events if e.startswith("train")]
    assert len(trained) == rounds and all(int(e.split(":")[2]) > 0 for e in trained)
    # Every training sum happened before step 2; nothing was aggregated during it, and after it only the
    # evaluation counts of the personalised models (a sum like any other).
    assert all(events.index(e) < start for e in trained)
    assert events[start + 1] == "step2:end"
    assert [e.split(":")[0] for e in events[start + 2 :]] == ["eval"]
    local = [r for r in res.rounds if r.phase == "personalize"]
    assert len(local) == 1
    assert local[0].total_up == 0 and local[0].crypto_seconds == 0.0
    # the only traffic of step 2 is every client's download of the final global model: the same bytes for
    # all, less than a federated round's download (the same model plus the protocol's messages)
    (down,) = set(local[0].bytes_down.values())
    assert len(local[0].bytes_down) == fg.num_clients and 0 < down < min(res.rounds[0].bytes_down.values())
    assert res.final is not None and res.final.phase == "personalize"


def test_end_to_end_injected_heterophily_beats_fedavg_extractor():
    """Structure non-iid split of a small CSBM: two clients get heterophilous edges injected."""
    from securefgl.data import make_csbm, partition_graph
    from securefgl.engine.runner import run_seed

    data = make_csbm(
        num_nodes=360, num_classes=3, avg_degree=6.0, homophily=0.75, num_features=16, signal=0.7, seed=1
    )
    fg = partition_graph(
        data,
        "structure-noniid",
        4,
        seed=0,
        split=(0.3, 0.3, 0.4),
        cache=False,
        modes=("homo", "hete", "hete", "homo"),
        rho=1.0,
    )
    info = fg.meta["info"]["clients"] if "info" in fg.meta else None
    rounds = 20
    res = run_seed(_run_config("secagg", rounds, {"epochs": 60}), fg, 0, torch.device("cpu"))
    extractor = [e for e in res.evals if e.phase == "federated"][-1].overall["test_acc"]
    adafgl = res.final.overall["test_acc"]
    assert res.final.phase == "personalize"
    print(f"extractor {extractor:.3f} adafgl {adafgl:.3f}", info)
    assert math.isfinite(adafgl) and adafgl > extractor + 0.03, (adafgl, extractor, info)


@pytest.mark.parametrize("sparse_x", [False, True])
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"combine": "hard", "hcs_hard_threshold": 0.5},
        {"loss": "mixture", "knowledge_loss": "frobenius"},
        {"he_input": "H_tilde", "feature_embedding": False, "compat_c1_scaling": True},
        {"message_passing": False, "adaptive_combination": False},
    ],
)
def test_batched_step2_equals_one_client_path(overrides, sparse_x):
    """Without dropout, training the clients together gives each client's result trained alone (a batch of one).

    (Adam turns float rounding of near-zero gradients into lr-sized steps, so after many epochs the two
    paths drift apart by rounding alone; a few epochs with a tight tolerance check the semantics.)
    """
    from securefgl.algorithms.adafgl._local import prepare_client, train_prepared

    clients = [_toy_client(n=n, seed=s) for n, s in ((30, 0), (22, 1), (26, 2))]
    clients[2] = (
        clients[2][0],
        torch.zeros(2, 0, dtype=torch.long),
        clients[2][2],
        clients[2][3],
    )  # no edges
    if sparse_x:  # bag-of-words-like features -> the embedding-bag path on both sides
        clients = [(torch.where(x.abs() < 0.6, torch.zeros_like(x), x), *rest) for x, *rest in clients]
    opts = AdaFGLOptions(epochs=4, hidden=8, dropout=0.0, sim_threshold=0.9, **overrides)
    results = {}
    for batched in (False, True):
        prepared, gens = [], []
        for i, (x, ei, y, masks) in enumerate(clients):
            p_hat = torch.softmax(torch.randn(x.size(0), 2, generator=_gen(40 + i)), dim=1)
            g = _gen(i)
            prepared.append(
                prepare_client(
                    x, ei, y, masks, p_hat, p_hat.log(), opts, num_classes=2, generator=g, client=i
                )
            )
            gens.append(g)
        results[batched] = train_prepared(prepared, opts, num_classes=2, generators=gens, batched=batched)
    for one, many in zip(results[False], results[True], strict=True):
        assert one.hcs == many.hcs
        assert torch.allclose(one.outcome.probs, many.outcome.probs, atol=1e-5), overrides
        assert one.outcome.history == pytest.approx(many.outcome.history, abs=1e-6)
        assert one.outcome.best_epoch == many.outcome.best_epoch


def test_registry_and_combinations():
    from securefgl.algorithms.adafgl import AdaFGL
    from securefgl.algorithms.registry import find_problems, get_algorithm

    assert get_algorithm("AdaFGL") is AdaFGL
    assert find_problems("adafgl", "secagg", "gcn", "cora", options={"alpha": 0.3}) == []
    problems = find_problems("adafgl", "secagg+dp", "gcn", "cora")
    assert problems and "differential privacy" in str(problems[0])
    bad = find_problems("adafgl", "secagg", "gcn", "cora", options={"combine": "sometimes"})
    assert bad and "combine" in str(bad[0])


def test_client_report_has_homophily_and_hcs():
    from securefgl.algorithms.base import Client, Setting
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.engine.runner import run_seed

    fg = _fed_graph()
    res = run_seed(_run_config("plaintext", 2, {"epochs": 3, "hidden": 8}), fg, 0, torch.device("cpu"))
    assert res.final.phase == "personalize"
    cfg = _run_config("plaintext", 2)
    setting = Setting(
        fg.num_features,
        fg.num_classes,
        fg.num_clients,
        fg.num_nodes,
        fg.num_nodes,
        cfg.model,
        cfg.train,
        max_clients_per_round=fg.num_clients,
    )
    algo = create_algorithm("adafgl", setting, {"epochs": 2, "hidden": 8})
    clients = [Client(i, d, _gen(i), workspace={"generator": _gen(5)}) for i, d in enumerate(fg.clients)]
    server = algo.init_server(_gen(1))
    from securefgl.algorithms.base import Phase

    algo.personalize_clients(clients, algo.initial_broadcast(server), Phase("personalize", kind="local"))
    rep = algo.client_report(clients[0])
    for key in (
        "num_nodes",
        "num_edges",
        "isolated_nodes",
        "label_histogram",
        "node_homophily",
        "edge_homophily",
        "class_homophily",
        "hcs",
    ):
        assert key in rep
    assert 0.0 <= rep["hcs"] <= 1.0 and sum(rep["label_histogram"]) == clients[0].num_nodes


@pytest.mark.parametrize("extractor", ["best_val", "last"])
def test_step2_starts_from_the_chosen_extractor(monkeypatch, extractor: str) -> None:
    """``extractor="best_val"``: step 2 gets the evaluated round with the best pooled validation accuracy,
    which the server computes from the evaluation sum (the clients' own counts agree with it)."""
    import dataclasses

    from securefgl.algorithms.adafgl import STEP1, AdaFGL
    from securefgl.engine.hooks import RunHooks
    from securefgl.engine.runner import run_seed

    accs: list[float] = []
    broadcasts: list[dict] = []
    given: list[dict] = []
    real_personalize = AdaFGL.personalize_clients

    def on_evaluate(ev) -> None:
        if ev.rs.phase == STEP1:
            accs.append(ev.overall["val_acc_pooled"])
            local = [m.splits["val"] for m in ev.per_client]  # each client's own row, client side
            assert ev.overall["val_acc_pooled"] == sum(m.correct for m in local) / sum(m.n for m in local)

    def on_round(ev) -> None:
        if ev.record.phase == STEP1:
            broadcasts.append(dict(ev.broadcast))

    def personalize(self, clients, broadcast, phase):
        given.append(broadcast)
        real_personalize(self, clients, broadcast, phase)

    monkeypatch.setattr(AdaFGL, "personalize_clients", personalize)
    cfg = _run_config("plaintext", 6, {"epochs": 3, "hidden": 8, "extractor": extractor})
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, eval_every=1))
    hooks = RunHooks(on_evaluate=on_evaluate, on_round=on_round)
    run_seed(cfg, _fed_graph(), 0, torch.device("cpu"), hooks=hooks)
    assert len(accs) == 6 and len(broadcasts) == 6 and len(given) == 1
    first_best = accs.index(max(accs))
    expected = broadcasts[first_best] if extractor == "best_val" else broadcasts[-1]
    assert all(torch.equal(given[0][k], expected[k]) for k in expected)


def test_extractor_fallback_keeps_the_better_model_on_the_clients_validation_nodes():
    from securefgl.algorithms.adafgl._local import extractor_fallback
    from securefgl.algorithms.adafgl.model import LocalOutcome

    x, _, y, masks = _toy_client(n=12)
    train, val, test = masks
    perfect = torch.nn.functional.one_hot(y, 2).float()
    client = _batch_client(x, y, masks, None, perfect, 0.5)
    step2 = LocalOutcome(
        probs=torch.full((12, 2), 0.5),
        best_epoch=7,
        val_correct=int(val.sum()) - 1,
        val_total=int(val.sum()),
        test_correct=0,
        test_total=int(test.sum()),
        train_correct=0,
        train_total=int(train.sum()),
    )
    out, fell_back = extractor_fallback(step2, client)
    assert fell_back and out.best_epoch == 0 and torch.equal(out.probs, perfect)
    assert (out.val_correct, out.test_correct, out.train_correct) == (
        int(val.sum()),
        int(test.sum()),
        int(train.sum()),
    )
    # a tie keeps step 2's model
    tie = LocalOutcome(**{**step2.__dict__, "val_correct": int(val.sum())})
    assert extractor_fallback(tie, client) == (tie, False)
    with pytest.raises(ConfigError, match="fallback='bogus' is invalid; valid: 'none', 'extractor'"):
        AdaFGLOptions(fallback="bogus")  # type: ignore[arg-type]


def test_fallback_option_reaches_every_client_and_is_reported():
    from securefgl.algorithms.adafgl._local import prepare_client, train_prepared

    opts = AdaFGLOptions(epochs=2, hidden=4, sim_threshold=0.9, fallback="extractor")
    prepared, gens = [], []
    for i in range(2):
        x, ei, y, masks = _toy_client(n=16, seed=i)
        perfect = torch.nn.functional.one_hot(y, 2).float()  # an extractor no personalised model can beat
        prepared.append(
            prepare_client(x, ei, y, masks, perfect, perfect, opts, num_classes=2, generator=_gen(i))
        )
        gens.append(_gen(i))
    results = train_prepared(prepared, opts, num_classes=2, generators=gens)
    for res, p in zip(results, prepared, strict=True):
        assert res.fell_back == (res.outcome.best_epoch == 0)
        assert res.outcome.val_correct == int(p.inputs.masks[1].sum())
