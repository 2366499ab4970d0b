"""securefgl.deploy: the same parties as separate processes over Flower (SuperLink, SuperNodes, Message API).

- :mod:`~securefgl.deploy.export`: per-organisation data files (``securefgl partition ... --export DIR``).
- :mod:`~securefgl.deploy.client` / :mod:`~securefgl.deploy.server`: the client's and the server's halves of a
  run, exchanging versioned frames (:mod:`~securefgl.deploy.wire`) that carry the protocol's own messages.
- :mod:`~securefgl.deploy.apps` / :mod:`~securefgl.deploy.client_app`: the Flower ``ServerApp`` and ``ClientApp``;
  :mod:`~securefgl.deploy.worker`: the client organisation's process holding its data and state between stages;
  :mod:`~securefgl.deploy.warm`: each message's ClientApp process forked from one that imported Flower once.
- :mod:`~securefgl.deploy.launcher`: a SuperLink and N SuperNodes on this machine, with TLS and SuperNode
  authentication (``securefgl deploy``).

Submodules are imported on use (nothing here): the ClientApp process Flower starts for every message imports
only :mod:`securefgl.deploy.client_app` (Flower and a socket), never torch.
"""

from __future__ import annotations
