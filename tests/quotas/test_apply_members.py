"""A teams file's `members:` (quotas/declared.py): the memberships given by hand become exactly
those listed, memberships from sign-on groups stay unless the file names their user; and its
`placements_paused` pauses and resumes a team as the admin's field does."""

import pytest

from jobs.models import Job
from quotas.models import Membership
from tests.factories import JobFactory, MembershipFactory, UserFactory
from tests.quotas.test_apply_teams import apply, refusal

pytestmark = pytest.mark.django_db


def roles(tenant) -> dict[str, tuple[str, str]]:
    rows = Membership.objects.filter(tenant=tenant).select_related("user")
    return {m.user.username: (m.role, m.from_group) for m in rows}


def test_members_given_by_hand_become_those_listed_and_group_ones_stay(root, teams, alpha):
    for name in ("alice", "bob", "carol", "dave"):
        UserFactory(username=name)
    MembershipFactory(tenant=alpha, user=UserFactory(username="bob"), role="member")
    MembershipFactory(tenant=alpha, user=UserFactory(username="carol"), role="owner")
    MembershipFactory(tenant=alpha, user=UserFactory(username="dave"), role="viewer",
                      from_group="auditors")  # fmt: skip
    file = "tenants:\n  - slug: alpha\n    members: {alice: owner, bob: viewer}\n"

    said = apply(teams(file))
    again = apply(teams(file))

    assert said == [
        "alpha: member carol removed",
        "alpha: member alice added (owner)",
        "alpha: member bob member -> viewer",
        "0 tenants created, 1 changed, 0 unchanged",
    ]
    assert again == ["0 tenants created, 0 changed, 1 unchanged"]
    assert roles(alpha) == {"alice": ("owner", ""), "bob": ("viewer", ""),
                            "dave": ("viewer", "auditors")}  # fmt: skip


def test_a_member_from_a_group_the_file_names_becomes_the_files(root, teams, alpha):
    MembershipFactory(tenant=alpha, user=UserFactory(username="dave"), role="viewer",
                      from_group="auditors")  # fmt: skip

    said = apply(teams("tenants:\n  - {slug: alpha, members: {dave: member}}\n"))

    assert said[0] == "alpha: member dave viewer -> member (was from sign-on group auditors)"
    assert roles(alpha) == {"dave": ("member", "")}


@pytest.mark.parametrize(
    ("members", "said"),
    [
        ("{nobody: owner}", "alpha: members: no user 'nobody'"),
        ("{alice: boss}", 'alpha: members: "alice": "boss" is no role (owner, member, viewer)'),
        ("[alice]", "alpha: members: a mapping of usernames to roles is expected"),
    ],
    ids=["unknown user", "unknown role", "a list"],
)
def test_members_it_cannot_make_refuse_the_file(root, teams, alpha, members, said):
    UserFactory(username="alice")

    assert said in refusal(teams(f"tenants:\n  - {{slug: alpha, members: {members}}}\n"))
    assert roles(alpha) == {}


def test_placements_paused_pauses_and_resumes_the_team_as_the_admins_field_does(root, teams, alpha):
    queued = JobFactory(tenant=alpha)
    Job.objects.filter(pk=queued.pk).update(eligible_at=queued.created)

    paused = apply(teams('tenants:\n  - {slug: alpha, placements_paused: "budget review"}\n'))
    stopped = Job.objects.get(pk=queued.pk).eligible_at
    resumed = apply(teams('tenants:\n  - {slug: alpha, placements_paused: ""}\n'))

    assert paused[0] == 'alpha: placements_paused "" -> "budget review"'
    assert stopped is None  # its queue wait stops while the team is paused
    assert resumed[0] == 'alpha: placements_paused "budget review" -> ""'
    assert Job.objects.get(pk=queued.pk).eligible_at is not None
