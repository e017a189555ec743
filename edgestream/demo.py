"""`make demo`: the platform's main job in one command.

1. Starts the managed local Kafka broker (unless a bootstrap address is given), streams the digits
   dataset from 8 devices at heterogeneous rates (ScaDLES preset S1') through one topic per device,
   and reads every device's stream back as PyTorch batches with ScaDLES's rate-proportional batch
   policy and truncation buffer, printing what each device saw.
2. Compares DDL (BSP, b = 64) with ScaDLES on the same streams in the virtual-time simulator and
   prints the comparison table (time to target accuracy, buffer, floats sent).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

DEMO_DEVICES = 8


def _demo_config(name: str):
    from edgestream.config import validate_dict

    return validate_dict({
        "name": name, "seed": 0, "data": {"dataset": "digits", "partition": "iid"},
        "devices": {"count": DEMO_DEVICES, "rates": {"preset": "S1'"}},
        "model": {"name": "cnn-small"}, "optim": {"lr": 0.05, "momentum": 0.9},
        "algorithm": {"name": "scadles", "buffer": "truncate", "batch": {"policy": "rate", "min": 8, "max": 1024}},
        "stop": {"target_accuracy": 0.9, "max_time_s": 120}, "eval": {"every_s": 2},
    })


def stream_demo(bootstrap: str, console: Console, seconds: float = 10.0) -> dict:
    """Produce for `seconds`, then read one batch per second per device back through Kafka."""
    from edgestream.consumers import KafkaStreamDataset
    from edgestream.kafka.topics import new_run_id, run_name
    from edgestream.producers import producer_from_config

    cfg = _demo_config("demo")
    run = run_name(cfg.name, new_run_id())
    producer = producer_from_config(cfg, bootstrap, run, list(range(DEMO_DEVICES)))
    console.print(f"streaming {DEMO_DEVICES} devices (preset S1', rates "
                  f"{', '.join(f'{producer.rates.base_rate(d):.0f}' for d in range(DEMO_DEVICES))} samples/s) "
                  f"into {run}.dev.* for {seconds:.0f} s ...")
    result: dict = {}
    th = threading.Thread(target=lambda: result.update(summary=producer.run_for(seconds)), daemon=True)
    th.start()
    time.sleep(2.0)  # trainers connect late: what was produced before is not lost (truncate drops it, counted)
    sets = [KafkaStreamDataset.from_config(cfg, bootstrap, run, d, timeout=5) for d in range(DEMO_DEVICES)]
    rows = {d: [] for d in range(DEMO_DEVICES)}

    def device_loop(d: int) -> None:  # one consumer per device, as on real edge trainers
        while th.is_alive():
            item = sets[d].next_batch()
            if item is not None:
                rows[d].append(item[2])
                sets[d].ack(item[2])

    loops = [threading.Thread(target=device_loop, args=(d,), daemon=True) for d in range(DEMO_DEVICES)]
    for t in loops:
        t.start()
    th.join()
    for t in loops:
        t.join()
    table = Table(title=f"Kafka -> PyTorch batches per device ({run})")
    for col in ("device", "S_i", "produced", "batches", "b_i", "dropped", "buffer", "wait ms"):
        table.add_column(col, justify="right")
    summary = result["summary"]
    for d, ds in enumerate(sets):
        metas = rows[d]
        table.add_row(str(d), f"{producer.rates.base_rate(d):.0f}/s", str(summary.devices[d]["delivered"]),
                      str(len(metas)), str(metas[-1]["batch"]) if metas else "-",
                      str(ds.totals["dropped"]), str(metas[-1]["buffer_samples"]) if metas else "-",
                      f"{1000 * sum(m['wait_s'] for m in metas) / max(len(metas), 1):.0f}")
        ds.close()
    console.print(table)
    return {"produced": summary.delivered, "trained_samples": sum(ds.totals["samples"] for ds in sets)}


def sim_demo(console: Console, out: Path) -> dict | None:
    """DDL vs ScaDLES on the same streams in virtual time (edgestream compare)."""
    try:
        from edgestream.runner.compare import compare_algorithms
    except ImportError:
        return None
    cfg = _demo_config("demo-compare")
    console.print("comparing ddl (b = 64) and scadles in the virtual-time simulator ...")
    return compare_algorithms(cfg, ["ddl", "scadles"], out=out, console=console)


def run_demo(bootstrap: str | None = None, console: Console | None = None, out: str = "runs/demo") -> dict:
    from edgestream.kafka import LocalBroker

    console = console or Console()
    broker = None
    if bootstrap is None:
        console.print("starting the managed local Kafka broker ...")
        t0 = time.monotonic()
        broker = LocalBroker(log=console.print).start()
        bootstrap = broker.bootstrap
        console.print(f"broker up at {bootstrap} in {time.monotonic() - t0:.1f} s")
    try:
        result = stream_demo(bootstrap, console)
    finally:
        if broker is not None:
            broker.stop()
            console.print("broker stopped")
    result["compare"] = sim_demo(console, Path(out))
    return result
