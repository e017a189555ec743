"""edgestream.models — the model zoo (mlp, cnn-small, resnet18/20, vgg-small), optimizer, LR schedule
and flat parameter/gradient helpers. See DESIGN.md."""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use: lr_at needs no torch)
_EXPORTS = {
    "build_optimizer": "edgestream.models.optim",
    "build_scheduler": "edgestream.models.optim",
    "lr_at": "edgestream.models.optim",
    "set_lr": "edgestream.models.optim",
    "flat_params": "edgestream.models.params",
    "grads_of": "edgestream.models.params",
    "param_names": "edgestream.models.params",
    "set_flat_params": "edgestream.models.params",
    "set_grads": "edgestream.models.params",
    "MODELS": "edgestream.models.registry",
    "build_model": "edgestream.models.registry",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
