"""Faults a real run names (issue 21): corrupted, foreign and stale checkpoints, lost consumer-group
offsets, one run id twice, secrets on disk, a full disk, trainers dying one after the other.

Real broker (the session fixture), real `edgestream run --engine local` orchestrators with real
`edgestream produce` / `edgestream train` children (gloo, CPU). Nothing is mocked; timeouts are hang
guards only. Runs are small (digits, mlp, 2-3 devices, a few steps).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import pytest
from factories import write_cfg  # the local run's config (tests/factories.py)
from support.runs import CLI, HANG_S, error_lines, finish, load_ckpt, resume, run, start, step_lines, wait_steps


def flip_a_bit(path: Path) -> None:
    """Flip one bit in the middle of the largest member's data (tensor bytes) of a torch zip file."""
    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    start_ = info.header_offset + 30 + name_len + extra_len
    data[start_ + info.file_size // 2] ^= 0x10
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------- 2. checkpoints are checked on load


@pytest.mark.timeout(900)
def test_corrupted_foreign_and_stale_checkpoints_are_refused_naming_the_file(bootstrap, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, devices=3, max_steps=5, every_steps=5)
    out = tmp_path / "runs"
    code, _, err = run(cfg, bootstrap, out=out)
    assert code == 0, err
    run_dir = out / f"{run_prefix}-ddl-r1"
    ckpts = run_dir / "checkpoints"
    at5 = {r: (ckpts / f"rank{r}.pt").read_bytes() for r in range(3)}
    code, _, err = resume(cfg, bootstrap, run_dir, "stop.max_steps=9")
    assert code == 0, err
    ck = {r: load_ckpt(ckpts / f"rank{r}.pt") for r in range(3)}
    assert {c["step"] for c in ck.values()} == {9}
    good = {r: (ckpts / f"rank{r}.pt").read_bytes() for r in range(3)}

    def refused(path: Path, *words: str) -> str:
        code, _, err = resume(cfg, bootstrap, run_dir, "stop.max_steps=12")
        lines = error_lines(err)
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert str(path) in lines[0] and all(w in lines[0] for w in words), lines[0]
        for r in range(3):
            (ckpts / f"rank{r}.pt").write_bytes(good[r])
        return lines[0]

    flip_a_bit(ckpts / "rank1.pt")  # a bit flipped in the tensor data
    refused(ckpts / "rank1.pt", "checksum")
    (ckpts / "rank2.pt").write_bytes(b"")  # empty
    refused(ckpts / "rank2.pt", "empty")
    (ckpts / "rank0.pt").write_bytes(good[1])  # another rank's file
    refused(ckpts / "rank0.pt", "rank 1", "rank 0")
    # each rank keeps the checkpoint its last one replaced (rank<i>.prev.pt): here the step-5 ones
    assert all((ckpts / f"rank{r}.prev.pt").read_bytes() == at5[r] for r in range(3))
    for r in range(3):
        (ckpts / f"rank{r}.prev.pt").unlink()
    (ckpts / "rank2.pt").write_bytes(at5[2])  # stale: an older step than its peers, who hold no step-5 checkpoint
    line = refused(ckpts / "rank2.pt", "step 5", "step 9")
    assert "rank 0" in line or "ranks 0" in line
    # another run's checkpoints: the same files under another run id
    other = out / f"{run_prefix}-ddl-r2"
    shutil.copytree(run_dir, other)
    code, _, err = resume(cfg, bootstrap, other)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1, err
    assert str(other / "checkpoints") in lines[0] and f"{run_prefix}-ddl-r1" in lines[0], lines[0]
    # a trainer started by hand checks its file too (before its rendezvous)
    flip_a_bit(ckpts / "rank1.pt")
    env = dict(os.environ, RANK="1", WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT="1", LOCAL_RANK="1",
               OMP_NUM_THREADS="1", EDGESTREAM_RENDEZVOUS_TIMEOUT_S="5")
    res = subprocess.run([*CLI, "train", str(cfg), "--bootstrap", bootstrap, "--run-id", "r1", "--out", str(out),
                          "--resume"], env=env, capture_output=True, text=True, timeout=HANG_S)
    last = [ln for ln in res.stderr.splitlines() if ln.strip()][-1]
    assert res.returncode != 0 and str(ckpts / "rank1.pt") in last and "checksum" in last, res.stderr[-2000:]
    assert "rendezvous" not in res.stderr
    # rank 2 stopped before its step-9 checkpoint, the others kept their step-5 one: all continue from step 5
    for r in range(3):
        (ckpts / f"rank{r}.pt").write_bytes(at5[2] if r == 2 else good[r])
        (ckpts / f"rank{r}.prev.pt").write_bytes(at5[r])
    code, _, err = resume(cfg, bootstrap, run_dir, "stop.max_steps=7")
    assert code == 0, err
    assert "rank(s) 0, 1 continue from their previous checkpoint at step 5" in err, err
    assert {load_ckpt(ckpts / f"rank{r}.pt")["step"] for r in range(3)} == {7}


# ---------------------------------------------------------------- 3. the checkpoint's positions are the truth


@pytest.mark.timeout(600)
def test_resume_after_the_group_offsets_are_gone_trains_no_sample_twice(bootstrap, run_prefix, tmp_path):
    from confluent_kafka.admin import AdminClient

    from edgestream.consumers.device_stream import trainer_group

    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=8, every_steps=4)
    out = tmp_path / "runs"
    code, _, err = run(cfg, bootstrap, out=out)
    assert code == 0, err
    run_dir = out / f"{run_prefix}-ddl-r1"
    first = {r: step_lines(run_dir / "ranks" / f"{r}.jsonl") for r in range(2)}
    groups = [trainer_group(run_dir.name, d) for d in range(2)]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its futures are done
    for f in admin.delete_consumer_groups(groups, request_timeout=30).values():
        f.result()
    code, _, err = resume(cfg, bootstrap, run_dir, "stop.max_steps=13")
    assert code == 0, err
    for r in range(2):
        lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")
        after = lines[len(first[r]):]
        assert [e["step"] for e in after] == list(range(8, 13))
        trained = max(e["seq_last"] for e in first[r])
        assert after[0]["seq_first"] == trained + 1, (trained, after[0])  # nothing trained twice, nothing skipped
        seqs = [(e["seq_first"], e["seq_last"]) for e in first[r] + after]
        assert all(b[0] == a[1] + 1 for a, b in zip(seqs, seqs[1:], strict=False))
        ck = load_ckpt(run_dir / "checkpoints" / f"rank{r}.pt")
        assert ck["step"] == 13 and ck["stream"]["offsets"]["dev"] == after[-1]["seq_last"] + 1  # its own positions


# ---------------------------------------------------------------- 4. one run id, one orchestrator


def test_two_orchestrators_of_one_run_id_never_both_proceed(tmp_path, run_prefix):
    """The claim itself, raced in threads many times: exactly one LocalRun holds the run directory."""
    from edgestream.config import load_config
    from edgestream.launch import LaunchError, LocalRun

    cfg = load_config(write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=5))
    for trial in range(25):
        runs = [LocalRun(cfg, out=tmp_path / "runs", run_id=f"x{trial}", bootstrap="127.0.0.1:1") for _ in range(3)]
        barrier = threading.Barrier(len(runs))
        got: list[object] = [None] * len(runs)

        def claim(i: int, runs=runs, barrier=barrier, got=got) -> None:
            barrier.wait()
            try:
                runs[i].claim.take()
                got[i] = "held"
            except LaunchError as exc:
                got[i] = exc

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(runs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got.count("held") == 1, got
        for g in got:
            if g != "held":
                assert g.code == 2 and f"run {run_prefix}-ddl-x{trial} is held by" in str(g) and f"pid {os.getpid()}" in str(g)
        for r in runs:
            r.claim.release()


@pytest.mark.timeout(600)
def test_a_second_orchestrator_of_a_running_run_is_refused(bootstrap, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000, every_steps=50)
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    procs = [start(cfg, bootstrap, out=out), start(cfg, bootstrap, out=out)]  # two at once
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.1)
    loser = next(p for p in procs if p.poll() is not None)
    winner = next(p for p in procs if p is not loser)
    code, _, err = finish(loser)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and f"run {run_dir.name} is held by" in lines[0], err
    assert f"pid {winner.pid}" in lines[0]
    wait_steps(run_dir, winner, 2, 2)
    # a resume while it runs is refused the same way
    code, _, err = resume(cfg, bootstrap, run_dir)
    assert code == 2 and f"pid {winner.pid}" in error_lines(err)[0], err
    winner.send_signal(signal.SIGKILL)  # a dead holder's claim is taken over
    winner.communicate(timeout=HANG_S)
    time.sleep(1.0)
    code, _, err = resume(cfg, bootstrap, run_dir, "stop.max_steps=3")
    assert code == 0 or "is held by" not in err, err


# ---------------------------------------------------------------- 5. secrets


def test_secrets_never_reach_the_disk_even_when_the_orchestrator_is_killed(bootstrap, run_prefix, tmp_path):
    secret = "s3cret-Value-8472"
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000,
                    runtime={"kafka_client": {"sasl.username": "u", "sasl.password": secret}})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    proc = start(cfg, bootstrap, out=out)
    wait_steps(run_dir, proc, 2, 2)  # the children read the config and train
    proc.kill()
    proc.communicate(timeout=HANG_S)
    time.sleep(1.0)
    leaked = [p for p in out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaked, leaked


def test_masking_replaces_secret_values_not_substrings():
    from edgestream.config.check import _masked

    client = {"sasl.password": "o", "ssl.key.password": "hunter22", "sasl.username": "o"}
    text = ('No such configuration property: "bogus.producer" ssl.key.password=hunter22 sasl.password=o '
            'pass: hunter22.')
    masked = _masked(text, client)
    assert masked == ('No such configuration property: "bogus.producer" ssl.key.password=*** sasl.password=*** '
                      'pass: ***.'), masked


def test_a_librdkafka_error_keeps_its_words_with_a_one_letter_password(tmp_path, run_prefix):
    from edgestream.config import ConfigError, load_config

    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=5,
                    runtime={"kafka_client": {"sasl.password": "o", "ssl.no.such.option": "1"}})
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    text = " ".join(err.value.problems)
    assert "No such configuration property" in text and "ssl.no.such.option" in text, text
    assert "***" not in text


# ---------------------------------------------------------------- 8. disk trouble and who died first


def test_a_full_out_folder_is_one_line_naming_the_path_and_the_device(bootstrap, run_prefix, tmp_path):
    out = tmp_path / "tiny"
    out.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(out)], capture_output=True, text=True)
    if mounted.returncode:  # the project's machines and CI run as root: a test that cannot run fails
        pytest.fail(f"cannot mount a tmpfs for the disk test (needs root): {mounted.stderr.strip()}")
    try:
        cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000, every_steps=2)
        code, _, err = run(cfg, bootstrap, out=out)
        lines = error_lines(err)
        own = [ln for ln in err.splitlines() if not ln.startswith(("  ", "last lines of"))]  # not a child's log
        assert code == 1 and not any("Traceback" in ln for ln in own), err
        assert len(lines) == 1, err
        assert "no space left" in lines[0].lower() and str(out) in lines[0] and "device " in lines[0], lines[0]
    finally:
        subprocess.run(["umount", "-l", str(out)], check=False)


def test_the_first_trainer_to_die_is_named_not_the_lowest_rank(bootstrap, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000)
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    proc = start(cfg, bootstrap, out=out)
    wait_steps(run_dir, proc, 2, 2)
    pids = json.loads((run_dir / "pids.json").read_text())["trainers"]
    os.kill(pids["0"], signal.SIGSTOP)      # rank 0 cannot notice rank 1's death ...
    os.kill(pids["1"], signal.SIGUSR1)      # ... rank 1 dies first
    time.sleep(0.3)
    os.kill(pids["0"], signal.SIGUSR1)      # then rank 0, of the same signal (equal exit statuses)
    os.kill(pids["0"], signal.SIGCONT)
    code, _, err = finish(proc)
    lines = error_lines(err)
    assert code == 1 and lines and lines[0].startswith("error: device 1 (trainer rank 1) killed by SIGUSR1"), err
