"""core.db.written_keep, related_all, related_one and core.api.RelatedRows:
what a write keeps on an instance is rendered without a query; a relation not
kept is read as Django reads it (prefetched, or queried)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework import serializers

from core.api import RelatedRows
from core.db import related_all, related_one, written_keep
from rentals.models import Order

pytestmark = pytest.mark.django_db


class LineOutput(serializers.Serializer):
    position = serializers.IntegerField()
    code = serializers.CharField()


class OrderLinesOutput(serializers.Serializer):
    id = serializers.IntegerField()
    lines = RelatedRows(child=LineOutput())


def _order(account):
    from catalog.models import GpuModel, Region, Template

    region, gpu = Region.objects.order_by("pk").first(), GpuModel.objects.order_by("pk").first()
    order = Order.objects.create(
        account=account,
        region=region,
        gpu=gpu,
        template=Template.objects.order_by("pk").first(),
        gpu_count=1,
        term="monthly",
        terms=1,
        region_code=region.code,
        gpu_slug=gpu.slug,
        gpu_name=gpu.name,
        template_slug="x",
        addons=[],
        ssh_keys=[],
        pay_currency="BTC",
        subtotal_usd=1,
        multi_gpu_discount_pct=0,
        term_discount_pct=0,
        discount_usd=0,
        total_usd=1,
        per_gpu_hour_usd=1,
        per_hour_usd=1,
        created_at=timezone.now(),
    )
    line = {"description": "d", "quantity": 1, "unit_usd": 1, "terms": 1, "subtotal_usd": 1, "discount_pct": 0}
    order.lines.create(position=1, code="gpu", discount_usd=0, amount_usd=1, **line)
    order.lines.create(position=2, code="addon", discount_usd=0, amount_usd=1, **line)
    return order


def test_kept_rows_are_read_without_a_query(customer, catalog):
    order = _order(customer)
    lines = list(order.lines.order_by("position"))
    fresh = Order.objects.get(pk=order.pk)
    written_keep(fresh, lines=lines, rental=None)
    with CaptureQueriesContext(connection) as ctx:
        assert related_all(fresh, "lines") is lines
        assert related_one(fresh, "rental") is None
        body = OrderLinesOutput(fresh).data
    assert len(ctx.captured_queries) == 0
    assert body == {"id": order.pk, "lines": [{"position": 1, "code": "gpu"}, {"position": 2, "code": "addon"}]}


def test_a_relation_not_kept_is_read_from_the_database(customer, catalog):
    order = _order(customer)
    fresh = Order.objects.get(pk=order.pk)
    written_keep(fresh, rental=None)  # the lines are not kept
    with CaptureQueriesContext(connection) as ctx:
        assert sorted(line.position for line in related_all(fresh, "lines")) == [1, 2]
    assert len(ctx.captured_queries) == 1
    plain = Order.objects.get(pk=order.pk)
    with CaptureQueriesContext(connection) as ctx:
        assert related_one(plain, "rental") is None  # no rental: None, not an error
    assert len(ctx.captured_queries) == 1


def test_prefetched_rows_are_rendered_without_a_query(customer, catalog):
    order = _order(customer)
    prefetched = Order.objects.prefetch_related("lines").get(pk=order.pk)
    with CaptureQueriesContext(connection) as ctx:
        body = OrderLinesOutput(prefetched).data
    assert len(ctx.captured_queries) == 0
    assert sorted(line["code"] for line in body["lines"]) == ["addon", "gpu"]


def test_rows_kept_later_join_those_kept_before(customer, catalog):
    order = _order(customer)
    written_keep(order, rental=None)
    written_keep(order, lines=[])
    assert related_all(order, "lines") == [] and related_one(order, "rental") is None


def test_a_list_of_plain_values_renders_as_many_true_does():
    class Quote(serializers.Serializer):
        lines = RelatedRows(child=LineOutput())

    data = {"lines": [{"position": 1, "code": "a"}]}
    assert Quote(data).data == data == Quote(data).data
