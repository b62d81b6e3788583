from django.urls import path

from jobs.consumers import JobConsumer

websocket_urlpatterns = [path("ws/jobs/<int:pk>/", JobConsumer.as_asgi())]
