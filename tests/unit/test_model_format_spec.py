"""The model-version format as a spec (issue 57, item 2; docs/model-format.md): the committed test vectors
(tests/vectors/model_format/, written by scripts/make_model_vectors.py) are read by a reader written from the spec
alone (tests/support/spec_reader.py: standard library, numpy, onnxruntime -- no edgestream), which takes version 2 as
the latest good one, refuses what the vectors say, and gets the expected outputs; edgestream's own reader agrees."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import numpy as np
from support import spec_reader

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "model_format"


def _vectors() -> tuple[list[tuple[str | None, bytes | None]], dict]:
    doc = json.loads((VECTORS / "vectors.json").read_text())
    msgs = [(m["key"], (VECTORS / m["file"]).read_bytes() if m["file"] else None) for m in doc["messages"]]
    return msgs, doc["expect"]


def _read(reader, values):
    good, refused = {}, []
    for value in values:
        try:
            got = reader.add(value)
        except spec_reader.Refused as exc:
            refused.append(str(exc))
            continue
        if got is not None:
            good[got["version"]] = got
    return good, refused


def test_the_spec_reader_imports_no_edgestream():
    tree = ast.parse(Path(spec_reader.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and not any(n.split(".")[0] == "edgestream" for n in names), names


def test_a_reader_written_from_the_spec_reads_the_test_vectors():
    msgs, expect = _vectors()
    good, refused = _read(spec_reader.Reader(expect["run"]), [v for _, v in msgs])
    assert sorted(good) == [int(v) for v in expect["versions"]] and max(good) == expect["latest"]
    # one refusal per refused version (a foreign version's every chunk: the spec reader says each)
    assert refused[0] == "chunk checksum" and "file checksum" in refused and "another run" in refused
    x = np.array(expect["input"], dtype=expect["input_dtype"])
    tol = expect["tolerance"]
    for v, want in expect["versions"].items():
        version = good[int(v)]
        assert version["meta"]["step"] == want["step"]
        assert [f["name"] for f in version["meta"]["files"]] == expect["files_order"]
        assert {n: hashlib.sha256(b).hexdigest() for n, b in version["files"].items()} == want["files"]
        out = spec_reader.predict(version, x)
        assert np.allclose(out, np.array(want["outputs"]), atol=tol["atol"], rtol=tol["rtol"])
        assert out.argmax(1).tolist() == want["predictions"]
    for key, value in msgs:  # keys: v<version>.<chunk>, as the chunk's header says
        if value is not None:
            c = spec_reader.chunk(value) if key and not key.startswith("v3.0") else None
            if c is not None:
                assert key == f"v{c['version']}.{c['index']}"


def test_edgestream_reads_the_vectors_as_the_spec_reader_does():
    from edgestream.edge.model_format import read_all
    from edgestream.edge.onnx_model import Runnable

    msgs, expect = _vectors()
    got, refused = read_all((v for _, v in msgs), expect["run"])
    assert sorted(got) == [1, 2]
    assert refused == ["bad checksum: chunk 0 of 3 of version 3", "file model.onnx: sha256 mismatch",
                       "foreign run: version 5 is of run another-ddl-r9, this is vectors-ddl-r1"]
    x = np.array(expect["input"], dtype=expect["input_dtype"])
    for v, want in expect["versions"].items():
        assert Runnable.of(got[int(v)]).predict(x).tolist() == want["predictions"]
