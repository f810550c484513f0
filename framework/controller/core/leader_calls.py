"""Which controller to ask next: the leader-following retry of a controller call (sans-I/O).

Only the Raft leader among the controllers answers requests; the others
answer CONTROLLER_NOT_LEADER with the leader's address. ``LeaderCalls``
keeps the last leader found across calls; each ``LeaderCall`` tries it
first, then every other controller in turn. A hint naming another
controller is followed at once (a new round, the hinted one first); a
round without an answer ends in a pause of ``retry_interval``; the call
gives up at its deadline. Times are plain numbers in one unit of the
caller's choosing (``ControllerClient`` uses trio's seconds, the cluster
simulation its virtual milliseconds).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = ["Attempt", "GiveUp", "LeaderCall", "LeaderCalls", "Pause"]


@attrs.frozen
class Attempt:
    """Send the request to ``address`` and wait for its answer at most ``timeout``."""

    address: str
    timeout: float


@attrs.frozen
class Pause:
    """Every controller was tried without an answer: wait ``duration`` before the next round."""

    duration: float


@attrs.frozen
class GiveUp:
    """The deadline passed with no leader's answer; ``last_error`` says what happened last."""

    last_error: str


class LeaderCalls:
    """The controllers one client calls, and the leader it last found among them."""

    def __init__(self, addresses: Sequence[str], *, timeout: float, attempt_timeout: float,
                 retry_interval: float) -> None:
        if not addresses:
            raise ValueError("a controller client needs at least one controller address")
        self.addresses = tuple(addresses)
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        self.retry_interval = retry_interval
        #: The controller that answered last as leader, if any.
        self.leader: str | None = None

    def start(self, now: float, timeout: float | None = None) -> LeaderCall:
        """A call made at ``now``, ending at ``now + timeout`` (the client's by default)."""
        return LeaderCall(self, now + (self.timeout if timeout is None else timeout))

    def order(self) -> list[str]:
        """The controllers in the order one round tries them: the known leader first."""
        if self.leader is None:
            return list(self.addresses)
        return [self.leader, *(a for a in self.addresses if a != self.leader)]


class LeaderCall:
    """One call: ask ``next_step`` what to do, report each attempt's outcome."""

    def __init__(self, calls: LeaderCalls, deadline: float) -> None:
        self.calls = calls
        self.deadline = deadline
        self.last_error = "no controller tried"
        self._round: list[str] = []
        self._paused = True  # a fresh call starts its first round at once

    def next_step(self, now: float) -> Attempt | Pause | GiveUp:
        """The next attempt, a pause before the next round, or giving up."""
        remaining = self.deadline - now
        if remaining <= 0:
            return GiveUp(self.last_error)
        if not self._round:
            if not self._paused:
                self._paused = True
                return Pause(min(self.calls.retry_interval, remaining))
            self._round = self.calls.order()
        self._paused = False
        return Attempt(self._round.pop(0), min(self.calls.attempt_timeout, remaining))

    def failed(self, address: str, error: str) -> None:
        """The attempt at ``address`` got no answer (``error`` says why)."""
        self.last_error = f"{address}: {error}"
        if self.calls.leader == address:
            self.calls.leader = None

    def not_leader(self, address: str, hint: str | None) -> None:
        """``address`` answered CONTROLLER_NOT_LEADER, naming ``hint`` as the leader."""
        self.last_error = f"{address}: not the leader"
        calls = self.calls
        if calls.leader == address:
            calls.leader = None
        if hint and hint != address and hint in calls.addresses:
            calls.leader = hint
            self._round = []
            self._paused = True  # a hint is followed at once, without a pause

    def answered(self, address: str) -> None:
        """``address`` answered as the leader: the call is over."""
        self.calls.leader = address
