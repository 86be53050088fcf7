import json
import tarfile

import numpy as np
import pytest

from raptor.data import load_dataset
from raptor.ingest import IngestError, infer_time_step, ingest, ingest_from_url
from raptor.io import sha256_file

from conftest import TINY_SPLITS, write_raw_dataset


def test_ingest_roundtrip_days(tiny_raw, tmp_path):
    res = ingest(tiny_raw, tmp_path / "out")
    assert res.counts == {"train": 4, "valid": 2, "test": 2}
    ds = load_dataset(tmp_path / "out")
    assert ds.splits["train"].dtype == np.int32
    # Raw days 1..6 -> 0..5, step 1.
    assert ds.meta["time_offset"] == 1 and ds.meta["time_step"] == 1
    assert ds.splits["train"][:, 3].min() == 0
    expected = np.array(TINY_SPLITS["test"]) - np.array([0, 0, 0, 1])
    np.testing.assert_array_equal(ds.splits["test"], expected)
    assert ds.entity_names[0] == "Barack Obama" and ds.relation_names[2] == "Host a visit"
    assert set(ds.meta["sha256"]) == {"train.txt", "valid.txt", "test.txt", "entity2id.txt", "relation2id.txt"}
    assert ds.meta["sha256"]["train.txt"] == sha256_file(tiny_raw / "train.txt")


def test_ingest_hours_crlf_and_fifth_column(tmp_path):
    # ICEWS18-like: hours in steps of 24, CRLF endings, names with spaces, a 5th column.
    raw = write_raw_dataset(tmp_path / "raw", time_scale=24, crlf=True, extra_column=True)
    ingest(raw, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert ds.meta["time_step"] == 24 and ds.meta["time_offset"] == 24
    all_t = ds.all_quadruples()[:, 3]
    assert all_t.min() == 0 and all_t.max() == 5
    # The original value is recoverable from meta.json.
    raw_t = all_t * ds.meta["time_step"] + ds.meta["time_offset"]
    assert sorted(set(raw_t.tolist())) == [24 * d for d in range(1, 7)]
    assert ds.entity_names[4] == "United Nations"  # no trailing \r


def test_explicit_time_step_must_divide(tiny_raw, tmp_path):
    with pytest.raises(IngestError, match="not a multiple of time_step 2"):
        ingest(tiny_raw, tmp_path / "out", time_step=2)
    assert not (tmp_path / "out").exists()


def test_infer_time_step():
    assert infer_time_step(np.array([0, 24, 72])) == 24
    assert infer_time_step(np.array([5, 5])) == 1
    assert infer_time_step(np.array([1, 2, 365])) == 1


def _assert_refused(raw, out, match):
    with pytest.raises(IngestError, match=match):
        ingest(raw, out)
    assert not out.exists(), "a refused ingest must not write anything"
    assert not any(p.name.startswith(f".{out.name}.tmp") for p in out.parent.iterdir())


def test_refuses_non_integer_field(tiny_raw, tmp_path):
    lines = (tiny_raw / "valid.txt").read_text().splitlines()
    lines[1] = "3\tzero\t4\t4"
    (tiny_raw / "valid.txt").write_text("\n".join(lines) + "\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"valid\.txt, line 2: relation 'zero' is not an integer")


def test_refuses_wrong_field_count(tiny_raw, tmp_path):
    (tiny_raw / "test.txt").write_text("4\t1\t0\t5\n1\t2\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"test\.txt, line 2: expected 4 or 5 tab-separated fields")


def test_refuses_unknown_entity_id(tiny_raw, tmp_path):
    (tiny_raw / "train.txt").write_text("0\t0\t1\t1\n1\t1\t9\t2\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"train\.txt, line 2: object id 9 is not in entity2id\.txt")


def test_refuses_unknown_relation_id(tiny_raw, tmp_path):
    (tiny_raw / "train.txt").write_text("0\t7\t1\t1\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"train\.txt, line 1: relation id 7 is not in relation2id\.txt")


def test_refuses_missing_train_split_and_says_where_to_get_it(tiny_raw, tmp_path):
    (tiny_raw / "train.txt").unlink()
    _assert_refused(tiny_raw, tmp_path / "out", r"missing train\.txt .*RE-GCN")
    with pytest.raises(IngestError) as err:
        ingest(tiny_raw, tmp_path / "out")
    assert "ICEWS05-15" not in str(err.value)  # all three datasets are complete now: no special case


def test_refuses_missing_dictionary(tiny_raw, tmp_path):
    (tiny_raw / "relation2id.txt").unlink()
    _assert_refused(tiny_raw, tmp_path / "out", r"missing relation2id\.txt")


def test_refuses_wrong_temporal_order(tmp_path):
    splits = dict(TINY_SPLITS)
    splits["valid"] = [(3, 0, 4, 4), (0, 0, 2, 2)]  # day 2 < latest train day 3
    raw = write_raw_dataset(tmp_path / "raw", splits=splits)
    _assert_refused(raw, tmp_path / "out", r"valid\.txt, line 2: timestamp 2 is earlier than the latest train")


def test_refuses_bad_dictionary(tiny_raw, tmp_path):
    (tiny_raw / "entity2id.txt").write_text("A\t0\nB\t0\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"entity2id\.txt, line 2: duplicate entity id 0")
    (tiny_raw / "entity2id.txt").write_text("A\t0\nB\tx\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"entity2id\.txt, line 2: entity id 'x' is not an integer")


def test_refused_ingest_keeps_previous_output(tiny_raw, tmp_path):
    out = tmp_path / "out"
    ingest(tiny_raw, out)
    before = (out / "meta.json").read_text()
    (tiny_raw / "test.txt").write_text("oops\n")
    with pytest.raises(IngestError):
        ingest(tiny_raw, out)
    assert (out / "meta.json").read_text() == before


def test_checksum_mismatch_is_refused(tiny_raw, tmp_path):
    sums = tiny_raw / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  train.txt\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"train\.txt: SHA-256 .* does not match")
    sums.write_text(f"{sha256_file(tiny_raw / 'train.txt')}  train.txt\n")
    ingest(tiny_raw, tmp_path / "out")
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["sha256_verified_against_sums"] == ["train.txt"]


def test_ingest_from_url_checks_sha256(tiny_raw, tmp_path):
    archive = tmp_path / "data.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tiny_raw, arcname="TINY")
    digest = sha256_file(archive)
    with pytest.raises(IngestError, match="SHA-256 mismatch"):
        ingest_from_url(archive.as_uri(), "f" * 64, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    res = ingest_from_url(archive.as_uri(), digest, tmp_path / "good")
    assert res.counts["train"] == 4
