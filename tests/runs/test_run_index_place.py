"""Where the runs index is kept, and what its stamps see: beside the runs on a local filesystem, this host's own
file in a local cache folder on a network one (the filesystem type passed in), and an edit in place whose
modification time was put back is read again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import gaccum_core.runs.index_place as place
from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import run_table
from gaccum_core.runs.store import RunStore

TINY = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=3)
SHARED = ["nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "fuse.sshfs", "beegfs", "ceph", "glusterfs"]
LOCAL = ["ext4", "xfs", "btrfs", "tmpfs", "zfs", "overlay", "fuse.fuse-overlayfs", ""]


@pytest.mark.parametrize("fstype", SHARED)
def test_on_a_network_filesystem_each_host_keeps_its_own_index_in_its_cache(fstype, tmp_path):
    root, cache = Path("/shared/team/runs"), tmp_path / "cache"
    here = place.index_file(root, fstype, "node-a", cache)
    assert here.name == "node-a.sqlite" and here.parent.parent == cache / "runs-index"
    assert root not in here.parents and here.parent.name.startswith("runs-")
    assert place.index_file(root, fstype, "node-a", cache) == here  # the same file at every listing
    assert place.index_file(root, fstype, "node-b", cache).parent == here.parent  # another host: its own file
    assert place.index_file(root, fstype, "node-b", cache) != here
    assert place.index_file(Path("/shared/other/runs"), fstype, "node-a", cache).parent != here.parent


@pytest.mark.parametrize("fstype", LOCAL)
def test_on_a_local_filesystem_the_index_stays_beside_the_runs(fstype, tmp_path):
    root = Path("/data/runs")
    assert place.index_file(root, fstype, "node-a", tmp_path) == root / ".index.sqlite"


MOUNTINFO = r"""22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:50 / /shared rw,relatime shared:9 - nfs4 filer:/export rw,vers=4.2
41 22 0:51 / /sharedlocal rw,relatime - xfs /dev/sdb1 rw
42 40 0:52 / /shared/scratch\040space rw,relatime - lustre 10.0.0.1@tcp:/fs rw
43 22 0:53 / /home/me/mnt rw,nosuid - fuse.sshfs me@host:/runs rw
"""


@pytest.mark.parametrize("path,expected", [
    ("/shared/runs", "nfs4"), ("/shared", "nfs4"), ("/sharedlocal/runs", "xfs"),
    ("/shared/scratch space/runs", "lustre"), ("/home/me/mnt/runs", "fuse.sshfs"), ("/home/me/runs", "ext4"),
    ("/", "ext4")])
def test_the_filesystem_type_is_that_of_the_longest_mount_point_above_the_path(path, expected):
    assert place.fs_type(Path(path), MOUNTINFO) == expected


def test_without_a_mount_table_the_type_is_unknown_and_the_index_stays_beside(monkeypatch, tmp_path):
    monkeypatch.setattr(place, "MOUNTINFO", tmp_path / "no-such-file")
    assert place.fs_type(tmp_path) == "" and not place.is_network("")


@pytest.fixture
def shared_runs(tmp_path, monkeypatch, restarted) -> RunStore:
    """A runs directory this process takes for an NFS mount, with two runs, and this host's cache folder."""
    store = RunStore(tmp_path / "runs")
    store.root.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = place.fs_type
    monkeypatch.setattr(place, "fs_type", lambda path, mountinfo=None: "nfs4" if store.root.resolve() in
                        (path, *path.parents) else real(path, mountinfo))
    place._this_host_index.cache_clear()
    for name in ("a", "b"):
        store.create(TINY, name=name)
    yield store
    place._this_host_index.cache_clear()


def test_a_runs_directory_on_a_network_filesystem_is_indexed_in_this_hosts_cache(shared_runs, tmp_path, restarted):
    old = shared_runs.root / ".index.sqlite"
    old.write_bytes(b"an index another version wrote here\n")  # left alone: never opened, never replaced
    first = run_table(shared_runs)
    assert len(first) == 2
    (index_file,) = (tmp_path / "cache").rglob("*.sqlite")
    assert index_file.parent.parent == tmp_path / "cache" / "gaccum" / "runs-index"
    assert sorted(p.name for p in shared_runs.root.iterdir() if p.name.startswith(".")) == [".index.sqlite"]
    assert old.read_bytes() == b"an index another version wrote here\n"
    assert str(index_file) in place.describe(shared_runs.root) and "nfs4" in place.describe(shared_runs.root)
    restarted()
    assert run_table(shared_runs).equals(first)


def _tick_past(path: Path) -> None:
    """Wait until the filesystem's clock (coarse: a kernel tick) has moved past path's last change."""
    probe = path.with_name(".tick")
    for _ in range(1000):
        probe.write_bytes(b"")
        if probe.stat().st_ctime_ns > path.stat().st_ctime_ns:
            break
        time.sleep(0.002)
    probe.unlink()


def test_a_same_size_edit_with_its_mtime_put_back_is_read_again(tmp_path, restarted):
    store = RunStore(tmp_path)
    run_id = store.create(TINY, name="edited")
    store.update_status(run_id, state="stopped", message="before")
    assert run_table(store).loc[0, "message"] == "before"
    status = store.path(run_id) / "status.json"
    before = status.stat()
    _tick_past(status)
    with status.open("r+b") as f:  # in place: the same inode and size
        text = f.read()
        f.seek(0)
        f.write(text.replace(b'"before"', b'"after!"'))
    os.utime(status, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = status.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert run_table(store).loc[0, "message"] == "after!"  # this process
    restarted()
    assert run_table(store).loc[0, "message"] == "after!"  # a server restarted


def test_doctor_and_the_home_page_say_where_the_index_is(shared_runs, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from gaccum_core.cli.doctor import doctor_report

    where = place.describe(shared_runs.root)
    assert f"runs index    {where}" in doctor_report("cpu", check_compile=False, runs_dir=str(shared_runs.root))
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(shared_runs.root))
    home = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=60).run()
    assert not home.exception
    (line,) = [c.value for c in home.caption if c.value.startswith("Runs index")]
    assert str(place.this_host_index(shared_runs.root)[0]) in line.replace("\\", "") and "nfs4" in line
