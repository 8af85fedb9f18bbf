"""The session inspector page (``/inspector/``) in a real headless browser (Debian's Chromium,
driven by Playwright) against the real stack: a writer with two tenants, the three projectors
and `dsh serve` on uvicorn. Sessions that need a shape the writer would refuse to make quickly
(10,000 events) or at all (a poison record) are published to the events topic directly, as
the writer would. Screenshots go to ``.state/artifacts/inspector/`` (ignored, never committed).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from projectors.transcript import kind_of
from tests.conftest import Servers
from tests.docs_blocks import ROOT
from tests.integration.projector_support import (
    events_of,
    publish,
    scripted_session,
    simple_session,
)
from tests.integration.serve_support import TOKENS, serving_stack
from tests.support.builders import user

pw = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Debian's Chromium, headless, touching nothing beyond the loopback server.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / ".state" / "artifacts" / "inspector"
WAIT_MS = 30_000  # how long the page may take to show something: a bound, never a measure
pw.expect.set_options(timeout=WAIT_MS)


@dataclass(frozen=True)
class Inspector:
    url: str
    publish: Any  # (records) -> count, onto this module's events topic
    context: Any  # the browser context (a fresh profile)

    def http(self, tenant: str = "acme") -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKENS[tenant]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def page(self, session_id: str | None = None, tenant: str = "acme") -> Any:
        """The page with the tenant's token pasted in, and ``session_id`` opened."""
        page = self.context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{self.url}/inspector/")
        page.fill("#token", TOKENS[tenant])
        page.click("#token-form button")
        if session_id is not None:
            page.fill("#open-id", session_id)
            page.click("#open-form button")
            page.wait_for_selector("#session:not([hidden])")
        return page


@pytest.fixture(scope="module")
def inspector(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inspector]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: `make test-tools` installs Debian's")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with (
        serving_stack(servers) as (url, kafka),
        pw.sync_playwright() as playwright,
    ):
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1600, "height": 900},
        )
        try:
            yield Inspector(url, lambda records: publish(kafka, records), context)
        finally:
            context.close()


def sid(tenant: str = "acme") -> str:
    return f"{tenant}-{uuid.uuid4().hex[:10]}"


def append(http: httpx.Client, session_id: str, *events: dict[str, Any]) -> int:
    response = http.post(f"/v1/sessions/{session_id}/events", json={"events": list(events)})
    assert response.status_code == 200, response.text
    committed: int = response.json()["committed_seq"]
    return committed


def said(id_: str, text: str) -> dict[str, Any]:
    return {"type": "user/message", "data": user(id_, text), "surfaceOp": "append"}


def test_a_live_append_shows_up_in_the_transcript_pane(inspector: Inspector) -> None:
    s = sid()
    with inspector.http() as http:
        append(http, s, {"type": "turn/start", "data": {"turn": 1}}, said("u1", "first words"))
        page = inspector.page(s)
        page.wait_for_selector("#transcript .row[data-seq='1']")
        seq = append(http, s, said("u2", "said while the page was open"))
    row = page.wait_for_selector(f"#transcript .row[data-seq='{seq}']")
    assert "said while the page was open" in row.inner_text()
    # The surface pane follows too (it is read again after transcript entries arrive).
    page.wait_for_selector(f"#surface .row[data-seq='{seq}']")
    page.screenshot(path=ARTIFACTS / "live-append.png")


def test_clicking_a_summary_shows_every_message_it_replaced(inspector: Inspector) -> None:
    script = scripted_session(sid())
    session = script.session
    inspector.publish(events_of(session))
    page = inspector.page(session.id)
    summary = page.wait_for_selector(f"#surface .row.replacement[data-seq='{script.summary_seq}']")
    assert f"replaces {len(script.summarized)}" in summary.inner_text()
    summary.click()
    items = page.locator("#replaced li")
    pw.expect(items).to_have_count(len(script.summarized))
    assert [int(i) for i in items.evaluate_all("els => els.map(e => e.dataset.seq)")] == list(
        script.summarized
    )
    replaced_text = page.inner_text("#replaced")
    assert "list files" in replaced_text and "boom (trimmed)" in replaced_text
    page.screenshot(path=ARTIFACTS / "summary-provenance.png")
    # One replaced message was itself a replacement (the trimmed tool result): one more click
    # shows what it replaced, the original failed result.
    page.click(f"#replaced li[data-seq='{script.rewrite_seq}'] button")
    pw.expect(page.locator("#replaced li")).to_have_count(1)
    assert page.get_attribute("#replaced li", "data-seq") == str(script.failed_result_seq)
    assert "boom" in page.inner_text("#replaced")


def test_a_blocked_session_is_listed_and_shows_its_reason(inspector: Inspector) -> None:
    s = sid()
    good = events_of(simple_session(s, turns=1))[:3]
    inspector.publish([*good, (s, b"definitely not avro")])
    page = inspector.page()
    listed = page.wait_for_selector(f"#blocked-list li[data-session='{s}']")
    assert "CODEC_BAD_MARKER" in listed.inner_text()
    page.click(f"#blocked-list li[data-session='{s}'] button")
    banner = page.wait_for_selector("#blocked-banner:not([hidden])")
    text = banner.inner_text()
    assert "CODEC_BAD_MARKER" in text and "could not decode" in text
    # What was applied before the block is still shown, in both panes.
    page.wait_for_selector("#transcript .row[data-seq='1']")
    page.wait_for_selector("#surface .row[data-seq='1']")
    page.screenshot(path=ARTIFACTS / "blocked-session.png")


def test_a_10000_event_session_keeps_the_dom_bounded(inspector: Inspector) -> None:
    s = sid()
    session = simple_session(s, turns=1)
    turn = 1
    while len(session) < 10_000:  # each turn: a question and its answer, both on the surface
        turn += 1
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user(f"u{turn}", f"question {turn}"), "append")
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    last = len(session) - 1
    inspector.publish(events_of(session))
    page = inspector.page(s)
    entries = sum(1 for e in session.events() if kind_of(e) is not None)
    pw.expect(page.locator("#transcript-count")).to_have_text(f"{entries} entries")
    pw.expect(page.locator("#surface-count")).to_contain_text(f"applied {last}")
    # Only the rows in view (plus a few) are in the DOM, at the top and at the end alike.
    assert page.locator("#transcript .row").count() < 100
    assert page.locator("#surface .row").count() < 100
    page.eval_on_selector("#transcript", "el => { el.scrollTop = el.scrollHeight }")
    page.wait_for_selector(f"#transcript .row[data-seq='{last}']")
    assert page.locator("#transcript .row").count() < 100
    page.screenshot(path=ARTIFACTS / "ten-thousand-events.png")


def test_the_api_shows_a_tenant_only_its_sessions(inspector: Inspector) -> None:
    mine, theirs = sid("acme"), sid("globex")
    with inspector.http("acme") as acme, inspector.http("globex") as globex:
        append(acme, mine, {"type": "turn/start", "data": {"turn": 1}})
        append(globex, theirs, {"type": "turn/start", "data": {"turn": 1}})
        acme.get(f"/v1/sessions/{mine}/transcript", params={"at_least": 0, "timeout_ms": 20_000})
        globex.get(
            f"/v1/sessions/{theirs}/transcript", params={"at_least": 0, "timeout_ms": 20_000}
        )
        listed = acme.get("/v1/sessions", params={"limit": 1000}).json()
        state = acme.get(f"/v1/sessions/{mine}").json()
        forbidden = acme.get(f"/v1/sessions/{theirs}/provenance/0")
        unknown = acme.get(f"/v1/sessions/{mine}/provenance/99")
        anonymous = httpx.get(f"{inspector.url}/v1/sessions")
    recent = {r["session_id"] for r in listed["recent"]}
    assert mine in recent and theirs not in recent
    assert all(r["session_id"].startswith("acme-") for r in listed["recent"] + listed["blocked"])
    assert state["projections"]["transcript"]["applied"] == 0
    assert forbidden.status_code == 403 and forbidden.json()["code"] == "TENANT_PREFIX_FORBIDDEN"
    assert unknown.status_code == 404 and unknown.json()["code"] == "EVENT_UNKNOWN"
    assert unknown.headers["content-type"] == "application/problem+json"
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "UNAUTHORIZED"
