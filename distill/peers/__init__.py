"""peers: our drafts against a peer trainer's, at equal data (`python -m distill.peers --run RUN`).

    job.py                 PeersConfig, run(), main(): data -> each peer recipe trained -> one evaluation a prompt set
    config.py              PeersConfig and the peer's recipes (speculators' defaults, its small-data recipe)
    ours.py                what a pipeline run holds: drafts, the head's examples, tokens seen, the held-out proxy
    speculators_data.py    our data in speculators' offline format (its prepare-data, the target's hidden states)
    speculators_train.py   one speculators recipe: its packing plan, its trainer, its checkpoint as a draft folder
    speculators_cpu.py     speculators' own trainer with CPU device defaults (runs in the peer's interpreter)
    report.py              the table
"""

from distill.peers.config import PeersConfig
from distill.peers.job import main, run

__all__ = ["PeersConfig", "main", "run"]
