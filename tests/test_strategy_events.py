"""EventQueue on its own (ordering, the wall-clock rule, the virtual lookahead rule), and the
origin of the strategy's event and history times."""

from __future__ import annotations

import random

import pytest

from strategies.events import DEADLINE, REPLY, DeadlineEvent, EventQueue, ReplyEvent, Sent


def _sent(seq: int, send_time: float = 0.0) -> Sent:
    return Sent(f"m{seq}", 1000 + seq, seq, send_time, 0.0, seq)


def test_events_pop_by_time_then_replies_before_deadlines_then_send_order() -> None:
    queue = EventQueue()
    a, b, c = (_sent(queue.next_seq()) for _ in range(3))
    queue.push(2.0, REPLY, ReplyEvent(a, None, "x"))
    queue.push(1.0, DEADLINE, DeadlineEvent(c, 1.0))
    queue.push(1.0, REPLY, ReplyEvent(c, None, "y"))
    queue.push(1.0, REPLY, ReplyEvent(b, None, "z"))
    order = []
    while len(queue):
        when, event = queue.pop()
        order.append((when, type(event).__name__, event.sent.seq))
    assert order == [
        (1.0, "ReplyEvent", b.seq),
        (1.0, "ReplyEvent", c.seq),
        (1.0, "DeadlineEvent", c.seq),
        (2.0, "ReplyEvent", a.seq),
    ]


def test_wall_clock_head_is_due_once_its_time_has_passed() -> None:
    queue = EventQueue()
    assert not queue.processable([], virtual=False, now=10.0, lookahead=0.0)
    sent = _sent(queue.next_seq())
    queue.push(5.0, REPLY, ReplyEvent(sent, None, None))
    assert not queue.processable([sent], virtual=False, now=4.999, lookahead=0.0)
    assert queue.processable([sent], virtual=False, now=5.0, lookahead=0.0)
    assert queue.head_time() == 5.0


@pytest.mark.parametrize("lookahead", [0.0, 0.5, 2.0])
@pytest.mark.parametrize("seed", range(20))
def test_virtual_rule_processes_in_key_order_whatever_order_replies_arrive(
    seed: int, lookahead: float
) -> None:
    # brute force: messages sent at random times, replies of random durations (>= lookahead)
    # pulled in a random order; the processed order must be the sorted order of event keys,
    # and nothing may be processed while an unpulled message could still precede it
    rng = random.Random(seed)
    queue = EventQueue()
    messages = []
    clock = 0.0
    for _ in range(rng.randint(1, 12)):
        clock += rng.choice([0.0, 0.5, 1.0])  # ties in send time happen
        sent = _sent(queue.next_seq(), clock)
        duration = lookahead + rng.choice([0.0, 0.5, 1.0, 3.0])
        messages.append((sent, sent.send_time + duration))
    inflight = {s.message_id: s for s, _ in messages}
    arrival = list(messages)
    rng.shuffle(arrival)
    processed: list[tuple[float, int]] = []
    for sent, when in arrival:
        del inflight[sent.message_id]
        queue.push(when, REPLY, ReplyEvent(sent, None, None))
        while queue.processable(inflight.values(), virtual=True, now=0.0, lookahead=lookahead):
            when_done, event = queue.pop()
            key = (when_done, event.sent.seq)
            for other, other_when in messages:
                if other.message_id in inflight:
                    assert (other_when, other.seq) > key
            processed.append(key)
    assert not len(queue)
    assert processed == sorted((w, s.seq) for s, w in messages)


def test_history_times_count_from_start_including_the_operator_analysis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the p_c analysis runs inside start() before the first message; on a wall clock its
    # seconds belong to the run's time (JobEvent.time: "seconds since start() was called")
    from conftest import EQUAL, ToyEdge, accuracy_fn, model

    from strategies import EdgeStrategy, InProcessGrid, ManualClock
    from strategies.shares import SharePlanner

    clock = ManualClock()

    def slow_analysis(self: SharePlanner) -> None:
        clock.advance(5.0)

    monkeypatch.setattr(SharePlanner, "check_model", slow_analysis)
    strategy = EdgeStrategy(threshold=2, clock=clock, shares=EQUAL)
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=1, evaluate_fn=accuracy_fn())
    sends = [e.time for e in strategy.events if e.kind == "sent"]
    assert min(sends) >= 5.0
    assert strategy.history[0].time >= 5.0
