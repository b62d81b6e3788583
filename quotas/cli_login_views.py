"""The portal's /cli-login/ page, where a signed-in user lets the command line in (`mlsched
login`, quotas.cli_logins): they type the code the CLI printed (its link fills it in), see
which login it is (its name, the address and time it was asked from) and the token it will
get, and approve it, read-only or not, or deny it. A wrong or expired code says so; past
WRONG_CODES of them within the window, the page is a 429 until it ends."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from quotas import cli_logins, tokens

TEMPLATE = "portal/cli_login.html"


@never_cache
@login_required
def cli_login(request):
    if request.method != "POST":
        return render(request, TEMPLATE, {"code": request.GET.get("code", "")[:40]})
    code = request.POST.get("code", "")[:40]
    if cli_logins.too_many_wrong_codes(request.user):
        minutes = int(cli_logins.WRONG_CODES_WINDOW.total_seconds() // 60)
        why = f"Too many wrong codes: try again in {minutes} minutes at most."
        return render(request, TEMPLATE, {"code": code, "error": why}, status=429)
    login = cli_logins.waiting(code)
    if login is None:
        return wrong(request, code)
    decision = request.POST.get("decision")
    if decision == "approve":
        return approved(request, login)
    if decision == "deny":
        done = cli_logins.deny(login, request.user)
        return render(request, TEMPLATE, {"done": "denied" if done else "gone"})
    return confirming(request, login)


def wrong(request, code: str):
    """The code typed names no waiting login: said on the page, and counted if one was typed."""
    if not cli_logins.typed(code):
        return render(request, TEMPLATE, {"code": code, "error": "Type the code it printed."})
    cli_logins.wrong_code(request.user)
    why = (
        "No login waits for this code: it is mistyped, or it expired (a code lasts "
        f"{int(cli_logins.LIFE.total_seconds() // 60)} minutes), or it was used. Run "
        "`mlsched login` again for a new one."
    )
    return render(request, TEMPLATE, {"code": code, "error": why})


def confirming(request, login, error: str = ""):
    """The login the code names, the token it would get, and the buttons to decide."""
    context = {
        "login": login,
        "code": cli_logins.shown(login.user_code),
        "days": settings.MLSCHED_CLI_LOGIN_TOKEN_DAYS,
        "read_only": bool(request.POST.get("read_only")),
        "error": error,
    }
    return render(request, TEMPLATE, context)


def approved(request, login):
    read_only = bool(request.POST.get("read_only"))
    try:
        done = cli_logins.approve(login, request.user, read_only=read_only)
    except tokens.TokenError as refused:
        return confirming(request, login, refused.message)
    return render(request, TEMPLATE, {"done": "approved" if done else "gone", "login": login})
