"""The catalog comes back exactly as seeded after a transactional test flushed
the database (tests/seeding.py), also when part of it was seeded again first."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.seeding import SEEDED_APPS, seed_restore, seeded_models


def _contents() -> dict[str, list]:
    return {
        model._meta.label: list(model._base_manager.order_by("pk").values_list())
        for model in seeded_models(*SEEDED_APPS)
    }


@pytest.mark.django_db(transaction=True)
def test_a_flushed_catalog_comes_back_as_seeded(catalog):
    from catalog.models import GpuModel, Host, Region, Slot
    from sizing.models import Architecture

    seeded = _contents()
    assert (GpuModel.objects.count(), Host.objects.count(), Slot.objects.count()) == (15, 845, 6300)
    assert Architecture.objects.exists()

    call_command("flush", interactive=False, verbosity=0)
    assert not GpuModel.objects.exists() and not Slot.objects.exists() and not Architecture.objects.exists()
    seed_restore()
    assert _contents() == seeded  # every row, every column, the same primary keys

    # The sequences follow: a new row takes the next id, not one of the restored ones.
    region = Region.objects.get(code="DFW-1")
    host = Host.objects.create(name="dfw-1-extra", region=region, gpu=GpuModel.objects.get(slug="l4"), slot_count=8)
    assert host.pk > max(pk for pk, *_ in seeded["catalog.Host"])


@pytest.mark.django_db(transaction=True)
def test_an_app_seeded_again_first_is_completed_not_duplicated(catalog):
    from catalog.models import GpuModel, Slot
    from sizing.models import Architecture
    from sizing.seed import architectures_seed

    architectures = Architecture.objects.count()
    call_command("flush", interactive=False, verbosity=0)
    architectures_seed()  # a test asked for the architectures before the catalog
    seed_restore()
    assert Architecture.objects.count() == architectures
    assert (GpuModel.objects.count(), Slot.objects.count()) == (15, 6300)
