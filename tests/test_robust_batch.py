"""Batch runs and limiter feedback under faults (#14): every input recorded, one writer per file, no torn headers,
capped pauses."""

from __future__ import annotations

import pytest
from modelir import Model, build_request, errors
from modelir.batch import run_batch
from modelir.batch.ledger import Ledger, RecordFileLockedError
from modelir.limiter import Limiter, feedback_pause
from modelir.limiter.base import MAX_FEEDBACK_PAUSE
from modelir.records.files import RecordFileError, read_records
from modelir.transports.reference import ReferenceModel
from modelir.v1 import record_pb2


class _Buggy(Model):
    """A model whose call for one prompt raises something untyped (a bug, or an escape)."""

    async def arun(self, request, *, deadline=None):
        if request.prompt == "boom":
            raise KeyError("choices")
        return await super().arun(request, deadline=deadline)


async def test_an_untyped_exception_is_one_failed_record_not_the_end_of_the_run(tmp_path):
    model = _Buggy(ReferenceModel(), name="reference")
    inputs = [
        (str(i), build_request("reference", prompt=p, max_output_tokens=2)) for i, p in enumerate("a boom c".split())
    ]
    summary = await run_batch(model, inputs, tmp_path / "out.jsonl")
    assert (summary.ok, summary.failed) == (2, 1)
    records = {r.key: r for r in read_records(tmp_path / "out.jsonl")}
    assert sorted(records) == ["0", "1", "2"]
    assert records["1"].status == record_pb2.RECORD_STATUS_FAILED
    assert records["1"].failure.reason == errors.InternalError.reason and "KeyError" in records["1"].failure.message


def test_a_second_writer_on_one_file_is_refused(tmp_path):
    out = tmp_path / "out.jsonl"
    first = Ledger.open(out)
    try:
        with pytest.raises(RecordFileLockedError, match="another run"):
            Ledger.open(out, resume=True)
    finally:
        first.close()
    Ledger.open(out, resume=True).close()  # free again once the first run is done


def test_a_new_file_appears_with_its_header_or_not_at_all(tmp_path):
    out = tmp_path / "out.binpb"
    Ledger.open(out, fmt="binary").close()
    assert [p.name for p in tmp_path.iterdir()] == ["out.binpb"]  # no temporary left behind
    Ledger.open(out, resume=True).close()


def test_a_torn_header_names_the_way_out(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"header": {"irVers')
    with pytest.raises(RecordFileError, match="delete it and run again without --resume"):
        Ledger.open(out, resume=True)


@pytest.mark.parametrize(
    "status, headers",
    [
        (429, {"retry-after": "86400"}),
        (200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "24h"}),
        (200, {"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "1e308"}),
    ],
)
def test_provider_feedback_pauses_at_most_the_cap(status, headers):
    assert feedback_pause(status, headers) == MAX_FEEDBACK_PAUSE


def test_retry_after_zero_is_no_pause_and_no_hint_is_one_second():
    assert feedback_pause(429, {"retry-after": "0"}) == 0.0
    assert feedback_pause(429, {}) == 1.0
    limiter = Limiter()
    limiter.observe(429, {"retry-after": "0"})
    assert limiter._paused_until == 0.0
