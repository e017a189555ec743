"""The runs a broker holds, and removing them: `edgestream topics list` / `topics delete` and
`runtime.cleanup: delete-on-success`.

A run is the topic prefix `<name>-<algorithm>-<run id>` (DESIGN.md "Kafka conventions"). Its topics are the
`<run>.<kind>` topics edgestream creates (`dev.<i>`, `inj.<i>`, `inj`, `streams`, `dlq`, `meta`,
`ps.*`): any other topic -- no run prefix, another kind, Kafka's internal `__*` -- is never listed as a
run's, so never deleted. Its consumer groups are every group named `<run>.*`: the trainers'
`<run>.dev.<i>.trainer` / `<run>.inj.<i>.trainer`, the PS's `<run>.ps` and `<run>.ps.worker.<i>`, and the
orchestrator's `<run>.orchestrator` (names contain no '.', so `<run>.` is nobody else's prefix).

A run is *live* while its orchestrator is a member of `<run>.orchestrator` (launch/hold.py): a live run
is never deleted. Its *age* comes from the run id when it is the default `YYYYmmdd-HHMMSS-xxxx` (UTC),
else from the earliest message timestamp in its topics (ListOffsets by timestamp: no message is read);
a run with neither (empty topics, a chosen id) has no age and is not `--older-than` anything. The
amount held is counted in messages (end - start offsets): librdkafka has no DescribeLogDirs, so bytes
on disk are not available from here.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from edgestream.kafka.admin import admin_client, delete_topics
from edgestream.kafka.topic_names import hold_group

#: a run's topic: `<name>-<algorithm>-<run id>.<kind>` (name and run id: letters, digits, '-', '_'; no '.')
RUN_TOPIC = re.compile(r"^(?P<run>[A-Za-z0-9][A-Za-z0-9_\-]*-[A-Za-z0-9_\-]+)"
                       r"\.(?:dev\.\d+|inj(?:\.\d+)?|streams|dlq|meta|ps\.[A-Za-z0-9_.\-]+)$")
#: the default run id's UTC time (edgestream.runid.new_run_id) at the end of a run name
RUN_ID_TIME = re.compile(r"-(?P<t>\d{8}-\d{6})-[0-9a-f]{4}$")
DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: how long a group that still has members (a stopped child's, until its session times out) is retried
GROUP_BUSY_S = 15.0
#: names shown per kind in one "deleted"/"would delete" line
SHOWN_NAMES = 12


class LifecycleError(ValueError):
    """A run asked for is not on the broker, or a duration is malformed (one line)."""


@dataclass
class RunInfo:
    """One run on the broker."""

    run: str
    topics: list[str] = field(default_factory=list)
    partitions: int = 0
    messages: int = 0
    groups: list[str] = field(default_factory=list)
    started: float | None = None   # epoch seconds (run id, else its earliest message), None: unknown
    started_from: str = ""         # "run id" | "first message" | ""
    holder: str | None = None      # the live orchestrator (its client id), None: not live

    def age_s(self, now: float | None = None) -> float | None:
        return None if self.started is None else max(0.0, (now or time.time()) - self.started)

    def as_dict(self, now: float | None = None) -> dict:
        return {**asdict(self), "age_s": self.age_s(now), "live": self.holder is not None}


def parse_duration(text: str, what: str = "--older-than") -> float:
    """'90s', '30m', '2h', '7d', '1w' -> seconds; LifecycleError otherwise."""
    m = DURATION.match(str(text).strip())
    if not m:
        raise LifecycleError(f"{what}: {text!r} is not allowed; give a number and a unit s, m, h, d or w "
                             "(e.g. 30m, 2h, 7d)")
    return float(m["n"]) * UNIT_S[m["unit"]]


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def run_of_topic(topic: str) -> str | None:
    m = RUN_TOPIC.match(topic)
    return m["run"] if m else None


def _result(fut, timeout_s: float):
    return fut.result(timeout=timeout_s + 5)


def _groups(admin: AdminClient, timeout_s: float) -> list[str]:
    res = _result(admin.list_consumer_groups(request_timeout=timeout_s), timeout_s)
    if res.errors:  # a partial list would hide groups from a delete
        raise LifecycleError(f"listing the consumer groups failed: {res.errors[0]}")
    return sorted(g.group_id for g in res.valid)


def _offsets(admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec, timeout_s: float) -> dict:
    """{(topic, partition): ListOffsetsResultInfo}; a partition Kafka cannot answer for is left out."""
    if not tps:
        return {}
    out = {}
    for tp, fut in admin.list_offsets({tp: spec for tp in tps}, request_timeout=timeout_s).items():
        try:
            out[(tp.topic, tp.partition)] = _result(fut, timeout_s)
        except KafkaException:
            continue
    return out


def _holders(admin: AdminClient, groups: list[str], timeout_s: float) -> dict[str, str]:
    """{hold group: client id of a member} for the hold groups that have members (live runs)."""
    if not groups:
        return {}
    out = {}
    for group, fut in admin.describe_consumer_groups(groups, request_timeout=timeout_s).items():
        try:
            members = list(getattr(_result(fut, timeout_s), "members", None) or [])
        except KafkaException:
            continue
        if members:
            out[group] = members[0].client_id or "another orchestrator"
    return out


def list_runs(bootstrap: str, security: Mapping[str, str] | None = None, *, timeout_s: float = 30.0,
              admin: AdminClient | None = None) -> list[RunInfo]:
    """Every run on the broker at `bootstrap`, sorted by name (see the module doc for what is counted)."""
    admin = admin or admin_client(bootstrap, security)
    md = admin.list_topics(timeout=timeout_s)
    runs: dict[str, RunInfo] = {}
    tps: list[TopicPartition] = []
    for name, topic in md.topics.items():
        run = run_of_topic(name)
        if run is None:
            continue
        info = runs.setdefault(run, RunInfo(run))
        info.topics.append(name)
        info.partitions += len(topic.partitions)
        tps += [TopicPartition(name, p) for p in topic.partitions]
    if not runs:
        return []
    groups = _groups(admin, timeout_s)
    for g in groups:
        run = g.split(".", 1)[0]
        if "." in g and run in runs:
            runs[run].groups.append(g)
    first = _offsets(admin, tps, OffsetSpec.earliest(), timeout_s)
    last = _offsets(admin, tps, OffsetSpec.latest(), timeout_s)
    for (topic, part), end in last.items():
        start = first.get((topic, part))
        runs[run_of_topic(topic)].messages += max(0, end.offset - (start.offset if start else 0))
    undated = []
    for info in runs.values():
        info.topics.sort()
        m = RUN_ID_TIME.search(info.run)
        if m:
            info.started, info.started_from = float(calendar.timegm(time.strptime(m["t"], "%Y%m%d-%H%M%S"))), "run id"
        else:
            undated.append(info.run)
    if undated:  # the earliest message timestamp: ListOffsets for timestamp 0 answers the first message's
        wanted = [tp for tp in tps if run_of_topic(tp.topic) in undated
                  and last.get((tp.topic, tp.partition)) is not None
                  and last[(tp.topic, tp.partition)].offset > getattr(first.get((tp.topic, tp.partition)), "offset", 0)]
        for (topic, _), res in _offsets(admin, wanted, OffsetSpec.for_timestamp(0), timeout_s).items():
            info = runs[run_of_topic(topic)]
            if res.offset >= 0 and res.timestamp > 0 and (info.started is None or res.timestamp / 1000 < info.started):
                info.started, info.started_from = res.timestamp / 1000.0, "first message"
    holders = _holders(admin, [hold_group(r) for r in runs if hold_group(r) in groups], timeout_s)
    for run, info in runs.items():
        info.holder = holders.get(hold_group(run))
    return [runs[r] for r in sorted(runs)]


def find_runs(runs: list[RunInfo], names: Iterable[str]) -> list[RunInfo]:
    """The runs `names` mean (a run name `<name>-<algorithm>-<run id>`, or a run id naming one run); LifecycleError
    naming what is not there (and what is)."""
    by_name = {r.run: r for r in runs}
    out: list[RunInfo] = []
    for name in names:
        hit = by_name.get(name)
        if hit is None:
            matches = [r for r in runs if r.run.endswith(f"-{name}")]
            if len(matches) > 1:
                raise LifecycleError(f"--run {name}: the run id matches several runs: "
                                     f"{', '.join(r.run for r in matches)}; give the run name "
                                     "(<name>-<algorithm>-<run id>)")
            if not matches:
                shown = ", ".join(r.run for r in runs[:8]) + (", ..." if len(runs) > 8 else "") if runs else "none"
                raise LifecycleError(f"--run {name}: no such run on the broker (no topic {name}.* or <name>-{name}.*); "
                                     f"runs there: {shown}")
            hit = matches[0]
        if hit not in out:
            out.append(hit)
    return out


def older_than(runs: list[RunInfo], seconds: float, now: float | None = None) -> list[RunInfo]:
    """The runs of known age older than `seconds`."""
    now = now or time.time()
    return [r for r in runs if r.started is not None and now - r.started > seconds]


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


def describe(info: RunInfo) -> str:
    """'6 topics (a, b, ...), 2 consumer groups (c, d)' of a run."""
    groups = f"{len(info.groups)} consumer group(s)" + (f" ({_names(info.groups)})" if info.groups else "")
    return f"{len(info.topics)} topic(s) ({_names(info.topics)}), {groups}"


def _delete_groups(admin: AdminClient, groups: list[str], timeout_s: float) -> tuple[list[str], list[str]]:
    """Delete consumer groups; one still with members is retried for GROUP_BUSY_S. Returns (deleted, kept
    with the reason)."""
    deleted, todo, reasons = [], list(groups), {}
    deadline = time.monotonic() + GROUP_BUSY_S
    while todo:
        busy = []
        for group, fut in admin.delete_consumer_groups(todo, request_timeout=timeout_s).items():
            try:
                _result(fut, timeout_s)
                deleted.append(group)
            except KafkaException as exc:
                code = exc.args[0].code() if exc.args and hasattr(exc.args[0], "code") else None
                if code == KafkaError.GROUP_ID_NOT_FOUND:
                    deleted.append(group)  # gone already (its offsets went with its topics)
                elif code == KafkaError.NON_EMPTY_GROUP:
                    busy.append(group)
                    reasons[group] = "it still has members"
                else:
                    reasons[group] = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        todo = busy
        if todo and time.monotonic() < deadline:
            time.sleep(1.0)
        elif todo:
            break
    kept = [f"{g} ({reasons[g]})" for g in groups if g not in deleted]
    return sorted(deleted), kept


def delete_run(bootstrap: str, info: RunInfo, security: Mapping[str, str] | None = None, *,
               timeout_s: float = 30.0, admin: AdminClient | None = None) -> tuple[list[str], list[str], list[str]]:
    """Delete a run's consumer groups, then its topics (only those of `info`). Returns (topics deleted,
    groups deleted, what could not be deleted with why). The caller checks the run is not live."""
    admin = admin or admin_client(bootstrap, security)
    groups, kept = _delete_groups(admin, list(info.groups), timeout_s)
    topics = [t for t in info.topics if run_of_topic(t) == info.run]  # never another run's or a non-run topic
    try:
        deleted = delete_topics(bootstrap, topics, security, timeout=timeout_s)
    except KafkaException as exc:
        deleted = []
        kept.append(f"its topics ({exc.args[0].str() if exc.args and hasattr(exc.args[0], 'str') else exc})")
    return sorted(deleted), groups, kept


def live_line(info: RunInfo) -> str:
    return (f"run {info.run} is live: held by {info.holder} (a live member of consumer group "
            f"{hold_group(info.run)}); not deleted -- stop the run first")


def delete_runs(bootstrap: str, runs: list[RunInfo], security: Mapping[str, str] | None = None, *,
                apply: bool, echo: Callable[[str], None], timeout_s: float = 30.0) -> dict[str, int]:
    """Delete (apply) or show (dry run) what `runs` hold, one line per run; a live run is one line and is
    kept. Returns counts: runs, topics, groups (deleted, or that would be), live (refused), failed."""
    counts = {"runs": 0, "topics": 0, "groups": 0, "live": 0, "failed": 0}
    admin = admin_client(bootstrap, security)
    for info in runs:
        if info.holder is not None:
            counts["live"] += 1
            echo(live_line(info))
            continue
        if not apply:
            echo(f"would delete run {info.run}: {describe(info)}")
            counts["runs"] += 1
            counts["topics"] += len(info.topics)
            counts["groups"] += len(info.groups)
            continue
        # just before deleting, ask again: an orchestrator may have taken the run since it was listed
        holder = _holders(admin, [hold_group(info.run)], timeout_s).get(hold_group(info.run))
        if holder is not None:
            info.holder = holder
            counts["live"] += 1
            echo(live_line(info))
            continue
        topics, groups, kept = delete_run(bootstrap, info, security, timeout_s=timeout_s, admin=admin)
        done = RunInfo(info.run, topics=topics, groups=groups)
        echo(f"deleted run {info.run}: {describe(done)}" + (f"; NOT deleted: {'; '.join(kept)}" if kept else ""))
        counts["runs"] += 1
        counts["topics"] += len(topics)
        counts["groups"] += len(groups)
        counts["failed"] += bool(kept)
    return counts


def cleanup_after_run(bootstrap: str, run: str, finished: bool, security: Mapping[str, str] | None = None,
                      echo: Callable[[str], None] = print) -> None:
    """`runtime.cleanup: delete-on-success` at the end of a real run (every child exited, summary written,
    the run's hold given up): a finished run's topics and consumer groups are deleted; a run that did not
    finish keeps them for --resume, said in one line. Kafka trouble here is one line, never the run's
    failure."""
    config = " --config CONFIG" if security else ""  # the TLS/SASL settings come from the config, never argv
    later = f"edgestream topics delete --run {run} --bootstrap {bootstrap}{config} --yes"
    if not finished:
        echo(f"runtime.cleanup: delete-on-success: run {run} did not finish, so its topics and consumer groups stay "
             f"on {bootstrap} for --resume (remove them with `{later}`)")
        return
    try:
        info = next((r for r in list_runs(bootstrap, security) if r.run == run), None)
        if info is None:
            echo(f"runtime.cleanup: run {run} has no topics on {bootstrap} to delete")
            return
        topics, groups, kept = delete_run(bootstrap, info, security)
    except (KafkaException, TimeoutError, RuntimeError) as exc:
        echo(f"runtime.cleanup: deleting run {run}'s topics on {bootstrap} failed ({exc}); remove them with `{later}`")
        return
    echo(f"runtime.cleanup: deleted run {run}'s {len(topics)} topic(s) and {len(groups)} consumer group(s) from "
         f"{bootstrap}" + (f"; NOT deleted: {'; '.join(kept)} (retry with `{later}`)" if kept else ""))
