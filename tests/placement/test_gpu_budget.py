"""A tenant's GPU-hour budget for each period (Slurm's GrpTRESMins): a job whose GPUs for its
whole runtime limit do not fit in what is left, beside what the tenant used so far and what its
running jobs may still use, waits as ``gpu_budget`` until the period renews, whatever is free,
and neither evicts nor reserves for it."""

from __future__ import annotations

from jobs.placement import PENDING, PLACED, Tenant, place
from jobs.placement.explain import LIMITS
from tests.placement.builders import NOW, j_batch, j_eval, j_training, n8_a100_nodes, running_on
from tests.placement.builders import snapshot as build

H = 3600.0
RENEWS = NOW + 10 * 24 * H


def budgeted(
    hours: float, spent_hours: float = 0.0, tenant: str = "alpha", renews: float = RENEWS
) -> Tenant:
    return Tenant(tenant, gpu_budget=hours * H * 1000, gpu_budget_spent=spent_hours * H * 1000,
                  gpu_budget_renews=renews)  # fmt: skip


def decided(queued, tenants, running=(), nodes=None):
    nodes = list(nodes or n8_a100_nodes(2))
    return {o.job_id: o for o in place(build(nodes, queued, running, tenants)).outcomes}


def test_a_job_that_fits_in_what_is_left_starts_and_one_that_does_not_waits_for_the_renewal():
    # 100 GPU-hours, 60 spent: 8 GPUs for 4 h (32) fit, 8 GPUs for 6 h (48) do not.
    fits = j_training("fits", max_runtime=4 * H)
    too_long = j_training("too-long", max_runtime=6 * H)

    out = decided([too_long, fits], [budgeted(100, spent_hours=60)])
    alone = decided([too_long], [budgeted(100, spent_hours=60)])["too-long"]

    assert out["fits"].status == PLACED
    assert (out["too-long"].status, out["too-long"].reason) == (PENDING, "gpu_budget")
    assert out["too-long"].estimated_start == RENEWS
    assert "40.0 of its 100.0 GPU-hours left" in alone.message
    assert "it may use 48.0 of them (8 GPUs for its runtime limit" in alone.message


def test_what_the_cycle_places_is_charged_against_the_budget():
    jobs = [j_batch(f"b{n}", gpus=2, max_runtime=10 * H) for n in range(4)]  # 20 GPU-hours each

    out = decided(jobs, [budgeted(50)])

    assert [out[f"b{n}"].status for n in range(4)] == [PLACED, PLACED, PENDING, PENDING]


def test_running_jobs_count_what_they_may_still_use_up_to_their_runtime_limit():
    node, holding = running_on(n8_a100_nodes(1)[0], "running", 4, expected_end=NOW + 10 * H)
    job = j_batch("next", gpus=1, max_runtime=2 * H)  # 2 GPU-hours

    # 40 GPU-hours may still be used by the running job: 41 leaves one, 42 leaves two.
    short = decided([job], [budgeted(41)], [holding], [node, *n8_a100_nodes(1)])
    enough = decided([job], [budgeted(42)], [holding], [node, *n8_a100_nodes(1)])

    assert (short["next"].status, enough["next"].status) == (PENDING, PLACED)


def test_a_running_jobs_use_past_the_periods_end_counts_against_the_next_period():
    node, holding = running_on(n8_a100_nodes(1)[0], "running", 4, expected_end=NOW + 10 * H)
    job = j_batch("next", gpus=1, max_runtime=H)  # 1 GPU-hour
    nodes = [node, *n8_a100_nodes(1)]

    # The period ends in 2 h: the running job may use 8 GPU-hours of it, not 40.
    near_end = decided([job], [budgeted(10, renews=NOW + 2 * H)], [holding], nodes)
    mid_period = decided([job], [budgeted(10)], [holding], nodes)

    assert (near_end["next"].status, mid_period["next"].status) == (PLACED, PENDING)


def test_a_job_is_charged_only_the_part_of_its_ask_before_the_periods_end():
    job = j_training("long", max_runtime=4 * H)  # 32 GPU-hours, 8 in the last hour
    after = j_batch("after", gpus=1, max_runtime=3 * H)  # 1 GPU-hour before the end

    near_end = decided([job, after], [budgeted(100, spent_hours=90, renews=NOW + H)])
    mid_period = decided([job], [budgeted(100, spent_hours=90)])["long"]

    assert near_end["long"].status == near_end["after"].status == PLACED
    assert (mid_period.status, mid_period.reason) == (PENDING, "gpu_budget")
    assert "it may use 32.0 of them" in mid_period.message


def test_an_ask_past_the_whole_budget_is_refused_even_as_the_period_ends():
    job = j_training("huge", max_runtime=20 * H)  # 160 GPU-hours, 8 in the last hour

    out = decided([job], [budgeted(100, renews=NOW + H)])["huge"]

    assert (out.status, out.reason, out.estimated_start) == (PENDING, "gpu_budget", None)


def test_a_job_asking_more_than_the_whole_budget_is_told_it_cannot_start():
    job = j_training("huge", workers=2, max_runtime=100 * H)  # 1,600 GPU-hours

    out = decided([job], [budgeted(1000)])["huge"]

    assert (out.status, out.reason, out.estimated_start) == (PENDING, "gpu_budget", None)
    assert "more than its team's whole budget of 1,000.0" in out.message


def test_jobs_without_gpus_and_tenants_without_a_budget_are_not_held():
    cpu_only = j_eval("cpu", gpu_milli=0, max_runtime=1000 * H)
    other = j_training("other", tenant="beta", max_runtime=1000 * H)

    out = decided([cpu_only, other], [budgeted(1, spent_hours=1), Tenant("beta")])

    assert out["cpu"].status == out["other"].status == PLACED


def test_a_spent_budget_holds_a_job_of_unknown_runtime_but_one_left_lets_it_start():
    job = j_batch("unknown", gpus=1, max_runtime=None)

    spent = decided([job], [budgeted(10, spent_hours=10)])["unknown"]
    left = decided([job], [budgeted(10, spent_hours=9)])["unknown"]

    assert (spent.status, left.status) == (PENDING, PLACED)


def test_a_job_its_budget_holds_evicts_nothing_and_costs_no_queue_depth():
    nodes = list(n8_a100_nodes(1))
    node, victim = running_on(nodes[0], "low", 8, tenant="beta", preemptible=True, tier=0)
    job = j_training("urgent", tier=5, max_runtime=10 * H)

    outcome = place(build([node], [job], [victim], [budgeted(10), Tenant("beta")]))

    assert not outcome.preempted and not outcome.outcomes[0].victims
    assert outcome.outcomes[0].reason == "gpu_budget"
    assert "gpu_budget" in LIMITS
