"""The one booking rule (cpn.booking) on literal node states: whole cards, shared cards, CPU and memory
taken and given back, a running job's CPU given back or kept, and the node-wide helpers the policies and
the scheduler hold placements and free stopped jobs with."""

from __future__ import annotations

import pytest

from cpn.admission import Room
from cpn.booking import Booking, hold_cards, node_state, release_cards
from cpn.decisions import Placement, RunningJob
from cpn.inventory import Node, NodeState, SharedCard
from cpn.jobs import JobSpec

A = Node("c", "a", "Tesla-V100-SXM2-16GB", 4, 16.0, 32.0, "training")
B = Node("c", "b", "Tesla-V100-SXM2-16GB", 4, 16.0, 32.0, "training")


def job(job_id: str, gpus: int = 1, cpu: float = 4.0, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", num_gpus=gpus, cpu=cpu, **kw)


def test_whole_cards_are_taken_with_their_cpu_and_given_back_to_the_same_state():
    before = NodeState(A, 4, 2.0, ("other",))
    booking = Booking.on(before, job("j", gpus=4, cpu=8.0), 2, 0.0)
    assert booking == Booking("j", 2, 4.0)  # half the gang's cards: half its CPU
    after = booking.take(before)
    assert after == NodeState(A, 2, 6.0, ("other", "j"))
    assert booking.give_back(after) == before


def test_a_sharing_job_opens_a_card_and_the_next_joins_it_while_share_and_memory_last():
    empty = NodeState(A, 4)
    first = Booking.on(empty, job("s1", gpu_share=0.5), 1, 6.0)
    assert (first.card, first.share, first.memory_gb) == (0, 0.5, 6.0)
    one = first.take(empty)
    assert one.free_gpus == 3 and one.shared == (SharedCard(0, 0.5, 10.0),) and one.cpu_used == 4.0
    second = Booking.on(one, job("s2", gpu_share=0.25), 1, 4.0)
    two = second.take(one)
    assert second.card == 0 and two.free_gpus == 3 and two.shared == (SharedCard(0, 0.25, 6.0),)
    # too much memory for what card 0 has left: a card of its own
    third = Booking.on(two, job("s3", gpu_share=0.25), 1, 8.0)
    three = third.take(two)
    assert third.card == 1 and three.free_gpus == 2
    assert three.shared == (SharedCard(0, 0.25, 6.0), SharedCard(1, 0.75, 8.0))
    assert three.running == ("s1", "s2", "s3")


def test_a_shared_card_is_free_again_only_when_its_last_share_is_given_back():
    empty = NodeState(A, 4)
    s1 = Booking.on(empty, job("s1", gpu_share=0.5), 1, 6.0)
    both = s1.take(empty)
    s2 = Booking.on(both, job("s2", gpu_share=0.5), 1, 6.0)
    both = s2.take(both)
    assert both.shared == (SharedCard(0, 0.0, 4.0),) and both.free_gpus == 3
    left = s1.give_back(both)
    assert left.shared == (SharedCard(0, 0.5, 10.0),) and left.free_gpus == 3 and left.running == ("s2",)
    assert s2.give_back(left) == empty


def test_a_card_opened_below_the_shared_ones_keeps_them_in_index_order():
    """The simulated clusters open the lowest free card: the node's shared cards stay lowest index first."""
    state = NodeState(A, 3, shared=(SharedCard(2, 0.5, 8.0),))
    after = Booking("s", 1, 1.0, card=0, share=0.25, memory_gb=2.0).take(state)
    assert [c.index for c in after.shared] == [0, 2] and after.free_gpus == 2


def test_a_whole_card_booking_of_a_sharing_job_holds_the_card_whole():
    state = NodeState(A, 4)
    after = Booking.whole(job("s", gpu_share=0.25), 1).take(state)
    assert after.free_gpus == 3 and after.shared == ()


def test_a_booking_past_what_is_free_gives_back_exactly_what_it_took_but_a_hold_shows_none_free():
    """A look following an earlier look's decision may book a card twice until a job ends: the count stays
    exact. `hold_cards` (never given back) shows no node with fewer than no free cards."""
    state = NodeState(A, 2)
    over = Booking("j", 3, 1.0)
    assert over.take(state).free_gpus == -1 and over.give_back(over.take(state)) == state
    held = hold_cards((state,), [(job("j", gpus=3), Placement("j", "c", "a", 3))])
    assert held[0].free_gpus == 0


@pytest.mark.parametrize(("with_state", "cpu_after"), [(True, 4.0), (False, 12.0)])
def test_a_running_job_gives_back_its_cards_share_of_the_cpu_or_keeps_it(with_state, cpu_after):
    state = NodeState(A, 1, 12.0, ("r1", "r2"))  # 3 busy cards use 12 cores: r1's 2 use 8
    booking = Booking.running("r1", 2, state if with_state else None)
    after = booking.give_back(state)
    assert after.free_gpus == 3 and after.running == ("r2",) and after.cpu_used == cpu_after


def test_hold_cards_books_every_node_of_a_gang_and_leaves_other_nodes_alone():
    nodes = (NodeState(A, 4), NodeState(B, 4, 1.0), NodeState(Node("c", "x", "K80", 2, 12, 8, "training"), 2))
    gang = job("g", gpus=6, cpu=12.0)
    held = hold_cards(nodes, [(gang, Placement("g", "c", "a", 4, (("b", 2),)))])
    assert held[0] == NodeState(A, 0, 8.0, ("g",))
    assert held[1] == NodeState(B, 2, 5.0, ("g",))
    assert held[2] is nodes[2]
    assert hold_cards(nodes, []) is nodes


def test_release_cards_frees_the_stopped_jobs_cards_and_counts_their_cpu_still_in_use():
    nodes = (NodeState(A, 0, 16.0, ("r1", "r2")), NodeState(B, 2, 4.0, ("r1",)))
    running = {"r1": RunningJob(100.0, (("c/a", 2), ("c/b", 2))), "r2": RunningJob(50.0, (("c/a", 2),))}
    freed = release_cards(nodes, {"r1"}, running)
    assert freed == (NodeState(A, 2, 16.0, ("r2",)), NodeState(B, 4, 4.0, ()))
    assert release_cards(nodes, (), running) is nodes


def test_a_node_state_counted_afresh_from_its_bookings_is_what_taking_them_in_order_gives():
    bookings = [
        Booking("w", 2, 8.0),
        Booking("s1", 1, 2.0, card=3, share=0.5, memory_gb=4.0),
        Booking("s2", 1, 2.0, card=3, share=0.25, memory_gb=2.0),
        Booking("s3", 1, 1.0, card=0, share=0.5, memory_gb=8.0),
    ]
    taken = NodeState(A, 4)
    for booking in bookings:
        taken = booking.take(taken)
    expected = NodeState(
        A, 0, 13.0, ("w", "s1", "s2", "s3"), (SharedCard(0, 0.5, 8.0), SharedCard(3, 0.25, 10.0))
    )
    assert node_state(A, bookings) == taken == expected
    assert node_state(A, []) == NodeState(A, 4)


def test_what_one_sharing_job_leaves_when_its_partner_ends_is_counted_without_the_partners_rounding():
    """The simulated clusters count a node afresh: after s1 ends, s2's card shows exactly what s2 alone
    leaves, however the shares of jobs that came and went round."""
    s1 = Booking("s1", 1, 0.0, card=0, share=0.1, memory_gb=1.1)
    s2 = Booking("s2", 1, 0.0, card=0, share=0.2, memory_gb=2.2)
    assert node_state(A, [s2]).shared == (SharedCard(0, 1.0 - 0.2, 16.0 - 2.2),)
    assert node_state(A, [s1, s2]).shared == (SharedCard(0, 1.0 - (0.1 + 0.2), 16.0 - (1.1 + 2.2)),)


def test_the_policies_working_copy_of_a_node_books_as_the_node_state_does():
    """`take_room` (a decision's mutable rooms, shared cards by position) and `take` (node states) agree."""
    state = NodeState(A, 3, 2.0, ("r",), (SharedCard(0, 0.5, 8.0),))
    room = Room.of(state)
    for booking in (
        Booking("w", 2, 8.0),
        Booking("s1", 1, 2.0, card=0, share=0.25, memory_gb=2.0),
        Booking("s2", 1, 2.0, card=1, share=0.5, memory_gb=6.0),
    ):
        state = booking.take(state)
        booking.take_room(room)
    assert (room.free, room.cpu_used, room.shared) == (0, 14.0, [(0.25, 6.0), (0.5, 10.0)])
    assert Room.of(state).shared == room.shared and state.free_gpus == room.free
