r"""The Algorithm interface: what clients sum, what the server does with the sums, and when.

Every federated algorithm in securefgl is a subclass of :class:`Algorithm`, registered by name in
:mod:`securefgl.algorithms.registry`. The engine (:mod:`securefgl.engine`) owns the loop; the algorithm
only answers its questions:

========================  ==================================================================================
step                      meaning
========================  ==================================================================================
``phases(train)``         which phases run, in order: ``Phase(kind="rounds")`` (client steps, secure sums,
                          server steps, evaluation) or ``Phase(kind="local")`` (local-only stages)
``init_client(client)``   fill ``client.state`` (per-client persistent state: models, caches)
``init_server(gen)``      the server's own state (public-only: never client data) and
``initial_broadcast``     what every client receives before the first round
``requests(rs)``          the sums of this round (default: one :class:`SumRequest` from ``schema(rs)``)
``schema(rs)``            the :class:`~securefgl.protocols.encoding.SumSchema` of the round's one sum,
                          or ``None`` for a round without communication
``client_steps``          all sampled clients' contributions (default: a loop over ``client_step``;
                          override it to train the clients of a round together)
``server_step(...)``      receives :class:`~securefgl.protocols.base.Sums` **only** and returns the new
                          broadcast
``personalize_clients``   a ``local`` phase: local-only training (default: a loop over ``personalize``)
``evaluate``              every client's class scores on all its nodes (client side); the engine counts them
                          per client and sums the counts through the protocol
``server_evaluated``      the server learns from an evaluation sum (AdaFGL keeps its best extractor)
``start_phase``           the broadcast a phase starts from (server side)
========================  ==================================================================================

The server sees sums only, by construction:

* :meth:`Algorithm.server_step` is called with the server state (built by :meth:`Algorithm.init_server`
  from public information alone), the :class:`Sums` the protocol released and the public
  :class:`RoundState`. It is never given a :class:`Client`; the engine refuses anything but ``Sums``.
* An algorithm object is *sealed* once built (:meth:`Algorithm.seal`): it cannot stash a client, a
  contribution or any other value on ``self`` during a run. Per-client state lives in
  :attr:`Client.state`, server state in the object returned by :meth:`init_server`.
* What clients send is declared up front by a ``SumSchema`` (names, shapes, public bounds); weighted
  averages are sent as numerator and denominator blocks and divided after aggregation.

Worked example: FedAvg in thirty lines (the real, batched one is :mod:`securefgl.algorithms.baselines.fedavg`;
this block is executed by the test suite):

.. code-block:: python

    import torch
    import torch.nn.functional as F

    from securefgl.algorithms import Algorithm, register_algorithm
    from securefgl.protocols.encoding import BlockSpec, SumSchema


    @register_algorithm
    class TinyFedAvg(Algorithm):
        name = "tiny-fedavg"

        def init_server(self, generator):
            model = self.setting.make_model(generator=generator)
            return {"params": {k: v.detach().clone() for k, v in model.state_dict().items()}}

        def initial_broadcast(self, server):
            return dict(server["params"])

        def schema(self, rs):  # public: names, shapes, bounds
            bound = self.setting.count_bound * 8.0  # n_k <= count_bound, |w| <= 8
            blocks = [BlockSpec(f"num.{k}", tuple(v.shape), bound=bound) for k, v in rs.broadcast.items()]
            blocks.append(BlockSpec("den", (1,), kind="count", bound=self.setting.count_bound))
            return SumSchema(blocks, max_clients=self.setting.num_clients)

        def client_step(self, client, rs):
            model = self.setting.make_model()
            model.load_state_dict(rs.broadcast)
            d, m, n = client.data, client.data.train_mask, client.num_train
            opt = torch.optim.Adam(model.parameters(), lr=self.setting.train.lr)
            for _ in range(self.setting.train.local_epochs if n else 0):
                opt.zero_grad()
                loss = F.cross_entropy(model(d.x, d.edge_index)[m], d.y[m])
                loss.backward()
                opt.step()
                client.record_loss(loss.detach())
            out = {f"num.{k}": n * v.detach().clamp(-8, 8) for k, v in model.state_dict().items()}
            out["den"] = torch.tensor([n])
            return out  # numerator n_k * w_k and denominator n_k: divided after the sum

        def server_step(self, server, sums, rs):  # sums: Sums, nothing else
            den = float(sums["den"][0])
            server["params"] = {k: sums[f"num.{k}"] / den for k in server["params"]}
            return dict(server["params"])

        def evaluate(self, clients, broadcast, rs):
            model = self.setting.make_model()
            model.load_state_dict(broadcast)
            model.eval()
            with torch.no_grad():
                return {c.id: model(c.data.x, c.data.edge_index) for c in clients}

    # securefgl.run({"algorithm": {"name": "tiny-fedavg"}, "protocol": {"name": "secagg"}})

The engine then runs, per round ``r`` of each ``rounds`` phase::

    rs        = RoundState(phase, r, sampled client ids, broadcast)
    schema    = algorithm.schema(rs)                          # public
    contribs  = algorithm.client_steps(sampled clients, rs)   # {client id: {block: tensor}}
    sums, tr  = protocol.aggregate(schema, contribs, dropouts=plan, round_index=r)
    broadcast = algorithm.server_step(server_state, sums, rs) # Sums only
    scores    = algorithm.evaluate(all clients, broadcast, rs)  # every eval_every rounds, client side
    counts    = protocol.aggregate(eval schema, each client's correct/total/loss counts)
    algorithm.server_evaluated(server_state, metrics from counts, rs)  # best round, early stop: sums only

and ``algorithm.start_phase(server_state, phase, broadcast)`` picks the broadcast each phase starts from.

Phases. One-shot O-pFGL is ``[Phase("upload", rounds=1, sample=False), Phase("train", kind="local")]``;
AdaFGL's federated step 1 then local step 2 is ``[Phase("federated", rounds=R), Phase("personalize",
kind="local")]``; FedStruct's one-off setup sums are ``[Phase("setup", rounds=1, sample=False,
evaluate=False), Phase("train", rounds=R)]``. Sums meant for one client only (FedStruct's
designated-recipient sums) are declared with ``SumRequest(recipient=i)``: the engine delivers them to
``client.inbox[key]`` and never to the server step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch

from securefgl.errors import ConfigError, TrainingError
from securefgl.protocols.registry import ProtocolSpec, parse_protocol

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from securefgl.config.train import TrainConfig
    from securefgl.nn.registry import ModelSpec
    from securefgl.protocols.base import Sums
    from securefgl.protocols.encoding import SumSchema

__all__ = [
    "Algorithm",
    "Broadcast",
    "Client",
    "CompatibilityProblem",
    "Phase",
    "RoundState",
    "Setting",
    "SumRequest",
    "parse_options",
]

#: What the server sends to every client after a server step: public named tensors (e.g. the global
#: model's parameters, O-pFGL's pseudo-graph). Its size counts as download bytes for every participant.
Broadcast = Mapping[str, torch.Tensor]

#: Key of the one sum of a round when an algorithm declares it with :meth:`Algorithm.schema`.
MAIN = "main"


@dataclass(frozen=True)
class Phase:
    """One stage of an algorithm's run.

    Args:
        name: Shown in progress output and stored in the metrics (``"train"``, ``"setup"``, ...).
        kind: ``"rounds"``: iterative client steps, secure sums and server steps (and evaluation);
            ``"local"``: one local-only stage per client (:meth:`Algorithm.personalize_clients`), no
            communication. (default: ``"rounds"``)
        rounds: Number of rounds of a ``rounds`` phase; ``None`` means the run's ``train.rounds``.
            Ignored for ``local`` phases. (default: ``None``)
        sample: Apply the run's per-round client sampling; ``False`` invites every client (one-off
            setup and upload phases). (default: ``True``)
        evaluate: Evaluate during this phase (every ``train.eval_every`` rounds, best-round selection and
            early stopping). A ``local`` phase with ``evaluate=True`` is evaluated once, after it.
            (default: ``True``)
    """

    name: str
    kind: Literal["rounds", "local"] = "rounds"
    rounds: int | None = None
    sample: bool = True
    evaluate: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("rounds", "local"):
            raise ConfigError(
                f"phase {self.name!r}: kind {self.kind!r} is not valid; valid: 'rounds', 'local'"
            )
        if self.rounds is not None and self.rounds < 0:
            raise ConfigError(f"phase {self.name!r}: rounds must be >= 0, got {self.rounds}")


@dataclass(frozen=True)
class SumRequest:
    """One secure sum of a round.

    Args:
        key: Name of the sum within the round (``"main"`` for the one sum declared by ``schema``).
        schema: Blocks, bounds and release rules.
        recipient: ``None``: the sum goes to the server step. A client id: the sum is revealed to that client
            only (designated-recipient mode; the server relays) and lands in ``client.inbox[key]``.
        participants: Client ids that contribute; ``None`` means every client of the round.
        relay: With a ``recipient``: the server also relays the recipient's released sum (under CKKS a
            ciphertext only the clients can decrypt) to every other participant, so each client finds the same
            sum in its own ``inbox[key]`` (O-pFGL variant A.5). (default: ``False``)
    """

    key: str
    schema: SumSchema
    recipient: int | None = None
    participants: tuple[int, ...] | None = None
    relay: bool = False

    def __post_init__(self) -> None:
        if self.relay and self.recipient is None:
            raise ConfigError(f"sum {self.key!r}: relay=True needs a designated recipient")


@dataclass(frozen=True)
class RoundState:
    """The public state of one round, shown to client steps, server steps and evaluation.

    Args:
        phase: Name of the current phase.
        round: Round index within the phase (0-based).
        global_round: Round index over the whole run (0-based), bound into protocol session ids.
        clients: Ids of the clients invited this round (sorted).
        broadcast: What the server sent before this round (the previous server step's output).
        num_rounds: Rounds of this phase.
    """

    phase: str
    round: int
    global_round: int
    clients: tuple[int, ...]
    broadcast: Broadcast
    num_rounds: int = 1


@dataclass(eq=False)
class Client:
    """One client as the engine simulates it. Only client-side code ever sees this object.

    Args:
        id: Client id (its index in ``FederatedGraph.clients``).
        data: The client's local graph on the run's device: ``x`` ``(N_k, F)``, ``y`` ``(N_k,)``,
            ``edge_index`` ``(2, E_k)`` in local indices, ``train_mask``/``val_mask``/``test_mask``.
        generator: The client's own seeded torch generator (dropout, sampling).
        state: The algorithm's persistent per-client state (filled by :meth:`Algorithm.init_client`).
        inbox: Designated-recipient sums delivered to this client, by request key.
        eval_data: Test data that arrives at the client later (FedLoG's unseen-node, missing-class and
            new-client sets): read by evaluation code only, never by training. (default: empty)
        workspace: Scratch space shared by all simulated clients of the run (client side only, e.g. the
            batched graph layout of :mod:`securefgl.training.local_training`); no server step receives it.
        losses: Training losses reported with :meth:`record_loss` in the current round.
    """

    id: int
    data: Data
    generator: torch.Generator
    state: dict[str, Any] = field(default_factory=dict)
    inbox: dict[str, Sums] = field(default_factory=dict)
    eval_data: dict[str, Any] = field(default_factory=dict)
    workspace: dict[str, Any] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)

    @property
    def num_nodes(self) -> int:
        """``N_k``: the number of nodes of the local graph."""
        return int(self.data.num_nodes)

    @property
    def num_train(self) -> int:
        """``n_k``: the number of labelled (train) nodes."""
        return int(self.data.train_mask.sum())

    @property
    def device(self) -> torch.device:
        return self.data.x.device

    def record_loss(self, loss: float | torch.Tensor) -> None:
        """Report this client's training loss of the current step (shown in progress, checked for NaN)."""
        self.losses.append(float(loss))


@dataclass(frozen=True)
class Setting:
    """Public facts of a run that an algorithm may use. Holds no client data.

    Args:
        num_features: ``F``.
        num_classes: ``C`` (global classes).
        num_clients: ``K``.
        num_nodes: Total nodes of the federated graph (public; used for count bounds).
        count_bound: Public upper bound on any one client's node count (bounds count blocks and weights).
        model: The model architecture (:class:`securefgl.nn.ModelSpec`).
        train: Optimisation settings (:class:`securefgl.config.TrainConfig`).
        device: Where tensors live.
        max_clients_per_round: The most clients a round invites (``max_clients`` of schemas).
        protocol: The aggregation protocol (public): its base and whether distributed DP wraps it (``dp``
            makes FedAvg upload DP-ready deltas). A name (``"secagg+dp"``) is parsed into a
            :class:`~securefgl.protocols.registry.ProtocolSpec`.
        public_edge_index: ``(2, E)`` the federation's whole edge set in global ids, present only for an
            algorithm whose threat model makes the structure public to the server
            (:meth:`Algorithm.server_knows_edges`, e.g. FedStruct-A); never features or labels.
            (default: ``None``)
    """

    num_features: int
    num_classes: int
    num_clients: int
    num_nodes: int
    count_bound: int
    model: ModelSpec
    train: TrainConfig
    device: torch.device = torch.device("cpu")
    max_clients_per_round: int = 0
    protocol: ProtocolSpec = ProtocolSpec("plaintext")
    public_edge_index: torch.Tensor | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "protocol", parse_protocol(self.protocol or "plaintext"))

    def make_model(self, *, generator: torch.Generator | None = None) -> torch.nn.Module:
        """A fresh model of the run's architecture, initialised from ``generator`` (on ``device``)."""
        from securefgl.nn.registry import build_model

        return build_model(
            self.model, self.num_features, self.num_classes, generator=generator, device=self.device
        )


@dataclass(frozen=True)
class CompatibilityProblem:
    """One reason a combination cannot run, and what to do instead.

    Args:
        reason: What is wrong, naming the values involved.
        remedy: What the user can change.
        permanent: ``True`` if the combination can never be supported (it would break the privacy contract
            or the method's definition); ``False`` if it is merely not supported yet.
    """

    reason: str
    remedy: str
    permanent: bool = False

    def __str__(self) -> str:
        kind = "unsupported" if self.permanent else "not supported yet"
        return f"{self.reason} ({kind}; {self.remedy})"


def parse_options(options_cls: type, options: Mapping[str, Any] | None, *, where: str) -> Any:
    """Validate an algorithm's options dict against its frozen ``Options`` dataclass.

    Unknown keys, wrong types and out-of-range values (checked in the dataclass's ``__post_init__``) raise
    :class:`~securefgl.errors.ConfigError` naming the key and the valid choices.
    """
    from securefgl.config.loader import build

    return build(options_cls, dict(options or {}), where=where)


@dataclass(frozen=True)
class _NoOptions:
    """An algorithm without options."""


class Algorithm:
    """Base class of every federated algorithm; see the module docstring for the contract.

    Subclasses set ``name`` and, if they take options, ``Options`` (a frozen dataclass whose
    ``__post_init__`` checks ranges). They override the steps they need; everything has a default that
    does nothing or loops over the per-client step.

    Args:
        setting: The public facts of the run.
        options: The algorithm's options (an ``Options`` instance or a mapping validated against it).

    Class attributes:
        name: Registry name (lower case).
        Options: Frozen dataclass of the algorithm's options.
        supported_models: Model names it can train (``None``: any registered model).
        uses_protocol: ``False`` for algorithms that never communicate (Local, Centralized): the protocol
            option is then unused.
        dp_blocks: Whether any of its schemas marks blocks ``dp=True`` (a ``+dp`` protocol would add no noise
            otherwise, so the registry refuses that combination).
        batched: Whether :meth:`client_steps` trains the clients of a round together.
        needs_global_graph: Whether the algorithm trains on the whole graph (Centralized, the non-private
            reference): the engine then puts ``FederatedGraph.global_data()`` in ``workspace["global_data"]``.
        needs_cross_edges: Whether each client needs its view of its inter-client edges (FedStruct): the engine
            then prepares the clients with :func:`securefgl.data.cross_edges.attach_cross_edges`.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = _NoOptions
    supported_models: ClassVar[frozenset[str] | None] = None
    uses_protocol: ClassVar[bool] = True
    dp_blocks: ClassVar[bool] = False
    batched: ClassVar[bool] = False
    needs_global_graph: ClassVar[bool] = False
    needs_cross_edges: ClassVar[bool] = False

    def __init__(self, setting: Setting, options: Any = None) -> None:
        self.setting = setting
        if options is None or isinstance(options, Mapping):
            options = parse_options(type(self).Options, options, where=f"algorithm.options ({self.name})")
        elif not isinstance(options, type(self).Options):
            raise ConfigError(
                f"{self.name}: options must be a {type(self).Options.__name__} or a mapping, got "
                f"{type(options).__name__}"
            )
        self.options = options

    # ------------------------------------------------------------------ structure -----------------------

    def seal(self) -> None:
        """Forbid further attribute assignment (the engine seals every algorithm it runs)."""
        object.__setattr__(self, "_sealed", True)

    def __setattr__(self, key: str, value: Any) -> None:
        if getattr(self, "_sealed", False):
            raise TrainingError(
                f"algorithm {self.name!r} tried to set attribute {key!r} during a run; keep per-client state "
                "in client.state and server state in the object returned by init_server()"
            )
        object.__setattr__(self, key, value)

    @classmethod
    def compatibility(
        cls, *, protocol: ProtocolSpec, model: str, dataset: str, options: Any, num_clients: int | None
    ) -> list[CompatibilityProblem]:
        """Algorithm-specific problems with a combination (beyond the registry's generic checks).

        Called before any work starts with the parsed protocol (``protocol.base``, ``protocol.dp``); return
        every problem found (empty list: fine).
        """
        return []

    @classmethod
    def server_knows_edges(cls, options: Any) -> bool:
        """Whether the server may know the global edge set under ``options`` (default: never).

        ``True`` puts the federation's edges in :attr:`Setting.public_edge_index` (a weaker threat model the
        algorithm must document, e.g. FedStruct-A).
        """
        return False

    def phases(self, train: TrainConfig) -> Sequence[Phase]:
        """The phases of a run, in order (default: one ``rounds`` phase of ``train.rounds`` rounds)."""
        return (Phase("train", kind="rounds", rounds=train.rounds),)

    # ------------------------------------------------------------------ client side ----------------------

    def init_client(self, client: Client) -> None:
        """Fill ``client.state`` once, before the first phase (default: nothing)."""

    def requests(self, rs: RoundState) -> Sequence[SumRequest]:
        """The sums of round ``rs`` (default: the one sum of :meth:`schema`, or none)."""
        schema = self.schema(rs)
        return () if schema is None else (SumRequest(MAIN, schema),)

    def schema(self, rs: RoundState) -> SumSchema | None:
        """The schema of the round's one server-bound sum; ``None``: the round sends nothing."""
        return None

    def client_step(self, client: Client, rs: RoundState) -> Any:
        """One client's work in round ``rs``.

        Returns:
            The client's :data:`~securefgl.protocols.base.Contribution` (``{block name: tensor}``) when the
            round has one sum; ``{request key: Contribution}`` when :meth:`requests` declares several; ``None``
            when the round sends nothing.
        """
        return None

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        """Every invited client's output for round ``rs`` (default: ``client_step`` per client).

        Override to train the clients of a round together (see :mod:`securefgl.training.local_training`).
        """
        return {c.id: self.client_step(c, rs) for c in clients}

    def personalize(self, client: Client, broadcast: Broadcast, phase: Phase) -> None:
        """A ``local`` phase for one client: local-only work that updates ``client.state``."""

    def personalize_clients(self, clients: Sequence[Client], broadcast: Broadcast, phase: Phase) -> None:
        """A ``local`` phase for every client (default: ``personalize`` per client)."""
        for c in clients:
            self.personalize(c, broadcast, phase)

    # ------------------------------------------------------------------ server side ----------------------

    def init_server(self, generator: torch.Generator) -> Any:
        """The server's state, built from public information only (``self.setting``, ``generator``)."""
        return None

    def initial_broadcast(self, server: Any) -> Broadcast:
        """What clients receive before the first round (default: nothing)."""
        return {}

    def server_step(self, server: Any, sums: Sums | Mapping[str, Sums], rs: RoundState) -> Broadcast:
        """Update the server state from the released sums and return the new broadcast.

        Args:
            server: The object returned by :meth:`init_server` (mutable).
            sums: The round's :class:`Sums` (one sum), or ``{request key: Sums}`` when :meth:`requests`
                declares several server-bound sums.
            rs: The public round state.

        Returns:
            The broadcast every client receives next (default: unchanged).
        """
        return rs.broadcast

    def server_evaluated(self, server: Any, metrics: Mapping[str, float], rs: RoundState) -> None:
        """Learn from an evaluation, on the server: ``metrics`` come from the evaluation sum only.

        ``metrics`` has the keys of :func:`securefgl.engine.evaluation.metrics_from_sums` (``val_acc``,
        ``val_acc_pooled``, ...). Default: nothing (the engine's own best-round rule needs no help). AdaFGL keeps
        the step-1 model with the best pooled validation accuracy here.
        """

    def start_phase(self, server: Any, phase: Phase, broadcast: Broadcast) -> Broadcast:
        """The broadcast a phase starts from, decided on the server (default: the latest one)."""
        return broadcast

    # ------------------------------------------------------------------ evaluation -----------------------

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        """Each client's class scores on all its nodes, ``{client id: (N_k, C)}``, with the model it would use.

        Each client's metrics are computed from these on its own masks (client side); only their sums reach the
        server (:mod:`securefgl.engine.evaluation`). Default: the model in
        ``client.state["model"]``.
        """
        out = {}
        for c in clients:
            model = c.state.get("model")
            if model is None:
                raise TrainingError(
                    f"{self.name}: evaluate() is not implemented and client {c.id} has no state['model']"
                )
            model.eval()
            with torch.no_grad():
                out[c.id] = model(c.data.x, c.data.edge_index)
        return out

    # ------------------------------------------------------------------ misc -----------------------------

    def run_report(self, server: Any) -> dict[str, Any]:
        """Public facts about the run the server may report (stored in ``metrics.json``; default: none).

        Receives the server state only, so it can hold nothing but what the server learnt from sums.
        """
        return {}

    def describe(self) -> dict[str, Any]:
        """JSON-friendly description (name and options) stored with results."""
        opts = dataclasses.asdict(self.options) if dataclasses.is_dataclass(self.options) else {}
        return {"name": self.name, "options": opts}

    def __repr__(self) -> str:
        opts = dataclasses.asdict(self.options) if dataclasses.is_dataclass(self.options) else {}
        inner = ", ".join(f"{k}={v!r}" for k, v in opts.items())
        return f"{type(self).__name__}({inner})"
