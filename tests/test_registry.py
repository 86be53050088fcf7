"""The dataset registry: published checksums, defaults a params entry takes, and refusals."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from raptor.data import registry
from raptor.config import ConfigError, params_from_dict
from raptor.data.ingest import IngestError, IngestOptions, ingest
from raptor.data.registry import RELEASES, file_digest
from raptor.config import load_params
from raptor.pipeline.stages import dvc_yaml, main as stages_main

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.mark.shared_data
def test_icews_checksums_are_the_shared_copies():
    """The registry's ICEWS digests are those of ../shared/data/SHA256SUMS, every file of each release."""
    sums = {}
    for line in (SHARED / "SHA256SUMS").read_text().splitlines():
        digest, rel = line.split(maxsplit=1)
        sums[rel.strip()] = f"sha256:{digest}"
    for name in ("ICEWS14", "ICEWS18", "ICEWS05-15"):
        release = RELEASES[name].checksums
        assert set(release) == {"train.txt", "valid.txt", "test.txt", "entity2id.txt", "relation2id.txt"}
        for fname, digest in release.items():
            assert sums[f"{name}/{fname}"] == digest, (name, fname)


def test_every_release_is_well_formed():
    for name, release in RELEASES.items():
        assert release.source and release.checksums, name
        assert all(registry.CHECKSUM.match(d) for d in release.checksums.values()), name
        params_from_dict({"datasets": {name: {}}})  # its defaults validate


def test_file_digests(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert file_digest(empty, "git-sha1") == "git-sha1:e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's empty blob
    data = tmp_path / "data"
    data.write_bytes(b"hello\n")
    assert file_digest(data, "git-sha1") == "git-sha1:ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object
    assert file_digest(data, "sha256") == "sha256:" + hashlib.sha256(b"hello\n").hexdigest()
    with pytest.raises(ValueError, match="md5"):
        file_digest(data, "md5")


def test_a_registered_name_is_all_a_params_entry_needs():
    p = params_from_dict({"datasets": {"YAGO": None, "GDELT": {"raw_dir": "/data/gdelt"}}})
    yago, gdelt = p.datasets["YAGO"], p.datasets["GDELT"]
    assert yago.raw_dir == "../shared/data/YAGO" and yago.granularity == "year" and yago.layout == "ids"
    assert yago.checksums == dict(RELEASES["YAGO"].checksums) and "TITer" in yago.source
    assert gdelt.raw_dir == "/data/gdelt" and gdelt.granularity == "15min"  # params win, the rest from the registry
    assert gdelt.checksums["train.txt"].startswith("git-sha1:")


def test_unregistered_dataset_needs_a_raw_dir_and_checksums_are_checked():
    with pytest.raises(ConfigError, match=r"datasets\.MINE\.raw_dir: required .*registered: ICEWS14"):
        params_from_dict({"datasets": {"MINE": {}}})
    with pytest.raises(ConfigError, match=r"datasets\.MINE\.checksums\.train\.txt: expected sha256"):
        params_from_dict({"datasets": {"MINE": {"raw_dir": "x", "checksums": {"train.txt": "abc"}}}})


def _digests(raw: Path, algorithm: str = "sha256") -> dict[str, str]:
    return {p.name: file_digest(p, algorithm) for p in sorted(raw.glob("*.txt"))}


def _tiny_release(checksums) -> IngestOptions:
    return IngestOptions(dataset="TINY", checksums=checksums, source="https://example.org/tiny")


@pytest.mark.parametrize("algorithm", ["sha256", "git-sha1"])
def test_ingest_checks_every_file_of_the_release(tiny_raw, tmp_path, algorithm):
    checksums = _digests(tiny_raw, algorithm)
    ingest(tiny_raw, tmp_path / "ok", _tiny_release(checksums))
    meta = json.loads((tmp_path / "ok" / "meta.json").read_text())
    assert meta["verified_against_release"] == checksums

    with open(tiny_raw / "valid.txt", "a") as f:
        f.write("0\t0\t1\t9\n")
    with pytest.raises(IngestError) as err:
        ingest(tiny_raw, tmp_path / "bad", _tiny_release(checksums))
    msg = str(err.value)
    assert "valid.txt" in msg and checksums["valid.txt"] in msg and "https://example.org/tiny" in msg
    assert "datasets.TINY.checksums" in msg
    assert not (tmp_path / "bad").exists()


def test_missing_release_files_say_what_to_download_and_where(tiny_raw, tmp_path):
    checksums = _digests(tiny_raw)
    (tiny_raw / "train.txt").unlink()
    with pytest.raises(IngestError, match=r"dataset TINY: train\.txt not found in .*raw\. Download it from "
                                          r"https://example\.org/tiny into that folder"):
        ingest(tiny_raw, tmp_path / "out", _tiny_release(checksums))
    with pytest.raises(IngestError, match=r"entity2id\.txt, relation2id\.txt, test\.txt, train\.txt, valid\.txt not found in .*nowhere"):
        ingest(tmp_path / "nowhere", tmp_path / "out", _tiny_release(checksums))
    assert not (tmp_path / "out").exists()


def test_pipeline_refuses_an_absent_registered_dataset_before_dvc(tmp_path, capsys):
    """`dvc repro`'s first stage resolves params: a registered dataset that is not downloaded stops
    there with the download instructions (DVC would only say "missing dependency")."""
    params = tmp_path / "params.yaml"
    params.write_text("datasets:\n  WIKI: {raw_dir: absent/WIKI}\n")
    (tmp_path / "dvc.yaml").write_text(dvc_yaml(load_params(params)))
    rc = stages_main(["resolve", "--params", str(params), "--local", str(tmp_path / "params.local.yaml"),
                      "--out", str(tmp_path / "build" / "params.json")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "dataset WIKI:" in err and "absent/WIKI" in err and "JHL-HUST/TITer" in err


def test_ingest_command_no_verify_accepts_a_copy_of_ones_own(tiny_raw, tmp_path, capsys):
    from raptor.cli import main

    params = tmp_path / "params.yaml"
    params.write_text(f"datasets:\n  TINY: {{raw_dir: {tiny_raw}, checksums: {{train.txt: 'sha256:{'0' * 64}'}}}}\n")
    assert main(["ingest", "--params", str(params), "--out", str(tmp_path / "a")]) == 1
    assert "differs from the published release" in capsys.readouterr().err and not (tmp_path / "a").exists()
    assert main(["ingest", "--params", str(params), "--out", str(tmp_path / "a"), "--no-verify"]) == 0
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["verified_against_release"] == {}
