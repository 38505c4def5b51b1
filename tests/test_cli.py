"""tools/catalog through a subprocess, as CI and authors run it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .conftest import ROOT, VALID_FAMILY

TOOL = [str(ROOT / "tools" / "catalog")]


def run(*args, env=None):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_lint_builtin_is_clean():
    proc = run("lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "0 problem(s)" in proc.stderr


def test_lint_reports_file_line_col_and_exits_1(write):
    path = write(VALID_FAMILY.replace("kind: text", "kind: txt"))
    proc = run("lint", str(path))
    assert proc.returncode == 1
    line = proc.stdout.strip().splitlines()[0]
    assert line.startswith(f"{path}:8:9: error[schema-enum]: 'txt' is not one of")
    assert line.endswith("(at $.family.kind)")
    assert "Traceback" not in proc.stdout + proc.stderr


def test_lint_json_format(write):
    path = write(b"\x00\x01garbage")
    proc = run("lint", "--format", "json", str(path))
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["problems"] == [{"file": str(path), "line": 1, "col": 1, "code": "binary-file",
                                 "message": "this is a binary file, not YAML text (NUL byte)", "json_path": "$"}]


def test_lint_no_builtin(write):
    proc = run("lint", "--no-builtin", str(write(VALID_FAMILY)))
    assert proc.returncode == 1  # `chatml` comes from the built-in prompt styles
    assert "unknown-prompt-style" in proc.stdout


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["lint", "--format", "xml"],
                                  ["estimate", "qwen3", "--context", "0"]])
def test_usage_errors_exit_2(args):
    proc = run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_list_json_and_table():
    proc = run("list", "--json")
    rows = json.loads(proc.stdout)
    assert any(r["name"] == "qwen3:8b-4bit" and r["source"] == "mlx-community/Qwen3-8B-4bit" for r in rows)
    table = run("list").stdout.splitlines()
    assert table[0].split() == ["NAME", "KIND", "PARAMS", "WEIGHTS", "SOURCE"]
    assert len(table) == len(rows) + 1


def test_show_resolved_entry():
    proc = run("show", "QWEN3:30b-a3b")
    data = json.loads(proc.stdout)
    assert data["name"] == "qwen3:30b-a3b-4bit"
    assert data["architecture"]["num_experts"] == 128
    assert data["prompt_style"]["thinking"] == {"start": "<think>", "end": "</think>"}


def test_show_unknown_suggests():
    proc = run("show", "qwen3:8bb")
    assert proc.returncode == 1
    assert "did you mean 'qwen3:8b'" in proc.stderr


def test_estimate_text_and_json():
    proc = run("estimate", "qwen3:8b", "--context", "32768", "--json")
    data = json.loads(proc.stdout)
    assert data["kv_cache"] == 2 * 36 * 8 * 128 * 2 * 32768
    assert data["total"] == data["weights"] + data["kv_cache"] + data["activations"]
    text = run("estimate", "qwen3:8b", "--parallel", "2").stdout
    assert "kv cache" in text and "2 x 40960 tokens" in text


def test_catalog_flag_and_env_layering(write):
    path = write(VALID_FAMILY)
    assert json.loads(run("show", "testfam", "--catalog", str(path)).stdout)["name"] == "testfam:1b-4bit"
    env = {"MLX_SERVICE_CATALOG_PATH": str(path)}
    assert json.loads(run("show", "testfam", env=env).stdout)["name"] == "testfam:1b-4bit"


def test_without_an_environment_one_line_says_to_run_make_setup(tmp_path):
    import shutil

    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "catalog", checkout / "tools" / "catalog")  # a fresh clone: no .venv
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    fake = bin_dir / "python3"  # a system python3 without the project's dependencies
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'ruamel'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    proc = subprocess.run(["/bin/sh", str(checkout / "tools" / "catalog"), "lint"], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_dir)})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "tools/catalog: no Python with MLX Service's dependencies here: run `make setup` first (it creates .venv)"]
