from django.urls import path

from billing import views

urlpatterns = [
    path("currencies", views.CurrencyListView.as_view(), name="currencies"),
    path("invoices", views.InvoiceListView.as_view(), name="invoice-list"),
    path("invoices/<int:invoice_id>", views.InvoiceDetailView.as_view(), name="invoice-detail"),
    path("invoices/<int:invoice_id>/currency", views.InvoiceCurrencyView.as_view(), name="invoice-currency"),
    path("invoices/<int:invoice_id>/requote", views.InvoiceRequoteView.as_view(), name="invoice-requote"),
    path(
        "invoices/<int:invoice_id>/pay-with-credit", views.InvoicePayWithCreditView.as_view(), name="invoice-pay-credit"
    ),
    path("invoices/<int:invoice_id>/qr.svg", views.InvoiceQrView.as_view(), name="invoice-qr"),
    path("account/credit", views.CreditView.as_view(), name="account-credit"),
]
