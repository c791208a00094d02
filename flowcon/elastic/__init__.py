"""flowcon.elastic: the training side of elastic jobs (ElasticFlow section 5, EDL, Elan).

A training script written as single-device code becomes elastic with::

    from flowcon import elastic

    def train(run: elastic.Elastic) -> None:
        model = run.wrap(Net())                     # DDP when WORLD_SIZE > 1
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in run.steps(model, opt):          # resumes after the last checkpoint
            x, y = next_batch(run.local_batch_size)
            ...
            run.report(step=step, loss=loss.item())

    if __name__ == "__main__":
        elastic.main(train)

``main`` runs the job in the scaling mode the executor picked (``FLOWCON_SCALING``):
checkpoint-restart (``flowcon.elastic.restart``, the default) or stop-free
(``flowcon.elastic.stopfree``: workers join and leave the running job, ``train`` gets a
``StopFree``, which has the same ``wrap`` / ``steps`` / ``report``). The pieces both use:
``data`` (the sampler), ``lr`` (hybrid batch scaling), ``straggler``, ``state``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from flowcon import contract
from flowcon.contract import EXIT_PREEMPTED as EXIT_PREEMPTED
from flowcon.elastic import restart, stopfree
from flowcon.elastic.data import ElasticSampler as ElasticSampler
from flowcon.elastic.lr import HybridScaling as HybridScaling
from flowcon.elastic.probe import largest_batch as largest_batch
from flowcon.elastic.restart import CHECKPOINT_FILE as CHECKPOINT_FILE
from flowcon.elastic.restart import DONE_FILE as DONE_FILE
from flowcon.elastic.restart import Elastic as Elastic
from flowcon.elastic.restart import ElasticEnv as ElasticEnv
from flowcon.elastic.restart import launch_workers as launch_workers
from flowcon.elastic.restart import load_checkpoint as load_checkpoint
from flowcon.elastic.restart import save_checkpoint as save_checkpoint
from flowcon.elastic.restart import shard as shard
from flowcon.elastic.stopfree import StopFree as StopFree
from flowcon.elastic.straggler import StragglerDetector as StragglerDetector


def main(train: Callable[[Any], None], checkpoint_every: int | None = None) -> None:
    """Entry point of a training script: restart mode, or stop-free mode with
    ``FLOWCON_SCALING=stopfree`` (a launcher process that may host the job's store, the
    workers its children; docs/elastic.md, "Stop-free scaling")."""
    if os.environ.get(contract.ENV_SCALING, "").strip() == contract.SCALING_STOPFREE:
        stopfree.main(train, checkpoint_every=checkpoint_every)
    else:
        restart.main(train, checkpoint_every=checkpoint_every)
