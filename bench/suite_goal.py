"""The suite's goals as the house's issue sets them: the tests it had when it was filed take at
most 20 min from a fresh clone, and each later issue's new tests add at most 3 min.

``LATER`` lists the tests each later issue added (by function name; a parametrized test counts
with every case). Every other test of the suite is one of the tests the issue found, or one that
carries several of them, merged (those count as the issue's own), or a mend's. The bench:

* clones this checkout's HEAD into a temporary folder and runs the README's test command there
  (``bin/test``, set-up included, every test timed: ``--durations=0``) with ``LATER``'s tests
  deselected: the first goal's figure. ``--with-later`` runs the whole suite instead (the
  figure BENCHMARKS.md's suite row quotes);
* sums the time each later issue's tests held a worker (set-up, call and tear-down) in a whole
  run (``--with-later``'s, or ``--durations LOG``: the output of ``bin/test --durations=0``),
  and its share of that run's wall: the suite runs on two workers kept busy to the end, so an
  issue's tests add about half their worker time;
* with ``--write-durations``, writes that whole run's time of every test (set-up, call and
  tear-down) to ``tests/durations.json``, which orders the suite's runs (longest first).

Run: .venv/bin/python bench/suite_goal.py [--with-later [--write-durations]]
     [--durations LOG --no-run]
     (a suite run: 25-30 min on a fast day)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from _scratch import scratch

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 2

# The tests each issue after the house's added, by the function's name.
LATER: dict[str, tuple[str, ...]] = {
    "64 (your flows in your repository)": (
        "test_a_team_installs_the_kit_and_runs_its_own_project",
        "test_flows_come_from_the_project_and_entry_points_and_a_name_twice_is_refused",
        "test_init_writes_a_project_once_and_it_is_found",
        "test_settings_come_from_the_file_under_the_environment_and_say_where_from",
        "test_the_project_is_found_walking_up_or_named",
        "test_unknown_keys_settings_and_secrets_in_the_file_are_refused",
        "test_setup_says_and_prunes_the_cache_folders_of_other_locks",
        "test_the_class_archive_lives_in_its_virtualenv_and_earlier_kits_archives_are_removed",
        "test_the_jars_are_the_locked_ones_and_none_that_pyspark_ships",
        "test_a_job_from_another_project_runs_that_projects_flows",
        "test_a_project_from_init_builds_its_own_image_with_the_kit_as_a_dependency",
        "test_the_kits_compose_file_is_the_one_init_writes_for_its_example_project",
        "test_every_command_taking_a_flow_says_what_to_do_when_it_finds_none",
        "test_starter_suites_follow_the_flows_spec_and_complete_at_run_time",
    ),
    "65 (a flow that changes)": (
        "test_an_evolve_run_with_nothing_to_change_passes_its_approval",
        "test_a_changed_view_shadowed_switched_to_and_back",
        "test_a_flow_changed_column_view_and_breaking_rename",
        "test_a_flow_whose_code_does_not_build_says_so_in_one_line",
        "test_a_plan_says_what_it_compares_the_code_with",
        "test_serve_rebuilds_its_state_when_the_view_changed",
        "test_the_stream_across_an_added_column_loses_and_doubles_nothing",
        "test_upkeep_keeps_the_live_version_the_pending_one_and_those_left_recently",
    ),
    "66 (the stream-first layer at Spark's pace)": (
        "test_a_version_appended_beside_another_writers_copy_stays_once_in_history",
        "test_dataframe_debugging_is_off_unless_asked_for",
        "test_a_job_taken_tells_only_the_processes_still_warming_to_leave_the_rest",
        "test_the_apply_ranks_only_the_keys_it_received_more_than_once",
        "test_a_large_batch_writes_a_date_in_its_tasks_and_the_session_gets_its_setting_back",
        "test_a_layer_whose_batches_repeat_many_keys_ranks_the_next_in_the_pass_and_back",
        "test_a_small_batchs_history_lookup_reads_the_same_rows_through_deltalake_or_spark",
        "test_two_jobs_on_the_engine_committing_at_once_both_apply",
        "test_views_recomputed_from_current_state_read_either_way_agree",
        "test_a_table_read_again_sees_each_new_commit_and_a_rewritten_one_anew",
        "test_only_the_tables_read_last_are_kept",
    ),
}

# "12.34s call     tests/test_x.py::test_y[a case]" (a case's id may hold spaces)
DURATION = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(\S+::(\w+).*?)\s*$")


def issue_of(function: str) -> str | None:
    return next((issue for issue, names in LATER.items() if function in names), None)


def deselect_expression() -> str:
    """A ``-k`` expression leaving out every later issue's test (exact names: no test of the
    suite has another's whole name inside its own)."""
    return "not (" + " or ".join(n for names in LATER.values() for n in names) + ")"


def run_suite(with_later: bool) -> tuple[float, str]:
    """The README's test command in a fresh clone of HEAD, every test timed: (seconds, its
    output)."""
    work = scratch(None, "suite-goal-")  # the clone, removed when the bench exits
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    command = ["bin/test", "--durations=0"]
    if not with_later:
        command += ["-k", deselect_expression()]
    print(f"[suite_goal] {' '.join(command[:2])} in a fresh clone of HEAD ...", flush=True)
    start = time.monotonic()
    done = subprocess.run(command, check=False, cwd=clone, capture_output=True, text=True)
    seconds = time.monotonic() - start
    log = work.parent / "suite-goal-last.txt"  # kept: the last run's output
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        print(f"[suite_goal] the run failed ({done.returncode}); its output: {log}")
    return seconds, done.stdout


def summary(output: str) -> str:
    """pytest's last line ("217 passed, 1 warning in 1555.42s (0:25:55)") in a run's output."""
    lines = [line for line in output.splitlines() if " passed" in line and " in " in line]
    return lines[-1].strip("= ") if lines else "no summary"


def seconds_by_test(output: str) -> dict[str, float]:
    """Each test's set-up, call and tear-down seconds in a ``--durations=0`` run's output."""
    seconds: dict[str, float] = defaultdict(float)
    for line in output.splitlines():
        if m := DURATION.match(line):
            # pytest-xdist's --dist loadgroup shows a grouped test as "<node id>@<group>"
            seconds[re.sub(r"@\w+$", "", m[3])] += float(m[1])
    return dict(seconds)


def write_durations(output: str) -> None:
    """``tests/durations.json`` from a whole run's output, longest first."""
    seconds = seconds_by_test(output)
    source = (
        "set-up, call and tear-down seconds of every test of a fresh clone's two-worker "
        f"bin/test --durations=0 ({summary(output)}; bench/suite_goal.py --with-later "
        "--write-durations); only their order matters (longest first)"
    )
    ordered = dict(sorted(((k, round(v, 2)) for k, v in seconds.items()), key=lambda kv: -kv[1]))
    path = ROOT / "tests" / "durations.json"
    path.write_text(json.dumps({"source": source, "seconds": ordered}, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: {len(ordered)} tests")


def later_durations(output: str) -> None:
    """Each later issue's tests' worker time in a ``--durations=0`` run's ``output``, and its
    share of the run's wall."""
    held: dict[str, float] = defaultdict(float)
    tests: dict[str, set[str]] = defaultdict(set)
    total = 0.0
    wall = re.search(r" in ([\d.]+)s", summary(output))
    for line in output.splitlines():
        if m := DURATION.match(line):
            seconds, node, function = float(m[1]), m[3], m[4]
            total += seconds
            if issue := issue_of(function):
                held[issue] += seconds
                tests[issue].add(node)
    print(
        f"the run's tests held the workers {total:,.0f} s; pytest's wall "
        f"{float(wall[1]) if wall else 0:,.0f} s"
    )
    for issue in LATER:
        share = held[issue] / WORKERS
        print(
            f"issue {issue}: {len(tests[issue])} tests, {held[issue]:,.0f} s of a worker, "
            f"about {share:,.0f} s ({share / 60:.1f} min) of the wall on {WORKERS} workers"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with-later", action="store_true", help="run the whole suite")
    parser.add_argument("--durations", type=Path, help="a whole run's --durations=0 output")
    parser.add_argument("--no-run", action="store_true", help="only read --durations")
    parser.add_argument(
        "--write-durations",
        action="store_true",
        help="write the whole run's test times to tests/durations.json",
    )
    args = parser.parse_args()
    if not args.no_run:
        seconds, output = run_suite(args.with_later)
        which = "the whole suite" if args.with_later else "the tests the house's issue found"
        print(
            f"{which}, from a fresh clone (set-up included): {seconds:,.0f} s "
            f"({seconds / 60:.1f} min); pytest: {summary(output)}"
        )
        if args.with_later:
            later_durations(output)
            if args.write_durations:
                write_durations(output)
    if args.durations:
        later_durations(args.durations.read_text())
        if args.write_durations:
            write_durations(args.durations.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
