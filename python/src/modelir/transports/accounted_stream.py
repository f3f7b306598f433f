"""Every event of a stream accounted for: the stream lifter wrapper that `HttpTransport.stream_lifter_accounted`
returns (`accounting` says what is accounted and how)."""

from __future__ import annotations

from modelir.transports.accounting import Finding, Schema, findings, provider_part, warning, worth_keeping
from modelir.transports.accounting_typed import nothing_to_account
from modelir.transports.base import RawEvent, StreamLifter
from modelir.v1 import content_pb2, errors_pb2, stream_pb2


def end_warnings_and_parts(
    seen: dict[tuple[int, str], list[Finding]], next_index: dict[int, int], transport: str, issuer: content_pb2.Issuer
) -> tuple[list[stream_pb2.StreamEvent], list[errors_pb2.Warning]]:
    """A stream's findings at its end: one whole-part delta per kept value (after the choice's last part) and the
    warning naming the unread paths."""
    events, unread = [], []
    for (choice, _), values in sorted(seen.items()):
        for finding in values:
            if not finding.fact:
                unread.append(finding.path)
            if worth_keeping(finding):
                index = next_index.get(choice, 0)
                next_index[choice] = index + 1
                part = provider_part(transport, issuer, finding)
                events.append(
                    stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(choice_index=choice, part_index=index, part=part))
                )
    return events, ([warning(unread, stream=True)] if unread else [])


class AccountedStream(StreamLifter):
    """A stream lifter whose every event is accounted against the wire's stream section: its facts and unread
    members become whole provider parts after each choice's last part (facts: the last value, since a stream
    repeats a fact's state; unread members: every distinct value), and the end carries the warning."""

    def __init__(self, inner: StreamLifter, section: Schema, transport: str, issuer: content_pb2.Issuer) -> None:
        self.inner = inner
        self.section = section
        self.transport = transport
        self.issuer = issuer
        self.seen: dict[tuple[int, str], list[Finding]] = {}
        self.next_index: dict[int, int] = {}
        self.plain = inner.plain_lane(section)  # the inner lifter's lane for events it proves need no accounting

    def _note(self, events: list[stream_pb2.StreamEvent]) -> None:
        for event in events:
            if event.WhichOneof("event") == "delta":
                delta = event.delta
                if delta.part_index >= self.next_index.get(delta.choice_index, 0):
                    self.next_index[delta.choice_index] = delta.part_index + 1

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        if self.plain is not None and (plain := self.plain(event)) is not None:
            choice, text = plain
            return [self._plain_text(choice, text)] if text else []
        return self._feed_accounted(event)

    def feed_batch(self, events: list[RawEvent], out: list[stream_pb2.StreamEvent], *, merge: bool = False) -> None:
        """With `merge`, each run of plain events (`StreamLifter.plain_lane`) of one choice is one text delta, as
        the coalescing would merge their deltas; every other event is fed alone, in order (a run is in `out`
        before the next event is fed, so a failure keeps it)."""
        lane = self.plain
        if not merge or lane is None:
            super().feed_batch(events, out)
            return
        run: list[str] = []
        run_choice = -1
        for event in events:
            plain = lane(event)
            if plain is None:
                if run:
                    out.append(self._plain_text(run_choice, "".join(run)))
                    run.clear()
                out += self._feed_accounted(event)
                continue
            choice, text = plain
            if not text:
                continue
            if choice != run_choice and run:
                out.append(self._plain_text(run_choice, "".join(run)))
                run.clear()
            run_choice = choice
            run.append(text)
        if run:
            out.append(self._plain_text(run_choice, "".join(run)))

    def _plain_text(self, choice: int, text: str) -> stream_pb2.StreamEvent:
        event = self.inner.plain_text(choice, text)
        part = event.delta.part_index
        if part >= self.next_index.get(choice, 0):
            self.next_index[choice] = part + 1
        return event

    def _feed_accounted(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        out = self.inner.feed(event)
        self._note(out)
        if event.data[:1] in (b"{", b"[") or event.data.lstrip()[:1] in (b"{", b"["):
            if nothing_to_account(self.section.name, event.data):
                return out  # one closed decode proved it, without `findings`' decode and walk (the reference)
            for finding in findings(self.section, event.data):
                values = self.seen.setdefault((finding.choice, finding.below_choice), [])
                if finding.fact:  # a fact's state: the latest that holds anything (a null or `{}` clears nothing)
                    if worth_keeping(finding):
                        values[:] = [finding]
                elif all(v.raw != finding.raw for v in values):
                    values.append(finding)
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out = self.inner.close(interrupted=interrupted)
        self._note(out)
        if not self.seen:
            return out
        kept, warnings = end_warnings_and_parts(self.seen, self.next_index, self.transport, self.issuer)
        at = next((i for i, e in enumerate(out) if e.WhichOneof("event") == "end"), len(out))
        if at < len(out):
            out[at].end.warnings.extend(warnings)
        return [*out[:at], *kept, *out[at:]]
