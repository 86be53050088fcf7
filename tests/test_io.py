import errno

import pytest

from raptor.io import OutputError, atomic_dir, atomic_path, atomic_write_text


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
