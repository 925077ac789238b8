"""/pay/<token>: the hosted checkout page of an invoice (billing/checkout_views.py)."""

from django.urls import path

from billing import checkout_views as views

urlpatterns = [
    path("<str:token>", views.checkout_page, name="checkout"),
    path("<str:token>/status", views.checkout_status, name="checkout-status"),
    path("<str:token>/qr.svg", views.checkout_qr, name="checkout-qr"),
    path("<str:token>/currency", views.checkout_currency, name="checkout-currency"),
    path("<str:token>/requote", views.checkout_requote, name="checkout-requote"),
]
