"""A user's own record decoder (issue 33 item 2), from outside the package: the test writes a small package
into a temporary folder and names its factory by import path (the config file's folder is on the import
path: plugins.add_search_path) and by an entry point of the group edgestream.decoders; nothing in
edgestream is edited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from edgestream import plugins
from edgestream.data.records import RecordFormat, build_decoder
from edgestream.data.validate import DeviceRule, SampleSpec

USER_DECODERS = """
import numpy as np
from edgestream.data.records import RecordDecoder, RecordError, takes


class CsvDecoder(RecordDecoder):
    \"\"\"'v1;v2;...;label' lines: one record() a message; the base class checks shapes and labels.\"\"\"

    def __init__(self, fmt):
        super().__init__(fmt)
        self.sep = fmt.options.get("sep", ";")
        self.message_bytes = 8 * int(np.prod(self.spec.shape))

    def record(self, value, message):
        text = value.decode("ascii", "replace")
        if not text:
            raise RecordError("missing_field", "input: an empty line")
        *xs, y = text.split(self.sep)
        return [float(v) for v in xs], int(y)


@takes("options")
def csv_lines(fmt):
    sep = fmt.options.get("sep", ";")
    if len(sep) != 1:
        raise ValueError(f"streams.options: sep {sep!r} must be one character")
    return CsvDecoder(fmt)


def not_a_decoder(fmt):
    return {"decode": None}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """tmp/project/{sensorfmt/decoders.py, a dist-info with an edgestream.decoders entry point}."""
    root = tmp_path / "project"
    pkg = root / "sensorfmt"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "decoders.py").write_text(textwrap.dedent(USER_DECODERS))
    info = root / "sensorfmt_dist-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sensorfmt-dist\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text("[edgestream.decoders]\ncsv-lines = sensorfmt.decoders:csv_lines\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.chdir(tmp_path)
    for mod in [m for m in sys.modules if m == "sensorfmt" or m.startswith("sensorfmt.")]:
        monkeypatch.delitem(sys.modules, mod)
    plugins.add_search_path(root)  # what load_config does with the config file's folder
    return root


SPEC = SampleSpec(np.float32, (3,), 4)


@pytest.mark.parametrize("name", ["sensorfmt.decoders:csv_lines", "csv-lines"])
def test_user_decoder_by_import_path_and_entry_point(project, name):
    dec = build_decoder(RecordFormat(name, SPEC, options={"sep": ","}))
    msgs = [b"1,2,3,0", b"1,2,1", b"", b"4,5,6,9", b"7,8,x,1", b"0.5,0.25,1,3"]
    batch, bad = dec.decode(msgs, DeviceRule(0, 2))
    assert bad == [(1, "shape_mismatch: input has shape (2,); must be (3,)"),
                   (2, "missing_field: input: an empty line"),
                   (3, "bad_label: target is 9; must be in [0, 4)"),
                   (4, "decode_error: ValueError: could not convert string to float: 'x'")]
    assert batch.x.dtype == np.float32 and batch.x.tolist() == [[1, 2, 3], [0.5, 0.25, 1]]
    assert batch.labels.tolist() == [0, 3] and batch.seqs.tolist() == [0, 5]
    assert batch.accepted == [msgs[0], msgs[5]] and dec.message_bytes == 24 and dec.normalize is None
    assert plugins.DECODERS.source(name) in ("import path", "entry point (sensorfmt-dist 0.3.0)")


def test_user_decoder_refusals(project):
    with pytest.raises(ValueError, match=r"^streams.input: format 'sensorfmt.decoders:csv_lines' does not take it "
                                         r"\(it takes options\)$"):
        build_decoder(RecordFormat("sensorfmt.decoders:csv_lines", SPEC, input="v"))
    with pytest.raises(ValueError, match=r"^streams.options: sep '::' must be one character$"):
        build_decoder(RecordFormat("csv-lines", SPEC, options={"sep": "::"}))
    with pytest.raises(ValueError, match=r"^streams.format: 'sensorfmt.decoders:not_a_decoder' returned a dict "
                                         r"without spec, normalize, message_bytes, decode"):
        build_decoder(RecordFormat("sensorfmt.decoders:not_a_decoder", SPEC))
    with pytest.raises(ValueError, match=r"^streams.format: module 'sensorfmt.decoders' has no attribute 'nope'$"):
        build_decoder(RecordFormat("sensorfmt.decoders:nope", SPEC))


def test_plugins_lists_the_user_decoder(project):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "edgestream", "plugins", "decoders", "--json"], capture_output=True,
                         text=True, env=env, check=True)
    listing = json.loads(out.stdout)["decoders"]
    assert [d["name"] for d in listing] == ["edgestream", "json", "avro", "raw", "npy", "csv-lines"]
    assert listing[-1] == {"name": "csv-lines", "source": "entry point (sensorfmt-dist 0.3.0)",
                           "target": "sensorfmt.decoders:csv_lines", "summary": ""}
