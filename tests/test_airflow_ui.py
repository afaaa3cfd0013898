"""The Migration page in the real Airflow UI: a real API server with the plugin, real Delta
tables written by Spark, headless Debian chromium, a real ``streamshift_promote`` DAG run.

What the page shows is compared with the control tables read through Spark (not through the
page's own JVM-free reader).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from flows.trades import FLOW
from flows.trades.generate import generate_day
from streamshift.control.report import write_report
from streamshift.engine.jobs.eod import run_eod
from streamshift.engine.jobs.promote import promote
from streamshift.engine.jobs.reconcile import reconcile_date
from streamshift.engine.write.target import Target, read
from streamshift.local.airflow import (
    APPROVER,
    OPERATOR,
    USER,
    VIEWER,
    LocalAirflow,
    password,
)
from streamshift.spec import catalog
from streamshift.spec.catalog import ControlTables
from streamshift.spec.registry import flow_names
from streamshift.spec.stages import NAMES as STAGES
from streamshift.store.airflow_api import AirflowApiError
from streamshift.store.records import current_stage

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

PROMOTE_DAG = "streamshift_promote"
# Dates no other Airflow test uses; the newest in the stack's warehouse, so they are the
# promotion evidence (the stack's window is 3).
DAYS = [dt.date(2027, 6, 1) + dt.timedelta(days=i) for i in range(3)]
# The Trigger form's date: no file is landed for it, so its run waits for one.
TRIGGER_DAY = dt.date(2027, 7, 1)
# The backfill form's range (a Monday and a Tuesday; past, as a backfill must be), for the
# telemetry flow, whose EOD DAG no other stack test runs: no file is landed for either day.
BACKFILL_FORM_DAYS = [dt.date(2026, 10, 5), dt.date(2026, 10, 6)]


def _set_stage(spark, settings, to: str, flow: str = FLOW.name) -> None:  # type: ignore[no-untyped-def]
    """Walk the flow to ``to`` one recorded step at a time (the stack is shared)."""
    while (now := current_stage(settings, flow)) != to:
        step = STAGES[STAGES.index(now) + (1 if STAGES.index(to) > STAGES.index(now) else -1)]
        promote(spark, settings, flow, step, force=True, reason="test set-up", by="test")


def _without(path: Path, skip: set[str], out: Path) -> Path:
    with open(path, newline="") as src, open(out, "w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=reader.fieldnames or [])
        writer.writeheader()
        writer.writerows(r for r in reader if r["trade_id"] not in skip)
    return out


def _expected(spark, settings) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What the page must show, from the tables through Spark."""
    from pyspark.sql.window import Window

    control = ControlTables(settings.warehouse)
    runs = read(spark, control.recon_runs).where(F.col("flow") == FLOW.name)
    newest = Window.partitionBy("business_date", "recon").orderBy(F.col("run_at").desc())
    latest = runs.withColumn("n", F.row_number().over(newest)).where("n = 1")
    stages = read(spark, control.stage_changes).where(F.col("flow") == FLOW.name)
    now = stages.orderBy(F.col("changed_at").desc()).first()["to_stage"]
    # The streak is the evidence the stage makes for the next: the EOD file's reconciliations
    # in stage stream, stream vs batch otherwise.
    kind = "eod_file" if now == "stream" else "parity"
    parity = (
        latest.where(F.col("recon").startswith(kind))
        .groupBy("business_date")
        .agg(F.sum("breaks").alias("breaks"), F.bool_and("clean").alias("clean"))
        .orderBy("business_date")
        .collect()
    )
    last_day = latest.agg(F.max("business_date")).first()[0]
    last = latest.where(F.col("business_date") == last_day)
    run_ids = [r["run_id"] for r in last.select("run_id").collect()]
    breaks = read(spark, control.recon_breaks).where(F.col("run_id").isin(run_ids)).count()
    return {
        "streak": [(str(r["business_date"]), int(r["breaks"]), r["clean"]) for r in parity][-30:],
        "last_day": str(last_day),
        "last_breaks": int(last.agg(F.sum("breaks")).first()[0]),
        "worst_rows": min(breaks, 10),
        "stage": now,
        "history_rows": stages.count(),
        "approval_rows": _decisions(spark, settings),
    }


def _decisions(spark, settings) -> int:  # type: ignore[no-untyped-def]
    path = ControlTables(settings.warehouse).promotion_decisions
    if not (Path(path) / "_delta_log").is_dir():
        return 0
    return read(spark, path).where(F.col("flow") == FLOW.name).count()


def _shown(driver) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    section = driver.find_element(By.CSS_SELECTOR, "section.flow[data-flow='trades']")
    days = section.find_elements(By.CSS_SELECTOR, "ol.streak li.day")
    return {
        "streak": [
            (
                d.get_attribute("data-date"),
                int(d.get_attribute("data-breaks")),
                "clean" in d.get_attribute("class").split(),
            )
            for d in days
        ],
        "last_day": section.find_element(By.CSS_SELECTOR, ".last-date").text,
        "last_breaks": int(section.find_element(By.CSS_SELECTOR, ".last-breaks").text),
        "worst_rows": len(section.find_elements(By.CSS_SELECTOR, "table.worst tbody tr")),
        "stage": section.find_element(By.CSS_SELECTOR, ".stage").text,
        "history_rows": len(section.find_elements(By.CSS_SELECTOR, "table.history tbody tr")),
        "approval_rows": len(section.find_elements(By.CSS_SELECTOR, "table.approvals tbody tr")),
    }


def _wait(driver, seconds: float, poll: float = 0.5) -> WebDriverWait:  # type: ignore[no-untyped-def]
    """A wait that reads through the UI's re-renders: React replaces elements between a find and
    a read, which surfaces as a stale reference, not as an answer."""
    return WebDriverWait(
        driver, seconds, poll_frequency=poll, ignored_exceptions=[StaleElementReferenceException]
    )


def _page_text(driver) -> str:  # type: ignore[no-untyped-def]
    """The page's text, read in the page: no element reference to go stale while React
    re-renders (Chrome then answers "Node with given id does not belong to the document", a
    WebDriverException that no wait ignores)."""
    return str(driver.execute_script("return document.body ? document.body.innerText : ''"))


def _login(driver, airflow: LocalAirflow, then: str, user: str = USER) -> WebDriverWait:  # type: ignore[no-untyped-def]
    """Sign in as ``user`` through Airflow's login form, which then opens the UI's page
    ``then`` (whoever was signed in before is signed out first)."""
    wait = _wait(driver, 60)
    driver.get(f"{airflow.url}/auth/login")
    driver.delete_all_cookies()
    driver.get(f"{airflow.url}/auth/login?next={urllib.parse.quote(then, safe='')}")
    wait.until(EC.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password(airflow.settings, user))
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    return wait


def _login_and_open(driver, airflow: LocalAirflow) -> None:  # type: ignore[no-untyped-def]
    """Sign in, open Browse → Migration, enter its frame."""
    wait = _login(driver, airflow, "/plugin/migration")
    frame = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "iframe[title=Migration]")))
    assert frame.get_attribute("src").endswith("/streamshift/migration")
    driver.switch_to.frame(frame)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "section.flow")))


def _cli(settings, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = LocalAirflow(settings).env()
    return subprocess.run(
        [str(Path(sys.executable).parent / "streamshift"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_migration_page_in_the_browser_shows_the_tables_and_promotes_through_the_gate(  # type: ignore[no-untyped-def]
    spark, airflow_stack, browser, tmp_path: Path
) -> None:
    settings, _client = airflow_stack
    airflow = LocalAirflow(settings)
    _set_stage(spark, settings, "shadow")
    batch = Target.open(spark, settings, FLOW, "batch")
    stream = Target.open(spark, settings, FLOW, "stream")
    files = {
        d: generate_day(d, 30, tmp_path / str(d), seed=7 + i, progress=False)
        for i, d in enumerate(DAYS)
    }
    missed = set()
    for d in DAYS:
        eod = files[d].eod
        run_eod(spark, batch, d, eod)
        if d == DAYS[-1]:  # the stream layer misses two trades of the last day
            with open(eod, newline="") as handle:
                missed = {r["trade_id"] for _, r in zip(range(2), csv.DictReader(handle))}
            eod = _without(eod, missed, tmp_path / "stream_day.csv")
        run_eod(spark, stream, d, eod)
        reconcile_date(spark, settings, FLOW, d)
    write_report(settings, FLOW.name, DAYS[-1])

    _login_and_open(browser, airflow)
    expected = _expected(spark, settings)
    *clean_days, (last_day, last_breaks, last_clean) = expected["streak"][-3:]
    assert clean_days == [(str(DAYS[0]), 0, True), (str(DAYS[1]), 0, True)]
    assert last_day == str(DAYS[2]) and last_breaks > 0 and not last_clean
    assert _shown(browser) == expected
    shot = tmp_path / "migration-page.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot of the Migration page: {shot}")

    # The last reconciliation links to the day's report (it opens in the page's frame: the
    # UI sandboxes plugin frames without pop-ups).
    section = browser.find_element(By.CSS_SELECTOR, "section.flow[data-flow='trades']")
    section.find_element(By.CSS_SELECTOR, "a.report").click()
    _wait(browser, 30).until(
        lambda d: d.find_element(By.TAG_NAME, "h1").text == f"trades — business date {DAYS[-1]}"
    )
    assert browser.find_element(By.CSS_SELECTOR, ".verdict").text == f"{last_breaks} breaks"
    browser.save_screenshot(str(tmp_path / "report-from-the-page.png"))

    # Every break links to its explanation: the broken group's members in the batch layer
    # (which serves closed dates in shadow) hold a trade the stream missed; the stream layer's
    # members of the same group do not.
    _login_and_open(browser, airflow)
    section = browser.find_element(By.CSS_SELECTOR, "section.flow[data-flow='trades']")
    link = section.find_element(By.CSS_SELECTOR, "table.worst td[data-col='key'] a")
    group = json.loads(link.text)
    link.click()

    def members(d):  # type: ignore[no-untyped-def]
        cells = d.find_elements(By.CSS_SELECTOR, "table.members td[data-col='key']")
        return {c.text for c in cells}

    _wait(browser, 60).until(lambda d: d.find_element(By.CSS_SELECTOR, "h1 .group"))
    heading = browser.find_element(By.TAG_NAME, "h1").text
    assert f"book={group['book']}" in heading and f"instrument={group['instrument']}" in heading
    in_batch = members(browser)
    assert in_batch & missed, (in_batch, missed)
    browser.save_screenshot(str(tmp_path / "explain-page.png"))
    browser.find_element(By.LINK_TEXT, "The stream layer").click()
    _wait(browser, 60).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "p.layer").text.startswith("The stream layer:")
    )
    assert members(browser) == in_batch - missed

    # Promotion to stream: the gate says no (the last day has breaks), in the CLI's words.
    cli = _cli(settings, "promote", "--flow", "trades", "--to", "stream")
    assert cli.returncode != 0 and "refused" in cli.stderr
    _login_and_open(browser, airflow)
    box = browser.find_element(By.CSS_SELECTOR, "section.flow[data-flow='trades'] .promote")
    assert box.find_element(By.TAG_NAME, "button").text == "Promote to stream"
    box.find_element(By.TAG_NAME, "button").click()
    outcome = _wait(browser, 60).until(
        lambda d: d.find_element(By.CSS_SELECTOR, ".promote .outcome.refused")
    )
    assert outcome.text and outcome.text in cli.stderr
    assert f"{DAYS[-1]} had {last_breaks} breaks" in outcome.text
    assert current_stage(settings, FLOW.name) == "shadow"

    # Repair the stream layer, reconcile again: the gate opens; promote from the page.
    run_eod(spark, stream, DAYS[-1], files[DAYS[-1]].eod)
    [parity] = reconcile_date(spark, settings, FLOW, DAYS[-1])
    assert parity.clean
    _login_and_open(browser, airflow)
    box = browser.find_element(By.CSS_SELECTOR, "section.flow[data-flow='trades'] .promote")
    box.find_element(By.CSS_SELECTOR, "input.reason").send_keys("three clean days")
    box.find_element(By.TAG_NAME, "button").click()
    # The page triggers streamshift_promote as the signed-in user; the run waits for a second
    # user's approval (four eyes), and the page says so, linking to where they answer.
    awaiting = _wait(browser, 300, poll=2).until(
        lambda d: d.find_element(By.CSS_SELECTOR, ".promote .outcome.awaiting")
    )
    assert "waiting for a second user's approval" in awaiting.text
    link = awaiting.find_element(By.TAG_NAME, "a").get_attribute("href")
    browser.save_screenshot(str(tmp_path / "migration-page-awaiting-approval.png"))
    run_id = urllib.parse.unquote(link.split("/runs/")[1].split("/")[0])
    assert current_stage(settings, FLOW.name) == "shadow"  # nothing recorded before the answer
    # The requester may not approve their own request: the request is not assigned to them.
    detail = airflow.client(USER).hitl(PROMOTE_DAG, run_id, "approve")
    assert [u["id"] for u in detail["assigned_users"]] == [APPROVER]
    assert f"| {DAYS[-1]} | 0 |" in detail["body"]  # the evidence the approver reads
    with pytest.raises(AirflowApiError) as own:
        airflow.client(USER).respond(PROMOTE_DAG, run_id, "approve", "Approve")
    assert own.value.status == 403
    airflow.client(USER).wait_for_input(PROMOTE_DAG, run_id, "approve")  # see its note

    # The approver signs in, reads the request and its evidence, and approves it.
    path = urllib.parse.urlparse(link).path
    wait = _login(browser, airflow, path, user=APPROVER)
    wait.until(lambda d: f"Promote {FLOW.name} from shadow to stream?" in _page_text(d))
    approve = wait.until(
        EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Approve']"))
    )
    browser.save_screenshot(str(tmp_path / "required-action-approval.png"))
    approve.click()
    # The page's run goes on: record_promotion records the answer and the change.
    run = airflow.client(USER).wait_for_run(PROMOTE_DAG, run_id, timeout=600)
    assert run["state"] == "success"
    assert current_stage(settings, FLOW.name) == "stream"
    _login_and_open(browser, airflow)
    [decision] = [
        r
        for r in read(spark, ControlTables(settings.warehouse).promotion_decisions).collect()
        if r["run_id"] == run_id
    ]
    assert (decision["requested_by"], decision["decision"], decision["decided_by"]) == (
        USER,
        "approved",
        APPROVER,
    )
    changes = (
        read(spark, ControlTables(settings.warehouse).stage_changes)
        .where(F.col("flow") == FLOW.name)
        .orderBy(F.col("changed_at").desc())
        .first()
    )
    assert (changes["from_stage"], changes["to_stage"], changes["changed_by"]) == (
        "shadow",
        "stream",
        USER,
    )
    assert changes["reason"] == "three clean days" and not changes["forced"]
    assert json.loads(changes["evidence"])["window"] == 3
    assert _shown(browser) == _expected(spark, settings)
    browser.save_screenshot(str(tmp_path / "migration-page-promoted.png"))

    # "Where's my adjustment?": the page's search box traces a key through the layer that
    # serves now (stream): the first trade of the first day, from its file's line 2.
    eod = files[DAYS[0]].eod
    with open(eod, newline="") as handle:
        first = next(csv.DictReader(handle))
    form = browser.find_element(By.CSS_SELECTOR, "form.trace")
    Select(form.find_element(By.NAME, "flow")).select_by_visible_text(FLOW.name)
    form.find_element(By.NAME, "key").send_keys(first["trade_id"])
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, 60).until(
        lambda d: d.find_element(By.TAG_NAME, "h1").text == f"trades key {first['trade_id']}"
    )
    traced = [
        {td.get_attribute("data-col"): td.text for td in tr.find_elements(By.TAG_NAME, "td")}
        for tr in browser.find_elements(By.CSS_SELECTOR, "table.trace tbody tr")
    ]
    assert [(t["version"], t["source_ref"], t["outcome"]) for t in traced] == [
        (first["version"], f"{eod}:2", "applied*")
    ]
    assert "The stream layer" in browser.find_element(By.CSS_SELECTOR, ".current").text
    browser.save_screenshot(str(tmp_path / "trace-page.png"))


def test_the_assets_page_lists_what_each_flows_eod_publishes(
    airflow_stack, browser, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Airflow's Assets page shows each flow's ``<flow>_eod_published``, the asset downstream
    DAGs schedule on, once the DAG processor has parsed the EOD DAGs."""
    settings, client = airflow_stack
    for flow in flow_names():
        client.wait_for_dag(f"eod_{flow}")
    # Each is produced by the publish task of the flow's EOD and late-data DAGs.
    assets = {a["name"]: a for a in client.get("/api/v2/assets?limit=100")["assets"]}
    for flow in flow_names():
        asset = assets[f"{flow}_eod_published"]
        assert asset["uri"] == f"x-streamshift://{flow}/eod-published"
        assert sorted((t["dag_id"], t["task_id"]) for t in asset["producing_tasks"]) == [
            (f"eod_{flow}", "publish_summary"),
            (f"late_data_{flow}", "publish_summary"),
        ]
    wait = _login(browser, LocalAirflow(settings), "/assets")
    names = [f"{flow}_eod_published" for flow in flow_names()]
    wait.until(lambda d: all(n in _page_text(d) for n in names))
    shot = tmp_path / "assets-page.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot of the Assets page: {shot}")


def test_the_trigger_form_starts_a_run_with_the_params_typed_in(
    airflow_stack, browser, request, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The Trigger button of ``eod_trades`` in the UI, as a user starts a day by hand: the form
    shows the DAG's params; a file outside the landing folder comes back with the params
    schema's refusal and starts nothing; the date, mode and file typed in reach the run the
    form starts, triggered by the signed-in user, and its first task resolves them (the run
    then waits for the file, which no one lands)."""
    settings, client = airflow_stack
    client.wait_for_dag("eod_trades")
    request.addfinalizer(lambda: client.pause("eod_trades"))  # the form unpauses it

    def manual_runs() -> dict[str, dict[str, Any]]:
        return {r["dag_run_id"]: r for r in client.runs("eod_trades", "manual")}

    before = set(manual_runs())
    wait = _login(browser, LocalAirflow(settings), "/dags/eod_trades")
    button = "[data-testid=trigger-dag-button]"
    wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, button))).click()
    day = wait.until(EC.presence_of_element_located((By.NAME, "element_business_date")))
    day.send_keys(TRIGGER_DAY.strftime("%m%d%Y"))  # a date input, in the browser's en-US order
    file = browser.find_element(By.NAME, "element_file")
    file.send_keys("../../etc/passwd")
    submit = browser.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]")
    submit.click()
    refusal = "Invalid input for param file: '../../etc/passwd' does not match"
    wait.until(lambda d: refusal in _page_text(d))
    assert set(manual_runs()) == before  # nothing started

    # The refusal's toast lies over the button while the pointer rests there.
    ActionChains(browser).move_to_element(file).perform()
    toast = (By.CSS_SELECTOR, "[data-scope=toast][data-part=root]")
    wait.until(EC.invisibility_of_element_located(toast))
    file.send_keys(Keys.CONTROL, "a", Keys.DELETE)
    file.send_keys(f"{TRIGGER_DAY}/ui_trades.csv")
    mode = browser.find_element(By.CSS_SELECTOR, "input[role=combobox][aria-required=true]")
    mode.send_keys("replace", Keys.ENTER)
    shot = tmp_path / "trigger-form.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot of the Trigger form: {shot}")
    submit.click()

    wait.until(lambda d: "/dags/eod_trades/runs/manual__" in d.current_url)  # the run's page
    (run_id,) = set(manual_runs()) - before
    assert urllib.parse.unquote(browser.current_url).endswith(f"/runs/{run_id}")
    run = manual_runs()[run_id]
    request.addfinalizer(lambda: client.set_run_state("eod_trades", run_id, "failed"))
    conf = {
        "business_date": str(TRIGGER_DAY),
        "mode": "replace",
        "file": f"{TRIGGER_DAY}/ui_trades.csv",
    }
    assert run["conf"] == conf
    assert run["triggering_user_name"] == USER

    resolved = _resolved_and_waiting(client, "eod_trades", run_id)
    assert (resolved["business_date"], resolved["mode"], resolved["file"]) == (
        str(TRIGGER_DAY),
        "replace",
        str(catalog.landing_dir(settings, "trades") / str(TRIGGER_DAY) / "ui_trades.csv"),
    )


def test_the_backfill_form_starts_one_run_per_business_day_of_the_range(
    airflow_stack, browser, request, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The Trigger button's Backfill form, as a user backfills late days from the UI: a range
    picked in its date pickers becomes one backfill with a run per scheduled business day,
    triggered by the signed-in user; each run's business date is its logical date (the
    params left empty), and the first resolves that day's file and waits for it."""
    settings, client = airflow_stack
    dag_id, flow = "eod_telemetry", "telemetry"
    client.wait_for_dag(dag_id)
    request.addfinalizer(lambda: client.pause(dag_id))  # the form unpauses it
    backfills = f"/api/v2/backfills?dag_id={dag_id}"
    assert client.get(backfills)["backfills"] == []

    wait = _login(browser, LocalAirflow(settings), f"/dags/{dag_id}")
    button = "[data-testid=trigger-dag-button]"
    wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, button))).click()
    wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "[id$=':radio:label:backfill']")))
    browser.find_element(By.CSS_SELECTOR, "[id$=':radio:label:backfill']").click()
    for picker, day in zip((0, 1), BACKFILL_FORM_DAYS, strict=True):
        # Each end is a popover whose date field takes the focus; its time keeps the default.
        wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=datetime-input]")))
        browser.find_elements(By.CSS_SELECTOR, "[data-testid=datetime-input]")[picker].click()
        wait.until(
            lambda d: d.switch_to.active_element.get_attribute("placeholder") == "YYYY/MM/DD"
        )
        browser.switch_to.active_element.send_keys(day.strftime("%Y/%m/%d"), Keys.ESCAPE)
    # The form's dry run counts the scheduled days in the range.
    wait.until(lambda d: "2 runs will be triggered." in _page_text(d))
    shot = tmp_path / "backfill-form.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot of the Backfill form: {shot}")
    footer = browser.find_elements(By.CSS_SELECTOR, "footer button")
    (submit,) = [b for b in footer if b.text == "Run Backfill"]
    submit.click()

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not client.get(backfills)["backfills"]:
        time.sleep(1)
    (backfill,) = client.get(backfills)["backfills"]
    request.addfinalizer(lambda: _end_backfill(client, dag_id, backfill["id"]))
    assert (backfill["from_date"][:10], backfill["to_date"][:10]) == tuple(
        str(d) for d in BACKFILL_FORM_DAYS
    )
    # The backfill can show before its runs do (seen on a busy machine): wait for them.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not client.runs(dag_id, "backfill"):
        time.sleep(1)
    runs = client.runs(dag_id, "backfill")
    assert sorted(r["logical_date"][:10] for r in runs) == [str(d) for d in BACKFILL_FORM_DAYS]
    assert {r["triggering_user_name"] for r in runs} == {USER}

    # One run at a time (the form's default): the first resolves its day and waits for the file.
    first = f"backfill__{BACKFILL_FORM_DAYS[0]}T22:00:00+00:00"
    resolved = _resolved_and_waiting(client, dag_id, first)
    day = str(BACKFILL_FORM_DAYS[0])
    assert (resolved["business_date"], resolved["file"]) == (
        day,
        str(catalog.landing_dir(settings, flow) / catalog.default_file(flow, day)),
    )


def _resolved_and_waiting(client, dag_id: str, run_id: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What the run's ``resolve_inputs`` decided, once its file sensor waits (deferred: no file
    is landed for the day, and a waiting run holds no worker slot)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        states = client.task_states(dag_id, run_id)
        if states.get("wait_for_eod_file") in ("deferred", "failed", "upstream_failed"):
            break
        time.sleep(2)
    assert states["resolve_inputs"] == "success", states
    assert states["wait_for_eod_file"] == "deferred", states
    resolved: dict[str, Any] = client.returned(dag_id, run_id, "resolve_inputs")
    return resolved


def _end_backfill(client, dag_id: str, backfill_id: int) -> None:  # type: ignore[no-untyped-def]
    """Cancel the backfill (its queued runs fail) and fail the run waiting for its file."""
    client.cancel_backfill(backfill_id)
    for run in client.runs(dag_id, "backfill"):
        if run["state"] not in ("success", "failed"):
            client.set_run_state(dag_id, run["dag_run_id"], "failed")


def _status(
    url: str, token: str | None = None, method: str = "GET", body: Any = None
) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode() if body is not None else None, method=method
    )
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read().decode() or "null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode() or "null")


def _refused_to_viewer(airflow: LocalAirflow, route: str, body: Any, dag_id: str) -> None:
    """A viewer's POST to one of the page's ``route``s is refused: it may not trigger ``dag_id``."""
    viewer = airflow.client(VIEWER)
    status, answer = _status(
        f"{airflow.url}/streamshift/{route}", token=viewer.token(), method="POST", body=body
    )
    assert status == 403 and f"may not trigger {dag_id}" in answer["detail"]


def test_the_page_api_needs_an_airflow_user_and_the_api_server_runs_no_jvm(airflow_stack) -> None:  # type: ignore[no-untyped-def]
    settings, client = airflow_stack
    airflow = LocalAirflow(settings)
    flows = f"{airflow.url}/streamshift/api/flows"
    assert _status(flows)[0] == 401
    assert _status(f"{airflow.url}/streamshift/migration")[0] == 401
    assert _status(f"{airflow.url}/streamshift/reports/trades/{DAYS[0]}")[0] == 401
    assert _status(flows, token="not-a-token")[0] == 403
    # FastAPI's own docs routes would answer without the app's dependencies: they are off.
    for route in ("docs", "redoc", "openapi.json"):
        assert _status(f"{airflow.url}/streamshift/{route}")[0] == 404, route
    status, body = _status(flows, token=client.token())
    assert status == 200 and [f["flow"] for f in body] == flow_names()
    # A flow the project does not declare: 404, naming those it does.
    missing, answer = _status(f"{flows}/payments/trace?key=T1", token=client.token())
    assert missing == 404, answer
    assert answer["detail"] == f"unknown flow 'payments'; declared flows: {', '.join(flow_names())}"
    by_flow = {f["flow"]: f for f in body}
    assert by_flow["trades"]["stage"] == current_stage(settings, "trades")

    # A viewer sees the page but may not promote (it may not trigger streamshift_promote).
    assert _status(flows, token=airflow.client(VIEWER).token())[0] == 200
    _refused_to_viewer(airflow, "api/flows/trades/promote", {"to": "kappa"}, "streamshift_promote")

    # Serving all of that started no JVM under the API server.
    api_server = json.loads((settings.airflow_home / "pids.json").read_text())["api-server"]
    tree = _process_tree(api_server)
    commands = {pid: _cmdline(pid) for pid in tree}
    assert "airflow" in commands[api_server] and "api" in commands[api_server]
    assert not [c for c in commands.values() if "java" in c or "spark" in c], commands
    for pid in tree:
        assert "libjvm" not in Path(f"/proc/{pid}/maps").read_text(), commands[pid]


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _process_tree(root: int) -> list[int]:
    """``root`` and all its living descendants (from each process's parent pid)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    tree, frontier = [root], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree += children
        frontier += children
    return tree


def test_promote_dag_refuses_like_the_cli(airflow_stack) -> None:  # type: ignore[no-untyped-def]
    """Triggered directly (not from the page), the DAG's gate task fails with the gate's words."""
    settings, client = airflow_stack
    now = current_stage(settings, "trades")
    run_id = f"same-stage-{time.time_ns()}"
    client.trigger("streamshift_promote", {"flow": "trades", "to": now}, run_id=run_id)
    run = client.wait_for_run("streamshift_promote", run_id, timeout=300, progress=False)
    states = client.task_states("streamshift_promote", run_id)
    assert run["state"] == "failed"
    assert states["check_gate"] == "failed" and states["record_promotion"] == "upstream_failed"
    assert current_stage(settings, "trades") == now


def test_forcing_a_promotion_needs_the_admin_role(airflow_stack) -> None:  # type: ignore[no-untyped-def]
    """An operator may trigger streamshift_promote, but a forced run of theirs fails at the
    gate task naming the role it needs; the stage stays."""
    settings, _ = airflow_stack
    operator = LocalAirflow(settings).client(OPERATOR)
    now = current_stage(settings, "trades")
    to = next(s for s in STAGES if s != now)
    run_id = f"forced-by-operator-{time.time_ns()}"
    conf = {"flow": "trades", "to": to, "force": True, "reason": "operator tries"}
    operator.trigger("streamshift_promote", conf, run_id=run_id)
    run = operator.wait_for_run("streamshift_promote", run_id, timeout=300, progress=False)
    states = operator.task_states("streamshift_promote", run_id)
    assert run["state"] == "failed" and states["check_gate"] == "failed"
    assert states["record_promotion"] == "upstream_failed"
    assert current_stage(settings, "trades") == now
    log = operator.task_log("streamshift_promote", run_id, "check_gate")
    assert "may not force a promotion past the gate: that needs the admin role" in log, log


def test_a_promotion_to_stream_waits_for_a_second_user_whose_rejection_is_recorded(  # type: ignore[no-untyped-def]
    spark, airflow_stack
) -> None:
    """Four eyes through the real DAG and REST API: an admin forces telemetry to stream (past
    the evidence, never past the approval); the request is assigned to the approver alone,
    shows why it was forced, refuses the admin's own answer, and the approver's rejection
    fails the run, changes no stage and is recorded."""
    settings, client = airflow_stack
    flow = "telemetry"
    client.wait_for_dag(PROMOTE_DAG)
    _set_stage(spark, settings, "shadow", flow)
    try:
        conf = {"flow": flow, "to": "stream", "force": True, "reason": "pilot desk"}
        run_id = client.trigger(PROMOTE_DAG, conf)["dag_run_id"]
        client.wait_for_input(PROMOTE_DAG, run_id, "approve", timeout=300)
        detail = client.hitl(PROMOTE_DAG, run_id, "approve")
        assert [u["id"] for u in detail["assigned_users"]] == [APPROVER]
        assert detail["subject"] == f"Promote {flow} from shadow to stream?"
        assert "FORCED past the gate: pilot desk" in detail["body"]
        with pytest.raises(AirflowApiError) as own:
            client.respond(PROMOTE_DAG, run_id, "approve", "Approve")
        assert own.value.status == 403
        LocalAirflow(settings).client(APPROVER).respond(PROMOTE_DAG, run_id, "approve", "Reject")

        run = client.wait_for_run(PROMOTE_DAG, run_id, timeout=600)
        assert run["state"] == "failed"
        states = client.task_states(PROMOTE_DAG, run_id)
        assert (states["approve"], states["record_promotion"]) == ("success", "failed")
        assert "rejected by approver" in client.task_log(PROMOTE_DAG, run_id, "record_promotion")
        assert current_stage(settings, flow) == "shadow"
        decided = read(spark, ControlTables(settings.warehouse).promotion_decisions).where(
            F.col("run_id") == run_id
        )
        assert [
            (r["flow"], r["requested_by"], r["decision"], r["decided_by"])
            for r in decided.collect()
        ] == [(flow, USER, "rejected", APPROVER)]
    finally:
        _set_stage(spark, settings, "batch", flow)


def test_the_page_re_drives_a_rules_quarantine_as_the_signed_in_user(  # type: ignore[no-untyped-def]
    spark, airflow_stack, browser, tmp_path
) -> None:
    """The page's quarantine section, as an operator fixes what the quarantine holds: each rule,
    and each of its dates, with the rows a re-drive would try (the counts those of the
    quarantine read through Spark), a Re-drive button that starts ``streamshift_redrive`` for
    that rule (and date) as the signed-in user,
    and, once the run is done, its outcome per row (here: the device is still unknown, so the
    row stays, recorded as still failing). A viewer may not re-drive."""
    from streamshift.spec.registry import get_flow, get_generator

    settings, client = airflow_stack
    flow = get_flow("telemetry")
    client.wait_for_dag("streamshift_redrive")
    _set_stage(spark, settings, "batch", flow.name)  # the batch layer serves: no topic needed
    # two days' poison files: each rule has rows on both, and the re-drive takes one day's
    day, other = dt.date(2027, 8, 2), dt.date(2027, 8, 3)
    for on in (day, other):
        files = get_generator(flow.name)(on, 10, tmp_path / f"{on}", seed=5, progress=False)
        run_eod(spark, Target.open(spark, settings, flow, "batch"), on, files.poison)
    batch = Target.open(spark, settings, flow, "batch")
    quarantined = (
        read(spark, batch.tables.quarantine)
        .where((F.col("flow") == flow.name) & (F.col("rule") != "version_conflict"))
        .groupBy("rule", "business_date")
        .agg(F.countDistinct("source_ref").alias("rows"))
        .collect()
    )
    # (rule, date) -> rows, and "all dates" when several or the only one is unread
    expected: dict[tuple[str, str], int] = {}
    for r in quarantined:
        on = "no date" if r["business_date"] is None else str(r["business_date"])
        expected[(r["rule"], on)] = int(r["rows"])
    for rule in {rule for rule, _ in expected}:
        days = {on: n for (r, on), n in expected.items() if r == rule}
        if len(days) > 1 or "no date" in days:  # rows without a date: only "all" re-drives them
            expected[(rule, "all dates")] = sum(days.values())
    # DEV-999, which the feed lacks, on each day
    assert expected.get(("known_device", str(day))) == 1, expected
    assert expected.get(("known_device", "all dates")) == 2, expected

    airflow = LocalAirflow(settings)
    route = f"api/flows/{flow.name}/redrive"
    _refused_to_viewer(airflow, route, {"rule": "known_device"}, "streamshift_redrive")

    _login_and_open(browser, airflow)
    wait = _wait(browser, 60)
    section = f"section.flow[data-flow='{flow.name}']"

    def shown_rules() -> dict[tuple[str, str], int]:
        rows = browser.find_elements(By.CSS_SELECTOR, f"{section} table.quarantine tbody tr")
        return {
            (r.get_attribute("data-rule"), r.get_attribute("data-date")): int(
                r.find_element(By.CSS_SELECTOR, "[data-col=rows]").text
            )
            for r in rows
        }

    assert shown_rules() == expected
    before = {r["dag_run_id"] for r in client.runs("streamshift_redrive", "manual")}
    button = f"{section} tr[data-rule='known_device'][data-date='{day}'] button"
    browser.find_element(By.CSS_SELECTOR, button).click()
    # The run's outcome, once the page reloads: the row tried, still failing, by whom.
    redrives = f"{section} table.redrives tbody tr"
    refused = f"{section} .redrive .outcome.refused"
    _wait(browser, 600, poll=2).until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, redrives) or d.find_elements(By.CSS_SELECTOR, refused)
        )
    )
    for said in browser.find_elements(By.CSS_SELECTOR, refused):
        raise AssertionError(f"the re-drive was refused or failed: {said.text}")
    (run_id,) = {r["dag_run_id"] for r in client.runs("streamshift_redrive", "manual")} - before
    run = next(r for r in client.runs("streamshift_redrive", "manual") if r["dag_run_id"] == run_id)
    assert run["state"] == "success" and run["triggering_user_name"] == USER
    assert run["conf"] == {"flow": flow.name, "rule": "known_device", "business_date": str(day)}
    recorded = (
        read(spark, ControlTables(settings.warehouse).redrives)
        .where(F.col("flow") == flow.name)
        .collect()
    )
    # only that day's row was tried: the other day's stays untried
    assert [(r["rule"], r["business_date"], r["outcome"], r["redriven_by"]) for r in recorded] == [
        ("known_device", day, "still failing", USER)
    ]
    cells = [
        {c.get_attribute("data-col"): c.text for c in row.find_elements(By.TAG_NAME, "td")}
        for row in browser.find_elements(By.CSS_SELECTOR, redrives)
    ]
    assert [(c["source_ref"], c["outcome"], c["redriven_by"]) for c in cells] == [
        (recorded[0]["source_ref"], "still failing", USER)
    ]
    wait.until(lambda d: shown_rules() == expected)  # still there: nothing was applied
    table = browser.find_element(By.CSS_SELECTOR, f"{section} table.redrives")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", table)
    shot = tmp_path / "migration-page-redrive.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot of the page's quarantine after a re-drive: {shot}")
