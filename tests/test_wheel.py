"""A wheel built by `pip install .` (not editable) carries the built-in catalog, schema and web UI and finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from .conftest import ROOT


def test_wheel_carries_and_finds_catalog(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, timeout=300)
    wheel = next(tmp_path.glob("mlx_service-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "service/_data/schemas/catalog.schema.json" in names
    assert "service/_data/catalog/families/qwen3.yaml" in names
    assert "service/_data/catalog/detection.yaml" in names
    assert {"service/ui/index.html", "service/ui/app.js", "service/ui/style.css"} <= set(names)  # the web UI
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    code = ("import service.catalog as c, service.catalog.paths as p; "
            "r = c.load_catalog([], cache=False); assert not r.problems, r.problems; "
            "print(p.builtin_catalog_dir()); print(len(r.catalog.entries()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(target)})
    assert proc.returncode == 0, proc.stderr
    where, count = proc.stdout.split()
    assert where == str(target / "service" / "_data" / "catalog")
    assert int(count) > 60
