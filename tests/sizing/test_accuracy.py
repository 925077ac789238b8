"""The speed model against published benchmarks: every row held to its band is
inside it, and docs/sizing.md carries exactly the table the command writes."""

from pathlib import Path

from django.core.management import call_command

from sizing.services import ACCURACY_END, ACCURACY_START, accuracy_document, accuracy_table, sizing_accuracy

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "sizing.md"


def test_every_published_row_is_inside_its_band():
    rows = sizing_accuracy()
    held = [r for r in rows if not r.separately]
    assert len(held) >= 100
    outside = [
        (r.row["model"], r.row["gpu"], r.row["input_tokens"], r.row["output_tokens"], r.ratio)
        for r in held
        if not r.inside
    ]
    assert not outside
    # Rows listed apart say why and still carry their prediction.
    for r in rows:
        if r.separately:
            assert len(r.separately) > 40
            assert r.predicted is not None
    # Sources of both kinds, every row with its page.
    assert {r.row["source"] for r in held} == {"trtllm", "vllm"}
    assert all(r.row["url"].startswith("https://") for r in rows)


def test_no_prediction_implies_more_than_the_dense_peak():
    for r in sizing_accuracy():
        if r.predicted is not None:
            assert 0 < r.peak_share < 1


def test_the_docs_table_is_the_commands(tmp_path):
    text = DOC.read_text()
    start, end = text.index(ACCURACY_START), text.index(ACCURACY_END)
    assert text == accuracy_document(text, accuracy_table(sizing_accuracy()))
    copy = tmp_path / "sizing.md"
    copy.write_text(text[: start + len(ACCURACY_START)] + "\nhand-edited\n" + text[end:])
    call_command("sizing_accuracy", write=str(copy))
    assert copy.read_text() == text
