"""The Databricks asset bundle (databricks/) is consistent with the package it deploys.

No Databricks and no Spark here: the YAML is parsed and every task is checked against pyproject.toml and
the job modules themselves. A task's entry point must be a [project.scripts] entry that resolves to a
callable ``main``, and its parameters, with the bundle's variables and dynamic values substituted as the
dev and prod targets would, must parse with that job's own ``parser()``.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "databricks"
TARGETS = ("dev", "prod")
#: Every job the bundle must deploy, by entry point.
EXPECTED_ENTRY_POINTS = {
    "topiclake-compact",
    "topiclake-retention",
    "topiclake-compact-keys",
    "topiclake-vacuum",
    "topiclake-reprocess",
    "topiclake-register-tables",
}
#: Jobs that run on a schedule (the others run on demand).
SCHEDULED = EXPECTED_ENTRY_POINTS - {"topiclake-reprocess"}

_VAR = re.compile(r"\$\{var\.([A-Za-z_][A-Za-z0-9_-]*)\}")
_DYNAMIC = re.compile(r"\{\{\s*([^}]+?)\s*\}\}")


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not a mapping"
    return data


def _config() -> dict[str, Any]:
    return _load(BUNDLE / "databricks.yml")


def _resource_files() -> list[Path]:
    return sorted((BUNDLE / "resources").glob("*.yml")) + sorted((BUNDLE / "resources").glob("*.yaml"))


def _jobs() -> dict[str, tuple[Path, dict[str, Any]]]:
    jobs: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in _resource_files():
        for key, job in (_load(path).get("resources", {}).get("jobs") or {}).items():
            assert key not in jobs, f"job {key} defined twice ({jobs[key][0].name}, {path.name})"
            jobs[key] = (path, job)
    return jobs


def _scripts() -> dict[str, str]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def _walk_strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _walk_strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_strings(value)


@dataclass
class Task:
    job_key: str
    job: dict[str, Any]
    task: dict[str, Any]
    for_each_inputs: str | None  # the raw `inputs` of an enclosing for_each_task

    @property
    def id(self) -> str:
        return f"{self.job_key}.{self.task['task_key']}"


def _tasks() -> list[Task]:
    tasks: list[Task] = []
    for key, (_, job) in _jobs().items():
        for task in job.get("tasks") or []:
            if "for_each_task" in task:
                inner = task["for_each_task"]["task"]
                tasks.append(Task(key, job, inner, str(task["for_each_task"]["inputs"])))
            else:
                tasks.append(Task(key, job, task, None))
    return tasks


def _variable_values(target: str) -> dict[str, Any]:
    """Values of the bundle's variables in ``target``: the target's own, else the default."""
    config = _config()
    values = {name: spec.get("default") for name, spec in (config.get("variables") or {}).items()}
    values.update(config["targets"][target].get("variables") or {})
    return values


def _substitute(text: str, target: str, job: dict[str, Any], for_each_inputs: str | None) -> str:
    """Resolve ``${var.x}`` as ``target`` would, ``{{input}}`` to the first for-each input and
    ``{{job.parameters.x}}`` to the job parameter's default."""
    values = _variable_values(target)

    def var(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        assert value is not None, f"variable {match.group(1)} has no value in target {target}"
        return str(value)

    def dynamic(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref == "input":
            assert for_each_inputs is not None, "{{input}} outside a for_each_task"
            inputs = json.loads(_VAR.sub(var, for_each_inputs))
            assert isinstance(inputs, list) and inputs, f"for_each inputs {inputs!r} are not a non-empty list"
            return str(inputs[0])
        if ref.startswith("job.parameters."):
            name = ref.removeprefix("job.parameters.")
            defaults = {p["name"]: p["default"] for p in job.get("parameters") or []}
            assert name in defaults, f"{{{{{ref}}}}} is not a parameter of the job"
            return str(defaults[name])
        raise AssertionError(f"unexpected dynamic value reference {{{{{ref}}}}}")

    resolved = _DYNAMIC.sub(dynamic, _VAR.sub(var, text))
    assert "${" not in resolved and "{{" not in resolved, resolved
    return resolved


def _resolve_entry_point(entry_point: str) -> Callable[..., Any]:
    scripts = _scripts()
    assert entry_point in scripts, f"{entry_point} is not in [project.scripts] of pyproject.toml"
    module_name, _, attr = scripts[entry_point].partition(":")
    assert attr == "main", f"{entry_point} -> {scripts[entry_point]}: the entry point must be a main()"
    module = importlib.import_module(module_name)
    function = getattr(module, attr)
    assert callable(function)
    return function


# ---------------------------------------------------------------------------------------- quartz cron

_DOW = "SUN|MON|TUE|WED|THU|FRI|SAT"
_MONTHS = "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC"
#: (name, low, high, names) of the fields of a quartz cron expression.
_FIELDS = [
    ("seconds", 0, 59, ""),
    ("minutes", 0, 59, ""),
    ("hours", 0, 23, ""),
    ("day-of-month", 1, 31, ""),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 1, 7, _DOW),
    ("year", 1970, 2199, ""),
]


def _quartz_field_ok(value: str, low: int, high: int, names: str) -> bool:
    atom = rf"(\d+{'|' + names if names else ''})"

    def in_range(token: str) -> bool:
        return not token.isdigit() or low <= int(token) <= high

    for part in value.split(","):
        m = re.fullmatch(rf"(\*|{atom}(-{atom})?)(/(\d+))?", part)
        if m is None:
            return False
        tokens = [t for t in re.split(r"[-/]", part) if t and t != "*"]
        if not all(in_range(t) for t in tokens[:2]):
            return False
        if m.group(6) is not None and int(m.group(6)) < 1:
            return False
    return True


def quartz_cron_errors(expression: str) -> list[str]:
    """Problems of a quartz cron expression (empty when valid): 6 or 7 fields, each in its range, and
    exactly one of day-of-month and day-of-week set to '?'."""
    fields = expression.split()
    if len(fields) not in (6, 7):
        return [f"{len(fields)} fields, quartz wants 6 or 7 (seconds first)"]
    errors = []
    for value, (name, low, high, names) in zip(fields, _FIELDS, strict=False):
        if value == "?" and name in ("day-of-month", "day-of-week"):
            continue
        if name == "day-of-month" and re.fullmatch(r"L(-\d+)?|LW|\d+W", value):
            continue
        if name == "day-of-week" and re.fullmatch(rf"(\d|{_DOW})(L|#[1-5])", value):
            continue
        if not _quartz_field_ok(value, low, high, names):
            errors.append(f"{name} {value!r}")
    if (fields[3] == "?") == (fields[5] == "?"):
        errors.append("exactly one of day-of-month and day-of-week must be '?'")
    return errors


@pytest.mark.parametrize(
    ("expression", "valid"),
    [
        ("0 15 * * * ?", True),
        ("0 0/30 * * * ?", True),
        ("0 30 3 ? * MON-FRI", True),
        ("0 0 12 1 JAN,JUL ? 2030", True),
        ("15 * * * *", False),  # unix cron: 5 fields
        ("0 15 * * * *", False),  # neither day field is '?'
        ("0 61 * * * ?", False),
        ("0 0 24 * * ?", False),
        ("0 0/0 * * * ?", False),
        ("0 0 * * * ? ? ?", False),
    ],
)
def test_quartz_cron_checker(expression: str, valid: bool) -> None:
    assert (quartz_cron_errors(expression) == []) is valid, quartz_cron_errors(expression)


# -------------------------------------------------------------------------------------------- bundle


def test_bundle_top_level() -> None:
    config = _config()
    assert config["bundle"]["name"] == "topiclake"
    # the wheel artifact is built from the repository root
    artifacts = config["artifacts"]
    wheels = [a for a in artifacts.values() if a.get("type") == "whl"]
    assert len(wheels) == 1, artifacts
    assert (BUNDLE / wheels[0]["path"]).resolve() == ROOT
    assert (ROOT / "pyproject.toml").exists()
    assert "wheel" in wheels[0]["build"], wheels[0]
    # the sync root contains the wheel's dist/ (outside the bundle directory)
    sync_roots = [(BUNDLE / p).resolve() for p in config.get("sync", {}).get("paths", [])]
    assert any((ROOT / "dist").is_relative_to(root) for root in sync_roots), sync_roots
    assert config["targets"]["dev"]["mode"] == "development"
    assert config["targets"]["prod"]["mode"] == "production"
    assert config["targets"]["dev"].get("default") is True


def test_every_resource_file_is_included() -> None:
    includes = _config()["include"]
    files = _resource_files()
    assert files, "no databricks/resources/*.yml"
    for path in files:
        relative = path.relative_to(BUNDLE).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in includes), f"{relative} not included"
    # and nothing else is included by accident
    for pattern in includes:
        assert list(BUNDLE.glob(pattern)), f"include {pattern} matches no file"


def test_every_variable_is_declared_and_has_a_value_in_every_target() -> None:
    config = _config()
    declared = set(config.get("variables") or {})
    used: set[str] = set()
    for path in [BUNDLE / "databricks.yml", *_resource_files()]:
        for text in _walk_strings(_load(path)):
            used.update(_VAR.findall(text))
    assert used - declared == set(), f"undeclared variables: {used - declared}"
    assert declared - used == set(), f"unused variables: {declared - used}"
    for target in TARGETS:
        overrides = set(config["targets"][target].get("variables") or {})
        assert overrides <= declared, f"{target} sets undeclared variables {overrides - declared}"
        values = _variable_values(target)
        missing = {name for name, value in values.items() if value is None}
        assert not missing, f"target {target} leaves {missing} without a value"
    # schedules fire in prod only
    assert _variable_values("dev")["pause_status"] == "PAUSED"
    assert _variable_values("prod")["pause_status"] == "UNPAUSED"
    # the topics of the maintenance jobs are a JSON list in every target
    for target in TARGETS:
        topics = json.loads(_variable_values(target)["topics"])
        assert isinstance(topics, list) and topics and all(isinstance(t, str) for t in topics)


def test_job_cluster_keeps_topic_tables_writable_by_delta_rs() -> None:
    from topiclake.jobs.session import DELTA_RS_COMPATIBLE_CONF

    cluster = _config()["variables"]["job_cluster"]["default"]
    spark_conf = {k: str(v) for k, v in cluster["spark_conf"].items()}
    for key, value in DELTA_RS_COMPATIBLE_CONF.items():
        assert spark_conf.get(key) == value, (
            f"job cluster spark_conf {key}={spark_conf.get(key)}, want {value}"
        )
    # dedicated access mode: the jobs use the classic SparkContext
    assert cluster["data_security_mode"] == "SINGLE_USER"


def test_one_job_per_entry_point_with_schedules_where_expected() -> None:
    by_entry_point: dict[str, list[str]] = {}
    for task in _tasks():
        entry = task.task["python_wheel_task"]["entry_point"]
        by_entry_point.setdefault(entry, []).append(task.job_key)
    assert set(by_entry_point) == EXPECTED_ENTRY_POINTS
    for key, (path, job) in _jobs().items():
        entries = {t.task["python_wheel_task"]["entry_point"] for t in _tasks() if t.job_key == key}
        if entries & SCHEDULED:
            schedule = job.get("schedule")
            assert schedule, f"{key} ({path.name}) has no schedule"
            errors = quartz_cron_errors(schedule["quartz_cron_expression"])
            assert errors == [], f"{key}: {schedule['quartz_cron_expression']!r}: {errors}"
            assert schedule["pause_status"] == "${var.pause_status}", key
            assert schedule.get("timezone_id"), key
        else:
            assert "schedule" not in job and "trigger" not in job, f"{key} runs on demand only"
            assert job.get("parameters"), f"{key} takes job parameters"


def test_every_task_runs_on_a_declared_job_cluster_with_the_wheel() -> None:
    for task in _tasks():
        clusters = {c["job_cluster_key"] for c in task.job.get("job_clusters") or []}
        assert task.task.get("job_cluster_key") in clusters, task.id
        libraries = [lib["whl"] for lib in task.task.get("libraries") or [] if "whl" in lib]
        assert libraries, f"{task.id} installs no wheel"
        # relative to the resource file: the artifact's dist/ in the repository root
        for whl in libraries:
            assert (BUNDLE / "resources" / whl).resolve().parent == ROOT / "dist", (task.id, whl)
        wheel_task = task.task["python_wheel_task"]
        assert wheel_task["package_name"] == "topiclake", task.id


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("task", _tasks(), ids=lambda t: t.id)
def test_task_entry_point_resolves_and_its_parameters_parse(task: Task, target: str) -> None:
    wheel_task = task.task["python_wheel_task"]
    entry_point = wheel_task["entry_point"]
    main = _resolve_entry_point(entry_point)
    module = importlib.import_module(main.__module__)
    assert callable(getattr(module, "parser", None)), f"{module.__name__} has no parser()"
    params = [_substitute(str(p), target, task.job, task.for_each_inputs) for p in wheel_task["parameters"]]
    try:
        args = module.parser().parse_args(params)
    except SystemExit as exc:  # argparse exits on bad arguments
        pytest.fail(f"{task.id} ({entry_point}) parameters {params} do not parse: exit {exc.code}")
    assert args.warehouse == _variable_values(target)["warehouse"]


def test_entry_points_are_installed_console_scripts() -> None:
    from importlib.metadata import entry_points

    installed = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    for name in EXPECTED_ENTRY_POINTS:
        assert installed.get(name) == _scripts()[name], f"{name}: reinstall (pip install -e .)"
