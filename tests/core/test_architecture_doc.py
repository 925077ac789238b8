"""docs/architecture.md says what the code is: every name it gives exists, and its picture is the code's.

The page names functions and modules by their dotted paths (`rentals.services.orders.order_create`), files
by their repository paths (`billing/machine.py`) and endpoints by method and path (`POST /api/v1/orders`),
all in code spans. These tests fail on a dotted name that does not import or has no such attribute, on one
that reaches into a private helper (a leading underscore: such names move without notice), on a file that is
missing, on an endpoint no URL route answers, on a setting (`RENTAL_GRACE_DAYS`) Django does not have, on a
webhook event (`rental.active`) webhooks.models.WEBHOOK_EVENTS does not list, and on a periodic job of
CELERY_BEAT_SCHEDULE or a webhook event the page does not name.

The picture (the page's mermaid block) draws an arrow `a --> b` for "a imports b". Every arrow must be
allowed by .importlinter's contracts, and every import between two apps in the code (grimp's graph, the
one `lint-imports` reads; migrations left out) must be drawn. A dotted arrow `a -. signals .-> b` says b
listens to a's signals: b must import a's signals module. What fenced blocks hold is not read as
references; the links and headings are tests/core/test_docs.py's to check.

`test_order_create_hops_follow_the_picture` places an order through the API (after a first one that warms
the process), with and without a workload, and records every Python function the project runs meanwhile
(sys.setprofile): each call from one app into another inside
`order_create` must follow an arrow of the picture. Run with `-s` it prints the figures the page quotes
(modules entered, hops between apps), counted as the page says.
"""

from __future__ import annotations

import configparser
import importlib
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType

import pytest
from rest_framework.test import APIClient

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "architecture.md"

# The project's Python packages (.importlinter's root_packages) and the test package.
IMPORT_LINTER = configparser.ConfigParser()
IMPORT_LINTER.read(REPO / ".importlinter")
APPS = tuple(IMPORT_LINTER["importlinter"]["root_packages"].split())
PACKAGES = (*APPS, "tests")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(\w*)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
FILE_PATH = re.compile(r"^\.?[\w.*-]+(?:/[\w.*{}-]+)*/?$")
# A setting's name has an underscore (`RENTAL_GRACE_DAYS`) or is given a value (`PROVISIONER=webhook`): not `USDT`.
SETTING = re.compile(r"^([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)$|^([A-Z][A-Z0-9_]*)=\S+$")
EVENT = re.compile(r"^(?:order|invoice|rental)\.[a-z_]+$")
ENDPOINT = re.compile(r"^(?:(GET|POST|PUT|PATCH|DELETE) )?(/(?:api|pay|admin)/\S*)$")
IMPORT_ARROW = re.compile(r"^\s*(\w+)\s*-->\s*(\w+)\s*$")
SIGNAL_ARROW = re.compile(r"^\s*(\w+)\s*-\.\s*[\w ]*\.->\s*(\w+)\s*$")


@dataclass
class Page:
    spans: list[tuple[int, str]] = field(default_factory=list)  # (line, text of a code span)
    diagram: list[tuple[int, str]] = field(default_factory=list)  # (line, line of the mermaid block)


def page_read(path: Path) -> Page:
    page = Page()
    fence: str | None = None
    language = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        opening = FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and not line.strip().lstrip(fence[0]):
                fence = None
            elif language == "mermaid":
                page.diagram.append((number, line))
            continue
        if opening:
            fence, language = opening.group(1), opening.group(2)
            continue
        page.spans.extend((number, m.group(2).strip()) for m in CODE_SPAN.finditer(line))
    return page


def dotted_resolve(name: str) -> str | None:
    """None when `name` is an importable module or an attribute path under one; else what is wrong."""
    parts = name.split(".")
    if any(part.startswith("_") for part in parts):
        return f"{name}: names a private helper"
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                return f"{name}: importing {module_name} fails: {exc}"
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return f"{name}: {'.'.join(parts[:cut])} has no {'.'.join(parts[cut:])}"
            obj = getattr(obj, attribute)
        return None
    return f"{name}: no such module"


def path_resolve(path: str, root: Path) -> str | None:
    if "*" in path:
        return None if any(root.glob(path)) else f"{path}: no file matches"
    return None if (root / path).exists() else f"{path}: no such file"


def endpoint_resolve(path: str) -> str | None:
    from django.urls import Resolver404, resolve

    concrete = re.sub(r"\{[^}]+\}", "1", path)
    try:
        resolve(concrete)
    except Resolver404:
        return f"{path}: no route"
    return None


def reference_problems(page: Page, root: Path) -> list[str]:
    """What the page names that is not there, one line per problem."""
    from django.conf import settings

    from webhooks.models import WEBHOOK_EVENTS

    problems = []
    for line, text in page.spans:
        endpoint, setting = ENDPOINT.match(text), SETTING.match(text)
        if endpoint:
            problem = endpoint_resolve(endpoint.group(2))
        elif setting:
            name = setting.group(1) or setting.group(2)
            problem = None if hasattr(settings, name) else f"{name}: no such setting"
        elif EVENT.match(text):
            problem = None if text in WEBHOOK_EVENTS else f"{text}: no such webhook event"
        elif DOTTED.match(text) and text.split(".")[0] in PACKAGES:
            problem = dotted_resolve(text)
        elif ("/" in text and FILE_PATH.match(text)) or text == ".importlinter":
            problem = path_resolve(text, root)
        else:
            continue
        if problem:
            problems.append(f"docs/architecture.md:{line}: {problem}")
    return problems


def test_the_reference_checks_catch_what_is_missing(tmp_path):
    (tmp_path / "rentals").mkdir()
    (tmp_path / "rentals" / "views.py").write_text("")
    page_file = tmp_path / "page.md"
    page_file.write_text(
        "`rentals.services.orders.order_create` `rentals.services.orders.order_conjure` "
        "`rentals.services.orders._order_lock` `rentals.nowhere.thing`\n"
        "`rentals/views.py` `rentals/gone.py` `rentals/*.py` `billing/*.py` `POST /api/v1/orders` "
        "`/api/v1/nowhere` `the order's status` `awaiting_payment` `Idempotency-Key`\n"
        "`RENTAL_GRACE_DAYS` `PROVISIONER=webhook` `RENTAL_GRACE_HOURS` `USDT` `order.created` `order.shipped`\n"
        "```\n`rentals/in_a_fence.py`\n```\n",
        encoding="utf-8",
    )
    assert reference_problems(page_read(page_file), tmp_path) == [
        "docs/architecture.md:1: rentals.services.orders.order_conjure: rentals.services.orders has no order_conjure",
        "docs/architecture.md:1: rentals.services.orders._order_lock: names a private helper",
        "docs/architecture.md:1: rentals.nowhere.thing: rentals has no nowhere.thing",
        "docs/architecture.md:2: rentals/gone.py: no such file",
        "docs/architecture.md:2: billing/*.py: no file matches",
        "docs/architecture.md:2: /api/v1/nowhere: no route",
        "docs/architecture.md:3: RENTAL_GRACE_HOURS: no such setting",
        "docs/architecture.md:3: order.shipped: no such webhook event",
    ]


def test_every_name_and_path_the_page_gives_exists():
    page = page_read(PAGE)
    assert len(page.spans) > 50, "the page names the code it describes in code spans"
    assert reference_problems(page, REPO) == []


def test_every_periodic_job_is_on_the_page():
    """Each task of CELERY_BEAT_SCHEDULE, by the dotted path of the function that runs it."""
    from django.conf import settings

    from config.celery import app

    app.loader.import_default_modules()
    named = {text for _, text in page_read(PAGE).spans}
    missing = set()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        run = app.tasks[entry["task"]].run
        dotted = f"{run.__module__}.{run.__name__}"
        if dotted not in named:
            missing.add(f"{entry['task']} ({dotted})")
    assert sorted(missing) == []


def test_every_webhook_event_is_on_the_page():
    from webhooks.models import WEBHOOK_EVENTS

    named = {text for _, text in page_read(PAGE).spans}
    assert sorted(set(WEBHOOK_EVENTS) - named) == []


# --- The picture ------------------------------------------------------------------------------


def arrows(page: Page) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(imports, signals) drawn in the page's mermaid block."""
    imports, signals = set(), set()
    for _, line in page.diagram:
        if match := IMPORT_ARROW.match(line):
            imports.add((match.group(1), match.group(2)))
        elif match := SIGNAL_ARROW.match(line):
            signals.add((match.group(1), match.group(2)))
    return imports, signals


def forbidden_by_contracts() -> set[tuple[str, str]]:
    """(importer, imported) app pairs that .importlinter's forbidden contracts refuse."""
    pairs: set[tuple[str, str]] = set()
    for section in IMPORT_LINTER.sections():
        contract = IMPORT_LINTER[section]
        if not section.startswith("importlinter:contract:") or contract.get("type") != "forbidden":
            continue
        for source in contract["source_modules"].split():
            pairs.update((source, target) for target in contract["forbidden_modules"].split() if target != source)
    return pairs


def code_imports() -> dict[tuple[str, str], set[tuple[str, str]]]:
    """Imports between two apps in the code: (importer app, imported app) -> {(module, module)}."""
    import grimp

    graph = grimp.build_graph(*APPS, include_external_packages=False)
    found: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for module in graph.modules:
        if ".migrations" in module:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            pair = (module.split(".")[0], imported.split(".")[0])
            if pair[0] != pair[1]:
                found.setdefault(pair, set()).add((module, imported))
    return found


def test_the_picture_draws_every_app_and_only_allowed_arrows():
    imports, signals = arrows(page_read(PAGE))
    assert imports, "the page has a mermaid block with `a --> b` arrows"
    drawn = {app for pair in imports | signals for app in pair}
    assert drawn == set(APPS)
    assert sorted(imports & forbidden_by_contracts()) == []


def test_every_import_between_apps_is_drawn():
    imports, _ = arrows(page_read(PAGE))
    found = code_imports()
    undrawn = {f"{a} --> {b}: {sorted(found[(a, b)])[:3]}" for a, b in found if (a, b) not in imports}
    assert sorted(undrawn) == []
    assert sorted(imports - set(found)) == [], "an arrow no import makes"


def test_every_signal_arrow_has_a_listener():
    _, signals = arrows(page_read(PAGE))
    assert signals, "the page draws who listens to whose signals"
    found = code_imports()
    unheard = [
        f"{sender} -. signals .-> {listener}"
        for sender, listener in signals
        if not any(imported == f"{sender}.signals" for _, imported in found.get((listener, sender), ()))
    ]
    assert unheard == []


# --- One order, traced ------------------------------------------------------------------------------


def app_of(module: str | None) -> str | None:
    """The app a module belongs to; None for a module of no app (Django's, the standard library's)."""
    head = (module or "").split(".")[0]
    return head if head in APPS else None


def app(module: str) -> str:
    return module.split(".")[0]


@dataclass
class Hops:
    """Python calls into the project's modules, and the calls from one app into another."""

    modules: Counter[str] = field(default_factory=Counter)
    hops: Counter[tuple[str, str]] = field(default_factory=Counter)  # (caller, called module) across apps -> calls

    def apps(self) -> set[str]:
        return {app(module) for module in self.modules}

    def app_hops(self) -> set[tuple[str, str]]:
        return {(app(a), app(b)) for a, b in self.hops}

    def summary(self, name: str) -> str:
        lines = [
            f"{name}: {len(self.modules)} modules in {len(self.apps())} apps ({', '.join(sorted(self.apps()))}); "
            f"{len(self.hops)} hops between apps (distinct caller module -> called module), "
            f"{sum(self.hops.values())} calls across them, over {len(self.app_hops())} app pairs"
        ]
        lines += [f"    {a} -> {b}: {count}" for (a, b), count in sorted(self.hops.items())]
        lines.append(f"    modules: {', '.join(sorted(self.modules))}")
        return "\n".join(lines)


class Tracer:
    """A sys.setprofile hook: a call is charged to the nearest frame below it in a project module (the
    frames of Django, DRF and the standard library in between are skipped); it is a hop when that frame's
    app is another. Calls made while `scope`'s code is on the stack go to `inside` as well."""

    def __init__(self, scope: Callable[..., object]) -> None:
        self.scope: CodeType = scope.__code__
        self.request, self.inside = Hops(), Hops()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        module: str = frame.f_globals.get("__name__") or ""
        if app_of(module) is None:
            return
        caller, within = frame.f_back, frame.f_code is self.scope
        below: str | None = None
        while caller is not None:
            if below is None and app_of(caller.f_globals.get("__name__")) is not None:
                below = caller.f_globals["__name__"]
            within = within or caller.f_code is self.scope
            if below is not None and within:
                break
            caller = caller.f_back
        for hops in (self.request, self.inside) if within else (self.request,):
            hops.modules[module] += 1
            if below is not None and app_of(below) != app_of(module):
                hops.hops[(below, module)] += 1


def order_traced(client: APIClient, body: dict[str, object]) -> Tracer:
    from rentals.services.orders import order_create

    tracer = Tracer(order_create)
    sys.setprofile(tracer)
    try:
        response = client.post("/api/v1/orders", body, format="json")
    finally:
        sys.setprofile(None)
    assert response.status_code == 201, response.json()
    return tracer


@pytest.mark.django_db
@pytest.mark.parametrize("workload", [True, False], ids=["with-workload", "without-workload"])
def test_order_create_hops_follow_the_picture(chains, catalog, customer, settings, workload):
    from accounts.services import ssh_key_add, token_create
    from tests.rentals.helpers import new_key_line

    settings.UNPAID_ORDERS_MAX = 10
    client = APIClient()  # authenticated as a customer's client is: a bearer token, checked on each request
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(account=customer).raw}")
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    body = {
        "region": "DFW-1",
        "gpu": "l4",
        "gpu_count": 1,
        "term": "monthly",
        "terms": 1,
        "template": "ollama-ubuntu-24.04",
        "addons": [],
        "ssh_keys": [key.pk],
        "pay_currency": "LTC",
    }
    if workload:
        body["workload"] = {"model": "llama-3.1-8b", "precision": "fp8", "context": 8192, "concurrency": 1}
    order_traced(client, body)  # the first order of all imports lazily and creates the counters
    tracer = order_traced(client, body)
    imports, _ = arrows(page_read(PAGE))
    inside = tracer.inside
    # observability's log filter and formatter run inside every function that logs a line: called
    # by the logging module, not by the order's code.
    entered = inside.apps() - {"observability"}
    assert entered == {"rentals", "catalog", "billing", "webhooks", "core"} | ({"sizing"} if workload else set())
    against = sorted(
        f"{a} -> {b}"
        for a, b in inside.hops
        # core imports no app (.importlinter): it reaches one only through what the app handed it (a
        # model whose from_db or save core.db calls, a callback), which is no arrow of the picture.
        if (app(a), app(b)) not in imports and app(b) != "observability" and app(a) != "core"
    )
    assert against == [], "a call inside order_create from one app into another that no arrow draws"
    print(f"\n{'with' if workload else 'without'} a workload")
    print(tracer.request.summary("POST /api/v1/orders") + "\n" + inside.summary("order_create"))
