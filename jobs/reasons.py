"""Why a queued job waits: the reason codes the cycle stores (`Job.pending_reason`), those of
the placement core (`jobs.placement.REASONS`) and those it gives outside the core, each with
what it means, as the overview page and the job lists' `reason` filter read them."""

from jobs.placement import REASONS

# The reasons a queued job waits that the cycle gives outside the placement core.
OTHER_REASONS = {
    "": "Not seen by a placement cycle yet.",
    "held": "Held: it is not offered to the scheduler until released.",
    "waiting_for_dependency": "Waiting for the jobs it depends on.",
    "deferred": "Deferred until the begin its submitter asked for.",
    "retry_backoff": "Waiting out the backoff before its retry.",
    "team_paused": "Its team's placements are paused by a platform admin.",
    "exclusive_not_allowed": "It takes nodes whole, which its team may no longer do.",
    "named_nodes_gone": "None of the nodes it names to run on exists any more.",
    "changed_underneath": "Placed, but what it was placed on changed before the placement "
    "committed: the next cycle decides again.",
}
# A job the cycle placed whose placement its commit skipped (the nodes, quotas or the job
# changed since the snapshot, jobs.commit): the next cycle decides it again.
CHANGED_UNDERNEATH = "changed_underneath"
# Every code a queued job may wait for ("" aside: not decided yet).
CODES = frozenset(REASONS) | (frozenset(OTHER_REASONS) - {""})


PAUSED = "team_paused"  # a job of a tenant whose placements a platform admin paused
# An exclusive job of a tenant a platform admin no longer lets take nodes whole.
NOT_WHOLE = "exclusive_not_allowed"
NOT_WHOLE_SENTENCE = (
    "Its team may no longer take nodes whole (a platform admin's setting): make it shared "
    "(exclusive false, CLI constrain ID --shared) or cancel it."
)


# A job whose `only_nodes` names no node any cluster still has (removed from their inventory
# since it was submitted): it could never run as it is.
NAMED_GONE = "named_nodes_gone"
NAMED_GONE_SENTENCE = (
    "None of the nodes it names to run on (only_nodes) exists any more: name others (CLI "
    "constrain ID --only-nodes NODE,NODE), let it run on any node (--any-node) or cancel it."
)


# Why the cycle sets a queued job aside (jobs.snapshot.set_aside, named_gone): as a held job,
# such a job is not eligible meanwhile (actions.unstamp), and is again from the cycle that finds
# it free.
SET_ASIDE = (PAUSED, NOT_WHOLE, NAMED_GONE)


def paused_sentence(because: str) -> str:
    """Why a job of a tenant whose placements a platform admin paused waits."""
    return f"Its team's placements are paused by a platform admin: {because.rstrip('.')}."[:300]


def meaning(code: str) -> str:
    """What a queued job's reason code means, "" for one not known here."""
    return REASONS.get(code) or OTHER_REASONS.get(code, "")
