"""The one extension mechanism: every pluggable kind is a `Registry`, and a name resolves, in order, to

1. a **built-in** (registered by edgestream itself, through `Registry.register`, like any other entry),
2. an **import path** ``"package.module:attribute"`` (the attribute may be dotted: ``"pkg.mod:Class.make"``),
   imported from installed packages, ``PYTHONPATH`` and the folders `add_search_path` added (a config
   file's folder: `edgestream.config.load_config` adds it), or
3. an **entry point** named `name` in the group ``edgestream.<kind>`` of an installed package
   (``[project.entry-points."edgestream.models"] sensor-cnn = "mypkg.models:sensor_cnn"``).

Kinds (`REGISTRIES`): ``models``, ``datasets``, ``algorithms``, ``compressors``, ``tasks``, ``decoders``,
``detectors``.
Built-ins are registered as import-path strings, so looking a built-in name up imports nothing (the config schema loads
without torch); the object is imported on `load`.

Errors are `PluginError` (a ValueError) with one line: an unknown name lists the built-ins and shows
the import-path form; a failing import names the module and the exception; an object of the wrong
kind says what was expected (`Registry.check`).

`add_search_path(folder)` puts a folder first on ``sys.path`` and on ``PYTHONPATH`` in ``os.environ``,
so every child process started afterwards (trainers, the parameter server, producers) resolves an
import path the same way this process does.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

#: the entry-point group of a kind: "edgestream.<kind>"
GROUP_PREFIX = "edgestream."


class PluginError(ValueError):
    """A name that does not resolve to a usable plugin (one line, naming the field when known)."""


@dataclass(frozen=True)
class Available:
    """One name a registry can resolve: where it comes from ("built-in", "entry point (dist 1.0)") and
    the target (an import path string)."""

    name: str
    source: str
    target: str
    summary: str = ""


def is_import_path(name: str) -> bool:
    """Whether `name` reads as ``package.module:attribute``."""
    mod, sep, attr = name.partition(":")
    return bool(sep and mod.strip() and attr.strip()) and " " not in name


def import_object(path: str, field: str = "") -> Any:
    """The object at ``package.module:attribute``; PluginError (one line) naming the module and the
    exception when the import fails, or the attribute when it is missing."""
    where = f"{field}: " if field else ""
    mod_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - a user's module may raise anything while importing
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise PluginError(f"{where}cannot import module {mod_name!r} ({type(exc).__name__}: {detail}); "
                          f"searched installed packages, PYTHONPATH and the config file's folder") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{where}module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def add_search_path(folder: str | os.PathLike) -> None:
    """Make modules in `folder` importable here and in every child process started afterwards."""
    folder = os.path.abspath(os.fspath(folder))
    if folder not in sys.path:
        sys.path.insert(0, folder)
        importlib.invalidate_caches()
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([folder, *parts])


class Registry:
    """The names of one pluggable kind (see the module doc).

    kind: "models" (the entry-point group is "edgestream.models"); what: how an error names one entry
    ("model factory"); check(obj) -> a problem line or None: what a resolved object must be.
    """

    def __init__(self, kind: str, what: str, check: Callable[[Any], str | None] | None = None) -> None:
        self.kind, self.what, self._check = kind, what, check
        self.group = GROUP_PREFIX + kind
        self._builtins: dict[str, Available] = {}
        self._loaded: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, built-ins={list(self._builtins)})"

    # ------------------------------------------------------------------ registering
    def register(self, name: str, target: str | Any, summary: str = "", where: str | None = None) -> None:
        """Register a built-in: `target` is an import path string (imported on first `load`) or the
        object itself (`where`: the module it is defined in, for listings)."""
        if name in self._builtins:
            raise ValueError(f"{self.kind}: {name!r} is registered twice")
        if isinstance(target, str):
            self._builtins[name] = Available(name, "built-in", target, summary)
        else:
            path = where or f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', '?')}"
            self._builtins[name] = Available(name, "built-in", path, summary)
            self._loaded[name] = target

    @property
    def builtins(self) -> tuple[str, ...]:
        return tuple(self._builtins)

    def entry_points(self) -> dict[str, Any]:
        """{name: importlib.metadata.EntryPoint} of the installed packages' group edgestream.<kind>."""
        try:
            eps = metadata.entry_points(group=self.group)
        except Exception:  # noqa: BLE001 - a broken distribution must not break the built-ins
            return {}
        return {ep.name: ep for ep in eps}

    def available(self) -> list[Available]:
        """Every name this registry resolves without an import path: built-ins, then entry points."""
        out = list(self._builtins.values())
        for name, ep in sorted(self.entry_points().items()):
            if name in self._builtins:
                continue  # a built-in wins; `edgestream plugins` shows the shadowed one as such
            dist = getattr(ep, "dist", None)
            src = f"entry point ({dist.name} {dist.version})" if dist is not None else "entry point"
            out.append(Available(name, src, ep.value))
        return out

    # ------------------------------------------------------------------ resolving
    def knows(self, name: str) -> bool:
        """Whether `name` is a built-in or an installed entry point (import paths are not looked at)."""
        return name in self._builtins or name in self.entry_points()

    def unknown(self, name: str, field: str = "") -> PluginError:
        where = f"{field}: " if field else ""
        return PluginError(f"{where}{name!r} is not a built-in {self.what} or an installed plugin; built-ins: "
                           f"{', '.join(self._builtins)}; or give an import path 'package.module:attribute' "
                           f"(or an entry point in the group {self.group!r})")

    def load(self, name: str, field: str = "") -> Any:
        """The object `name` stands for (see the module doc), checked; PluginError (one line) otherwise."""
        if name in self._loaded:
            return self._loaded[name]
        if name in self._builtins:
            obj = import_object(self._builtins[name].target, field)
        elif is_import_path(name):
            obj = import_object(name, field)
        else:
            ep = self.entry_points().get(name)
            if ep is None:
                raise self.unknown(name, field)
            try:
                obj = ep.load()
            except Exception as exc:  # noqa: BLE001
                raise PluginError(f"{field + ': ' if field else ''}entry point {name!r} ({ep.value}) of group "
                                  f"{self.group!r} failed to load ({type(exc).__name__}: {exc})") from None
        if self._check is not None:
            problem = self._check(obj)
            if problem:
                raise PluginError(f"{field + ': ' if field else ''}{name!r} {problem}")
        self._loaded[name] = obj
        return obj

    def source(self, name: str) -> str:
        """Where `name` comes from: "built-in", "entry point (...)", or "import path"."""
        if name in self._builtins:
            return "built-in"
        for a in self.available():
            if a.name == name:
                return a.source
        return "import path"


def _callable(obj: Any) -> str | None:
    return None if callable(obj) else f"is a {type(obj).__name__}, not a callable"


#: models: factory(input_shape, num_outputs, **kwargs) -> torch.nn.Module
MODELS = Registry("models", "model", _callable)
#: datasets: factory(**kwargs) -> arrays or a map-style torch Dataset (edgestream.data.formats)
DATASETS = Registry("datasets", "dataset", _callable)
#: compressors: factory(spec: dict) -> edgestream.compression.Compressor
COMPRESSORS = Registry("compressors", "compressor", _callable)
#: algorithms: an edgestream.sync.AlgorithmSpec (see docs/extending.md)
ALGORITHMS = Registry("algorithms", "algorithm", None)



def _instance_of(path: str) -> Callable[[Any], str | None]:
    """A check that an object is an instance of the class at import path `path`, imported on the first check
    (as a built-in's target is: the registry imports none of the kinds it holds)."""

    def check(obj: Any) -> str | None:
        cls = import_object(path)
        return None if isinstance(obj, cls) else f"is a {type(obj).__name__}, not an {path.replace(':', '.')}"

    return check


#: tasks: an edgestream.tasks.Task (the loss and the metrics)
TASKS = Registry("tasks", "task", _instance_of("edgestream.tasks:Task"))

#: decoders: factory(fmt: edgestream.data.records.RecordFormat) -> a record decoder (streams.format)
DECODERS = Registry("decoders", "record decoder", _callable)

#: detectors: factory(**drift.params) -> a drift detector (edgestream.drift: update(value) -> bool and its state)
DETECTORS = Registry("detectors", "drift detector", _callable)

REGISTRIES: dict[str, Registry] = {r.kind: r for r in (MODELS, DATASETS, ALGORITHMS, COMPRESSORS, TASKS, DECODERS,
                                                       DETECTORS)}

for _name, _target in (("mlp", "edgestream.models.mlp:mlp"), ("cnn-small", "edgestream.models.cnn:cnn_small"),
                       ("resnet18", "edgestream.models.resnet:resnet18"),
                       ("resnet20", "edgestream.models.resnet:resnet20"),
                       ("vgg-small", "edgestream.models.vgg:vgg_small")):
    MODELS.register(_name, _target)
for _name, _target in (("none", "none"), ("fp16", "fp16"), ("topk", "topk"), ("randomk", "randomk"),
                       ("qsgd", "qsgd"), ("adaptive-topk", "adaptive_topk")):
    COMPRESSORS.register(_name, f"edgestream.compression.builtins:{_target}")
for _name in ("digits", "synthetic", "cifar10", "cifar100", "mnist", "npz", "folder", "csv", "parquet", "windows"):
    DATASETS.register(_name, f"edgestream.data.formats:{_name}")
for _name, _target in (("classification", "CLASSIFICATION"), ("regression", "REGRESSION")):
    TASKS.register(_name, f"edgestream.tasks:{_target}")
for _name, _target, _summary in (
        ("edgestream", "wire_records:edgestream_decoder", "edgestream's binary wire"),
        ("json", "json_records:json_decoder", "a JSON object a message; streams.input / target name its fields"),
        ("avro", "avro_records:avro_decoder", "schemaless Avro binary (streams.schema: an .avsc)"),
        ("raw", "raw_records:raw_decoder", "the input's bytes; the target from a header or the key"),
        ("npy", "raw_records:npy_decoder", "a .npy file's bytes; the target from a header or the key")):
    DECODERS.register(_name, f"edgestream.data.records.{_target}", _summary)
for _name, _target, _summary in (
        ("adwin", "adwin:ADWIN", "adaptive windowing: a cut where the window's older and newer means differ"),
        ("page_hinkley", "page_hinkley:PageHinkley", "CUSUM of the errors' deviations from their mean"),
        ("ddm", "ddm:DDM", "the error rate's rise above its minimum (0/1 errors: classification)")):
    DETECTORS.register(_name, f"edgestream.drift.{_target}", _summary)
