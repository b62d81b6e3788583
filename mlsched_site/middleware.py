"""Request checks every view would otherwise repeat."""

from django.http import JsonResponse


def refuse_nul_in_query(get_response):
    """A NUL in a query parameter is a 400 naming the parameter (the API's error shape), for
    every page and API: a database text field cannot hold one, so a filter on it would
    otherwise fail as a 500."""

    def middleware(request):
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                shown = name.replace("\x00", "\\0")
                return JsonResponse({shown: ["Cannot contain a NUL character."]}, status=400)
        return get_response(request)

    return middleware
