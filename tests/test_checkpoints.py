"""Our torch files are read safely: tensors and plain data only, our formats only, with a fallback
to the previous checkpoint when the latest one is truncated."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from raptor.runs import checkpoints
from raptor.config import ModelConfig
from raptor.agents.policy import Policy
from raptor.agents.base import load_model
from raptor.runs.checkpoints import MODEL_FORMAT, save_model

SMALL = ModelConfig(entity_dim=8, relation_dim=8, time_dim=2, step_dim=2, mlp_hidden_dim=8)


class _Payload:
    """Unpickling this creates a file: the stand-in for code a hostile model file would run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _model(tmp_path):
    pol = Policy(5, 2, SMALL, max_path_length=3)
    meta = {"num_entities": 5, "num_relations": 2, "model": SMALL.__dict__, "max_path_length": 3}
    save_model(tmp_path / "m.pt", pol, meta)
    return pol, meta


def test_our_model_round_trips(tmp_path):
    pol, _ = _model(tmp_path)
    loaded, meta = load_model(tmp_path / "m.pt")
    assert meta["num_entities"] == 5
    for (n, a), (_, b) in zip(pol.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), n


def test_a_file_carrying_code_is_refused_and_never_runs(tmp_path):
    pol, meta = _model(tmp_path)
    marker = tmp_path / "payload-ran"
    torch.save({"format": MODEL_FORMAT, "policy": pol.state_dict(), "meta": {**meta, "x": _Payload(marker)}},
               tmp_path / "evil.pt")
    with pytest.raises(checkpoints.UnsafeFileError, match=r"evil\.pt: refused: .*could run code") as info:
        load_model(tmp_path / "evil.pt")
    assert not marker.exists()
    # What was refused is said; torch's advice (weights_only=False, allowlisting the global), which is
    # what would run the payload, is not quoted; nor are terminal colour codes.
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'evil.pt'}: refused: ")
    assert "Unsupported global" in message or "unsupported GLOBAL" in message, message
    assert "open" in message, message
    for advice in ("weights_only", "Re-running", "False", "add_safe_globals", "safe_globals", "allowlist", "\x1b"):
        assert advice not in message, message
    assert "\n" not in message


def test_other_files_are_refused_with_clear_errors(tmp_path):
    torch.save({"format": "someone-else/v3", "weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(checkpoints.CheckpointError, match=r"other\.pt: not a RAPTOR model \(format 'someone-else/v3'"):
        load_model(tmp_path / "other.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(checkpoints.CheckpointError, match="format 'list'"):
        load_model(tmp_path / "list.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(checkpoints.CorruptFileError, match=r"text\.pt: not a readable RAPTOR model"):
        load_model(tmp_path / "text.pt")
    with pytest.raises(FileNotFoundError, match="RAPTOR model not found"):
        load_model(tmp_path / "missing.pt")


def test_the_latest_checkpoint_exists_at_every_moment_of_a_save(tmp_path, monkeypatch):
    """A writer killed just before the new checkpoint is renamed into place leaves the old one at its name
    (and as .prev), never only the .prev: `park` copies the latest, and a run parked without one started
    again from epoch 0 (CI, 2026-11-28)."""
    import os as _os

    path = tmp_path / "checkpoint.pt"
    checkpoints.save(path, {"format": "f", "epoch": 0}, keep_previous=True)
    real_replace = _os.replace

    def killed_before_the_last_rename(src, dst):
        if Path(dst) == path:
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(_os, "replace", killed_before_the_last_rename)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.save(path, {"format": "f", "epoch": 1}, keep_previous=True)
    monkeypatch.setattr(_os, "replace", real_replace)
    assert checkpoints.load(path, "f", "checkpoint")["epoch"] == 0
    assert checkpoints.load(checkpoints.previous(path), "f", "checkpoint")["epoch"] == 0
    checkpoints.save(path, {"format": "f", "epoch": 1}, keep_previous=True)
    checkpoints.save(path, {"format": "f", "epoch": 2}, keep_previous=True)
    assert checkpoints.load(path, "f", "checkpoint")["epoch"] == 2  # the link is a second name, not the same file
    assert checkpoints.load(checkpoints.previous(path), "f", "checkpoint")["epoch"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "checkpoint.pt.prev"]


def test_a_checkpoint_is_kept_as_previous_by_a_copy_where_links_fail(tmp_path, monkeypatch):
    import os as _os

    path = tmp_path / "checkpoint.pt"
    checkpoints.save(path, {"format": "f", "epoch": 0}, keep_previous=True)

    def no_links(*_a, **_k):
        raise OSError("links not supported")

    monkeypatch.setattr(_os, "link", no_links)
    checkpoints.save(path, {"format": "f", "epoch": 1}, keep_previous=True)
    assert checkpoints.load(path, "f", "checkpoint")["epoch"] == 1
    assert checkpoints.load(checkpoints.previous(path), "f", "checkpoint")["epoch"] == 0


def test_truncated_latest_checkpoint_falls_back_to_the_previous(tmp_path, caplog):
    path = tmp_path / "checkpoint.pt"
    checkpoints.save(path, {"format": "f", "epoch": 0}, keep_previous=True)
    checkpoints.save(path, {"format": "f", "epoch": 1}, keep_previous=True)
    assert checkpoints.load_latest(path, "f", "checkpoint")["epoch"] == 1
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with caplog.at_level("WARNING", logger="raptor"):
        assert checkpoints.load_latest(path, "f", "checkpoint")["epoch"] == 0
    assert "truncated or corrupted" in caplog.text and "falling back" in caplog.text
    checkpoints.previous(path).unlink()
    with pytest.raises(checkpoints.CorruptFileError, match="no previous checkpoint to fall back to: delete"):
        checkpoints.load_latest(path, "f", "checkpoint")
    assert checkpoints.load_latest(tmp_path / "none.pt", "f", "checkpoint") is None
