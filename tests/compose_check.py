"""Docker Compose v2's view of a compose file, without Docker: what `docker compose ... up` would read.

- `dotenv(path)`: an env file (.env, --env-file) the way Compose v2 parses it: comments, `export`,
  single quotes literal, double quotes with escapes, inline ` #` comments, `${VAR}` in values.
- `interpolate(text, env)`: `$$`, `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?err}`,
  `${VAR?err}`, `${VAR:+alt}`, `${VAR+alt}`, defaults nested; an unset `${VAR}` is blank (Compose warns).
  A missing required variable raises `MissingVariable` with Compose's message.
- `load_project(...)`: one compose file with its project directory (the file's folder unless
  --project-directory), the .env there (or --env-file) under the shell environment, every value
  interpolated (keys are not), bind-mount and build-context paths resolved against the project directory.
- `validate(doc)`: the vendored Compose Specification JSON schema (tests/compose_spec/).
- `documented_commands(text)`: the `docker compose ...` command lines of a Markdown file or a compose
  file's comment header, with their inline VAR=value assignments and flags (`ComposeCommand`).

Only the standard library, PyYAML and `jsonschema` (for `validate`).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parent / "compose_spec" / "compose-spec.json"
COMPOSE_NAMES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")


class MissingVariable(KeyError):
    """A `${VAR:?err}` / `${VAR?err}` whose variable is unset (or empty, for `:?`)."""

    def __str__(self) -> str:
        return str(self.args[0])


# ------------------------------------------------------------------------------------------------ interpolation
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _braced_end(text: str, start: int) -> int:
    """Index of the `}` closing the `${` whose body starts at `start` (nested `${...}` skipped)."""
    depth, i = 1, start
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
            continue
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"invalid interpolation format: unclosed ${{ in {text!r}")


def interpolate(text: str, env: dict[str, str], missing: set[str] | None = None) -> str:
    """`text` with Compose v2's interpolation applied against `env`; names of unset plain `${VAR}`s
    (blank in the result, as Compose does with a warning) are added to `missing` when given."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("${", i):
            end = _braced_end(text, i + 2)
            body = text[i + 2:end]
            i = end + 1
            m = _NAME.match(body)
            if not m:
                raise ValueError(f"invalid interpolation format for {text!r}: ${{{body}}}")
            name, rest = m.group(0), body[m.end():]
            value = env.get(name)
            if rest == "":
                if value is None and missing is not None:
                    missing.add(name)
                out.append(value or "")
                continue
            for op in (":-", ":?", ":+", "-", "?", "+"):
                if rest.startswith(op):
                    arg = rest[len(op):]
                    break
            else:
                raise ValueError(f"invalid interpolation format for {text!r}: ${{{body}}}")
            empty_is_unset = op.startswith(":")
            is_set = value is not None and (value != "" or not empty_is_unset)
            if op.endswith("-"):
                out.append(value if is_set else interpolate(arg, env, missing))
            elif op.endswith("+"):
                out.append(interpolate(arg, env, missing) if is_set else "")
            else:  # ?: required
                if not is_set:
                    msg = interpolate(arg, env, missing)
                    raise MissingVariable(f"required variable {name} is missing a value: {msg}")
                out.append(value)
            continue
        m = _NAME.match(text, i + 1)
        if m:  # $VAR
            name = m.group(0)
            if name not in env and missing is not None:
                missing.add(name)
            out.append(env.get(name, ""))
            i = m.end()
            continue
        out.append("$")  # a lone $ stays
        i += 1
    return "".join(out)


def variables(text: str) -> list[tuple[str, str, str]]:
    """Every interpolation in `text` as (name, operator, argument); operator "" for `${VAR}`/`$VAR`;
    the variables inside defaults included."""
    found: list[tuple[str, str, str]] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
        elif text.startswith("${", i):
            end = _braced_end(text, i + 2)
            body = text[i + 2:end]
            m = _NAME.match(body)
            if not m:
                raise ValueError(f"invalid interpolation format for {text!r}: ${{{body}}}")
            rest = body[m.end():]
            op = next((o for o in (":-", ":?", ":+", "-", "?", "+") if rest.startswith(o)), "")
            if rest and not op:
                raise ValueError(f"invalid interpolation format for {text!r}: ${{{body}}}")
            found.append((m.group(0), op, rest[len(op):]))
            found.extend(variables(rest[len(op):]))
            i = end + 1
        elif text[i] == "$" and (m := _NAME.match(text, i + 1)):
            found.append((m.group(0), "", ""))
            i = m.end()
        else:
            i += 1
    return found


def interpolate_tree(node, env: dict[str, str], missing: set[str] | None = None):
    """Every string value (not key) of a parsed compose file interpolated."""
    if isinstance(node, str):
        return interpolate(node, env, missing)
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env, missing) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(v, env, missing) for v in node]
    return node


def strings(node):
    """Every string (keys and values) of a parsed compose file."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


# ------------------------------------------------------------------------------------------------ env files
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'", "$": "$"}


def dotenv(path: Path | str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of an env file; values may refer to earlier lines and to `base` (the shell)."""
    return dotenv_text(Path(path).read_text(), base)


def dotenv_text(text: str, base: dict[str, str] | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, eq, value = line.partition("=")
        key = key.strip()
        if not _NAME.fullmatch(key):
            raise ValueError(f"env file: invalid line {raw!r}")
        if not eq:
            continue  # KEY alone: taken from the shell, nothing to interpolate with here
        value = value.lstrip()
        scope = {**(base or {}), **out}
        if value[:1] == "'":
            end = value.find("'", 1)
            if end < 0:
                raise ValueError(f"env file: unterminated quote in {raw!r}")
            out[key] = value[1:end]
        elif value[:1] == '"':
            chars, i = [], 1
            while i < len(value) and value[i] != '"':
                if value[i] == "\\" and i + 1 < len(value):
                    chars.append(_ESCAPES.get(value[i + 1], "\\" + value[i + 1]))
                    i += 2
                else:
                    chars.append(value[i])
                    i += 1
            if i >= len(value):
                raise ValueError(f"env file: unterminated quote in {raw!r}")
            out[key] = interpolate("".join(chars), scope)
        else:
            value = re.split(r"\s+#", value, maxsplit=1)[0].rstrip()
            out[key] = interpolate(value, scope)
    return out


# ------------------------------------------------------------------------------------------------ projects
@dataclass
class Mount:
    service: str
    source: str          # as written, after interpolation
    target: str
    path: Path | None    # the host path of a bind mount (resolved against the project directory), None for a volume
    read_only: bool
    create_host_path: bool  # short syntax: Docker creates a missing source as an empty root-owned directory


@dataclass
class Project:
    file: Path
    project_dir: Path
    env: dict[str, str]          # the interpolation environment: .env / --env-file under the shell's
    raw: dict                    # the file as parsed (anchors and merge keys resolved)
    doc: dict                    # interpolated
    missing: set[str] = field(default_factory=set)  # unset plain ${VAR}s (blank)

    @property
    def services(self) -> dict[str, dict]:
        return self.doc.get("services") or {}

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.project_dir / p).resolve()

    def mounts(self, service: str) -> list[Mount]:
        out = []
        for v in self.services[service].get("volumes") or []:
            if isinstance(v, str):
                parts = v.split(":")
                if len(parts) == 1:
                    out.append(Mount(service, "", parts[0], None, False, False))  # anonymous volume
                    continue
                src, dst, mode = parts[0], parts[1], (parts[2] if len(parts) > 2 else "")
                bind = src.startswith((".", "/", "~"))
                out.append(Mount(service, src, dst, self.resolve(src) if bind else None,
                                 "ro" in mode.split(","), bind))
            else:
                kind, src = v.get("type"), v.get("source", "")
                out.append(Mount(service, src, v["target"], self.resolve(src) if kind == "bind" else None,
                                 bool(v.get("read_only")), bool((v.get("bind") or {}).get("create_host_path"))))
        return out

    def build(self, service: str) -> tuple[Path, Path] | None:
        """(context, Dockerfile) of a service that builds, resolved against the project directory."""
        b = self.services[service].get("build")
        if b is None:
            return None
        if isinstance(b, str):
            b = {"context": b}
        ctx = self.resolve(b.get("context", "."))
        return ctx, ctx / b.get("dockerfile", "Dockerfile")


def load_project(file: Path | str, *, project_dir: Path | str | None = None, env_file: Path | str | None = None,
                 shell: dict[str, str] | None = None, dotenv_text_override: str | None = None) -> Project:
    """`docker compose [--project-directory D] [--env-file E] -f FILE` as Compose v2 loads it: the
    interpolation environment is the shell's over the env file's (E, else D/.env when it exists);
    `dotenv_text_override` stands in for that env file's content (e.g. .env.example copied as .env)."""
    file = Path(file).resolve()
    pdir = Path(project_dir).resolve() if project_dir is not None else file.parent
    shell = dict(shell or {})
    envf = Path(env_file) if env_file is not None else pdir / ".env"
    if dotenv_text_override is not None:
        fileenv = dotenv_text(dotenv_text_override, shell)
    elif envf.is_file():
        fileenv = dotenv(envf, shell)
    elif env_file is not None:
        raise FileNotFoundError(f"couldn't find env file: {envf}")
    else:
        fileenv = {}
    env = fileenv | shell
    raw = yaml.safe_load(file.read_text())
    missing: set[str] = set()
    doc = interpolate_tree(raw, env, missing)
    return Project(file, pdir, env, raw, doc, missing)


def validate(doc: dict) -> list[str]:
    """The Compose Specification schema's complaints about `doc` ([] when valid)."""
    try:
        import jsonschema  # the dev extra; imported here so the rest works without it
    except ImportError as exc:
        raise ImportError("validating compose files needs jsonschema: pip install -e '.[dev]'") from exc

    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


# ------------------------------------------------------------------------------------------------ documented commands
@dataclass
class ComposeCommand:
    text: str                        # the command as written (continuations joined)
    assignments: dict[str, str]      # VAR=value before `docker compose`
    files: list[str]                 # -f / --file
    project_dir: str | None          # --project-directory
    env_files: list[str]             # --env-file
    profiles: list[str]              # --profile
    subcommand: str | None
    args: list[str]                  # after the subcommand

    def project_file(self, cwd: Path) -> Path:
        if self.files:
            return (cwd / self.files[0]).resolve()
        for name in COMPOSE_NAMES:
            if (cwd / name).is_file():
                return cwd / name
        raise FileNotFoundError(f"no compose file in {cwd}")

    def target_service(self) -> str | None:
        """The service a `run`, `exec`, `logs`, `cp`, ... names first (None if it names none)."""
        takes_value = {"-e", "--env", "-u", "--user", "-w", "--workdir", "--name", "--entrypoint", "-p",
                       "--publish", "-v", "--volume", "--index", "--tail", "--since", "--until", "-l", "--label",
                       "--scale", "-t", "--timeout", "--wait-timeout", "--pull", "--format", "--filter",
                       "--status"}
        args = iter(self.args)
        for a in args:
            if a in takes_value:
                next(args, None)
            elif not a.startswith("-"):
                return a.split(":", 1)[0] if self.subcommand == "cp" else a
        return None


_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _strip_comment(line: str) -> str:
    """A shell line without its trailing `# comment` (a # inside quotes or a word stays)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def documented_commands(text: str, comment_prefix: str | None = None) -> list[ComposeCommand]:
    """The `docker compose` commands in `text`: in a Markdown file's fenced code blocks, or, with
    `comment_prefix="#"`, in a file's comment lines (a compose file's header)."""
    if comment_prefix is None:
        lines = []
        inside = False
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                inside = not inside
                continue
            if inside:
                lines.append(line)
    else:
        lines = [ln.strip()[len(comment_prefix):] for ln in text.splitlines() if ln.strip().startswith(comment_prefix)]
    joined: list[str] = []
    buf = ""
    for line in lines:
        line = _strip_comment(line.strip())
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        joined.append(buf + line)
        buf = ""
    out = []
    for line in joined:
        if "docker compose" not in line:
            continue
        words = shlex.split(line)
        assignments = {}
        while words and _ASSIGN.match(words[0]):
            k, _, v = words.pop(0).partition("=")
            assignments[k] = v
        if words[:2] != ["docker", "compose"]:
            continue  # e.g. `docker run`, or prose
        words = words[2:]
        cmd = ComposeCommand(line, assignments, [], None, [], [], None, [])
        while words and words[0].startswith("-"):
            opt = words.pop(0)
            name, eq, val = opt.partition("=")
            if name in ("-f", "--file", "--project-directory", "--env-file", "--profile", "-p", "--project-name"):
                if not eq:
                    val = words.pop(0)
                if name in ("-f", "--file"):
                    cmd.files.append(val)
                elif name == "--project-directory":
                    cmd.project_dir = val
                elif name == "--env-file":
                    cmd.env_files.append(val)
                elif name == "--profile":
                    cmd.profiles.append(val)
        if words:
            cmd.subcommand, cmd.args = words[0], words[1:]
        out.append(cmd)
    return out
