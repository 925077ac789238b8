from django.urls import path

from catalog import views

urlpatterns = [
    path("catalog/gpus", views.GpuListView.as_view(), name="catalog-gpus"),
    path("catalog/regions", views.RegionListView.as_view(), name="catalog-regions"),
    path("catalog/stock", views.StockView.as_view(), name="catalog-stock"),
    path("catalog/addons", views.AddonListView.as_view(), name="catalog-addons"),
    path("catalog/templates", views.TemplateListView.as_view(), name="catalog-templates"),
    path("pricing/quote", views.QuoteView.as_view(), name="pricing-quote"),
]
