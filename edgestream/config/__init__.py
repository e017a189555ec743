"""The experiment configuration: pydantic models of the YAML file, defaults, presets and validation.

Field names follow ../shared/DESIGN.md ("Experiment configuration"). Unknown fields are errors so a
typo never passes silently. `load_config(path)` raises `ConfigError` whose `problems` are one line
each, naming the field path, the bad value and what is allowed, e.g.
``devices.count: -3 is not allowed; must be >= 1``.

Rules beyond the field types:
- numbers: every float must be finite (no .inf / .nan); integer fields are strict (true/false or 4.0
  are not integers) and no number field takes true/false; per-device rates (rate, low, high, mean,
  std, min_rate) are at most MAX_RATE samples/s.
- a config *file* must give `name` (an empty file is an error); `validate_dict` keeps the default
  name for configs built in code.
- relative paths (data.root, devices.rates.path) in a file resolve against the file's folder; one
  given with `--set` resolves against the current directory. `load_config` stores them absolute, so
  every consumer of the config (simulator, producers, run directories) reads the same files.
  runtime.out stays relative to the current directory (default runs/).
- `load_config` also builds what can be built without a broker (edgestream.config.check: the rate
  model and its trace file, the dataset files' presence and headers, the Kafka client settings) so
  `config validate` catches what `run` or `produce` would otherwise fail on.
- secrets in runtime.kafka_client (keys holding password, secret or key, except *.location paths)
  show as "***" in `to_yaml()` (what `config show` prints and run directories store); the config
  object keeps the real values.

The package, by job (no module imports torch at its top; a section imports a registry only to check a name it
does not know as a built-in):
- base: field types (Float, Int, Bool), the base model, secret keys, MAX_RATE, `plugin_name`
- data, devices, training (model, optim, algorithm, compression, stop, eval, checkpoint), runtime, kafka,
  streams: the sections
- experiment: `ExperimentConfig`, the checks across sections, `to_yaml`
- errors: `ConfigError` and pydantic's errors as one line each
- check: what `load_config` builds beyond the schema (`check_buildable`, `check_runnable`)
- load: `load_config`, `load_dict`, `validate_dict`, `apply_override`, path resolution
This module names their public names, each loaded with its module on first use (edgestream/lazy.py: importing
edgestream.config.kafka, as kafka/layout.py does, loads no other section); `from edgestream.config import ...`
is how the rest of the package imports them.
"""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use)
_EXPORTS = {
    "MAX_RATE": "edgestream.config.base", "SECRET_MASK": "edgestream.config.base", "Float": "edgestream.config.base",
    "Int": "edgestream.config.base", "is_secret_key": "edgestream.config.base",
    "check_buildable": "edgestream.config.check",
    "PARTITIONS": "edgestream.config.data", "DataConfig": "edgestream.config.data",
    "DISTRIBUTIONS": "edgestream.config.devices", "PRESET_ALIASES": "edgestream.config.devices",
    "RATE_PRESETS": "edgestream.config.devices", "VARIATIONS": "edgestream.config.devices",
    "ComputeConfig": "edgestream.config.devices", "DevicesConfig": "edgestream.config.devices",
    "NetworkConfig": "edgestream.config.devices", "RatesConfig": "edgestream.config.devices",
    "VariationConfig": "edgestream.config.devices", "uniform_bounds": "edgestream.config.devices",
    "ConfigError": "edgestream.config.errors",
    "ExperimentConfig": "edgestream.config.experiment",
    "KafkaConfig": "edgestream.config.kafka",
    "NAME_OR_PATH": "edgestream.config.load", "NAME_REQUIRED": "edgestream.config.load",
    "PATH_FIELDS": "edgestream.config.load", "RESUME_MAY_CHANGE": "edgestream.config.pin",
    "algorithm_param_problems": "edgestream.config.load", "apply_override": "edgestream.config.load",
    "load_config": "edgestream.config.load", "load_dict": "edgestream.config.load",
    "validate_dict": "edgestream.config.load",
    "CLIENT_KEY_PREFIXES": "edgestream.config.runtime", "ENGINES": "edgestream.engine_names",
    "SECURITY_PROTOCOLS": "edgestream.config.runtime", "TOPIC_KEYS": "edgestream.config.runtime",
    "RuntimeConfig": "edgestream.config.runtime", "bootstrap_ok": "edgestream.config.runtime",
    "StreamsConfig": "edgestream.config.streams",
    "CONTINUOUS_EVERY_S": "edgestream.config.training", "MEMORIES": "edgestream.config.training",
    "AlgorithmConfig": "edgestream.config.training", "BatchConfig": "edgestream.config.training",
    "CheckpointConfig": "edgestream.config.training", "CompressionConfig": "edgestream.config.training",
    "EvalConfig": "edgestream.config.training", "InjectionConfig": "edgestream.config.training",
    "ModelConfig": "edgestream.config.training", "OptimConfig": "edgestream.config.training",
    "ServerOptimConfig": "edgestream.config.training", "StopConfig": "edgestream.config.training",
    "TargetMetricConfig": "edgestream.config.training",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
