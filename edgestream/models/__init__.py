"""edgestream.models — the model zoo (mlp, cnn-small, resnet18/20, vgg-small), optimizer, LR schedule
and flat parameter/gradient helpers. See DESIGN.md."""

from edgestream.models.optim import build_optimizer, build_scheduler, lr_at, set_lr
from edgestream.models.params import flat_params, grads_of, param_names, set_flat_params, set_grads
from edgestream.models.registry import MODELS, build_model

__all__ = [
    "MODELS",
    "build_model",
    "build_optimizer",
    "build_scheduler",
    "flat_params",
    "grads_of",
    "lr_at",
    "param_names",
    "set_flat_params",
    "set_grads",
    "set_lr",
]
