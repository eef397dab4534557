"""Rank 0's log records and warnings reach the caller's own handlers and
``warnings.showwarning``; every rank takes over the caller's logging layout
(`gnnorch.launch.relay`). A function that logs with ``logging`` or warns behaves over two ranks
as called plainly, as far as the caller can see: the same records reach the same handlers, the
same warnings the same ``catch_warnings`` list."""
import logging
import pickle
import threading
import warnings

import pytest
import torch.distributed as dist

import gnnorch
from gnnorch.launch import relay

pytestmark = pytest.mark.usefixtures("no_leftover_children")


class Kept(logging.Handler):
    """A handler of the caller's process keeping what it handles (unpicklable: it holds a lock
    and a list of this process)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s|%(name)s|%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def logger_layout():
    """A script's logging set-up, undone afterwards: 'train' at INFO with a Kept handler,
    'train.quiet' at ERROR, 'train.alone' not propagating, holding a Kept handler of its own."""
    names = ("train", "train.quiet", "train.alone")
    saved = [(logging.getLogger(n).level, logging.getLogger(n).propagate,
              list(logging.getLogger(n).handlers)) for n in names]
    main, alone = Kept(), Kept(logging.WARNING)
    logging.getLogger("train").setLevel(logging.INFO)
    logging.getLogger("train").addHandler(main)
    logging.getLogger("train.quiet").setLevel(logging.ERROR)
    logging.getLogger("train.alone").propagate = False
    logging.getLogger("train.alone").addHandler(alone)
    try:
        yield main, alone
    finally:
        for name, (level, propagate, handlers) in zip(names, saved):
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.propagate = propagate
            logger.handlers[:] = handlers


def log_everywhere(tag: str = "") -> int:
    """What a training function logs (in each rank: the rank says who it is)."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    logging.getLogger("train").debug("debug %d", rank)
    logging.getLogger("train").info("epoch %d loss %.2f%s", rank, 0.5, tag)
    logging.getLogger("train.quiet").warning("quiet %d", rank)
    logging.getLogger("train.quiet").error("loud %d", rank)
    logging.getLogger("train.alone").info("alone info %d", rank)
    logging.getLogger("train.alone").warning("alone warning %d", rank)
    try:
        raise ValueError("bad batch")
    except ValueError:
        logging.getLogger("train").exception("failed %d", rank)
    return rank


def test_rank_zeros_records_reach_the_callers_handlers(logger_layout, tmp_path):
    main, alone = logger_layout
    log_everywhere()
    plain_main, plain_alone = list(main.lines), list(alone.lines)
    main.lines.clear()
    alone.lines.clear()
    assert plain_main[:2] == ["INFO|train|epoch 0 loss 0.50", "ERROR|train.quiet|loud 0"]
    assert plain_alone == ["WARNING|train.alone|alone warning 0"]

    runtime = gnnorch.Runtime(log_everywhere, processes=2,
                              launch={"threads": 1, "log_dir": tmp_path})
    assert runtime() == 0
    assert main.lines == plain_main           # the traceback text included
    assert alone.lines == plain_alone
    assert "Traceback" in main.lines[-1] and "ValueError: bad batch" in main.lines[-1]
    # rank 1's records go to its own log, as its prints do
    rank1 = (tmp_path / "rank1.log").read_text()
    assert "INFO:train:epoch 1 loss 0.50" in rank1 and "debug 1" not in rank1
    assert "quiet 1" not in rank1 and "ERROR:train.quiet:loud 1" in rank1


def test_pytests_caplog_sees_rank_zero(caplog):
    caplog.set_level(logging.INFO, logger="train")
    gnnorch.Runtime(log_everywhere, processes=2, launch={"threads": 1})(" seen")
    messages = [r.getMessage() for r in caplog.records if r.name == "train"]
    assert "epoch 0 loss 0.50 seen" in messages
    assert not any(" 1" in m for m in messages)


def warn_twice() -> int:
    rank = dist.get_rank()
    warnings.warn(f"caller silenced this, rank {rank}", UserWarning)
    warnings.warn(f"shown from rank {rank}", RuntimeWarning)
    return rank


def test_rank_zeros_warnings_reach_the_callers_showwarning():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="caller silenced")
        gnnorch.Runtime(warn_twice, processes=2, launch={"threads": 1})()
    mine = [(w.category, str(w.message)) for w in seen
            if str(w.message).startswith(("caller silenced", "shown from"))]
    assert mine == [(RuntimeWarning, "shown from rank 0")]
    assert seen[[str(w.message) for w in seen].index("shown from rank 0")].filename \
        == __file__


def test_captured_warnings_go_to_the_callers_logging():
    kept = Kept()
    logging.getLogger("py.warnings").addHandler(kept)
    logging.captureWarnings(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            gnnorch.Runtime(warn_twice, processes=2, launch={"threads": 1})()
    finally:
        logging.captureWarnings(False)
        logging.getLogger("py.warnings").removeHandler(kept)
    lines = [line for line in kept.lines if "silenced this" in line or "from rank" in line]
    assert len(lines) == 2 and all("rank 0" in line for line in lines)
    assert "UserWarning: caller silenced this, rank 0" in lines[0]
    assert "RuntimeWarning: shown from rank 0" in lines[1]


# -- the parts, in one process ------------------------------------------------------------

class FakeConn:
    """A rank's connection: what was sent, unpickled as the caller's ``recv`` would."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.sent.append(message)

    def send_bytes(self, message: bytes) -> None:
        self.sent.append(pickle.loads(message))


def test_layout_applied_gives_each_handling_logger_one_stand_in(logger_layout):
    leveled = Kept(logging.ERROR)
    logging.getLogger("train.leveled").addHandler(leveled)
    try:
        captured = relay.LoggingLayout.capture()
    finally:
        logging.getLogger("train.leveled").removeHandler(leveled)
    # the test's own loggers only: applying the root's would take pytest's handlers away
    layout = relay.LoggingLayout(tuple(logger for logger in captured.loggers
                                       if logger.name.startswith("train")),
                                 captured.disabled_below)
    by_name = {logger.name: logger for logger in layout.loggers}
    assert by_name["train"].level == logging.INFO and by_name["train"].handler_level == 0
    assert by_name["train.leveled"].handler_level == logging.ERROR
    # pytest also attaches its capture handlers (level 0) to loggers that do not propagate
    assert by_name["train.alone"].handler_level == min(
        h.level for h in logging.getLogger("train.alone").handlers)
    assert by_name["train.quiet"].handler_level is None
    conn = FakeConn()
    channel = relay.RankChannel(conn)
    main, alone = logger_layout
    logging.getLogger("train").setLevel(logging.DEBUG)   # as a fresh rank's would differ
    layout.apply(lambda logger: relay.RecordRelay(logger, channel))
    assert logging.getLogger("train").level == logging.INFO
    assert [type(h) for h in logging.getLogger("train").handlers] == [relay.RecordRelay]
    log_everywhere()
    assert main.lines == [] and alone.lines == []      # relayed, not handled here
    # every record arrives once per logger holding handlers; the caller's handlers decide
    relayed = [m for m in conn.sent if m[0] == "log"]
    assert [(m[1], m[2]["msg"]) for m in relayed][:3] == [
        ("train", "epoch 0 loss 0.50"), ("train", "loud 0"), ("train.alone", "alone info 0")]
    logging.getLogger("train").handlers[:] = [main]
    logging.getLogger("train.alone").handlers[:] = [alone]
    for message in relayed:
        relay.deliver(message)
    assert main.lines[:2] == ["INFO|train|epoch 0 loss 0.50", "ERROR|train.quiet|loud 0"]
    assert alone.lines == ["WARNING|train.alone|alone warning 0"]   # its level: WARNING


def test_a_records_extra_values_travel_as_text_unless_plain():
    record = logging.LogRecord("train", logging.INFO, __file__, 1, "at %s", ("step",), None)
    record.lock = threading.Lock()
    kind, name, fields = pickle.loads(relay.log_message("train", record))
    assert (kind, name) == ("log", "train")
    assert fields["msg"] == "at step" and fields["args"] is None
    assert isinstance(fields["lock"], str) and fields["lineno"] == 1
    assert logging.makeLogRecord(fields).getMessage() == "at step"
    record.step = {"loss": 0.5}          # pickles, but the caller might not unpickle all such
    assert pickle.loads(relay.log_message("train", record))[2]["step"] == "{'loss': 0.5}"


def test_a_warning_the_caller_cannot_unpickle_is_shown_as_its_text():
    payload = pickle.dumps(("warning", b"not a pickle", "OddWarning: odd", __file__, 3, None))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        relay.deliver(pickle.loads(payload))
    assert [(w.category, str(w.message), w.lineno) for w in seen] == [
        (UserWarning, "OddWarning: odd", 3)]


def test_after_the_final_message_records_go_to_stderr(capsys):
    conn = FakeConn()
    channel = relay.RankChannel(conn)
    layout = relay.LoggerLayout("train.after", logging.INFO, True, False, (), logging.NOTSET)
    handler = relay.RecordRelay(layout, channel)
    record = logging.LogRecord("train.after", logging.WARNING, __file__, 1, "late", None, None)
    handler.handle(record)
    channel.final(("done", {}))
    handler.handle(record)
    assert [m[0] for m in conn.sent] == ["log", "done"]
    assert "WARNING:train.after:late" in capsys.readouterr().err


def test_a_warning_that_does_not_pickle_is_shown_in_the_rank():
    class Odd(UserWarning):
        def __reduce__(self):
            raise TypeError("no")

    shown = []
    conn = FakeConn()
    warning_relay = relay.WarningRelay(relay.RankChannel(conn),
                                       show=lambda *a: shown.append(a))
    warning_relay(Odd("odd"), Odd, __file__, 1)
    warning_relay(UserWarning("plain"), UserWarning, __file__, 1)
    assert len(shown) == 1 and [m[0] for m in conn.sent] == ["warning"]


def test_deliver_refuses_other_messages():
    with pytest.raises(ValueError, match="not a relayed message"):
        relay.deliver(("result", b"", {}))
