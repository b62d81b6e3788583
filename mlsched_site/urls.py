from django.contrib import admin
from django.contrib.auth import views as auth
from django.urls import include, path

from jobs import action_views as on_job
from jobs import cli_archive
from jobs import platform_views as platform
from jobs import views as portal
from jobs.actions import release_hold
from mlsched_site.health import healthz
from mlsched_site.openapi import OpenApiJson, OpenApiYaml
from quotas import accounts, logins, oidc, oidc_sessions
from quotas.api import (
    HistoryView,
    MembersView,
    MemberView,
    MeView,
    OwnTokenView,
    PauseView,
    PriorityClassesView,
    QuotasView,
    RatesView,
    SignInsView,
    TeamsApplyView,
    TeamsExportView,
    VolumesView,
)
from quotas.cli_login_views import cli_login
from quotas.cli_logins_api import CliLoginsView, CliLoginTokenView
from quotas.secret_views import delete_secret, secrets_page
from quotas.secrets_api import SecretsView, SecretView
from quotas.views import my_sign_ins, quotas, team_members, teams

# The admin's login counts failures as the portal's does.
admin.site.login_form = logins.AdminLoginForm

urlpatterns = [
    path("", portal.index, name="index"),
    path("queue/", portal.queue, name="queue"),
    path("jobs/new/", portal.submit, name="submit"),
    path("jobs/selected/", on_job.act_on_selected, name="act_on_selected"),
    path("jobs/matching/cancel/", on_job.cancel_matching, name="cancel_matching"),
    path("jobs/<int:pk>/", portal.job_detail, name="job"),
    path("jobs/<int:pk>/cancel/", on_job.cancel, name="cancel"),
    path("jobs/<int:pk>/hold/", on_job.hold, name="hold"),
    path("jobs/<int:pk>/release/", on_job.hold, {"verb": release_hold}, name="release"),
    path("jobs/<int:pk>/requeue/", on_job.requeue, name="requeue"),
    path("jobs/<int:pk>/resubmit/", on_job.resubmit, name="resubmit"),
    path("jobs/<int:pk>/dependencies/", on_job.change_dependencies, name="change_dependencies"),
    path("jobs/<int:pk>/priority/", on_job.change_priority, name="change_priority"),
    path("jobs/<int:pk>/shard-limit/", on_job.change_shard_limit, name="change_shard_limit"),
    path("jobs/<int:pk>/min-workers/", on_job.change_min_workers, name="change_min_workers"),
    path("jobs/<int:pk>/runtime-limit/", on_job.change_runtime_limit, name="change_runtime_limit"),
    path("jobs/<int:pk>/request/", on_job.change_request, name="change_request"),
    path("jobs/<int:pk>/constraints/", on_job.change_constraints, name="change_constraints"),
    path("jobs/<int:pk>/labels/", on_job.change_labels, name="change_labels"),
    path("jobs/<int:pk>/notifications/", on_job.change_notifications, name="change_notifications"),
    path("jobs/<int:pk>/retries/", on_job.change_retries, name="change_retries"),
    path("metrics", platform.metrics, name="metrics"),
    path("overview/", platform.overview, name="overview"),
    path("clusters/", platform.clusters, name="clusters"),
    path("usage/", platform.usage, name="usage"),
    path("usage.csv", platform.usage_csv, name="usage_csv"),
    path("usage-daily.csv", platform.usage_daily_csv, name="usage_daily_csv"),
    path("jobs.csv", platform.jobs_csv, name="jobs_csv"),
    path("usage-by-label.csv", platform.usage_by_label_csv, name="usage_by_label_csv"),
    path("usage-by-<slug:split>.csv", platform.usage_split_csv, name="usage_split_csv"),
    path("quotas/", quotas, name="quotas"),
    path("secrets/", secrets_page, name="secrets"),
    path("teams/", teams, name="teams"),
    path("teams/<slug:slug>/members/", team_members, name="team_members"),
    path("secrets/<slug:slug>/<str:name>/delete/", delete_secret, name="delete_secret"),
    path("tokens/", portal.api_tokens, name="api_tokens"),
    path("tokens/<int:pk>/revoke/", portal.revoke_api_token, name="revoke_api_token"),
    # `mlsched login` (quotas/cli_logins.py): the page its user approves it on.
    path("cli-login/", cli_login, name="cli_login"),
    path("healthz", healthz, name="healthz"),
    # Django's auth pages; the password reset and the email address change mail a link, and
    # where the platform sends no mail, a platform admin sets both in the admin.
    path("accounts/login/", logins.Login.as_view(), name="login"),
    path("accounts/logout/", oidc.Logout.as_view(), name="logout"),
    # OpenID Connect sign-on (quotas/oidc.py): 404s where MLSCHED_OIDC_ISSUER is unset.
    path("accounts/oidc/login/", oidc.login, name="oidc_login"),
    path("accounts/oidc/callback/", oidc.callback, name="oidc_callback"),
    path(
        "accounts/oidc/backchannel-logout/",
        oidc_sessions.backchannel_logout,
        name="oidc_backchannel_logout",
    ),
    path("accounts/sign-ins/", my_sign_ins, name="my_sign_ins"),
    path(
        "accounts/password/",
        logins.PasswordChange.as_view(template_name="portal/password_change.html"),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth.PasswordChangeDoneView.as_view(template_name="portal/password_changed.html"),
        name="password_change_done",
    ),
    path("accounts/email/", accounts.email_change, name="email_change"),
    path("accounts/email/<str:token>/", accounts.email_confirm, name="email_confirm"),
    path("accounts/password_reset/", accounts.password_reset, name="password_reset"),
    path(
        "accounts/password_reset/done/",
        accounts.password_reset_done,
        name="password_reset_done",
    ),
    path(
        "accounts/reset/<uidb64>/<token>/",
        accounts.password_reset_confirm,
        name="password_reset_confirm",
    ),
    path("accounts/reset/done/", accounts.password_reset_complete, name="password_reset_complete"),
    path("admin/", admin.site.urls),
    path("api/v1/agent/", include("clusters.api")),
    path("api/v1/quotas/", QuotasView.as_view(), name="api-quotas"),
    path("api/v1/priority-classes/", PriorityClassesView.as_view(), name="api-priority-classes"),
    path("api/v1/volumes/", VolumesView.as_view(), name="api-volumes"),
    path("api/v1/rates/", RatesView.as_view(), name="api-rates"),
    path("api/v1/me/", MeView.as_view(), name="api-me"),
    path("api/v1/me/token/", OwnTokenView.as_view(), name="api-own-token"),
    path("api/v1/cli-logins/", CliLoginsView.as_view(), name="api-cli-logins"),
    path("api/v1/cli-logins/token/", CliLoginTokenView.as_view(), name="api-cli-login-token"),
    path("api/v1/tenants/apply/", TeamsApplyView.as_view(), name="api-tenants-apply"),
    path("api/v1/tenants/export/", TeamsExportView.as_view(), name="api-tenants-export"),
    path("api/v1/history/", HistoryView.as_view(), name="api-history"),
    path("api/v1/sign-ins/", SignInsView.as_view(), name="api-sign-ins"),
    path("api/v1/tenants/<slug:slug>/pause/", PauseView.as_view(), name="api-tenant-pause"),
    path(
        "api/v1/tenants/<slug:slug>/resume/",
        PauseView.as_view(resume=True),
        name="api-tenant-resume",
    ),
    path("api/v1/tenants/<slug:slug>/members/", MembersView.as_view(), name="api-members"),
    path(
        "api/v1/tenants/<slug:slug>/members/<str:username>/",
        MemberView.as_view(),
        name="api-member",
    ),
    path("api/v1/tenants/<slug:slug>/secrets/", SecretsView.as_view(), name="api-secrets"),
    path("api/v1/tenants/<slug:slug>/secrets/<str:name>/", SecretView.as_view(), name="api-secret"),
    # The users' API described (docs/openapi.yaml), to anyone: no authentication.
    path("api/v1/openapi.yaml", OpenApiYaml.as_view(), name="api-openapi-yaml"),
    path("api/v1/openapi.json", OpenApiJson.as_view(), name="api-openapi-json"),
    # The command line as one file (jobs/cli_archive.py), to anyone: no authentication.
    path("cli/mlsched.pyz", cli_archive.download, name="cli_download"),
    path("api/v1/", include("jobs.api")),
    # SCIM 2.0 provisioning (quotas/scim.py): 404s where MLSCHED_SCIM_TOKEN is unset.
    path("scim/v2/", include("quotas.scim_views")),
]
