from django.urls import path

from . import views

urlpatterns = [
    path("models", views.ModelListView.as_view(), name="sizing-models"),
    path("check", views.CheckView.as_view(), name="sizing-check"),
    path("recommend", views.RecommendView.as_view(), name="sizing-recommend"),
    path("compare", views.CompareView.as_view(), name="sizing-compare"),
]
