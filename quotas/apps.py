from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed


class QuotasConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "quotas"

    def ready(self) -> None:
        from quotas import cli_logins, oidc_sessions, sign_ins  # their modules read the models

        cli_logins.check_token_days()

        # Sign-ins and failed attempts kept for security audits.
        user_logged_in.connect(sign_ins.logged_in, dispatch_uid="quotas.sign_ins.logged_in")
        user_login_failed.connect(sign_ins.login_failed, dispatch_uid="quotas.sign_ins.failed")
        # A session OpenID Connect signed in forgets its provider's session as it logs out.
        user_logged_out.connect(oidc_sessions.forget, dispatch_uid="quotas.oidc_sessions.forget")
