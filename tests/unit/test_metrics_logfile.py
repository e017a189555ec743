"""edgestream.metrics.logfile: the one log-file setup of the trainer's ranks/<rank>.log and the PS's ranks/ps.log."""

from __future__ import annotations

import logging
import re

import pytest

from edgestream.metrics.logfile import LOG_FORMAT, attach_log_file


@pytest.fixture
def edgestream_logger():
    root = logging.getLogger("edgestream")
    level, handlers = root.level, list(root.handlers)
    yield root
    for h in root.handlers:
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)


def test_attach_log_file_writes_the_edgestream_loggers_lines_in_one_format(tmp_path, edgestream_logger):
    edgestream_logger.setLevel(logging.WARNING)
    path = tmp_path / "ps.log"
    handler = attach_log_file(path)
    assert type(handler) is logging.FileHandler and handler in edgestream_logger.handlers
    assert edgestream_logger.level == logging.INFO and handler.formatter._fmt == LOG_FORMAT
    logging.getLogger("edgestream.ps.server").info("round %d", 3)
    logging.getLogger("edgestream.ps.server").debug("not kept")
    logging.getLogger("other").warning("not ours")
    handler.flush()
    (line,) = path.read_text().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} edgestream\.ps\.server INFO round 3", line)


def test_the_trainers_rank_log_is_the_same_setup_with_its_handler(tmp_path, edgestream_logger):
    from edgestream.trainer.ranklog import RankLogHandler, setup_logging

    handler = setup_logging(tmp_path / "0.log")
    assert isinstance(handler, RankLogHandler) and handler.formatter._fmt == LOG_FORMAT
    logging.getLogger("edgestream.trainer").info("step")
    handler.flush()
    assert (tmp_path / "0.log").read_text().rstrip().endswith("edgestream.trainer INFO step")
