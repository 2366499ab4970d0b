r"""FedLoG (Kim et al., ICLR 2025): local generalisation from global synthetic data, server seeing sums.

The method, its sums and its options are documented on :class:`FedLoG`. The package keeps the two halves
apart:

* ``options``: :class:`FedLoGOptions` (``FedLoG.Options``, ``[algorithm.options]``);
* ``schema``: what is summed, the round's sum requests (public);
* ``client``: :class:`FedLoGClient`, local state, the local round, the uploads, evaluation;
* ``server``: :class:`FedLoGServer`, the initial model, the secure averages from the sums, the history and
  :func:`best_round`; it imports no client-side module;
* ``algorithm``: :class:`FedLoG`, the registered combination of the two halves;
* ``model``: the local model (GraphSAGE embedder, head/tail branches) and the prompt generator;
* ``eval_sets``: :func:`attach_generalization_sets`, the data-preparation step that builds the Unseen-Node,
  Missing-Class and New-Client test sets (run by the experimenter before a run);
* ``_train`` (client side, private): local fitting, prompt-generator pretraining, the evaluation counters.
"""

from __future__ import annotations

from securefgl.algorithms.fedlog.algorithm import FedLoG
from securefgl.algorithms.fedlog.client import FedLoGClient
from securefgl.algorithms.fedlog.eval_sets import attach_generalization_sets
from securefgl.algorithms.fedlog.options import FedLoGOptions
from securefgl.algorithms.fedlog.server import FedLoGServer, best_round

__all__ = [
    "FedLoG",
    "FedLoGClient",
    "FedLoGOptions",
    "FedLoGServer",
    "attach_generalization_sets",
    "best_round",
]
