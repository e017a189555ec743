"""Build a StreamProducer from an experiment config (dataset, partition, rate model, wire encoder)."""

from __future__ import annotations

from edgestream.producers.restart import producer_run_config
from edgestream.producers.stream_producer import StreamProducer


def producer_from_config(cfg, bootstrap: str, run: str, devices: list[int], **kw) -> StreamProducer:
    """A producer of `devices` of run `run`: it pins the run's producer config in `<run>.meta` (a
    different config under an existing run is refused: RunConfigConflict) and continues each
    device's stream where its topic ends (producers/restart.py)."""
    from edgestream.data import SampleEncoder, load_dataset, partition_indices
    from edgestream.streams import build_rate_model

    d = cfg.data
    ds = load_dataset(d.dataset, d.root, seed=cfg.seed, shape=tuple(d.shape) if d.shape else None,
                      num_classes=d.num_classes, n_train=d.n_train, n_test=d.n_test)
    shards = partition_indices(ds.y_train, cfg.devices.count, d.partition, seed=cfg.seed,
                               labels_per_device=d.labels_per_device, alpha=d.alpha)
    rates = build_rate_model(cfg.devices.rates.spec(), cfg.devices.variation.spec(), cfg.devices.count, cfg.seed,
                             min_rate=cfg.devices.rates.min_rate)
    encode = SampleEncoder(ds.x_train.dtype, ds.x_train.shape[1:])  # header prefix packed once
    kw.setdefault("run_config", producer_run_config(cfg))
    return StreamProducer(bootstrap, run, devices, ds.x_train, ds.y_train, shards, rates, encode,
                          seed=cfg.seed, security=cfg.runtime.kafka_client, **kw)
