"""Clocks: every time read and every wait of the strategy loop goes through one of these.

The loop never calls :mod:`time` itself. Three clocks share the :class:`Clock` protocol:

- :class:`WallClock` (the default, for real deployments): seconds of the host's monotonic
  clock; event time = arrival time of a reply on the server's own clock.
- :class:`ManualClock`: a clock that only moves when told (``sleep`` advances it at once).
  Tests and :class:`~strategies.inprocess.InProcessGrid` use it to make wall-clock runs
  instant and deterministic.
- :class:`VirtualClock` (simulations): virtual seconds. The loop moves it to the event time
  of each event it processes (``advance_to``); a reply's event time is its message's virtual
  send time plus the virtual duration the client reports
  (:data:`flower_edge.wire.VIRTUAL_SECONDS`). Real waiting (polling the grid, the real-time
  guard on messages that never come back) goes through its ``wall`` clock.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from flower_edge import validate
from flower_edge.errors import ConfigError

__all__ = ["Clock", "ManualClock", "VirtualClock", "WallClock"]


@runtime_checkable
class Clock(Protocol):
    """Time source and waiting primitive of the strategy loop."""

    @property
    def is_virtual(self) -> bool:
        """Whether event times are virtual (set by the loop) rather than read from a clock."""
        ...

    def now(self) -> float:
        """Return the current time of this clock in seconds."""
        ...

    def real_now(self) -> float:
        """Return real (host or manual) seconds, used for real-time guards and polling."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of real (host or manual) time; ``seconds <= 0`` returns at once."""
        ...

    def advance_to(self, when: float) -> None:
        """Move a virtual clock forward to ``when``; real clocks ignore it."""
        ...


class WallClock:
    """The host's monotonic clock (``time.monotonic``, ``time.sleep``)."""

    @property
    def is_virtual(self) -> bool:
        """Return ``False``: event times are read from the host clock."""
        return False

    def now(self) -> float:
        """Return the host's monotonic time in seconds."""
        return time.monotonic()

    def real_now(self) -> float:
        """Return the host's monotonic time in seconds."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` on the host."""
        if seconds > 0:
            time.sleep(seconds)

    def advance_to(self, when: float) -> None:
        """Do nothing: a wall clock cannot be moved."""

    def __repr__(self) -> str:
        return "WallClock()"


class ManualClock:
    """A real-time stand-in that only moves when told: ``sleep(s)`` advances it by ``s`` at once.

    Parameters
    ----------
    start : float (default: 0.0)
        Initial reading in seconds, finite and ``>= 0``.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = validate.number("start", start, low=0.0)

    @property
    def is_virtual(self) -> bool:
        """Return ``False``: it stands in for a wall clock."""
        return False

    def now(self) -> float:
        """Return the current reading."""
        return self._now

    def real_now(self) -> float:
        """Return the current reading."""
        return self._now

    def sleep(self, seconds: float) -> None:
        """Advance the reading by ``seconds`` (no real waiting)."""
        if seconds > 0:
            self._now += seconds

    def advance(self, seconds: float) -> None:
        """Advance the reading by ``seconds`` (``>= 0``)."""
        if seconds < 0:
            raise ConfigError(f"seconds must be >= 0, got {seconds}")
        self._now += seconds

    def advance_to(self, when: float) -> None:
        """Do nothing: the loop does not set a stand-in for a wall clock."""

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now})"


class VirtualClock:
    """Virtual time, set by the loop to the time of the event it processes.

    Parameters
    ----------
    start : float (default: 0.0)
        Initial virtual time in seconds, finite and ``>= 0``.
    wall : Clock, optional
        Real clock for polling and real-time guards (default: a :class:`WallClock`; tests
        pass a :class:`ManualClock` so that waits cost nothing).
    """

    def __init__(self, start: float = 0.0, wall: Clock | None = None) -> None:
        self._now = validate.number("start", start, low=0.0)
        if wall is not None and not isinstance(wall, Clock):
            raise ConfigError(f"wall must be a strategies Clock, got {type(wall).__name__}")
        self.wall: Clock = WallClock() if wall is None else wall

    @property
    def is_virtual(self) -> bool:
        """Return ``True``."""
        return True

    def now(self) -> float:
        """Return the current virtual time."""
        return self._now

    def real_now(self) -> float:
        """Return the wall clock's reading."""
        return self.wall.real_now()

    def sleep(self, seconds: float) -> None:
        """Wait on the wall clock; virtual time does not move."""
        self.wall.sleep(seconds)

    def advance_to(self, when: float) -> None:
        """Move virtual time forward to ``when``; earlier times leave it unchanged."""
        self._now = max(self._now, float(when))

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now}, wall={self.wall!r})"
