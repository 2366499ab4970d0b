"""The Flower ClientApp: forwards each message's frame to this organisation's worker and returns its reply.

Flower starts one ClientApp process per message, so this module imports Flower and a socket only (no torch,
no dataset); the client's data and state live in its worker (:mod:`securefgl.deploy.worker`), whose socket the
SuperNode names in its node config: ``flower-supernode ... --node-config 'worker-socket="/path/to.sock"'``.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from securefgl.deploy.worker import call_worker

__all__ = ["RECORD", "client_app", "frame_of"]

#: Name of the record that carries a frame.
RECORD = "securefgl"


def frame_of(msg: Message) -> bytes:
    """The frame a message carries."""
    return bytes(msg.content[RECORD]["frame"])  # type: ignore[index,arg-type]


client_app = ClientApp()


@client_app.query()
def _client_query(msg: Message, context: Context) -> Message:
    path = context.node_config.get("worker-socket")
    if not path:
        raise ValueError("this SuperNode has no 'worker-socket' in its --node-config; start it with one")
    reply = call_worker(str(path), frame_of(msg))
    return Message(RecordDict({RECORD: ConfigRecord({"frame": reply})}), reply_to=msg)
