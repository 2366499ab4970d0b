"""The Flower ServerApp: ``server_app`` drives a :class:`DeployedRun` (the ClientApp is :mod:`.client_app`).

A Flower project pointing at these objects (``securefgl deploy`` writes one; see the README) has::

    [tool.flwr.app.components]
    serverapp = "securefgl.deploy.apps:server_app"
    clientapp = "securefgl.deploy.client_app:client_app"

    [tool.flwr.app.config]
    config = "<the run config as JSON>"    # the same config as `securefgl run`
    output-dir = "results/..."             # the results folder the ServerApp writes
    stage-timeout = 120.0                  # seconds to wait for the replies of one stage
    rejoin-timeout = 60.0                  # seconds a round waits for a client that left (default: stage-timeout)
    clients = 5                            # SuperNodes to wait for before starting

Every request travels as a ``query`` Message whose content is ``RecordDict({"securefgl": ConfigRecord({"frame":
bytes})})``; the reply carries the client's frame the same way. The ServerApp process needs no dataset.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from securefgl.deploy.wire import Reply, Request
from securefgl.errors import ConfigError, MalformedMessageError

__all__ = ["FlowerTransport", "server_app"]

from securefgl.deploy.client_app import RECORD, frame_of


def _frame_message(blob: bytes, node: int) -> Message:
    return Message(
        RecordDict({RECORD: ConfigRecord({"frame": blob})}), dst_node_id=node, message_type=MessageType.QUERY
    )


#: First pull interval (s) after pushing a stage's messages, and the most it grows to while replies are out.
POLL_START, POLL_MAX = 0.02, 0.5


class FlowerTransport:
    """Frames to clients as Flower messages through the SuperLink (see :class:`~securefgl.deploy.server.Transport`).

    Args:
        grid: The ServerApp's grid.
        expected: Client ids to wait for at start.
        timeout: Seconds to wait for the replies of one exchange; a node that has not answered by then is a dropout.
        wait: Seconds to wait for the expected SuperNodes to connect.
    """

    def __init__(self, grid: Grid, expected: int, timeout: float, wait: float = 300.0) -> None:
        self.grid, self.expected, self.timeout, self.wait = grid, expected, timeout, wait
        self.node_of: dict[int, int] = {}
        self.client_of: dict[int, int] = {}

    def _send_and_receive(self, msgs: list[Message], timeout: float) -> list[Message]:
        """Push ``msgs`` and pull their replies until all are in or ``timeout`` passes.

        Flower's ``Grid.send_and_receive`` pulls every 3 s, which adds 0-3 s to every protocol stage (a SecAgg+
        round has five); here the pull interval starts at :data:`POLL_START` and grows by half each empty pull
        up to :data:`POLL_MAX`, so a reply is picked up within about a tenth of its own latency.
        """
        pending = set(self.grid.push_messages(msgs))
        deadline = time.monotonic() + timeout
        interval, out = POLL_START, []
        while pending:
            got = list(self.grid.pull_messages(pending))
            out.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if not pending or time.monotonic() >= deadline:
                break
            interval = POLL_START if got else min(POLL_MAX, interval * 1.5)
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        return out

    def _discover(self) -> None:
        nodes = [n for n in self.grid.get_node_ids() if n not in self.client_of]
        if not nodes:
            return
        probe = Request("", 0, "hello", {}).to_bytes()
        for rep in self._send_and_receive([_frame_message(probe, n) for n in nodes], self.timeout):
            if rep.has_error():
                continue
            try:
                client = Reply.from_bytes(frame_of(rep)).client
            except (MalformedMessageError, KeyError):
                continue
            node = rep.metadata.src_node_id
            old = self.node_of.get(client)
            if old is not None:
                self.client_of.pop(old, None)
            self.node_of[client], self.client_of[node] = node, client

    def clients(self) -> list[int]:
        deadline = time.monotonic() + self.wait
        while True:
            self._discover()
            if len(self.node_of) >= self.expected or time.monotonic() > deadline:
                return sorted(self.node_of)
            time.sleep(1.0)

    def exchange(self, requests: Mapping[int, bytes], timeout: float | None = None) -> dict[int, bytes]:
        msgs = [_frame_message(b, self.node_of[c]) for c, b in requests.items() if c in self.node_of]
        out: dict[int, bytes] = {}
        for rep in self._send_and_receive(msgs, self.timeout if timeout is None else timeout):
            client = self.client_of.get(rep.metadata.src_node_id)
            if client is not None and not rep.has_error():
                out[client] = frame_of(rep)
        return out


server_app = ServerApp()


@server_app.main()
def _server_main(grid: Grid, context: Context) -> None:
    from securefgl.config import RunConfig
    from securefgl.deploy.run import run_deployed

    rc: dict[str, Any] = dict(context.run_config)
    try:
        config = RunConfig.from_mapping(json.loads(str(rc["config"])))
    except (KeyError, json.JSONDecodeError) as exc:
        raise ConfigError(f"run config 'config' must hold the run config as JSON ({exc})") from None
    transport = FlowerTransport(
        grid, int(rc.get("clients", config.partition.clients)), float(rc.get("stage-timeout", 120.0))
    )
    out = Path(str(rc["output-dir"])) if rc.get("output-dir") else None
    rejoin = float(rc["rejoin-timeout"]) if "rejoin-timeout" in rc else None
    run_deployed(config, transport, out, rejoin)
    print("[securefgl deploy] run finished", file=sys.stderr, flush=True)
