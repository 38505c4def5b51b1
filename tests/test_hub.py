"""Pulling from a local fake Hub: resume, verification, faults, sharing, and the CLI and HTTP surfaces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from service.hub import store
from service.hub.pull import Gated, Offline, PullCancelled, Puller, PullError
from service.hub.untrusted import TamperedListing
from service.locate import is_complete

from .conftest import ROOT
from .fakehub import FakeHub, Repo

BIG = os.urandom(4_000_000)


@pytest.fixture
def hub():
    with FakeHub() as fake:
        fake.repos["org/model"] = Repo({"config.json": b'{"model_type": "llama", "architectures": '
                                                       b'["LlamaForCausalLM"]}',
                                        "model.safetensors": BIG, "tokenizer.json": b"{}", "notes.md": b"x"})
        yield fake


@pytest.fixture
def puller(hub, tmp_path):
    return Puller(cache_dir=tmp_path / "hub", endpoint=hub.url, offline=False, backoff=0.01, stall_timeout=0.5)


def test_pull_fetches_loader_files_into_the_hf_layout(hub, puller):
    plan = puller.plan("org/model")
    assert sorted(f.path for f in plan.files) == ["config.json", "model.safetensors", "tokenizer.json"]
    events = []
    snap = puller.pull(plan, events.append)
    assert snap == puller.cache_dir / "models--org--model" / "snapshots" / plan.sha
    assert (snap / "model.safetensors").read_bytes() == BIG and is_complete(snap)
    assert (snap.parent.parent / "refs" / "main").read_text() == plan.sha
    assert [e["status"] for e in events][:1] == ["pulling manifest"] and events[-1]["status"] == "success"
    assert all(e["total"] == plan.total for e in events) and events[-1]["completed"] == plan.total
    again = []
    puller.pull(plan, again.append)  # nothing is fetched twice
    assert hub.bytes_sent["model.safetensors"] == len(BIG)


def test_dropped_connection_resumes_with_range(hub, puller):
    hub.faults.drop_after["model.safetensors"] = 2_000_000
    snap = puller.pull(puller.plan("org/model"))
    assert (snap / "model.safetensors").read_bytes() == BIG
    assert hub.bytes_sent["model.safetensors"] < len(BIG) * 1.1


def test_interrupted_pull_resumes_and_never_looks_complete(hub, puller):
    plan = puller.plan("org/model")
    cancel = threading.Event()

    def stop_halfway(event):
        if event.get("file_completed", 0) >= len(BIG) // 2:
            cancel.set()

    with pytest.raises(PullCancelled):
        puller.pull(plan, stop_halfway, cancel)
    sent_before = hub.bytes_sent["model.safetensors"]
    snapshots = puller.cache_dir / "models--org--model" / "snapshots"
    assert not (snapshots / plan.sha).exists()  # nothing a loader would take for a finished model
    partial = list((puller.cache_dir / "models--org--model" / "blobs").glob("*.mlx-partial"))
    had = partial[0].stat().st_size
    assert had >= len(BIG) // 2
    puller.pull(plan)
    refetched = hub.bytes_sent["model.safetensors"] - sent_before
    assert refetched <= len(BIG) - had + 0.1 * had  # less than 10% of what it already had is fetched again


def test_corrupt_bytes_are_rejected_and_removed(hub, puller):
    hub.faults.corrupt.add("model.safetensors")
    with pytest.raises(PullError) as err:
        puller.pull(puller.plan("org/model"))
    assert "checksum" in err.value.message
    folder = puller.cache_dir / "models--org--model"
    assert not (folder / "snapshots").exists() or not any((folder / "snapshots").iterdir())
    assert not list((folder / "blobs").glob("*.mlx-partial"))


@pytest.mark.parametrize(("setup", "exc", "needle"), [
    (lambda h: None, None, None),
    (lambda h: h.repos.pop("org/model"), "NotFound", "not found on the Hub"),
    (lambda h: setattr(h.repos["org/model"], "gated", 401), Gated, "HF_TOKEN"),
    (lambda h: setattr(h.repos["org/model"], "gated", 403), Gated, "accept its license"),
])
def test_hub_errors_say_what_to_do(hub, puller, setup, exc, needle):
    setup(hub)
    assert not (puller.cache_dir / "models--org--model").exists()
    if exc is None:
        with pytest.raises(Exception) as err:
            puller.plan("org/model", revision="no-such-branch")
        assert "no revision" in str(err.value)
        return
    with pytest.raises(Exception) as err:
        puller.plan("org/model")
    assert needle in str(err.value) and (exc == "NotFound" or isinstance(err.value, exc))
    if isinstance(err.value, Gated):
        assert f"{hub.url}/org/model" in str(err.value)


def test_file_missing_on_the_hub_leaves_no_model(hub, puller):
    hub.faults.missing.add("tokenizer.json")
    with pytest.raises(PullError) as err:
        puller.pull(puller.plan("org/model"))
    assert "tokenizer.json" in err.value.message and "404" in err.value.message
    assert not (puller.cache_dir / "models--org--model" / "snapshots").exists()


def test_stall_is_retried(hub, puller):
    hub.faults.stall["model.safetensors"] = 1.5
    snap = puller.pull(puller.plan("org/model"))
    assert (snap / "model.safetensors").read_bytes() == BIG


def test_not_enough_disk(hub, puller, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(PullError) as err:
        puller.pull(puller.plan("org/model"))
    assert "not enough disk space" in err.value.message and "1,000 free" in err.value.message
    assert "model.safetensors" not in hub.bytes_sent


def test_concurrent_pulls_share_one_download(hub, puller):
    plan = puller.plan("org/model")
    threads = [threading.Thread(target=puller.pull, args=(plan,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert hub.bytes_sent["model.safetensors"] == len(BIG)


def test_offline_says_so(tmp_path):
    with pytest.raises(Offline) as err:
        Puller(cache_dir=tmp_path, endpoint="http://127.0.0.1:9", offline=True).plan("org/model")
    assert "offline" in err.value.message


# ---- through the server and the CLI, with a real (generated) checkpoint -----------------------------------
@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    from service.catalog import load_catalog
    from service.recipes import build_checkpoint

    catalog = load_catalog([ROOT / "tests" / "catalog"]).raise_for_problems()
    entry = catalog.resolve("tiny")
    path = build_checkpoint(entry, catalog.prompt_style(entry), tmp_path_factory.mktemp("src") / "tiny")
    return {p.name: p.read_bytes() for p in path.iterdir()}


def test_pull_over_http_then_serve_and_delete(models_dir, tiny_files, tmp_path):
    from huggingface_hub import constants

    from .server import Server

    with FakeHub() as fake:
        fake.repos["org/tiny-mlx"] = Repo(dict(tiny_files))
        store.use_puller(Puller(cache_dir=Path(constants.HF_HUB_CACHE), endpoint=fake.url, offline=False))
        try:
            with Server(models_dir) as srv:
                with httpx.stream("POST", srv.url + "/api/pull", json={"model": "org/tiny-mlx"}) as r:
                    lines = [json.loads(line) for line in r.iter_lines() if line]
                statuses = [line["status"] for line in lines]
                assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
                assert "verifying sha256 digest" in statuses
                per_file = [line for line in lines if "digest" in line]
                assert per_file and all({"total", "completed", "overall_total"} <= set(line) for line in per_file)
                assert lines[-1]["overall_completed"] == lines[-1]["overall_total"] > 0
                names = [m["name"] for m in httpx.get(srv.url + "/api/tags").json()["models"]]
                assert "org/tiny-mlx" in names
                reply = httpx.post(srv.url + "/v1/chat/completions", json={
                    "model": "org/tiny-mlx", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
                assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
                httpx.post(srv.url + "/v1/models/org/tiny-mlx/unload")
                r = httpx.request("DELETE", srv.url + "/api/delete", json={"model": "org/tiny-mlx"})
                assert r.status_code == 200
                assert "org/tiny-mlx" not in [m["name"] for m in httpx.get(srv.url + "/api/tags").json()["models"]]
                r = httpx.request("DELETE", srv.url + "/api/delete", json={"model": "org/tiny-mlx"})
                assert r.status_code == 404 and "error" in r.json()
                fake.repos["org/bad"] = Repo(dict(tiny_files))
                fake.faults.corrupt.add("model.safetensors")
                with httpx.stream("POST", srv.url + "/api/pull", json={"model": "org/bad"}) as r:
                    lines = [json.loads(line) for line in r.iter_lines() if line]
                assert r.status_code == 200 and "checksum" in lines[-1]["error"]
                fake.faults.corrupt.clear()
                r = httpx.post(srv.url + "/api/pull", json={"model": "org/bad", "stream": False})
                assert r.status_code == 200 and r.json() == {"status": "success"}
                r = httpx.post(srv.url + "/api/pull", json={"model": "org/nothing-here"})
                assert r.status_code == 404 and "not found on the Hub" in r.json()["error"]
        finally:
            store.use_puller(None)


def test_cli_pull_list_rm(tiny_files, tmp_path):
    with FakeHub() as fake:
        fake.repos["org/tiny-mlx"] = Repo(dict(tiny_files))
        env = {**os.environ, "HF_ENDPOINT": fake.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
               "MLX_SERVICE_MODELS_DIR": str(tmp_path / "models")}

        def cli(*args):
            return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True,
                                  env=env, timeout=120)

        pulled = cli("pull", "org/tiny-mlx")
        assert pulled.returncode == 0, pulled.stderr
        assert Path(pulled.stdout.strip()).is_dir() and "success" in pulled.stderr
        listed = cli("list")
        assert "org/tiny-mlx" in listed.stdout
        shown = json.loads(cli("show", "org/tiny-mlx").stdout)
        assert shown["mlx_service"]["downloaded"] is True
        assert cli("rm", "org/tiny-mlx").returncode == 0
        assert "org/tiny-mlx" not in cli("list").stdout
        offline = subprocess.run([sys.executable, "-m", "service.cli", "pull", "org/tiny-mlx"], capture_output=True,
                                 text=True, env={**env, "HF_HUB_OFFLINE": "1"}, timeout=120)
        assert offline.returncode == 1 and "offline" in offline.stderr


def _catalog_tool(*args, env):
    return subprocess.run([str(ROOT / "tools" / "catalog"), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_verify_online_and_scaffold_from_hub(tiny_files, tmp_path):
    with FakeHub() as fake:
        fake.repos["org/tiny-mlx"] = Repo(dict(tiny_files))
        env = {**os.environ, "HF_ENDPOINT": fake.url, "HF_HUB_OFFLINE": "0"}
        out = tmp_path / "tiny.yaml"
        made = _catalog_tool("scaffold", "--from-hub", "org/tiny-mlx", "--family", "hubtiny", "-o", str(out), env=env)
        assert made.returncode == 0, made.stderr
        assert "model.safetensors" not in fake.bytes_sent or fake.bytes_sent["model.safetensors"] < 4096
        assert _catalog_tool("lint", str(out), env=env).returncode == 0
        ok = _catalog_tool("verify", "--online", "hubtiny", "--catalog", str(out), env=env)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        out.write_text(out.read_text().replace("hidden_size: 64", "hidden_size: 96"))
        bad = _catalog_tool("verify", "--online", "hubtiny", "--catalog", str(out), env=env)
        assert bad.returncode == 1
        line = bad.stdout.strip().splitlines()[0]
        assert line.startswith(f"{out}:") and "error[verify-config]" in line and "hidden_size=64" in line
        out.write_text(out.read_text().replace("org/tiny-mlx", "org/gone"))
        gone = _catalog_tool("verify", "--online", "hubtiny", "--catalog", str(out), env=env)
        assert gone.returncode == 1 and "error[verify-repo]" in gone.stdout and "not found" in gone.stdout


def test_ctrl_c_cancels_cleanly_and_offline_still_lists(tiny_files, tmp_path):
    import signal
    import time

    with FakeHub() as fake:
        fake.repos["org/slow"] = Repo({**tiny_files, "model.safetensors": BIG})
        fake.repos["org/tiny-mlx"] = Repo(dict(tiny_files))
        fake.faults.stall["model.safetensors"] = 30
        env = {**os.environ, "HF_ENDPOINT": fake.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
               "MLX_SERVICE_MODELS_DIR": str(tmp_path / "models")}
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "pull", "org/slow"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while fake.bytes_sent.get("model.safetensors", 0) < len(BIG) // 4 and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "run it again to resume" in err and "Traceback" not in err
        folder = tmp_path / "hf" / "hub" / "models--org--slow"
        assert list((folder / "blobs").glob("*.mlx-partial")) and not (folder / "snapshots").exists()
        fake.faults.stall.clear()
        pulled = subprocess.run([sys.executable, "-m", "service.cli", "pull", "org/tiny-mlx"], env=env,
                                capture_output=True, text=True, timeout=120)
        assert pulled.returncode == 0
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    listed = subprocess.run([sys.executable, "-m", "service.cli", "list"], env=offline, capture_output=True,
                            text=True, timeout=120)
    assert "org/tiny-mlx" in listed.stdout and "org/slow" not in listed.stdout


def test_cli_ps_talks_to_a_running_server(server):
    httpx.post(server.url + "/api/generate", json={"model": "tiny", "prompt": ""})
    env = {**os.environ, "MLX_SERVICE_PORT": str(server.settings.port)}
    out = subprocess.run([sys.executable, "-m", "service.cli", "ps"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "tiny:s-f32" in out.stdout


# ---- a hostile mirror --------------------------------------------------------------------------------------
def _outside(tmp_path: Path) -> Path:
    victim = tmp_path / "outside"
    victim.mkdir(exist_ok=True)
    (victim / "precious.txt").write_text("user data")
    return victim


def _retarget(entries: list, name: str, **changes) -> list:
    return [{**e, **changes} if e["path"] == name else e for e in entries]


@pytest.mark.parametrize("tamper", [
    lambda t, out: _retarget(t, "tokenizer.json", path="../../../../outside/evil.json"),
    lambda t, out: _retarget(t, "tokenizer.json", path=str(out / "evil.json")),
    lambda t, out: _retarget(t, "tokenizer.json", path="a/../../b.json"),
    lambda t, out: _retarget(t, "tokenizer.json", path="C:/evil.json"),
    lambda t, out: _retarget(t, "tokenizer.json", path="nul\0.json"),
    lambda t, out: _retarget(t, "tokenizer.json", oid="../../../outside/x"),
    lambda t, out: _retarget(t, "tokenizer.json", oid=str(out / "precious.txt")),
    lambda t, out: _retarget(t, "model.safetensors", lfs={"oid": "../" * 8 + "outside/x", "size": 1}),
    lambda t, out: _retarget(t, "tokenizer.json", size=-5),
    lambda t, out: _retarget(t, "tokenizer.json", size="12"),
    lambda t, out: _retarget(t, "tokenizer.json", size=10**30),
    lambda t, out: t + ["not an entry"],
    lambda t, out: {"files": t},
])
def test_a_hostile_listing_is_refused_before_anything_is_written(hub, puller, tmp_path, tamper):
    out = _outside(tmp_path)
    hub.faults.tree = lambda entries: tamper(entries, out)
    with pytest.raises(TamperedListing) as err:
        puller.pull(puller.plan("org/model"))
    assert err.value.status == 502 and "org/model" in err.value.message and str(tmp_path) not in err.value.message
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]
    assert not (puller.cache_dir / "models--org--model" / "snapshots").exists()
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.mlx-lock"))


@pytest.mark.parametrize("sha", ["../../../outside/snap", "/tmp/snap", "ABC", "0" * 39, 12, None])
def test_a_hostile_commit_sha_is_refused(hub, puller, tmp_path, sha):
    out = _outside(tmp_path)
    hub.faults.info = lambda info: {**info, "sha": sha}
    with pytest.raises(TamperedListing, match="40-hex"):
        puller.plan("org/model")
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]


@pytest.mark.parametrize("repo, revision", [("../etc", None), ("org/model", "../../../outside/ref"),
                                            ("org/model", "/abs"), ("org/..", None)])
def test_repo_ids_and_revisions_cannot_name_paths(puller, repo, revision):
    with pytest.raises(TamperedListing, match="invalid"):
        puller.plan(repo, revision)


def test_a_body_longer_than_its_listed_size_stops_at_the_size(hub, puller):
    hub.faults.extra["tokenizer.json"] = b"x" * 100_000
    snap = puller.pull(puller.plan("org/model"))
    assert (snap / "tokenizer.json").read_bytes() == b"{}"


def test_listing_pages_cannot_continue_on_another_server(hub, puller, monkeypatch):
    from huggingface_hub.utils import httpx as hub_httpx

    monkeypatch.setattr(hub_httpx.Response, "links", property(lambda self: {"next": {"url": "http://evil/x"}}))
    with pytest.raises(TamperedListing, match="another server"):
        puller.plan("org/model")


def test_delete_unloads_first_follows_no_link_and_keeps_generated_folders_private(tmp_path):
    from .server import Server

    outside = tmp_path / "elsewhere" / "ckpt"
    outside.mkdir(parents=True)
    (outside / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (outside / "model.safetensors").write_bytes(b"weights")
    models = tmp_path / "models"
    models.mkdir()
    (models / "linked").symlink_to(outside, target_is_directory=True)
    with Server(models) as srv:
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert httpx.post(srv.url + "/v1/chat/completions", json=chat, timeout=60).status_code == 200
        folder = srv.manager.resolve("tiny").path
        assert httpx.request("DELETE", srv.url + "/api/delete", json={"model": "generated/tiny-s-f32"}).status_code \
            == 404  # the recipe builds are reached through their catalog names only
        r = httpx.request("DELETE", srv.url + "/api/delete", json={"model": " TINY "})
        assert r.status_code == 200 and not folder.exists() and not srv.manager.models  # unloaded, then deleted
        assert httpx.request("DELETE", srv.url + "/api/delete", json={"model": "linked"}).status_code == 200
        assert not (models / "linked").exists() and (outside / "model.safetensors").read_bytes() == b"weights"
        assert httpx.post(srv.url + "/v1/chat/completions", json=chat, timeout=60).status_code == 200  # rebuilt


def test_deleting_a_snapshot_never_deletes_what_a_link_in_it_points_to_outside(hub, puller, tmp_path, monkeypatch):
    """A snapshot written by a tampered pull of an older version may link outside the cache; with another
    revision still there, huggingface_hub deletes a removed revision's blobs one by one, following that link.
    Deleting the model removes the link, not the file it points to."""
    from service.config import load_settings

    hub.repos["org/model"].branches.update({"v2": "f" * 40, "f" * 40: "f" * 40})  # a second commit
    puller.pull(puller.plan("org/model"))
    other = puller.pull(puller.plan("org/model", "v2"))
    victim = _outside(tmp_path) / "precious.txt"
    (other / "evil.json").symlink_to(victim)
    monkeypatch.setattr(store, "_PULLER", puller)
    store.remove(load_settings(models_dir=str(tmp_path / "models")), other)
    assert not other.exists() and victim.read_text() == "user data"
