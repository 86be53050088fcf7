import errno
import os

import pytest

from raptor.common.io import OutputError, atomic_dir, atomic_path, atomic_write_text


def _ours(folder):
    """Every folder counts as a previous output of the writer (replacing it is allowed)."""
    return True


def test_a_full_disk_is_reported_naming_the_output_and_keeps_the_previous_one(tmp_path):
    out = tmp_path / "out"
    atomic_write_text(out / "a.txt", "old")
    with pytest.raises(OutputError, match=r"no room to write .*out .*previous out, if any, is intact"):
        with atomic_dir(out, _ours) as tmp:
            (tmp / "a.txt").write_text("new")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert (out / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary sibling left
    with pytest.raises(OutputError, match=r"a\.txt"):
        with atomic_path(out / "a.txt"):
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
    assert (out / "a.txt").read_text() == "old"
    # Other errors pass through as they are.
    with pytest.raises(PermissionError):
        with atomic_dir(out, _ours):
            raise PermissionError(errno.EACCES, "denied")


def test_leftovers_of_a_killed_writer_are_removed_by_the_next_write_and_a_running_ones_are_kept(tmp_path):
    """The reported defect: `.tmp-*` folders left by a kill were never cleaned up."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from raptor.common import io

    out = tmp_path / "out"
    host = getattr(io, "_HOST", "00000000")  # this machine in temporary names
    atomic_write_text(out / "a.txt", "old")
    # A writer killed with SIGKILL in the middle of writing the folder: its temporary stays.
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom raptor.common.io import atomic_dir\n"
        f"with atomic_dir({str(out)!r}, lambda d: True) as tmp:\n"
        "    (tmp / 'a.txt').write_text('half')\n    print('writing', flush=True)\n    time.sleep(600)\n")],
        stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")]
    assert len(left) == 1
    # ... and a writer of the same output that still runs (here: alive, sleeping), another machine's,
    # and one of unknown age (named before the process was in the name): all kept.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    running = tmp_path / f".out.tmp-{host}-{sleeper.pid}-0123abcd"
    elsewhere = tmp_path / f".out.tmp-ffffffff-{writer.pid}-0123abcd"
    unnamed_new, unnamed_old = tmp_path / ".out.tmp-0123abcd", tmp_path / ".out.old-89abcdef"
    for p in (running, elsewhere, unnamed_new, unnamed_old):
        p.mkdir()
    stale = time.time() - getattr(io, "LEGACY_TEMP_STALE_AFTER_S", 0) - 1
    os.utime(unnamed_old, (stale, stale))
    other = tmp_path / f".other.tmp-{host}-{writer.pid}-0123abcd"  # another output's: not ours to judge
    other.mkdir()
    try:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        with atomic_dir(out, _ours) as tmp:
            (tmp / "a.txt").write_text("new")
        assert (out / "a.txt").read_text() == "new"
        assert not left[0].exists() and not unnamed_old.exists()
        assert running.exists() and elsewhere.exists() and unnamed_new.exists() and other.exists()
        # Once the running writer is gone too, the next write of a file there removes its temporary.
        sleeper.kill()
        sleeper.wait()
        assert io.remove_stale_temps(out) == [running]
    finally:
        sleeper.kill()
        writer.kill()


def test_a_folder_is_replaced_only_when_empty_or_recognised_as_a_previous_output(tmp_path):
    """The audit's case: `--out` naming an input or a user's folder deleted it without a word."""
    user = tmp_path / "notes"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"notes holds files and is not a label table: nothing was written"):
        with atomic_dir(user, lambda d: (d / "summary.json").is_file(), "a label table") as tmp:
            (tmp / "summary.json").write_text("{}")
    assert [p.name for p in user.iterdir()] == ["notes.txt"] and (user / "notes.txt").read_text() == "mine"
    with pytest.raises(OutputError, match=r"holds files"):  # no predicate: nothing non-empty is replaced
        with atomic_dir(user):
            pass
    a_file = tmp_path / "graph.npz"
    a_file.write_text("x")
    with pytest.raises(OutputError, match=r"graph\.npz exists and is not a folder"):
        with atomic_dir(a_file, _ours):
            pass
    assert a_file.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.npz", "notes"]  # no temporary, no .old
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic_dir(empty) as tmp:  # an empty folder is free to take
        (tmp / "a.txt").write_text("new")
    assert (empty / "a.txt").read_text() == "new"
    with atomic_dir(user, lambda d: (d / "notes.txt").is_file()) as tmp:  # recognised: replaced whole
        (tmp / "b.txt").write_text("new")
    assert [p.name for p in user.iterdir()] == ["b.txt"]


def test_an_output_that_could_not_be_written_is_refused_before_the_work(tmp_path, monkeypatch):
    """check_writable probes the nearest existing folder: a file on the way, or a folder where no file can
    be created, is one OutputError naming the output; a writable place is left as it was."""
    from raptor.common import io

    a_file = tmp_path / "train.txt"
    a_file.write_text("x")
    with pytest.raises(OutputError, match=r"cannot write .*train\.txt/eval/seed0: .*train\.txt is a file"):
        io.check_writable(a_file / "eval" / "seed0")
    io.check_writable(tmp_path / "new" / "eval")  # absent folders are fine: nothing is created
    io.check_writable(a_file)  # an existing file: its writer replaces or refuses it
    with pytest.raises(OutputError, match=r"cannot write .*train\.txt: .*train\.txt is a file, not a folder"):
        io.check_writable(a_file, folder=True)  # ... unless a folder is to be written there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.txt"]

    def read_only(**kwargs):  # a read-only mount (chmod does not stop root, who runs CI here)
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), kwargs["dir"])

    monkeypatch.setattr(io.tempfile, "mkstemp", lambda **kw: read_only(**kw))
    with pytest.raises(OutputError, match=r"cannot write .*/ro/out: Read-only file system \(.*\)$"):
        io.check_writable(tmp_path / "ro" / "out")


def test_an_output_that_cannot_be_written_is_one_error_naming_it(tmp_path):
    """A file where a folder is needed (or a read-only folder) was a raw traceback naming a temporary."""
    parent = tmp_path / "train.txt"
    parent.write_text("x")
    with pytest.raises(OutputError, match=r"cannot write .*train\.txt/out: .*nothing was replaced"):
        with atomic_dir(parent / "out") as tmp:
            (tmp / "a.txt").write_text("new")
    with pytest.raises(OutputError, match=r"cannot write .*train\.txt/m\.json"):
        atomic_write_text(parent / "m.json", "{}")
    # An error about another file (an input read while writing) is not the output's.
    with pytest.raises(PermissionError) as info:
        with atomic_dir(tmp_path / "out2"):
            raise PermissionError(errno.EACCES, "denied", str(tmp_path / "input.txt"))
    assert not isinstance(info.value, OutputError)
    assert not (tmp_path / "out2").exists()
