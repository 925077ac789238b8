from django.apps import AppConfig


class SizingConfig(AppConfig):
    name = "sizing"

    def ready(self) -> None:
        from catalog.signals import catalog_seeded

        catalog_seeded.connect(_seed_architectures, dispatch_uid="sizing.architectures")


def _seed_architectures(sender, **kwargs) -> int:
    from sizing.seed import architectures_seed

    return architectures_seed()


_seed_architectures.seed_name = "architectures"
