"""edgestream.trainer — the real performer: Kafka batches, torch forward/backward, torch.distributed
collectives, offset acks and checkpoints; `edgestream train` (see main.py)."""

from edgestream.trainer.main import DistEnv, TrainerError, train

__all__ = ["DistEnv", "TrainerError", "train"]
