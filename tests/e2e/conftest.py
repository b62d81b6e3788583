import os

# Playwright's sync API keeps an event loop running in this thread; the ORM calls the tests make
# between browser steps are still plain synchronous code (Django documents this switch for it).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
