import errno

import pytest

from raptor.common.io import OutputError, atomic_dir, atomic_path, atomic_write_text


def test_a_full_disk_is_reported_naming_the_output_and_keeps_the_previous_one(tmp_path):
    out = tmp_path / "out"
    atomic_write_text(out / "a.txt", "old")
    with pytest.raises(OutputError, match=r"no room to write .*out .*previous out, if any, is intact"):
        with atomic_dir(out) as tmp:
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
        with atomic_dir(out):
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
        f"with atomic_dir({str(out)!r}) as tmp:\n"
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
        with atomic_dir(out) as tmp:
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
