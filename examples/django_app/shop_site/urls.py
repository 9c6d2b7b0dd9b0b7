from __future__ import annotations

from django.urls import path
from orders.views import place_order

urlpatterns = [path("orders", place_order)]
