"""The compare examples of docs/sizing.md and of the README's walk-through are
what the code answers: their requests run through the API, and every
`"field": value` the documentation shows is in the answer, in the order shown
(docs/sizing.md) or anywhere (the README, as its walk-through test reads it)."""

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
# A field with a plain value, as the README walk-through's test reads them.
FRAGMENT = re.compile(r'"([a-z_0-9]+)": ("(?:[^"\\]|\\.)*"|-?\d[\d.]*|true|false|null)')


@pytest.fixture(autouse=True)
def _seeded(catalog, seeded_architectures):
    pass


def compact(text: str) -> str:
    return re.sub(r"([:,])\s+", r"\1", text)


def fragments(text: str) -> list[str]:
    return [compact(f'"{key}": {value}') for key, value in FRAGMENT.findall(text) if "..." not in value]


def sizing_example() -> tuple[dict, str]:
    """docs/sizing.md's compare request (its curl body) and the answer shown after it."""
    text = (ROOT / "docs" / "sizing.md").read_text()
    section = text.split("\n## Comparing cards\n", 1)[1].split("\n## ", 1)[0]
    curl = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    body = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
    answer = section.split("<!-- compare-example", 1)[1].split("```json\n", 1)[1].split("\n```", 1)[0]
    return body, answer


def readme_step() -> tuple[dict, str]:
    """The README walk-through's compare command (its body) and its `# ->` expectation."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## A customer's walk-through", 1)[1].split("```sh\n", 1)[1].split("\n```", 1)[0]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if "$API/sizing/compare" in line)
    command, expectation = [], []
    for line in lines[start:]:
        if line.lstrip().startswith("# ->"):
            expectation.append(line.split("# ->", 1)[1].strip())
        elif expectation and line.startswith("#    "):
            expectation.append(line.strip()[1:].strip())
        elif expectation:
            break
        else:
            command.append(line)
    body = json.loads(" ".join(command).split("-d '", 1)[1].rsplit("'", 1)[0])
    return body, " ".join(expectation)


def test_the_sizing_page_shows_what_compare_answers(api):
    body, shown = sizing_example()
    resp = api.post("/api/v1/sizing/compare", body, format="json")
    assert resp.status_code == 200, resp.json()
    answer = compact(resp.content.decode())
    wanted = fragments(shown)
    assert len(wanted) > 100  # the rows, the winner and the API comparison
    position = 0
    for fragment in wanted:
        found = answer.find(fragment, position)
        assert found >= 0, f"{fragment} not in the answer after {answer[max(0, position - 200) : position]}"
        position = found + len(fragment)


def test_the_walkthrough_step_shows_what_compare_answers(api):
    body, expected = readme_step()
    assert len(body["candidates"]) == 3
    resp = api.post("/api/v1/sizing/compare", body, format="json")
    assert resp.status_code == 200, resp.json()
    answer = compact(resp.content.decode())
    wanted = fragments(expected)
    assert any('"reason":' in f for f in wanted) and any("cost_per_million_accepted_usd" in f for f in wanted)
    for fragment in wanted:
        assert fragment in answer, fragment


def test_a_changed_figure_is_caught(api):
    body, shown = sizing_example()
    answer = compact(api.post("/api/v1/sizing/compare", body, format="json").content.decode())
    wrong = fragments(
        shown.replace('"cost_per_million_accepted_usd": "1.86"', '"cost_per_million_accepted_usd": "1.85"')
    )
    assert any(f not in answer for f in wrong)
