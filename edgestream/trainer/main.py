"""`edgestream train`: one trainer process = one device's worker, run for real.

This module is a host and nothing more: it resolves the config into a `RunPlan`, reads the torchrun
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK; device i = rank), joins the
rendezvous, and runs the rank's `WorkerSession` (edgestream.runner.session: stop rule, events, the
step-end hooks) in a blocking host against a `TrainerPerformer` (the plan's `KafkaStreamDataset`,
torch forward/backward on CUDA when available, torch.distributed collectives: gloo on CPU, NCCL on
CUDA, the AllReduce as `runtime.reduction` says: bucketed all_reduce by default, or the exact rank-order
sum). Rank 0 hosts the run's evaluation in a background thread (`runner.BackgroundEvaluation`).

Files, under `<out>/<name>-<algorithm>-<run id>/`: `ranks/<rank>.jsonl` (this rank's events.jsonl lines, flushed
per line; rank 0 adds the eval lines), `ranks/<rank>.log` (its log, Kafka client logs included),
`ranks/<rank>.summary.json` at a normal exit, `checkpoints/rank<rank>.pt` (checkpoint.every_steps and/or
checkpoint.every_s: edgestream.trainer.schedule; and at the end of a run, a stop by a signal included).

SIGTERM / SIGINT: the rank finishes its step, the group stops after one agreed step (the stop vote rides on
the algorithm's collective), the rank writes its checkpoint there and commits its acks, and `edgestream
train` exits 128 + the signal (143 / 130): a resumable stop at a step boundary.
The orchestrator (`edgestream run --engine local`) merges them into the run directory.

Errors a user can cause end with one line naming the problem (`TrainerError`): an unreachable broker,
a rank outside the config's devices, a rendezvous that times out (naming MASTER_ADDR:MASTER_PORT).

A Kafka outage is waited out for `runtime.kafka_outage_s` (edgestream.trainer.outage: "wait" records,
log lines; the peers wait in their collective), then the rank ends with one line naming the budget.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from edgestream import settings
from edgestream.consumers.from_plan import eval_data, kafka_dataset
from edgestream.kafka.admin import KafkaUnavailable
from edgestream.runner.driver import StepMeter
from edgestream.trainer.digest import DigestTaker, ParamDigest
from edgestream.trainer.errors import TrainerError
from edgestream.trainer.meet import DistEnv, agree_on_step, join_ps, rendezvous
from edgestream.trainer.ranklog import GuardedEvents, disk_error, setup_logging

log = logging.getLogger("edgestream.trainer")


def param_digest(params: list[torch.Tensor]) -> str:
    """A short hash of the parameters' bytes: equal digests = bitwise-identical replicas (now; the step lines
    carry a `ParamDigest`, hashed when the line is written)."""
    return str(ParamDigest(params))


def train(cfg: Any, *, run_id: str, bootstrap: str, out: str | Path, resume: bool = False, digest: bool = True,
          environ: dict | None = None) -> dict:
    """Run this process's worker until the group stops; returns the rank's summary (see module doc).
    A file it cannot write (a read-only or full output folder) ends it with one line naming the path and
    the device (TrainerError)."""
    rank = (os.environ if environ is None else environ).get("RANK", "?")
    try:
        return _train(cfg, run_id=run_id, bootstrap=bootstrap, out=out, resume=resume, digest=digest,
                      environ=environ)
    except OSError as exc:
        raise TrainerError(disk_error(rank, exc, Path(out))) from None
    except KafkaUnavailable as exc:  # at start-up, or the final checkpoint's commit: the budget ran out
        raise TrainerError(f"device {rank}: {exc}") from None


def _train(cfg: Any, *, run_id: str, bootstrap: str, out: str | Path, resume: bool = False, digest: bool = True,
           environ: dict | None = None) -> dict:
    from edgestream.kafka.outage import Outage
    from edgestream.metrics import EventLog
    from edgestream.models import param_names
    from edgestream.ps.client import PSStopped
    from edgestream.runner.engines import EngineError, check_runs
    from edgestream.runner.evaluate import BackgroundEvaluation
    from edgestream.runner.plan import RunPlan
    from edgestream.runner.rundir import write_phase
    from edgestream.runner.session import WorkerSession
    from edgestream.trainer.backend import BackendError, check_requested
    from edgestream.trainer.checkpoint import (
        CheckpointError,
        checkpoint_path,
        config_pin,
        identity,
        load_checkpoint,
        save_checkpoint,
    )
    from edgestream.trainer.collectives import DistCollectives
    from edgestream.trainer.gpus import GpuError, device_for
    from edgestream.trainer.graphs import GraphedForward, graphs_wanted
    from edgestream.trainer.outage import OutageRecords, collective_timeout_s, give_up_line
    from edgestream.trainer.performer import ACK_INTERVAL_S, Diverged, Stopped, TrainerPerformer
    from edgestream.trainer.prefetch import PrefetchDataset, prefetch_depth, takes_fixed_batches

    try:
        plan = RunPlan.resolve(cfg)
        env = DistEnv.from_environ(plan.world, environ)
        check_runs("local", plan.algorithm)
    except EngineError as exc:
        raise TrainerError("; ".join(exc.problems)) from None
    run = plan.run_name(run_id)
    run_dir = Path(out) / run
    ranks = run_dir / "ranks"
    ranks.mkdir(parents=True, exist_ok=True)
    handler = setup_logging(ranks / f"{env.rank}.log")
    try:  # the rank-to-GPU rule; what this rank was told (empty: automatic); the ranks agree at the rendezvous
        placed = device_for(env.local_rank, cfg.runtime.gpus)
        requested = check_requested(settings.backend())
    except (GpuError, BackendError) as exc:
        raise TrainerError(f"device {env.rank}: {exc}") from None
    device, cuda, note = torch.device(placed.device), placed.cuda, ""
    if cuda:
        torch.cuda.set_device(device)
    backend = requested or ("nccl" if cuda else "gloo")  # this rank's wish, until the rendezvous
    log.info("rank %d/%d run %s device %s backend %s reduction %s bootstrap %s", env.rank, env.world, run,
             placed.text(), requested or "automatic", cfg.runtime.reduction, bootstrap)

    write_phase(ranks, env.rank, "building the model")
    try:  # every rank (and every engine) starts from the same model
        model = plan.build_model().to(device).train()
    except EngineError as exc:
        raise TrainerError(f"device {env.rank}: " + "; ".join(exc.problems)) from None
    write_phase(ranks, env.rank, "building the optimizer")
    optimizer = plan.build_optimizer(model)
    ckpt_file = checkpoint_path(run_dir, env.rank)
    ckpt_ident = identity(run, env.rank, config_pin(cfg))  # checked on load, written into every checkpoint
    ckpt = None
    if resume:
        if not ckpt_file.exists():
            raise TrainerError(f"--resume: no checkpoint {ckpt_file} (set checkpoint.every_steps or "
                               "checkpoint.every_s to write them)")
        try:  # checksum, run, rank and config pin: one line naming the file when any differs
            ckpt = load_checkpoint(ckpt_file, map_location=device, expect=ckpt_ident)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
        except CheckpointError as exc:
            raise TrainerError(f"device {env.rank}: {exc}") from None
        except (RuntimeError, ValueError, KeyError) as exc:  # a state that does not fit this model/optimizer
            raise TrainerError(f"device {env.rank}: {ckpt_file}: does not fit this run's model or optimizer "
                               f"({' '.join(str(exc).split())[:160]})") from None
        check = plan.prequential_counter()
        if check is not None and ckpt.get("watch") is not None:
            try:  # the config's eval.prequential (which a resume may change) against the counters checkpointed
                check.load_state_dict(ckpt["watch"]["counter"])
            except ValueError as exc:
                raise TrainerError(f"device {env.rank}: cannot resume from {ckpt_file}: {exc}") from None

    stop_event = threading.Event()
    signalled: list[int] = []  # the first signal's number (the exit status says which: 128 + it)

    def on_signal(signum: int, frame: Any) -> None:
        if not signalled:
            signalled.append(signum)
        stop_event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)

    # acks: with checkpoints, committed with each checkpoint and durable before it counts (sync). Without
    # them no run can resume from a mid-run position: the newest ack is committed asynchronously at most
    # once a second (ACK_INTERVAL_S; at least once), and the last one when the trainer ends, made durable
    # when the dataset closes. (A synchronous commit per step cost the step 5-10 ms and the broker more
    # CPU than the trainer's own per-step overhead: benchmarks/bench_vs_ddp.py.)
    commit = "sync" if plan.checkpoints else "async"
    waits = OutageRecords(env.rank)  # every Kafka client of this rank waits through one outage
    outage = Outage(bootstrap, cfg.runtime.kafka_outage_s, listener=waits)
    write_phase(ranks, env.rank, "opening the device stream")
    try:
        # on a GPU the batch crosses as uint8 and is normalised there (consumers/dataset.py)
        dataset = kafka_dataset(plan, bootstrap, run, env.rank, timeout=1.0, commit=commit, torch_device=device,
                                outage=outage)
        if ckpt is not None:  # the stream positions that match the restored model
            dataset.load_state_dict(ckpt["stream"])
        if prefetch_depth(plan):  # the next batch taken while this one computes (edgestream.trainer.prefetch)
            dataset = PrefetchDataset(dataset, prefetch_depth(plan), device)
    except KafkaUnavailable as exc:
        raise TrainerError(f"device {env.rank}: {exc}") from None
    ps_run = plan.algorithm.family == "ps"
    ps_client = None
    if ps_run:  # the workers meet only at the parameter server, through Kafka: no rendezvous
        backend = "kafka-ps"
        write_phase(ranks, env.rank, "joining the parameter server")
        try:
            ps_client = join_ps(plan, bootstrap, run, env, model, device, stop_event, fresh=ckpt is None,
                                 outage=outage)
        except TrainerError:
            dataset.close(wait=False)
            raise
    else:
        timeout_s = settings.rendezvous_timeout_s()
        write_phase(ranks, env.rank, f"rendezvous of {env.world}")
        try:
            backend, note = rendezvous(env, placed, requested, timeout_s,
                                        collective_timeout_s(cfg.runtime.kafka_outage_s, timeout_s))
            if ckpt is not None:  # every rank resumes from the same step, or none does
                agree_on_step(env, int(ckpt["step"]), device if backend == "nccl" else torch.device("cpu"),
                               ckpt_file)  # gloo all-gathers host tensors only
        except TrainerError:
            dataset.close(wait=False)
            raise

    (ranks / f"{env.rank}.ready").touch()  # rendezvous done, consumers open (the orchestrator waits for it)
    write_phase(ranks, env.rank, None)
    meters: dict[int, StepMeter] = {}
    every = plan.checkpoint_every
    ckpts = plan.checkpoints  # every_steps and/or every_s
    compute = plan.compute
    performer = TrainerPerformer(env.rank, model, optimizer, dataset,
                                 None if ps_run else DistCollectives(env.rank, env.world,
                                                                     reduction=cfg.runtime.reduction,
                                                                     bucket_mb=cfg.runtime.bucket_mb,
                                                                     host_staging=backend == "gloo" and cuda,
                                                                     shared_memory=cfg.runtime.shared_memory
                                                                     and backend == "gloo",
                                                                     timeout_s=collective_timeout_s(
                                                                         cfg.runtime.kafka_outage_s, timeout_s)),
                                 meters,
                                 device=device, static=compute.factor(env.rank), dynamic=compute.dynamic,
                                 curve=compute.curve,
                                 seed=plan.seed, defer_acks=ckpts,
                                 ack_interval_s=0.0 if ckpts else ACK_INTERVAL_S,
                                 time_offset=ckpt["elapsed_s"] if ckpt else 0.0, stop_event=stop_event,
                                 due_time=None if ckpt else plan.due_time(env.rank), ps=ps_client, task=plan.task,
                                 graphed=GraphedForward(model, env.rank)
                                 if graphs_wanted(takes_fixed_batches(plan), device) else None,
                                 scoring=plan.prequential is not None)
    if ckpt is not None:
        performer.samples = int(ckpt.get("samples", 0))
    stop = plan.stop_rule()
    events = EventLog(ranks / f"{env.rank}.jsonl", append=resume, live=True)
    events.record("placement", time=performer.now(env.rank), device=env.rank, on=placed.device, gpu=placed.gpu,
                  backend=backend, note=note)  # the status line shows where each rank computes
    waits.attach(events, lambda: performer.now(env.rank), lambda: session.ctx.step)
    evaluation = None
    if env.rank == 0 and not ps_run:  # a PS run is scored at the PS (its W)
        task = plan.task
        # the test split or eval.path on `device`; eval.holdout: the streams' held-out records, read as they come
        source = eval_data(plan, bootstrap, run, device)
        evaluation = BackgroundEvaluation(model, source, None, GuardedEvents(events), stop, plan.eval_every_s,
                                          lock=performer.model_lock, task=task,
                                          on_eval=lambda now, step, value: log.info("eval t=%.1fs step %d %s %.4f",
                                                                                    now, step, task.primary, value))
    publisher = None
    if env.rank == 0 and not ps_run:  # model versions, with `publish:` (edgestream.publish; a PS run: the PS's)
        from edgestream.publish.publisher import ModelPublisher

        publisher = ModelPublisher.of(plan, run, run_dir, bootstrap, outage=outage, stop=stop_event.is_set)

    def version_figures() -> dict:  # the run's latest figures when a version is made (publish/metrics.py)
        ev = evaluation.evaluation if evaluation is not None else None
        watch = getattr(session, "watch", None)
        return {"heldout": None if ev is None or ev.last_metrics is None else {**ev.last_metrics,
                                                                                "time_s": ev.last_time},
                "prequential": None if watch is None else {"device": env.rank, **watch.counter.figures()}}

    params = performer.params
    take_digest = DigestTaker(params)
    saved_at: dict[str, Any] = {}
    schedule = None
    if ckpts:
        agree = None
        if not ps_run and plan.checkpoint_every_s is not None and env.world > 1:
            # the timer's verdicts: rank 0's, broadcast in a group of their own (trainer/schedule.py)
            from edgestream.trainer.schedule import broadcast_agree

            group = dist.new_group(backend="gloo", timeout=timedelta(
                seconds=collective_timeout_s(cfg.runtime.kafka_outage_s, timeout_s)))
            agree = broadcast_agree(group)
        from edgestream.trainer.schedule import CheckpointSchedule

        schedule = CheckpointSchedule(every, plan.checkpoint_every_s, int(ckpt["step"]) if ckpt else 0, agree=agree)

    def checkpoint(session: WorkerSession) -> None:
        # taken at a Log: ctx.step steps are applied and ctx.state is complete (the sync/ state
        # contract); the stream's state holds how far it was consumed, so a restarted worker
        # continues from exactly here
        ctx = session.ctx
        performer.settle()  # every loss up to here checked (a GPU's are read lazily): Diverged, not a checkpoint
        try:
            save_checkpoint(ckpt_file, model=model, optimizer=optimizer, step=ctx.step, state=ctx.state,
                            stream=dataset.state_dict(), elapsed_s=performer.now(env.rank),
                            samples=performer.samples, ident=ckpt_ident,
                            watch=session.watch_state())
        except CheckpointError as exc:  # a full or read-only disk: one line naming the file and the device
            raise TrainerError(str(exc)) from None
        performer.commit_pending()  # acks become durable only with the checkpoint that holds their model
        session.write_prequential()  # the counters as checkpointed: summary.json's figures if the rank dies later
        schedule.saved(ctx.step)
        log.info("checkpoint: step %d", ctx.step)

    def at_log(session: WorkerSession) -> None:
        step = session.ctx.step
        if digest:
            meters[env.rank].gauge(digest=take_digest())  # hashed off the step (trainer/digest.py)
        if evaluation is not None:
            evaluation.offer(performer.now(env.rank), step)
        group = session.ctx.drift
        if schedule is not None and (schedule.due(step) or (group is not None and group.checkpoint_step == step)):
            saved_at["due"] = True  # taken once this step's line is written (after_line); a drift response's too
        if publisher is not None and publisher.due(step, performer.now(env.rank)):
            with performer.model_lock:  # a copy of the parameters now; exported in the background
                publisher.offer(model, step, performer.now(env.rank), version_figures)

    def after_line(line: dict) -> None:
        # step lines are buffered (EventLog live): every line up to this step's goes through before the
        # checkpoint that holds their steps is saved and its acks committed, so a kill between the two
        # never leaves a checkpoint whose steps have no lines (the model, optimizer and ctx are as at the
        # Log: performing a Log changes none of them)
        if saved_at.pop("due", False):
            events.flush()
            checkpoint(session)

    session = WorkerSession(plan, env.rank, performer, stop=stop, events=events, meters=meters,
                            param_names=param_names(model), signal=stop_event.is_set, on_log=[at_log],
                            on_line=after_line if ckpts else None)
    if not ckpts:  # a commit waits for the line of its step to be written through (performer._ack)
        performer.lines_queued, performer.lines_written = (lambda: session.lines), (lambda: events.written_steps)
    performer.push_id = lambda: session.ctx.step  # a push's id: the worker's step (the PS drops repeats)
    performer.stop_reason = lambda: session.stop.reason
    performer.step = lambda: session.ctx.step  # the step an error names (as the step lines count it)
    if ckpt is not None:
        session.resume(ckpt["step"], ckpt["state"])
        if ckpt.get("watch") is not None:
            session.load_watch_state(ckpt["watch"])  # prequential counters and detector continue exactly
    t_start = time.monotonic()
    status = "finished"
    flush_error: OSError | None = None
    try:
        session.run_blocking()
        performer.settle()  # the last steps' losses, read lazily on a GPU, checked before the run counts as finished
    except Stopped:
        status = "stopped"
        raise TrainerError(f"device {env.rank}: stopped by a signal while waiting for stream data") from None
    except PSStopped as exc:
        status = "stopped"
        raise TrainerError(f"device {env.rank}: {exc}") from None
    except KafkaUnavailable:  # runtime.kafka_outage_s ran out (the wait's log lines and records are written)
        status = "failed"
        outage.hurry()  # Kafka is silent: its clients close without waiting for it again
        raise TrainerError(give_up_line(env.rank, outage, session.ctx.step)) from None
    except (TrainerError, Diverged) as exc:  # already one line naming the device (and the step or the file)
        status = "failed"
        log.error("%s", exc)
        raise TrainerError(str(exc)) from None
    except OSError as exc:  # a full or read-only disk under the rank's files
        status = "failed"
        raise TrainerError(disk_error(env.rank, exc, ranks)) from None
    except Exception as exc:  # a peer died or the group broke, or an unexpected error: one line, details in the log
        status = "failed"
        text = " ".join(str(exc).split())
        if isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and any(
                w in text.lower() for w in ("gloo", "nccl", "connection", "peer", "timed out"))):
            log.exception("collective failed")
            raise TrainerError(f"device {env.rank}: a collective with the other trainers failed (a peer died or "
                               f"the network broke): {text[:160]}") from None
        log.exception("unexpected error at step %d", session.ctx.step)
        raise TrainerError(f"device {env.rank}: unexpected {type(exc).__name__} at step {session.ctx.step}: "
                           f"{text[:200]} (traceback in {ranks / f'{env.rank}.log'})") from None
    except BaseException:
        status = "failed"
        raise
    finally:
        if status != "finished":  # ending in failure: close the Kafka clients without waiting for Kafka
            dataset.hurry()
            if session.watch is not None and not session.finished:
                session.write_prequential()  # its counters so far, for summary.json (a finished worker wrote them)
        if evaluation is not None:
            if status == "finished":
                evaluation.final(performer.now(env.rank), session.ctx.step)
            else:
                evaluation.close()
        if publisher is not None:
            try:  # the version of the end of the run (edgestream.publish.publisher)
                if status == "finished":
                    publisher.final(model, session.ctx.step, performer.now(env.rank), version_figures())
                publisher.close()
            except Exception as exc:  # noqa: BLE001 - a version that cannot be made must not hide the run's end
                log.error("model version at the end of the run: %s", " ".join(str(exc).split())[:300])
        if status == "finished" and ckpts and schedule.last_step != session.ctx.step:
            checkpoint(session)  # (none when the schedule's checkpoint of this very step was the last)
        elif not ckpts:
            try:
                try:  # the lines first: a commit never gets ahead of its step's line
                    events.flush()
                except OSError as exc:  # only what was written is committed; raised once the rest is closed
                    flush_error = exc
                performer.commit_pending()  # the newest acknowledged batch not yet committed (ACK_INTERVAL_S)
            except KafkaUnavailable:
                if status == "finished":
                    raise
        events.close()
        dataset.close(wait=status == "finished")
        if ps_client is not None:
            ps_client.close()
        if performer.collectives is not None:
            performer.collectives.close()  # its shared-memory files, if any
        if dist.is_initialized():
            dist.destroy_process_group()
        log.info("rank %d: status %s at step %d", env.rank, status, session.ctx.step)
        logging.getLogger("edgestream").removeHandler(handler)
        handler.close()
        if flush_error is not None and status == "finished":
            raise flush_error  # a full disk at the last lines: train() names the file
    totals = dataset.totals
    ps_stop = {"stop_reason": performer.ps_reason} if performer.ps_reason and session.stop.reason is None else {}
    summary = {**session.summary(), **ps_stop, "device": str(device), "backend": backend, "samples": performer.samples,
               "acked_samples": performer.acked_samples, "dropped": totals["dropped"], "dlq": totals["dlq"],
               "injected_in": totals["injected_in"], "injected_out": totals["injected_out"],
               "wall_s": round(time.monotonic() - t_start, 3), "resumed": resume,
               **({"signal": signal.Signals(signalled[0]).name} if signalled else {})}
    (ranks / f"{env.rank}.summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
