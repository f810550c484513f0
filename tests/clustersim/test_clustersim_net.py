"""The simulation's cooperative tasks: a task may crash its own node (drop every task)
or cancel itself while it runs, as a broker's put does when the simulation crashes it
mid-write; it then never resumes, and the others go on."""

from __future__ import annotations

from triomq.testing.clustersim_net import Tasks, wait_for
from triomq.testing.clustersim_transactions import run_seed


def test_a_task_that_drops_every_task_while_it_runs_ends_cleanly() -> None:
    tasks, ran = Tasks(), []

    def crasher():
        ran.append("crasher")
        tasks.clear()  # the node crashes under it
        yield lambda: True
        ran.append("crasher resumed")

    def other():
        yield from wait_for(lambda: True)
        ran.append("other")

    tasks.spawn(crasher())
    tasks.spawn(other())
    tasks.run()
    assert ran == ["crasher"]
    # The node restarts with new tasks; they run.
    tasks.spawn(other())
    tasks.run()
    assert ran == ["crasher", "other"]


def test_a_task_that_cancels_itself_and_another_keeps_the_rest_in_place() -> None:
    tasks, ran = Tasks(), []
    handles: dict[str, int] = {}

    def canceller():
        tasks.cancel(handles["second"])
        tasks.cancel(handles["canceller"])
        yield lambda: True
        ran.append("canceller resumed")

    def step(name: str):
        yield lambda: True
        ran.append(name)

    handles["canceller"] = tasks.spawn(canceller())
    handles["second"] = tasks.spawn(step("second"))
    tasks.spawn(step("third"))
    tasks.run()
    assert ran == ["third"]


def test_the_transaction_seed_that_crashed_a_broker_inside_its_own_put_runs() -> None:
    assert run_seed(9000).ok
