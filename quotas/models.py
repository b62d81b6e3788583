"""Tenants, their members, quotas and secrets, the priority classes jobs run under, the users'
API tokens, and their sign-ins; the rate card the usage reports price their hours at."""

import functools
import re
import secrets
from datetime import UTC, date
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, URLValidator
from django.db import models
from django.utils import timezone

from clusters.backends.base import (
    DOCKER_HUB,
    DOCKER_HUB_NAMES,
    PLATFORM_ENV,
    PLATFORM_ENV_PREFIX,
)
from quotas import vault


def new_notify_secret() -> str:
    """A tenant's key for signing its job-end notifications: 32 random bytes, in hex."""
    return secrets.token_hex(32)


MAX_IMAGE_PATTERNS = 100


def image_patterns(text: str) -> list[str]:
    """The non-blank lines of an allowed-images text, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


@functools.lru_cache(maxsize=1024)
def image_pattern(pattern: str) -> re.Pattern:
    """A pattern as a regular expression matched whole: `*` any run of characters, everything
    else itself (`?` and `[` too, unlike a shell's glob)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def validate_image_patterns(text: str) -> None:
    """At most MAX_IMAGE_PATTERNS patterns, each one word of at most 500 characters (an image
    reference has no spaces), and not one that lets any image through."""
    patterns = image_patterns(text)
    if len(patterns) > MAX_IMAGE_PATTERNS:
        raise ValidationError(f"At most {MAX_IMAGE_PATTERNS} patterns.")
    for pattern in patterns:
        if len(pattern) > 500 or any(c.isspace() for c in pattern):
            raise ValidationError(f"{pattern[:60]!r} is not an image pattern: one a line.")
        if set(pattern) <= {"*"}:
            raise ValidationError(f"{pattern!r} lets any image through: leave the field empty.")


class Tenant(models.Model):
    """A team: the isolation boundary. Every job, attempt, log and quota belongs to one."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=50, unique=True)
    fair_share_weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)])
    cohort = models.SlugField(
        max_length=50,
        default="default",
        help_text="Tenants of one cohort lend each other their idle guaranteed quota.",
    )
    max_queued_jobs = models.PositiveIntegerField(
        "most jobs queued",
        null=True,
        blank=True,
        help_text="At most this many of its jobs queued at once (a batch counts its shards): "
        "a submission past it is refused. Empty: no limit.",
    )
    max_gpus_per_user = models.PositiveIntegerField(
        "most GPUs per user",
        null=True,
        blank=True,
        help_text="GPUs one user's running jobs may hold in this tenant at once (Slurm's "
        "MaxTRESPerUser); a job that would take its submitter past it waits, whatever is free. "
        "Empty: no limit.",
    )
    gpu_hours_per_month = models.PositiveIntegerField(
        "GPU-hours a month",
        null=True,
        blank=True,
        help_text="GPU-hours its jobs may use each calendar month (UTC), Slurm's GrpTRESMins: "
        "a GPU job starts only if its GPUs for its whole runtime limit fit in what is left, "
        "beside what the month used so far and what running jobs may still use. Empty: no "
        "budget.",
    )
    # An alert, not a limit: nothing is held on it (jobs.budget_alerts tells the tenant).
    spend_alert_per_month = models.DecimalField(
        "spend alert a month",
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0.01"))],
        help_text="In the platform's currency: its notification URL and its owners are told "
        "when what its jobs' usage cost this calendar month (UTC), priced at the rates in "
        "force on the days it was used as the usage reports price it, reaches 80 % and 100 % of "
        "it. Only an alert: nothing is held. Empty: none.",
    )
    gpu_idle_limit_min = models.PositiveIntegerField(
        "GPU idle limit (minutes)",
        null=True,
        blank=True,
        validators=[MinValueValidator(10)],
        help_text="Minutes: a running job whose whole GPUs have all read idle (under 5 % busy) "
        "this long is stopped, with the stop grace for a checkpoint, and fails: a hung job or "
        "an open notebook keeps its GPUs from everyone else. Only where its cluster measures "
        "GPU time. At least 10; empty: never.",
    )
    # An outbound request from the control plane to any address is the platform's decision:
    # platform admins set it (quotas.admin.TenantAdmin); jobs.notify posts to it.
    # Database defaults too: a tenant written by code that does not know these columns (an
    # older process during a rolling upgrade) gets none, and a secret on first use (below).
    notify_url = models.URLField(
        "notification URL",
        max_length=500,
        blank=True,
        db_default="",
        validators=[URLValidator(schemes=["http", "https"])],
        help_text="An http(s) address the control plane POSTs a signed JSON document to when "
        "one of the tenant's jobs ends (a batch: once, when its last shard ends), and when its "
        "month's GPU-hour use reaches 80 % and 100 % of its budget. Empty: none.",
    )

    class NotifyFormat(models.TextChoices):
        JSON = "json", "JSON: the document with its line as text (Slack, Mattermost, your own)"
        TEAMS = "teams", "Microsoft Teams: an Adaptive Card, for a Workflows webhook"
        DISCORD = "discord", "Discord: the line as the message's content"

    notify_format = models.CharField(
        "notification format",
        max_length=16,
        choices=NotifyFormat.choices,
        default=NotifyFormat.JSON,
        db_default=NotifyFormat.JSON,
        help_text="What the notification URL is sent: the signed JSON document, its line as "
        "`text` beside it (what Slack's and Mattermost's incoming webhooks show); or the body "
        "a Microsoft Teams Workflows webhook or a Discord webhook takes.",
    )
    notify_secret = models.CharField(
        "notification secret",
        max_length=64,
        default=new_notify_secret,
        db_default="",
        editable=False,
        help_text="The key of each notification's HMAC-SHA256 signature (header "
        "X-Mlsched-Signature-256): with it a receiver checks that a notification comes from "
        "mlsched.",
    )
    # What a tenant's jobs may run is the platform's decision (supply-chain control): platform
    # admins set it (quotas.admin.TenantAdmin); jobs.serializers checks submissions against it.
    allowed_images = models.TextField(
        blank=True,
        db_default="",
        validators=[validate_image_patterns],
        help_text="Images its jobs may run, one pattern a line, * matching any run of "
        "characters: registry.example.com/ml/* (end a registry's host with /), "
        "python:3.11-slim. A submission (or resubmission) of another image is refused, and "
        "queued jobs of another image are held when the patterns change (a platform admin "
        "releases them). Empty: any image.",
    )
    default_priority_class = models.ForeignKey(
        "PriorityClass",
        verbose_name="default priority class",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The class of its jobs submitted without one (Slurm's DefaultQOS): one open "
        "to the tenant. Empty: normal.",
    )
    # Kueue's ClusterQueue stopPolicy Hold, a platform admin's: none of its queued work starts
    # while set; what runs runs on.
    placements_paused = models.CharField(
        "placements paused, because",
        max_length=200,
        blank=True,
        db_default="",
        help_text="Why none of the tenant's queued jobs may start now (an incident, a team "
        "over what it should run): while set, they stay queued, saying it; its running jobs "
        "run on and it may still submit. Empty: its work is placed as any.",
    )
    # Whether its work may keep nodes' idle CPU and memory from everyone else is the
    # platform's decision (Slurm's partition OverSubscribe): platform admins set it.
    exclusive_allowed = models.BooleanField(
        "may take nodes whole",
        default=True,
        db_default=True,
        help_text="Its jobs may ask for nodes to themselves (exclusive, Slurm's --exclusive): "
        "each worker a node on which nothing else runs, the CPU and memory it does not ask for "
        "kept idle. Off: such a submission is refused, and its queued exclusive jobs wait "
        "until made shared; running ones run on.",
    )
    # Who belongs to it by their groups at the single sign-on proxy (quotas/proxy_auth.py):
    # access to a team is the platform's, as its quota is.
    owner_groups = models.TextField(
        "owners from sign-on groups",
        blank=True,
        default="",
        db_default="",
        help_text="Groups whose users are the team's owners (its secrets, its budget mails; "
        "its admin pages once made staff), as members from groups are made. Empty: none.",
    )
    member_groups = models.TextField(
        "members from sign-on groups",
        blank=True,
        default="",
        db_default="",
        help_text="Groups of the single sign-on proxy (MLSCHED_AUTH_GROUPS_HEADER), one a "
        "line: their users are members, made or removed as they log in. Empty: none.",
    )
    viewer_groups = models.TextField(
        "viewers from sign-on groups",
        blank=True,
        default="",
        db_default="",
        help_text="Groups whose users see the team's jobs without submitting, as members "
        "from groups are made. Empty: none.",
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(spend_alert_per_month__isnull=True)
                | models.Q(spend_alert_per_month__gt=0),
                name="tenant_spend_alert_positive",
                violation_error_message="A spend alert is more than 0.",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def group_role(self, groups: set[str]) -> tuple[str, str] | None:
        """The role the tenant gives a user in `groups`, and the group that gives it (an
        owner's before a member's, a member's before a viewer's); None: none of them."""
        for role, written in ((Membership.Role.OWNER, self.owner_groups),
                              (Membership.Role.MEMBER, self.member_groups),
                              (Membership.Role.VIEWER, self.viewer_groups)):  # fmt: skip
            for group in group_names(written):
                if group in groups:
                    return role, group
        return None

    def clean(self) -> None:
        default = self.default_priority_class
        if default is not None and not default.open_to(self):
            raise ValidationError(
                {"default_priority_class": f"Class {default.name!r} is not open to this tenant: "
                 "list it among the class's tenants first."}
            )  # fmt: skip

    def image_patterns(self) -> list[str]:
        """The allowed image patterns; [] for any image."""
        return image_patterns(self.allowed_images)

    def image_refusal(self, image: str) -> str:
        """Why the tenant's jobs may not run `image`, "" if they may."""
        patterns = self.image_patterns()
        if not patterns or any(image_pattern(p).fullmatch(image) for p in patterns):
            return ""
        return (
            f"Tenant {self.slug!r} runs only images matching {', '.join(patterns)}: ask a "
            "platform admin to allow another."
        )

    def exclusive_refusal(self) -> str:
        """Why the tenant's jobs may not take nodes whole, "" if they may."""
        if self.exclusive_allowed:
            return ""
        return (
            f"Tenant {self.slug!r} may not take nodes whole: its jobs share nodes (ask a "
            "platform admin to allow exclusive jobs)."
        )

    def signing_secret(self) -> str:
        """The notification secret, made now if the row was written without one."""
        if not self.notify_secret:
            Tenant.objects.filter(pk=self.pk, notify_secret="").update(
                notify_secret=new_notify_secret()
            )
            self.notify_secret = Tenant.objects.values_list("notify_secret", flat=True).get(
                pk=self.pk
            )
        return self.notify_secret


class RecentUse(models.Model):
    """A tenant's recent use, which fair share counts beside what it holds now (Slurm's
    decayed usage): what its running work held, an average in which each moment weighs half as
    much every MLSCHED_FAIR_SHARE_HALF_LIFE_H hours. The scheduler's cycle brings it up to date
    about once a minute (jobs.recent_use)."""

    tenant = models.OneToOneField(
        Tenant, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    use = models.JSONField(
        default=dict,
        help_text='By resource: "gpu" in milli-GPU, "cpu" in millicores, "memory" in MiB.',
    )
    at = models.DateTimeField(help_text="The moment the average runs to.")

    def __str__(self) -> str:
        return f"recent use of tenant {self.tenant_id}"


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner"
        MEMBER = "member"
        VIEWER = "viewer"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # The sign-on group the membership comes from (Tenant.owner_groups, member_groups...): made,
    # changed and removed as its user logs in. Empty: given by hand, which logins leave alone.
    from_group = models.CharField(
        "from sign-on group", max_length=200, blank=True, default="", db_default=""
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"

    @property
    def can_submit(self) -> bool:
        return self.role in (self.Role.OWNER, self.Role.MEMBER)


def group_names(written: str) -> list[str]:
    """The group names a text of them holds, one a line (commas separate them too)."""
    return [name.strip() for line in written.splitlines() for name in line.split(",")
            if name.strip()]  # fmt: skip


def administered_tenants(user):
    """The tenants a staff user manages in the admin. Superusers are the platform admins: every
    tenant. Other staff are tenant admins: the tenants they own, and only those, whatever model
    permissions they hold (Django's are per model, not per tenant)."""
    if user.is_superuser:
        return Tenant.objects.all()
    return Tenant.objects.filter(memberships__user=user, memberships__role=Membership.Role.OWNER)


def validate_flavor(value: str) -> None:
    """A resource flavor is `cpu` (millicores), `memory` (MiB) or `gpu:<type>` (GPUs)."""
    if value in ("cpu", "memory"):
        return
    if value.startswith("gpu:") and len(value) > 4 and " " not in value:
        return
    raise ValidationError(f"{value!r} is not a flavor: use cpu, memory or gpu:<type>")


class Quota(models.Model):
    """A tenant's guaranteed share of one resource flavor, how much idle capacity it may
    borrow from other tenants' guarantees on top (a cohort, as in Kueue), and how much of its
    own guarantee they may borrow while it leaves it idle."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    # "gpu:" and a GPU type as long as a node's (clusters.Node.gpu_type: 64).
    flavor = models.CharField(max_length=4 + 64, validators=[validate_flavor])
    guaranteed = models.PositiveBigIntegerField(default=0)
    borrow_limit = models.PositiveBigIntegerField(default=0)
    lend_limit = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="How much of the guarantee the rest of the cohort may borrow while this "
        "tenant leaves it idle (Kueue's lendingLimit); the rest is kept for this tenant alone, "
        "so its jobs start there at once, without first reclaiming it from borrowers. At most "
        "the guarantee; empty: all of it.",
    )

    class Meta:
        ordering = ["tenant", "flavor"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "flavor"], name="quota_unique_flavor"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}: {self.flavor}"

    @property
    def unit(self) -> str:
        return {"cpu": "millicores", "memory": "MiB"}.get(self.flavor, "GPUs")

    @property
    def gpu_type(self) -> str:
        """The GPU type a `gpu:<type>` quota limits; empty for cpu and memory."""
        return self.flavor.removeprefix("gpu:") if self.flavor.startswith("gpu:") else ""

    def clean(self) -> None:
        """A GPU type spelled unlike the nodes' (gpu:a100 for their A100) would limit nothing
        while the real type stayed unlimited: refused, naming the type the nodes report. A
        type no node reports yet is kept (hardware on its way), spelled as the other quotas
        on it spell it: once the nodes come, only one spelling limits anything."""
        if self.lend_limit is not None and self.lend_limit > (self.guaranteed or 0):
            raise ValidationError(
                {"lend_limit": "A tenant lends at most its guarantee: lower it, or raise it."}
            )
        if self.gpu_type:
            check_spelling(self.gpu_type, Quota.objects.exclude(pk=self.pk), "quotas")


def check_spelling(gpu_type: str, others, what: str) -> None:
    """A GPU type spelled unlike the nodes' (gpu:a100 for their A100) refused on the flavor,
    naming the type the nodes report. A type no node reports yet is kept (hardware on its
    way), spelled as `others` (the other rows of the same model, `what`) spell it: once the
    nodes come, only one spelling counts."""
    from clusters.models import Node

    known = Node.objects.filter(gpu_type__iexact=gpu_type).values_list("gpu_type", flat=True)
    spelled, by = sorted(set(known)), "The nodes report"
    if not spelled:
        flavors = others.filter(flavor__iexact=f"gpu:{gpu_type}").values_list("flavor", flat=True)
        spelled, by = sorted({flavor[4:] for flavor in flavors}), f"Other {what} spell"
    if spelled and gpu_type not in spelled:
        raise ValidationError(
            {"flavor": f"{by} this GPU type as {spelled[0]!r}: use gpu:{spelled[0]}."}
        )


class PriorityClass(models.Model):
    """A strict priority tier. Jobs of a higher value are always considered first."""

    name = models.SlugField(max_length=50, unique=True)
    value = models.IntegerField(unique=True)
    may_preempt = models.BooleanField(
        default=False, help_text="Jobs of this class may preempt jobs of lower classes."
    )
    preempt_exempt_s = models.PositiveIntegerField(
        "preemption exempt time (s)",
        default=0,
        db_default=0,  # a class written by code that does not know the column (a rolling upgrade)
        help_text="Seconds from a job's start during which it is not evicted for a higher "
        "class or for its own tenant's quota (Slurm's PreemptExemptTime): work that has just "
        "paid for its start is not thrown away, and a low class is not evicted each time it "
        "starts. Capacity it borrowed is still reclaimed by its owners. 0: none.",
    )
    max_runtime_s = models.PositiveIntegerField(
        "longest runtime limit (s)",
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="The longest runtime limit a job of this class may ask for (Slurm's QOS "
        "MaxWall): a submission, or a move to this class, asking for more is refused on "
        "max_runtime_s. Jobs queued or running already keep theirs. Empty: no limit.",
    )
    default_runtime_s = models.PositiveIntegerField(
        "default runtime limit (s)",
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="The runtime limit of a job of this class submitted without one (Slurm's "
        "partition DefaultTime): at most its longest. Empty: a submission must give one.",
    )

    max_gpus_per_user = models.PositiveIntegerField(
        "GPUs one user may hold at this class",
        null=True,
        blank=True,
        help_text="The most GPUs one user's running jobs of this class may hold at once, "
        "across their tenants (Slurm's QOS MaxTRESPerUser=gres/gpu): a job that would take "
        "its submitter past it waits as class_gpu_limit; a lower class still runs their "
        "work. Jobs running already are not stopped for it. Empty: no limit.",
    )
    max_gpus = models.PositiveIntegerField(
        "GPUs this class may hold",
        null=True,
        blank=True,
        help_text="The most GPUs all running jobs of this class may hold at once, every "
        "tenant's together (Slurm's QOS GrpTRES=gres/gpu): a job that would take the class "
        "past it waits as class_gpu_limit. Jobs running already are not stopped for it. "
        "Empty: no limit.",
    )

    class FairShare(models.TextChoices):
        PLATFORM = "", "as the platform (MLSCHED_FAIR_SHARE_PREEMPTION)"
        ON = "on", "on for this class"
        OFF = "off", "off for this class"

    fair_share_preemption = models.CharField(
        max_length=3,
        choices=FairShare.choices,
        blank=True,
        default=FairShare.PLATFORM,
        db_default=FairShare.PLATFORM,
        help_text="Whether a GPU job of this class, waiting, may stop other teams' preemptible "
        "work of its class or lower held beyond their fair share (Kueue's fair-sharing "
        "preemption): on or off for this class, or as the platform is set.",
    )
    description = models.CharField(max_length=200, blank=True)
    tenants = models.ManyToManyField(
        Tenant,
        blank=True,
        related_name="priority_classes",
        help_text="Tenants whose members may submit at this class. A class that may not preempt "
        "and lists nobody is open to every tenant; a class that may preempt is open only to "
        "the tenants listed, so no team can evict its neighbours by choosing a class.",
    )

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"

    def clean(self) -> None:
        longest, default = self.max_runtime_s, self.default_runtime_s
        if longest is not None and default is not None and default > longest:
            raise ValidationError(
                {"default_runtime_s": f"At most the class's longest runtime limit, {longest} s."}
            )

    def runtime_refusal(self, max_runtime_s: int) -> str:
        """Why a job asking for this runtime limit may not run at this class, "" if it may."""
        limit = self.max_runtime_s
        if limit is None or max_runtime_s <= limit:
            return ""
        return f"At most {limit} s at {self.name!r} (the class's longest runtime limit)."

    @property
    def limits_said(self) -> str:
        """Its limits on a job as the portal's forms say them beside its name ("": none):
        "runtime limit at most 14400 s; at most 4 GPUs a user, 16 in all"."""
        said = [f"runtime limit at most {self.max_runtime_s} s"] if self.max_runtime_s else []
        per_user, whole = self.max_gpus_per_user, self.max_gpus
        if per_user is not None:
            said.append(f"at most {per_user} GPUs a user" + (f", {whole} in all" if whole else ""))
        elif whole is not None:
            said.append(f"at most {whole} GPUs in all")
        return "; ".join(said)

    def fair_shares(self) -> bool:
        """Whether its GPU jobs may evict by fair share: as it says, else as the platform."""
        if self.fair_share_preemption == self.FairShare.PLATFORM:
            return settings.MLSCHED_FAIR_SHARE_PREEMPTION
        return self.fair_share_preemption == self.FairShare.ON

    def open_to(self, tenant: Tenant) -> bool:
        """Whether members of ``tenant`` may submit jobs at this class (one query, none when
        the tenants were prefetched)."""
        listed = {t.pk for t in self.tenants.all()}
        return tenant.pk in listed or (not self.may_preempt and not listed)


class ApiToken(models.Model):
    """A user's personal token for the REST API and the CLI (`Authorization: Token <key>`).

    Only the key's SHA-256 is kept: the key is shown once, when created (quotas.tokens), and a
    leaked database lets nobody call the API as its users."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    # The key's first characters, to tell tokens apart; too few to guess the rest from.
    prefix = models.CharField(max_length=12, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    # Not auto_now_add: keys carried over from the old tokens keep their creation time.
    created = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)
    expires = models.DateTimeField(null=True, blank=True, help_text="Empty: never.")
    # A read-only token reads what its user may (GET, HEAD, OPTIONS) and changes nothing: a
    # dashboard's, a monitor's, a notebook's that only looks.
    read_only = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"

    def has_expired(self, now) -> bool:
        return self.expires is not None and self.expires <= now


class SignIn(models.Model):
    """A sign-in, or an attempt that failed, kept for security audits (quotas/sign_ins.py):
    who, when, from where and how; kept MLSCHED_SIGN_IN_RETENTION_DAYS (jobs.retention)."""

    class Method(models.TextChoices):
        PASSWORD = "password", "password"  # the portal's or the admin's login form
        PROXY = "proxy", "authenticating proxy"  # quotas/proxy_auth.py
        OIDC = "oidc", "OpenID Connect"  # quotas/oidc.py

    at = models.DateTimeField(default=timezone.now, db_index=True)
    # Null: a failed attempt naming no account (or the account deleted since).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="sign_ins", db_index=False,
    )  # fmt: skip
    username = models.CharField(max_length=150, help_text="The name as typed or given.")
    method = models.CharField(max_length=10, choices=Method.choices)
    succeeded = models.BooleanField()
    address = models.CharField(
        max_length=45, blank=True, help_text="The client's (quotas.logins.client_address)."
    )
    reason = models.CharField(max_length=400, blank=True, help_text="Why a failed one failed.")

    class Meta:
        ordering = ["-id"]
        # A user's sign-ins, and those naming an account, by time; the first serves a deleted
        # user's rows set to null.
        indexes = [
            models.Index(fields=["user", "at"], name="signin_user_at"),
            models.Index(fields=["username", "at"], name="signin_username_at"),
        ]

    def __str__(self) -> str:
        said = "signed in" if self.succeeded else "failed to sign in"
        return f"{self.username} {said} ({self.method}) at {self.at:%Y-%m-%d %H:%M}"


class OidcSession(models.Model):
    """A portal session OpenID Connect signed in (quotas/oidc.py): whom the provider said it
    is for (`subject`, its `sid` there), so that the provider's back-channel logout ends it,
    and when it is next checked with the provider (its refresh token, sealed by quotas.vault).
    Deleted as the session is logged out or ended; a user's rows of sessions the session
    store no longer has (expired) go at their next sign-on."""

    session_key = models.CharField(max_length=40, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_sessions"
    )
    subject = models.CharField(max_length=255, db_index=True, help_text="The ID token's sub.")
    sid = models.CharField(max_length=255, blank=True, db_index=True,
                           help_text="The ID token's sid: the provider's session.")  # fmt: skip
    refresh_token = models.TextField(blank=True, help_text="Sealed; empty: none was given.")
    # Null: never checked again (the provider gave no refresh token).
    recheck_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.user} signed on as {self.subject}"


class ScimUser(models.Model):
    """An account the identity provider changed over SCIM (quotas/scim.py): the id it keeps
    for the user there (`external_id`), when SCIM last changed the account, and whether SCIM
    deleted it (`deleted`: the account stays, inactive, for the jobs and the history naming
    it; SCIM sees it no more, and a push of its name makes it again)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="scim"
    )
    external_id = models.CharField(max_length=255, blank=True, db_index=True,
                                   help_text="The provider's id of the user.")  # fmt: skip
    modified = models.DateTimeField(default=timezone.now)
    deleted = models.BooleanField(default=False)

    class Meta:
        verbose_name = "SCIM user"

    def __str__(self) -> str:
        return f"{self.user} (SCIM{', deleted' if self.deleted else ''})"


class ScimGroup(models.Model):
    """A group the identity provider pushes over SCIM (quotas/scim.py), with its members: the
    groups teams' members, platform admins and tenant admins follow while SCIM is on, in place
    of a sign-on's (a tenant's `owner_groups`, `member_groups`, `viewer_groups`,
    MLSCHED_AUTH_ADMIN_GROUPS and MLSCHED_AUTH_TENANT_ADMIN_GROUPS name it by its
    `display_name`)."""

    display_name = models.CharField(max_length=200, unique=True)
    external_id = models.CharField(max_length=255, blank=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="scim_groups"
    )
    created = models.DateTimeField(default=timezone.now)
    modified = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        verbose_name = "SCIM group"

    def __str__(self) -> str:
        return self.display_name


SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
MAX_SECRET_CHARS = 32 * 1024
MAX_SECRETS_PER_TENANT = 200


# A registry as an image reference names it: a host, with a port or not. Docker Hub's other
# names are written docker.io, as an image that names no registry reads.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
REGISTRY = re.compile(rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?")
MAX_USERNAME_CHARS = 200


def image_registry(image: str) -> str:
    """The registry an image is pulled from, as Docker reads its reference: its first part if
    that names a host (a dot, a port or ``localhost``), else Docker Hub."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return registry_name(first)
    return DOCKER_HUB


def registry_name(host: str) -> str:
    host = host.strip().lower()
    return DOCKER_HUB if host in DOCKER_HUB_NAMES else host


def validate_registry(host: str) -> None:
    # A host without a dot or a port (but localhost) would be read as a Docker Hub path.
    named = "." in host or ":" in host or host == "localhost"
    if not (REGISTRY.fullmatch(host) and named and len(host) <= 255):
        raise ValidationError(
            f"{host[:80]!r} is not a registry: a host as an image names it, such as ghcr.io or "
            "registry.example.com:5000 (docker.io for Docker Hub)."
        )


def validate_secret_name(name: str) -> None:
    """An environment variable name (letters, digits and _, not a leading digit) that none of
    the variables the platform sets a worker takes."""
    if not SECRET_NAME.fullmatch(name):
        raise ValidationError(
            f"{name[:80]!r} is not a secret name: letters, digits and _, not a leading digit, "
            "at most 100."
        )
    if name in PLATFORM_ENV or name.upper().startswith(PLATFORM_ENV_PREFIX):
        raise ValidationError(f"{name!r} is set by mlsched for every worker: choose another name.")


class TenantSecret(models.Model):
    """A value a tenant's jobs get as an environment variable without it being stored with
    them (Kubernetes' Secrets, GitHub Actions' secrets): a tracking service's API key, a model
    hub's token. Sealed at rest (``quotas.vault``) and never shown again: its tenant's owners
    set, replace and delete it, its members name it in their jobs (``Job.secrets``), the agent
    of the cluster that runs such a job is given it with the job, and the job's log shows it
    as ``***``.

    One ``as_file`` is given to jobs as a file instead (Kubernetes' Secret volumes): the
    variable of its name holds the file's path.

    A secret with a ``registry`` is instead a private registry's pull credential (Kubernetes'
    imagePullSecrets): the password or token of ``username`` there. No job names it and none
    gets it: the Kubernetes backend pulls with it the images of the tenant's jobs that name
    that registry."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=100, validators=[validate_secret_name])
    registry = models.CharField(
        max_length=255, blank=True, default="", validators=[validate_registry],
        help_text="A registry host (ghcr.io, registry.example.com:5000, docker.io): the secret "
        "is the pull credential of the team's images there. Empty: an environment variable.",
    )  # fmt: skip
    username = models.CharField(
        max_length=MAX_USERNAME_CHARS, blank=True, default="",
        help_text="The user the registry credential signs in as.",
    )  # fmt: skip
    as_file = models.BooleanField(
        default=False,
        help_text="Given to jobs as a file (a service account's key, a kubeconfig): the "
        "variable of its name holds the file's path. Off: the variable holds the value.",
    )
    sealed = models.TextField(editable=False)
    updated = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )  # fmt: skip

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tenant_secret_unique_name"),
            models.UniqueConstraint(
                fields=["tenant", "registry"],
                condition=~models.Q(registry=""),
                name="tenant_secret_unique_registry",
                violation_error_message="The tenant has a credential for this registry already.",
            ),
            models.CheckConstraint(
                condition=models.Q(registry="", username="")
                | (~models.Q(registry="") & ~models.Q(username="")),
                name="tenant_secret_registry_has_username",
                violation_error_message="A registry credential names its registry and its "
                "user; a variable neither.",
            ),
            models.CheckConstraint(
                condition=models.Q(as_file=False) | models.Q(registry=""),
                name="tenant_secret_credential_not_a_file",
                violation_error_message="A registry credential is given to no job, as a file "
                "or otherwise.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} of {self.tenant}"

    def set_value(self, value: str) -> None:
        self.sealed = vault.seal(value)

    def value(self) -> str:
        """The secret, opened (``vault.Unreadable`` if no key opens it)."""
        return vault.unseal(self.sealed)


# A data volume's name: a DNS label, as Kubernetes names volumes.
VOLUME_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def validate_volume_name(name: str) -> None:
    if not VOLUME_NAME.fullmatch(name):
        raise ValidationError(
            f"{name[:80]!r} is not a volume name: lower-case letters, digits and '-', from and "
            "to a letter or digit, at most 63."
        )


# A PersistentVolumeClaim's name: a DNS subdomain.
CLAIM_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def validate_claim_name(name: str) -> None:
    if name and not (CLAIM_NAME.fullmatch(name) and len(name) <= 253):
        raise ValidationError(
            f"{name[:80]!r} is not a claim's name: lower-case letters, digits, '-' and '.', "
            "from and to a letter or digit, at most 253."
        )


def validate_host_path(path: str) -> None:
    if path and (not path.startswith("/") or "\x00" in path or "/../" in f"{path}/"):
        raise ValidationError("An absolute folder path on the cluster's hosts, without '..'.")


class TenantVolume(models.Model):
    """Data a tenant's jobs may mount (a dataset, a shared model store, an output bucket's
    mount), as Kubernetes' PersistentVolumeClaims and Slurm's shared file systems give it: a
    platform admin registers where it is (a claim in the tenant's namespace on Kubernetes
    clusters, a folder on the hosts of local clusters) and on which clusters; a job names it
    with the path its workers see it at (``Job.volumes``) and is placed only on those
    clusters. Read-only unless the platform admin lets jobs write to it and the job asks."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="volumes")
    name = models.CharField(max_length=63, validators=[validate_volume_name])
    description = models.CharField(max_length=200, blank=True, default="")
    claim = models.CharField(
        max_length=253, blank=True, default="", validators=[validate_claim_name],
        help_text="Kubernetes clusters: the PersistentVolumeClaim in the tenant's namespace.",
    )  # fmt: skip
    host_path = models.CharField(
        max_length=1024, blank=True, default="", validators=[validate_host_path],
        help_text="Local clusters: the folder on every host that holds it.",
    )  # fmt: skip
    writable = models.BooleanField(
        default=False, help_text="Jobs may ask to write to it. Off: every job reads it only."
    )
    clusters = models.ManyToManyField(
        "clusters.Cluster", blank=True, related_name="+",
        help_text="The clusters that have it. None chosen: every cluster.",
    )  # fmt: skip

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tenant_volume_unique_name"),
            models.CheckConstraint(
                condition=~models.Q(claim="", host_path=""),
                name="tenant_volume_has_a_place",
                violation_error_message="A volume names its claim, its host folder, or both.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} of {self.tenant}"


class CliLogin(models.Model):
    """A sign-in of the command line through the browser (`mlsched login`; OAuth 2.0's device
    authorization grant, RFC 8628; quotas/cli_logins.py): the CLI starts it and polls with
    its device code, which is kept only as a SHA-256; its user, signed in on the portal,
    types the short user code and approves it or denies it. The API token it gets is made
    when the CLI first polls an approved login, so its key is never stored. Rows older than a
    day go when a new login starts."""

    class State(models.TextChoices):
        PENDING = "pending"  # waiting for its user on the portal
        APPROVED = "approved"  # its token is made at the CLI's next poll
        DENIED = "denied"
        SPENT = "spent"  # its token was handed out

    device_code_hash = models.CharField(max_length=64, unique=True, editable=False)
    user_code = models.CharField(max_length=8, editable=False)  # without its dash
    name = models.CharField(max_length=100)  # the token's, as the CLI asked
    requested_from = models.CharField(
        max_length=45, blank=True, help_text="The client's (quotas.logins.client_address)."
    )
    created = models.DateTimeField(default=timezone.now)
    expires = models.DateTimeField()
    interval_s = models.PositiveIntegerField(default=5)  # the CLI's shortest wait between polls
    last_polled = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    # Who approved or denied it: the token is theirs.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
        related_name="+",
    )  # fmt: skip
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    read_only = models.BooleanField(default=False)  # chosen at its approval

    class Meta:
        verbose_name = "CLI login"
        constraints = [
            # A user code names one login waiting for its user (a new one is drawn on a clash).
            models.UniqueConstraint(
                fields=["user_code"],
                condition=models.Q(state="pending"),
                name="cli_login_pending_user_code",
            ),
        ]

    def __str__(self) -> str:
        return f"CLI login {self.name!r} from {self.requested_from or 'an unknown address'}"


# The day a rate written without one holds from: those written before rates had days
# (quotas/migrations/0039) and those code writes. Before any usage: they price all of it.
FROM_THE_START = date(2000, 1, 1)


def utc_today() -> date:
    """Today's date in UTC, the days rates hold from."""
    return timezone.now().astimezone(UTC).date()


class Rate(models.Model):
    """The rate card (chargeback, as Kubecost's prices and Run:ai's cost per GPU): what an hour
    of one flavor costs, in the platform's currency (MLSCHED_CURRENCY): a `gpu:<type>`
    GPU-hour of that type, a `cpu` core-hour, a `memory` GiB-hour, from a UTC day (`since`)
    until the same flavor's next rate's day, as cloud billing prices usage at the price in
    force when it was used. A usage report prices each day's hours at the rates in force that
    day (jobs/costs.py); a flavor without a rate in force costs nothing, and the report names
    it. A rate dated ahead is a scheduled change."""

    # "gpu:" and a GPU type as long as a node's (clusters.Node.gpu_type: 64), as a quota's.
    flavor = models.CharField(max_length=4 + 64, validators=[validate_flavor])
    since = models.DateField(
        "from", default=FROM_THE_START,
        help_text="The day (UTC) this price holds from, until the flavor's next rate's day: a "
        "day ahead schedules a change; the usage reports price each day's hours at the rate in "
        "force that day, and a flavor's first rate prices nothing before its day (date it back "
        "to price earlier usage). Changing a past rate's price or day reprices the days it "
        "covers in every report and this month's spend: a correction of history. To change a "
        "price from now on, add a rate from today.",
    )  # fmt: skip
    price = models.DecimalField(
        max_digits=16, decimal_places=6, validators=[MinValueValidator(Decimal(0))],
        help_text="Per hour, in the platform's currency: a GPU-hour of a gpu:<type>, a core-hour "
        "of cpu, a GiB-hour of memory (the usage reports count no memory used: not priced).",
    )  # fmt: skip

    class Meta:
        ordering = ["flavor", "since"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(price__gte=0), name="rate_price_not_negative",
                violation_error_message="A price is 0 or more.",
            ),
            models.UniqueConstraint(
                fields=["flavor", "since"], name="rate_one_price_a_day",
                violation_error_message="A flavor has one price from a day.",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        price = Decimal(self.price).normalize()  # 2.5, not 2.500000; 100, not 1E+2
        return f"{self.flavor}: {price:f} {settings.MLSCHED_CURRENCY} an hour from {self.since}"

    def clean(self) -> None:
        """A GPU type spelled unlike the nodes' would price nothing: refused, as a quota's. A
        second price of a flavor from the same day: refused on the day."""
        if self.flavor.startswith("gpu:"):
            check_spelling(self.flavor[4:], Rate.objects.exclude(pk=self.pk), "rates")
        same_day = Rate.objects.exclude(pk=self.pk).filter(flavor=self.flavor, since=self.since)
        if self.since and same_day.exists():
            raise ValidationError(
                {"since": f"{self.flavor} has a price from {self.since} already: change that "
                 "rate, or pick another day."}
            )  # fmt: skip
