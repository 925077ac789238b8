import pytest


@pytest.mark.django_db
def test_healthz_is_alive(api):
    resp = api.get("/healthz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_database_and_broker(api):
    resp = api.get("/readyz")
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    assert body["checks"]["database"] == {"ok": True, "vendor": "postgresql"}
    assert body["checks"]["broker"]["ok"] is True
    assert body["checks"]["broker"]["transport"] == "redis"


@pytest.mark.slow
@pytest.mark.django_db
def test_readyz_fails_when_broker_is_unreachable(api, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    resp = api.get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["checks"]["broker"]["ok"] is False


@pytest.mark.django_db
def test_unknown_api_route_uses_error_shape(api):
    resp = api.get("/api/v1/no-such-thing")
    assert resp.status_code == 404
    assert resp.json() == {"error": {"code": "not_found", "message": "Not found.", "details": {"index": "/api/v1/"}}}
