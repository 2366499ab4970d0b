r"""Adversary views: exactly what one adversary saw of a run, taken from the protocol transcripts.

The attack harness never hands an attack a client object or a contribution. It builds an
:class:`AdversaryView` from the :class:`~securefgl.protocols.base.Transcript` of every aggregation (the
bytes each party received, ``transcript.views[party]``, and the bytes it sent), the sums released *to that
party*, and what is public: the broadcasts, the model architecture and training recipe, the released model,
and, only when the threat model grants it, the graph structure of a client (:class:`GraphKnowledge`:
edges and which nodes are labelled, never features or labels). Three adversaries:

* :func:`server_view`: the honest-but-curious server (default). Its view is ``views[SERVER]``, the
  messages it sent, and the released sums.
* :func:`client_view`: a curious client. It sees the broadcasts, the requests the server sent it, and a
  sum only when it is the designated recipient (FedStruct-style sums); plus its own inputs.
* :func:`collusion_view`: the server colluding with a set of clients: the server's view, the colluders'
  received messages and their own inputs. Key material is not part of a transcript, so the colluders'
  shares stay sealed here; below the protocol threshold they reveal nothing more anyway (Bonawitz et al.
  2017, Thm. 6.3).

What an individual upload looks like to the server depends on the protocol (:meth:`AdversaryView.individual_inputs`):

* plaintext: the client's clipped vector, exactly (``PlainInput`` frames);
* SecAgg / SecAgg+: the masked vector :math:`y_u = x_u + \mathrm{PRG}(b_u) \pm \sum_v \mathrm{PRG}(k_{uv})
  \bmod 2^b`, uniformly distributed whatever :math:`x_u` is. The view decodes it the only way it can, as
  if it were an encoding (centred lift, divided by the block's scale): an attacker that ignores the masks.
  The result is flagged ``masked``;
* CKKS: ciphertexts under a key the server does not hold: nothing to decode
  (:class:`~securefgl.errors.NothingToAttackError`).

A view keeps copies of message records and sums, never the transcript itself (which also holds every other
party's received messages), so it cannot reach anything outside its adversary's knowledge; the tests walk
the view's object graph to check that no contribution tensor or client object is reachable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from securefgl.errors import ConfigError, NothingToAttackError
from securefgl.protocols.base import SERVER, MessageRecord, Sums, Transcript
from securefgl.protocols.encoding import SumSchema, centred_lift

if TYPE_CHECKING:
    from securefgl.config import TrainConfig
    from securefgl.nn.registry import ModelSpec

__all__ = [
    "AdversaryView",
    "AggregationRecord",
    "GraphKnowledge",
    "IndividualInput",
    "Observation",
    "PublicInfo",
    "client_view",
    "collusion_view",
    "server_view",
]

# Wire codes of the messages that carry one client's vector to the server.
_PLAIN_INPUT = 0x41  # securefgl.protocols.plaintext.PlainInput
_MASKED_INPUT = 6  # securefgl.protocols.messages.MaskedInput
_RESUMED_INPUT = 11  # securefgl.protocols.secaggplus.ResumedInput (a resumed session's masked input)
_CKKS_UPLOAD = 0x55  # securefgl.protocols.ckks.CKKSUpload


@dataclass(frozen=True)
class AggregationRecord:
    """One aggregation as it happened (the auditor's record, not an adversary's view).

    Produced by the audit's capture of a run (or by a test calling a protocol directly). Holds the whole
    transcript and, for ground truth, every contribution; views copy out only what their adversary saw.

    Args:
        key: Request key of the sum within its round (``"main"`` for an algorithm's one sum).
        phase: Phase name of the round.
        round_index: Global round index (bound into the session).
        schema: The public schema the algorithm declared.
        broadcast: The public broadcast the round started from.
        transcript: The protocol's transcript.
        released: The sums the protocol released (``None`` if it aborted).
        recipient: Designated recipient, or ``None`` for a server-bound sum.
        contributions: Every contribution (ground truth for scoring and for colluders' own inputs).
        error: The protocol error when the aggregation aborted.
    """

    key: str
    phase: str
    round_index: int
    schema: SumSchema
    broadcast: Mapping[str, torch.Tensor]
    transcript: Transcript
    released: Sums | None
    recipient: int | None = None
    contributions: Mapping[int, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    error: str | None = None


@dataclass(frozen=True)
class GraphKnowledge:
    """Graph structure an adversary is assumed to know about one client (never features or labels).

    Args:
        client: The client id.
        num_nodes: ``N_k``.
        edge_index: ``(2, E_k)`` local edges.
        train_index: Local indices of the client's labelled (training) nodes.
    """

    client: int
    num_nodes: int
    edge_index: torch.Tensor
    train_index: torch.Tensor

    def __post_init__(self) -> None:
        ei = torch.as_tensor(self.edge_index).detach().to(torch.long).cpu().clone()
        ti = torch.as_tensor(self.train_index).detach().to(torch.long).cpu().clone()
        if ei.dim() != 2 or ei.size(0) != 2:
            raise ConfigError(f"edge_index must have shape (2, E), got {tuple(ei.shape)}")
        if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= self.num_nodes):
            raise ConfigError(f"edge_index refers to nodes outside [0, {self.num_nodes})")
        if ti.numel() and (int(ti.min()) < 0 or int(ti.max()) >= self.num_nodes):
            raise ConfigError(f"train_index refers to nodes outside [0, {self.num_nodes})")
        object.__setattr__(self, "edge_index", ei)
        object.__setattr__(self, "train_index", ti)

    @staticmethod
    def from_data(client: int, data: Any) -> GraphKnowledge:
        """Take only the structure (edges, node count, which nodes are labelled) of a client's ``Data``."""
        return GraphKnowledge(
            client=int(client),
            num_nodes=int(data.num_nodes),
            edge_index=data.edge_index,
            train_index=data.train_mask.nonzero().flatten(),
        )


@dataclass(frozen=True)
class PublicInfo:
    """What is public in a run: the setting, the architecture, the recipe and the released model.

    Args:
        algorithm: Algorithm name.
        num_features: ``F``.
        num_classes: ``C``.
        num_clients: ``K``.
        model: The model architecture (``None`` for algorithms without one shared model).
        train: The training recipe (``TrainConfig``) the server configured.
        released_model: The final broadcast (the released model's parameters), if any.
        prox_mu: FedProx proximal weight (0 otherwise).
    """

    algorithm: str
    num_features: int
    num_classes: int
    num_clients: int
    model: ModelSpec | None = None
    train: TrainConfig | None = None
    released_model: Mapping[str, torch.Tensor] = field(default_factory=dict)
    prox_mu: float = 0.0


@dataclass(frozen=True)
class IndividualInput:
    """One client's upload as the adversary can read it.

    Args:
        client: The sender.
        values: Block name -> tensor (float64), decoded as well as the adversary can.
        kind: ``"plaintext"`` (exact) or ``"masked"`` (a masked vector decoded as if it were an encoding:
            uniformly random, independent of the client's input).
    """

    client: int
    values: dict[str, torch.Tensor]
    kind: Literal["plaintext", "masked"]

    @property
    def exact(self) -> bool:
        return self.kind == "plaintext"


@dataclass(frozen=True)
class Observation:
    """One aggregation seen by one adversary.

    Args:
        key, phase, round_index: Which sum of which round.
        protocol: The protocol label of the transcript.
        schema: The public schema.
        broadcast: The public broadcast of the round (a copy).
        received: The messages the adversary's parties received, byte for byte.
        sent: The messages the adversary's parties sent.
        invited, survivors, dropped, excluded: Public bookkeeping of the round (the server knows it).
        session_id: The session id.
        released: The sums released to the adversary (the server's sums for a server-bound sum, a
            designated recipient's sums for a curious recipient), else ``None``.
        own_inputs: The contributions of clients that are part of the adversary (colluders, the curious
            client itself).
    """

    key: str
    phase: str
    round_index: int
    protocol: str
    schema: SumSchema
    broadcast: dict[str, torch.Tensor]
    received: tuple[MessageRecord, ...]
    sent: tuple[MessageRecord, ...]
    invited: tuple[int, ...]
    survivors: tuple[int, ...]
    dropped: dict[int, str]
    excluded: dict[int, str]
    session_id: bytes
    released: Sums | None
    own_inputs: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def num_contributors(self) -> int:
        return len(self.survivors)


@dataclass(frozen=True)
class AdversaryView:
    """Everything one adversary saw of a run; attacks read this and nothing else.

    Args:
        kind: ``"server"``, ``"client"`` or ``"collusion"``.
        parties: The parties making up the adversary (``SERVER`` and/or client ids).
        observations: One :class:`Observation` per aggregation, in run order.
        public: What is public about the run.
        graph: Graph structure the threat model grants (client id -> :class:`GraphKnowledge`).
    """

    kind: Literal["server", "client", "collusion"]
    parties: tuple[str | int, ...]
    observations: tuple[Observation, ...]
    public: PublicInfo
    graph: dict[int, GraphKnowledge] = field(default_factory=dict)

    @property
    def name(self) -> str:
        if self.kind == "server":
            return "server"
        if self.kind == "client":
            return f"client:{self.parties[0]}"
        return f"server+clients{[p for p in self.parties if p != SERVER]}"

    @property
    def colluders(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.parties if p != SERVER)

    def rounds(self, key: str | None = None) -> list[Observation]:
        """Observations (of sum ``key`` only, if given)."""
        return [o for o in self.observations if key is None or o.key == key]

    def individual_inputs(self, obs: Observation) -> dict[int, IndividualInput]:
        """Every client upload of ``obs`` the adversary received, decoded as well as it can.

        Raises:
            NothingToAttackError: the adversary received no individual upload in this aggregation (a
                client view, CKKS ciphertexts, or no input messages at all).
        """
        if SERVER not in self.parties:
            raise NothingToAttackError(
                f"view {self.name!r} is a client's: it never receives another client's upload"
            )
        out: dict[int, IndividualInput] = {}
        opaque = 0
        for rec in obs.received:
            if rec.receiver != SERVER or not isinstance(rec.sender, int) or len(rec.payload) < 4:
                continue
            code = rec.payload[3]
            if code == _PLAIN_INPUT:
                out[rec.sender] = IndividualInput(
                    rec.sender, _decode_plain(rec.payload, obs.schema), "plaintext"
                )
            elif code in (_MASKED_INPUT, _RESUMED_INPUT):
                out[rec.sender] = IndividualInput(
                    rec.sender, _decode_masked(rec.payload, obs.schema), "masked"
                )
            elif code == _CKKS_UPLOAD:
                opaque += 1
        if not out:
            why = (
                f"{opaque} CKKS ciphertext upload(s) under a key the server does not hold"
                if opaque
                else "no individual upload message"
            )
            raise NothingToAttackError(
                f"view {self.name!r}, {obs.phase} round {obs.round_index} ({obs.protocol}): {why}"
            )
        return out

    def released_sum(self, obs: Observation) -> Sums:
        """The sums released to this adversary in ``obs``.

        Raises:
            NothingToAttackError: nothing was released to it (a server relaying a designated sum, a client
                that is not the recipient, an aborted protocol).
        """
        if obs.released is None:
            raise NothingToAttackError(
                f"view {self.name!r}: no sum was released to it in {obs.phase} round {obs.round_index}"
            )
        return obs.released


def _decode_plain(payload: bytes, schema: SumSchema) -> dict[str, torch.Tensor]:
    from securefgl.protocols.messages import decode
    from securefgl.protocols.plaintext import PlainInput

    msg = decode(payload, PlainInput)
    flat = np.ascontiguousarray(msg.vector, dtype=np.uint64).view(np.float64)
    return _split(flat, schema)


def _decode_masked(payload: bytes, schema: SumSchema) -> dict[str, torch.Tensor]:
    from securefgl.protocols.messages import MaskedInput, decode
    from securefgl.protocols.secaggplus import ResumedInput

    msg = decode(payload, (MaskedInput, ResumedInput))
    ring = np.ascontiguousarray(msg.vector[: schema.length], dtype=np.uint64)
    bits = int(msg.ring_bits)
    signed = centred_lift(ring, bits).astype(np.float64)
    flat = np.empty(schema.length, dtype=np.float64)
    for spec in schema.blocks:
        sl = schema.slices[spec.name]
        flat[sl] = signed[sl] / schema.scales[spec.name]
    return _split(flat, schema)


def _split(flat: np.ndarray, schema: SumSchema) -> dict[str, torch.Tensor]:
    if flat.shape[0] < schema.length:
        raise NothingToAttackError(
            f"an upload of {flat.shape[0]} values does not fit the schema's {schema.length}"
        )
    return {
        b.name: torch.from_numpy(flat[schema.slices[b.name]].copy()).reshape(b.shape) for b in schema.blocks
    }


def _copy_tensor_map(m: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {str(k): torch.as_tensor(v).detach().cpu().clone() for k, v in m.items()}


def _copy_sums(s: Sums | None) -> Sums | None:
    if s is None:
        return None
    values = {k: s[k].detach().cpu().clone() for k in s}  # released blocks only (withheld ones have none)
    rows = {k: m for k in s if (m := s.withheld_rows(k)) is not None}
    return Sums(
        values,
        num_contributors=s.num_contributors,
        withheld=dict(s.withheld),
        withheld_rows={k: v.clone() for k, v in rows.items()},
        clip_counts=dict(s.clip_counts),
        max_abs_error=dict(s.max_abs_error),
    )


def _observation(
    rec: AggregationRecord, parties: Sequence[str | int], own: Sequence[int], released: Sums | None
) -> Observation:
    t = rec.transcript
    members = set(parties)
    received: list[MessageRecord] = []
    sent: list[MessageRecord] = []
    for party, msgs in t.views.items():
        for m in msgs:
            if party in members:
                received.append(MessageRecord(m.phase, m.sender, m.receiver, bytes(m.payload)))
            elif m.sender in members:
                sent.append(MessageRecord(m.phase, m.sender, m.receiver, bytes(m.payload)))
    own_inputs = {int(c): _copy_tensor_map(rec.contributions[c]) for c in own if c in rec.contributions}
    return Observation(
        key=rec.key,
        phase=rec.phase,
        round_index=int(rec.round_index),
        protocol=str(t.protocol),
        schema=rec.schema,
        broadcast=_copy_tensor_map(rec.broadcast),
        received=tuple(received),
        sent=tuple(sent),
        invited=tuple(int(c) for c in t.invited),
        survivors=tuple(int(c) for c in t.survivors),
        dropped={int(k): str(v) for k, v in t.dropped.items()},
        excluded={int(k): str(v) for k, v in t.excluded.items()},
        session_id=bytes(t.session_id),
        released=_copy_sums(released),
        own_inputs=own_inputs,
    )


def _check_records(records: Sequence[AggregationRecord]) -> None:
    if not records:
        raise NothingToAttackError("the run recorded no aggregation: there is no view to attack")
    for r in records:
        if not isinstance(r, AggregationRecord):
            raise ConfigError(f"views are built from AggregationRecord objects, got {type(r).__name__}")
        if not r.transcript.views:
            raise ConfigError(
                f"the transcript of {r.phase} round {r.round_index} has no recorded views "
                "(the protocol ran with record_views=False); rerun with record_views=True"
            )


def _graph_map(
    graph: Mapping[int, GraphKnowledge] | Sequence[GraphKnowledge] | None,
) -> dict[int, GraphKnowledge]:
    if graph is None:
        return {}
    items = graph.values() if isinstance(graph, Mapping) else graph
    out = {}
    for g in items:
        if not isinstance(g, GraphKnowledge):
            raise ConfigError(f"graph knowledge must be GraphKnowledge objects, got {type(g).__name__}")
        out[g.client] = g
    return out


def server_view(
    records: Sequence[AggregationRecord],
    public: PublicInfo,
    *,
    graph: Mapping[int, GraphKnowledge] | Sequence[GraphKnowledge] | None = None,
) -> AdversaryView:
    """The honest-but-curious server's view: what it received and sent, and the sums released to it.

    Args:
        records: The run's aggregations.
        public: What is public about the run.
        graph: Graph structure granted to the adversary (default: none).
    """
    _check_records(records)
    obs = tuple(_observation(r, (SERVER,), (), r.released if r.recipient is None else None) for r in records)
    return AdversaryView("server", (SERVER,), obs, public, _graph_map(graph))


def client_view(
    records: Sequence[AggregationRecord],
    public: PublicInfo,
    client: int,
    *,
    graph: Mapping[int, GraphKnowledge] | Sequence[GraphKnowledge] | None = None,
) -> AdversaryView:
    """A curious client's view: the requests it received, its own inputs, sums designated to it.

    Raises:
        ConfigError: ``client`` was never invited.
    """
    _check_records(records)
    if not any(client in r.transcript.invited for r in records):
        raise ConfigError(f"client {client!r} took part in no aggregation of this run")
    obs = tuple(
        _observation(r, (int(client),), (int(client),), r.released if r.recipient == client else None)
        for r in records
        if client in r.transcript.invited
    )
    return AdversaryView("client", (int(client),), obs, public, _graph_map(graph))


def collusion_view(
    records: Sequence[AggregationRecord],
    public: PublicInfo,
    colluders: Sequence[int],
    *,
    graph: Mapping[int, GraphKnowledge] | Sequence[GraphKnowledge] | None = None,
) -> AdversaryView:
    """The server colluding with ``colluders``: the server's view plus theirs and their own inputs.

    Raises:
        ConfigError: no colluder given, or duplicates.
    """
    _check_records(records)
    cs = [int(c) for c in colluders]
    if not cs or len(set(cs)) != len(cs):
        raise ConfigError(f"colluders must be a non-empty list of distinct client ids, got {list(colluders)}")
    parties: tuple[str | int, ...] = (SERVER, *sorted(cs))
    obs = []
    for r in records:
        released = r.released if (r.recipient is None or r.recipient in cs) else None
        obs.append(_observation(r, parties, sorted(cs), released))
    return AdversaryView("collusion", parties, tuple(obs), public, _graph_map(graph))
