"""Property tests of the worker's bookkeeping, `pgqueue.core.ledger` (no database).

A random sequence of what a worker's components may do to the jobs it
holds is applied both to the ledger and to a plain model; after every
step the two agree, counts match, and nothing leaves the ledger except
through a recorded outcome or a lost lease.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pgqueue import Job, JobStatus
from pgqueue.core.ledger import LEASED, MOVES, TERMINAL, IllegalMove, Ledger, Move, Phase

C, H, R, L = Phase.CLAIMED, Phase.HELD, Phase.RUNNING, Phase.LOST
D, W, REC, F = Phase.DONE, Phase.WRITING, Phase.RECORDED, Phase.FORGOTTEN


def job(job_id: int) -> Job:
    now = datetime.now(UTC)
    return Job(job_id, "k", None, 1, 3, JobStatus.RUNNING, now, None, "w", now, now)


def test_move_table_is_exactly_the_designed_one() -> None:
    assert MOVES == {
        (C, Move.START): R,
        (C, Move.HOLD): H,
        (H, Move.UNHOLD): C,
        (C, Move.RELEASE): D,
        (H, Move.RELEASE): D,
        (R, Move.FINISH): D,
        (D, Move.WRITE): W,
        (W, Move.UNWRITE): D,
        (W, Move.RECORD): REC,
        (C, Move.LOSE): F,
        (H, Move.LOSE): F,
        (R, Move.LOSE): L,
        (L, Move.FINISH): F,
    }


def test_every_phase_but_the_terminal_ones_leads_to_one_of_them() -> None:
    # Following moves from any live phase reaches RECORDED or FORGOTTEN:
    # no job can be stranded in the ledger.
    for phase in set(Phase) - TERMINAL:
        seen, frontier = {phase}, [phase]
        while frontier:
            here = frontier.pop()
            for (source, _), target in MOVES.items():
                if source is here and target not in seen:
                    seen.add(target)
                    frontier.append(target)
        assert seen & TERMINAL, phase


@given(st.sampled_from(list(Phase)), st.sampled_from(list(Move)))
def test_a_move_outside_the_table_raises(phase: Phase, move: Move) -> None:
    ledger: Ledger[str] = Ledger()
    ledger.claim([job(1)])
    path = {C: [], H: [Move.HOLD], R: [Move.START], D: [Move.START, Move.FINISH],
            W: [Move.START, Move.FINISH, Move.WRITE], L: [Move.START, Move.LOSE]}  # fmt: skip
    if phase not in path:
        with pytest.raises(IllegalMove):
            do(ledger, 2, move)  # an unknown job: nothing is legal
        return
    for step in path[phase]:
        do(ledger, 1, step)
    assert ledger.phase(1) is phase
    if (phase, move) in MOVES:
        do(ledger, 1, move)
        target = MOVES[phase, move]
        assert ledger.phase(1) is (None if target in TERMINAL else target)
    elif move is Move.LOSE:
        assert ledger.lose([1]) == []  # lose() leaves alone what is no longer leased
        assert ledger.phase(1) is phase
    else:
        with pytest.raises(IllegalMove):
            do(ledger, 1, move)
        assert ledger.phase(1) is phase


def do(ledger: Ledger[str], job_id: int, move: Move) -> None:
    """Make ``move`` through the ledger's method for it."""
    if move is Move.START:
        ledger.start(job_id)
    elif move is Move.HOLD:
        ledger.hold(job_id)
    elif move is Move.UNHOLD:
        ledger.unhold(job_id)
    elif move is Move.FINISH:
        ledger.finish(job_id, "outcome")
    elif move is Move.RELEASE:
        ledger.release(job_id, lambda j: "released")
    elif move is Move.WRITE:
        if ledger.phase(job_id) is not D:
            raise IllegalMove(job_id, ledger.phase(job_id), move)
        ledger.take_done()
    elif move is Move.UNWRITE:
        ledger.unwrite([job_id])
    elif move is Move.RECORD:
        ledger.recorded([job_id])
    elif move is Move.LOSE:
        if ledger.phase(job_id) not in LEASED:
            raise IllegalMove(job_id, ledger.phase(job_id), move)
        ledger.lose([job_id])


class LedgerMachine(RuleBasedStateMachine):
    """The components' calls in any order the worker could make them."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger: Ledger[str] = Ledger()
        self.model: dict[int, Phase] = {}
        self.order: list[int] = []  # claim order of the CLAIMED jobs
        self.writing: list[list[int]] = []  # statements in flight
        self.next_id = 1
        self.ended: dict[int, Phase] = {}

    def ids(self, *phases: Phase) -> list[int]:
        return sorted(i for i, p in self.model.items() if p in phases)

    @rule(n=st.integers(1, 4))
    def claim(self, n: int) -> None:
        new = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        self.ledger.claim([job(i) for i in new])
        self.model.update(dict.fromkeys(new, C))
        self.order += new

    @rule()
    def start_next(self) -> None:
        nxt = self.ledger.next_unstarted()
        waiting = [i for i in self.order if self.model.get(i) is C]
        assert (nxt.id if nxt else None) == (waiting[0] if waiting else None)
        if nxt is not None:
            self.ledger.start(nxt.id)
            self.model[nxt.id] = R

    @rule(data=st.data())
    def hold_and_unhold(self, data: st.DataObject) -> None:
        claimed = self.ids(C)
        if claimed:
            i = data.draw(st.sampled_from(claimed))
            self.ledger.hold(i)
            self.model[i] = H
        held = self.ids(H)
        if held and bool(data.draw(st.booleans())):
            i = data.draw(st.sampled_from(held))
            self.ledger.unhold(i)
            self.model[i] = C
            self.order.insert(0, i)

    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        candidates = self.ids(R, L)
        if candidates:
            i = data.draw(st.sampled_from(candidates))
            kept = self.ledger.finish(i, f"outcome {i}")
            assert kept == (self.model[i] is R)
            self.end(i, F) if not kept else self.model.__setitem__(i, D)

    @rule()
    def write(self) -> None:
        taken = self.ledger.take_done()
        assert sorted(j.id for j, _ in taken) == self.ids(D)
        for j, outcome in taken:
            assert outcome in (f"outcome {j.id}", "released")
            self.model[j.id] = W
        if taken:
            self.writing.append([j.id for j, _ in taken])

    @rule(data=st.data(), ok=st.booleans())
    def statement_returns(self, data: st.DataObject, ok: bool) -> None:
        if not self.writing:
            return
        batch = self.writing.pop(data.draw(st.integers(0, len(self.writing) - 1)))
        if ok:
            self.ledger.recorded(batch)
            for i in batch:
                self.end(i, REC)
        else:
            self.ledger.unwrite(batch)
            self.model.update(dict.fromkeys(batch, D))

    @rule(data=st.data())
    def heartbeat_says_lost(self, data: st.DataObject) -> None:
        if not self.model:
            return
        ids = data.draw(st.lists(st.sampled_from(sorted(self.model)), max_size=3, unique=True))
        lost = {j.id for j in self.ledger.lose(ids)}
        assert lost == {i for i in ids if self.model[i] in LEASED}
        for i in lost:
            if self.model[i] is R:
                self.model[i] = L
            else:
                self.end(i, F)

    @rule()
    def release_unstarted(self) -> None:
        released = {j.id for j in self.ledger.release_unstarted(lambda j: "released")}
        assert released == set(self.ids(C, H))
        self.model.update(dict.fromkeys(released, D))

    @rule(data=st.data())
    def cancel_unstarted(self, data: st.DataObject) -> None:
        # A cancel that reaches a job no runner has begun: it never starts.
        unstarted = self.ids(C, H)
        if unstarted:
            i = data.draw(st.sampled_from(unstarted))
            assert self.ledger.release(i, lambda j: "released").id == i
            self.model[i] = D
        assert (n := self.ledger.next_unstarted()) is None or self.model[n.id] is C

    def end(self, i: int, phase: Phase) -> None:
        del self.model[i]
        self.ended[i] = phase

    @invariant()
    def agrees_with_the_model(self) -> None:
        for i, phase in self.model.items():
            assert self.ledger.phase(i) is phase
        for i in self.ended:
            assert self.ledger.phase(i) is None
        assert len(self.ledger) == len(self.model)
        for phase in set(Phase) - TERMINAL:
            assert self.ledger.count(phase) == len(self.ids(phase))
        assert {j.id for j in self.ledger.leased()} == set(self.ids(*LEASED))
        assert self.ledger.outcomes_pending() == bool(self.ids(D, W))


TestLedgerMachine = LedgerMachine.TestCase
