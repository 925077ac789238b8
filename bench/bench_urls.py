"""config.urls plus the bare view of bench/load.py (bench_settings.py)."""

from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import urlpatterns as app_urlpatterns

# Fifteen items shaped like the catalog's cards: the same size of answer, no database.
BARE_ITEMS = [
    {"slug": f"card-{n}", "name": f"Card {n}", "memory_gb": 80, "monthly_usd": "1690.00", "fp8": True}
    for n in range(15)
]


class BareView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get(self, request):
        return Response(BARE_ITEMS)


urlpatterns = [path("bench/bare", BareView.as_view()), *app_urlpatterns]
