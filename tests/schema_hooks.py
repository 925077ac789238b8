"""schemathesis hooks for its CLI (SCHEMATHESIS_HOOKS=tests.schema_hooks), as
bench/schema_live.py runs it against a live server: the check that a request the
schema calls valid is accepted, with the same named exceptions the suite allows
(tests/schema_rules.py). Run it with `--exclude-checks positive_data_acceptance`,
which this check stands in for."""

from __future__ import annotations

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.schema_rules import refusal_allowed


@schemathesis.check
def positive_data_acceptance_but_named_rules(ctx, response, case):
    """schemathesis's positive_data_acceptance, except for a refusal by a rule the schema cannot state."""
    if refusal_allowed(response):
        return None
    return positive_data_acceptance(ctx, response, case)
