"""edgestream.trainer — the real performer: Kafka batches, torch forward/backward, torch.distributed
collectives, offset acks and checkpoints; `edgestream train` (see main.py)."""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use: the orchestrator needs no torch)
_EXPORTS = {
    "DistEnv": "edgestream.trainer.meet",
    "TrainerError": "edgestream.trainer.errors",
    "train": "edgestream.trainer.main",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
