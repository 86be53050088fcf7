import json
import tarfile

import numpy as np
import pytest

from raptor.data.dataset import load_dataset
from raptor.data.ingest import IngestError, IngestOptions, infer_time_step, ingest, ingest_from_url
from raptor.common.io import sha256_file

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
        ingest(tiny_raw, tmp_path / "out", IngestOptions(time_step=2))
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


def test_a_space_separated_line_among_tab_separated_ones_is_named(tiny_raw, tmp_path):
    lines = (tiny_raw / "train.txt").read_text().splitlines()
    lines[2] = "2 2 3 3"
    (tiny_raw / "train.txt").write_text("\n".join(lines) + "\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"train\.txt, line 3: expected 4 or 5 tab-separated fields "
                    r"\(subject, relation, object, timestamp\[, extra\]\), got 1 \(separated by spaces\?\): '2 2 3 3'")
    # A file separated by spaces throughout: its first line.
    (tiny_raw / "train.txt").write_text("\n".join(line.replace("\t", " ") for line in lines) + "\n")
    _assert_refused(tiny_raw, tmp_path / "out", r"train\.txt, line 1: .*got 1 \(separated by spaces\?\)")


@pytest.mark.parametrize("name", ["valid.txt", "train.txt", "entity2id.txt"])
def test_a_split_or_dictionary_that_is_a_directory_is_not_a_file(tiny_raw, tmp_path, name):
    (tiny_raw / name).unlink()
    (tiny_raw / name).mkdir()
    with pytest.raises(IngestError) as err:
        ingest(tiny_raw, tmp_path / "out")
    assert str(err.value) == f"{tiny_raw / name}: not a file"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ["", "\n\n  \n", "\ufeff\r\n\t\n"])
def test_a_whitespace_only_split_is_an_empty_split(tiny_raw, tmp_path, content):
    (tiny_raw / "test.txt").write_text(content, encoding="utf-8")
    with pytest.raises(IngestError) as err:
        ingest(tiny_raw, tmp_path / "out")
    assert str(err.value) == f"{tiny_raw / 'test.txt'}: empty split file"
    assert not (tmp_path / "out").exists()


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
    with pytest.raises(IngestError, match=r"test\.txt, line 1: expected 4 or 5 tab-separated fields"):
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


# ------------------------------------------------------------------------------- other layouts


def _write(directory, files):
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, newline="")
    return directory


def test_yago_dictionaries_with_dates_after_the_id(tmp_path):
    # RE-NET/TITer/xERTE YAGO: 'name<TAB>id<TAB>start<TAB>end', dates with '#' for unknown digits, a
    # start written '1'; 5-column integer splits with yearly time steps.
    entities = ("<Athletic_Park_(Vancouver)>\t2\t1913-##-##\t####-##-##\n<Getafe_CF>\t0\t1983-07-08\t####-##-##\n"
                "<Janet_Jagan>\t1\t1\t2009-03-28\n<Jane_Bryan>\t3\t1918-06-11\t2009-04-08\n")
    raw = _write(tmp_path / "YAGO", {
        "entity2id.txt": entities, "relation2id.txt": "<wasBornIn>\t0\n<playsFor>\t1\n",
        "train.txt": "0\t1\t1\t0\t0\n2\t0\t3\t1\t0\n", "valid.txt": "1\t0\t2\t2\t0\n", "test.txt": "3\t1\t0\t3\t0\n",
    })
    res = ingest(raw, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert res.num_entities == 4 and ds.meta["layout"] == "ids"
    assert ds.entity_names == ["<Getafe_CF>", "<Janet_Jagan>", "<Athletic_Park_(Vancouver)>", "<Jane_Bryan>"]
    assert ds.relation_names == ["<wasBornIn>", "<playsFor>"]
    np.testing.assert_array_equal(ds.splits["train"], [[0, 1, 1, 0], [2, 0, 3, 1]])
    # A dated dictionary with a line that lost its dates is named, not misread.
    (raw / "entity2id.txt").write_text(entities + "<Oops>\t4\n")
    _assert_refused(raw, tmp_path / "bad", r"entity2id\.txt, line 5: expected 'name<TAB>id<TAB>start<TAB>end'")


def test_names_layout_with_dates(tmp_path):
    # Id-free: names in the splits (spaces, quotes, CRLF), dates; ids follow the sorted names.
    raw = _write(tmp_path / "named", {
        "train.txt": 'Obama\tvisit\tMerkel\t2014-01-01\r\nMerkel\tmake statement\tPutin\t2014-01-02\r\n'
                     '"Quote" Co\tvisit\tObama\t2014-01-03\r\n',
        "valid.txt": "Putin\tvisit\tObama\t2014-01-04\t0\n", "test.txt": "Obama\tvisit\tPutin\t2014-01-06\t0\n",
    })
    res = ingest(raw, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert ds.meta["layout"] == "names" and set(ds.meta["sha256"]) == {"train.txt", "valid.txt", "test.txt"}
    assert ds.entity_names == ['"Quote" Co', "Merkel", "Obama", "Putin"]
    assert ds.relation_names == ["make statement", "visit"]
    np.testing.assert_array_equal(ds.splits["train"], [[2, 1, 1, 0], [1, 0, 3, 1], [0, 1, 2, 2]])
    np.testing.assert_array_equal(ds.splits["test"], [[2, 1, 3, 5]])
    assert res.time_step == 1 and ds.meta["calendar"] == {"start_date": "2014-01-01", "granularity": "day"}
    # The same names in another line order get the same ids.
    lines = (raw / "train.txt").read_text().splitlines()
    (raw / "train.txt").write_text("\n".join(reversed(lines)) + "\n")
    ingest(raw, tmp_path / "out2")
    assert load_dataset(tmp_path / "out2").entity_names == ds.entity_names


def test_names_layout_gdelt_15_minute_steps_and_years(tmp_path):
    raw = _write(tmp_path / "gdelt", {
        "train.txt": "A\tr\tB\t2018-01-01 00:00\nB\tr\tC\t2018-01-01T00:15\nC\tq\tA\t2018-01-01 01:00\n",
        "valid.txt": "A\tq\tC\t2018-01-01 01:15:00\n", "test.txt": "B\tq\tA\t2018-01-01 02:30\n",
    })
    res = ingest(raw, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert res.time_step == 15
    assert ds.splits["train"][:, 3].tolist() == [0, 1, 4] and ds.splits["test"][:, 3].tolist() == [10]
    assert ds.meta["calendar"] == {"start_date": "2018-01-01T00:00", "granularity": "15min"}
    # Yearly facts written as dates on January 1 are years.
    raw = _write(tmp_path / "wiki", {
        "train.txt": "A\tr\tB\t1990-01-01\nB\tr\tC\t1991-01-01\n", "valid.txt": "A\tr\tC\t1992-01-01\n",
        "test.txt": "C\tr\tA\t1994-01-01\n",
    })
    ingest(raw, tmp_path / "wiki_out")
    ds = load_dataset(tmp_path / "wiki_out")
    assert ds.splits["test"][:, 3].tolist() == [4]
    assert ds.meta["calendar"] == {"start_date": "1990-01-01", "granularity": "year"}


def test_names_layout_integer_times_build_a_graph(tmp_path):
    from raptor.data.graph import build_graph

    raw = _write(tmp_path / "named", {"train.txt": "A\tr\tB\t10\nB\tr\tC\t20\n", "valid.txt": "C\tr\tA\t30\n",
                                      "test.txt": "A\tr\tC\t40\n"})
    res = ingest(raw, tmp_path / "out")
    assert res.time_step == 10 and load_dataset(tmp_path / "out").meta["calendar"] is None
    build_graph(tmp_path / "out", tmp_path / "graph.npz")
    assert (tmp_path / "graph.npz").exists()


def test_integer_splits_without_dictionaries_are_ambiguous(tiny_raw, tmp_path):
    (tiny_raw / "entity2id.txt").unlink()
    (tiny_raw / "relation2id.txt").unlink()
    _assert_refused(tiny_raw, tmp_path / "out",
                    r"train\.txt, line 1: integer ids .* no entity2id\.txt or relation2id\.txt .*--layout names")
    # Said explicitly, the numbers are names.
    ingest(tiny_raw, tmp_path / "out", IngestOptions(layout="names"))
    ds = load_dataset(tmp_path / "out")
    assert ds.meta["layout"] == "names" and "0" in ds.entity_names


def test_names_layout_refusals(tmp_path):
    good = {"valid.txt": "C\tr\tA\t2014-01-03\n", "test.txt": "A\tr\tC\t2014-01-04\n"}
    raw = _write(tmp_path / "a", {"train.txt": "A\tr\tB\t2014-01-01\nB\tr\tC\tyesterday\n", **good})
    _assert_refused(raw, tmp_path / "out", r"a/train\.txt, line 2: time 'yesterday' is not an integer, a date")
    raw = _write(tmp_path / "b", {"train.txt": "A\tr\tB\t2014-01-01\n\nA\tr\tB\t2014-02-30\n", **good})
    _assert_refused(raw, tmp_path / "out", r"b/train\.txt, line 3: '2014-02-30': not a valid date")
    raw = _write(tmp_path / "c", {"train.txt": "A\tr\tB\t3\n", **good})
    _assert_refused(raw, tmp_path / "out", r"splits write times differently: train\.txt integer")
    raw = _write(tmp_path / "d", {"train.txt": "A\tr\tB\t2014-01-01\nA\tr\n", **good})
    _assert_refused(raw, tmp_path / "out", r"d/train\.txt, line 2: expected 4 or 5 tab-separated fields")
    raw = _write(tmp_path / "e", {"train.txt": "A\t\tB\t2014-01-01\n", **good})
    _assert_refused(raw, tmp_path / "out", r"e/train\.txt, line 1: empty relation name")
    with pytest.raises(IngestError, match="unknown layout 'csv'"):
        ingest(raw, tmp_path / "out", IngestOptions(layout="csv"))


def test_ingest_command_layout_option(tiny_raw, tmp_path, capsys):
    from raptor.cli import main

    (tiny_raw / "entity2id.txt").unlink()
    (tiny_raw / "relation2id.txt").unlink()
    params = tmp_path / "params.yaml"
    params.write_text("datasets: {TINY: {raw_dir: %s}}\n" % tiny_raw)
    assert main(["ingest", "--params", str(params), "--out", str(tmp_path / "o1")]) == 1
    assert "--layout names" in capsys.readouterr().err
    assert main(["ingest", "--params", str(params), "--out", str(tmp_path / "o2"), "--layout", "names"]) == 0
    params.write_text("datasets: {TINY: {raw_dir: %s, layout: names}}\n" % tiny_raw)
    assert main(["ingest", "--params", str(params), "--out", str(tmp_path / "o3")]) == 0
    assert load_dataset(tmp_path / "o3").meta["layout"] == "names"


def test_the_same_facts_in_either_layout_give_the_same_named_dataset(tiny_raw, tmp_path):
    ingest(tiny_raw, tmp_path / "ids")
    a = load_dataset(tmp_path / "ids")
    # Rewrite the splits with names and dates (day d -> 2014-01-0d) and no dictionaries.
    named = tmp_path / "named"
    named.mkdir()
    for split, quads in TINY_SPLITS.items():
        lines = [f"{a.entity_names[s]}\t{a.relation_names[r]}\t{a.entity_names[o]}\t2014-01-{t:02d}"
                 for s, r, o, t in quads]
        (named / f"{split}.txt").write_text("\n".join(lines) + "\n")
    ingest(named, tmp_path / "names")
    b = load_dataset(tmp_path / "names")

    def facts(ds):
        return {split: sorted((ds.entity_names[s], ds.relation_names[r], ds.entity_names[o], int(t))
                              for s, r, o, t in q) for split, q in ds.splits.items()}

    assert facts(a) == facts(b)
    assert b.meta["calendar"]["start_date"] == "2014-01-01"


@pytest.mark.parametrize("use_filter", [False] + ([True] if hasattr(tarfile, "data_filter") else []))
def test_tar_archives_are_extracted_without_escaping_the_folder(tmp_path, use_filter):
    """With tarfile's `data` filter (Python 3.11.4+) and without it (3.11.0-3.11.3, Debian 12's
    3.11.2, where `extractall(filter=...)` raised TypeError in a fresh clone): regular files land
    in the folder; a `..` path and an absolute symlink are refused before anything is written."""
    import io

    from raptor.data.ingest import extract_tar_safely

    def make(name, members):
        path = tmp_path / name
        with tarfile.open(path, "w") as tf:
            for member_name, data, link in members:
                info = tarfile.TarInfo(member_name)
                if link is not None:
                    info.type, info.linkname = tarfile.SYMTYPE, link
                    tf.addfile(info)
                else:
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        return path

    good = make("good.tar", [("ds/valid.txt", b"1\t2\t3\t0\n", None)])
    with tarfile.open(good) as tf:
        extract_tar_safely(tf, tmp_path / "out", "good.tar", use_filter=use_filter)
    assert (tmp_path / "out/ds/valid.txt").read_bytes() == b"1\t2\t3\t0\n"
    for name, members in (("up.tar", [("../escaped.txt", b"x", None)]),
                          ("link.tar", [("ds/passwd", b"", "/etc/passwd")])):
        dest = tmp_path / f"out-{name}"
        with tarfile.open(make(name, members)) as tf, pytest.raises(IngestError, match=name):
            extract_tar_safely(tf, dest, name, use_filter=use_filter)
        assert not (tmp_path / "escaped.txt").exists()
        assert not (dest / "ds" / "passwd").exists()


# ---------------------------------------------------------------------------- messages (issue 41, item 4)

#: What a one-line ingest message may take at most here: the path, a quoted prefix of QUOTE_CHARS
#: characters (each may be escaped to a few) and the words around them.
MESSAGE_LIMIT = 1000


def _refused_in_one_line(raw, out) -> str:
    """The IngestError message of ``ingest(raw, out)``: one short line, and nothing written."""
    with pytest.raises(IngestError) as err:
        ingest(raw, out)
    message = str(err.value)
    assert "\n" not in message and len(message) < MESSAGE_LIMIT, message[:MESSAGE_LIMIT]
    assert not out.exists(), "a refused ingest must not write anything"
    assert not any(p.name.startswith(f".{out.name}.tmp") for p in out.parent.iterdir())
    return message


def test_a_huge_bad_line_is_quoted_short_with_file_and_line(tiny_raw, tmp_path):
    big = 20 * 1024 * 1024
    lines = (tiny_raw / "valid.txt").read_text().splitlines()
    (tiny_raw / "valid.txt").write_text("\n".join([lines[0], "3\t" + "x" * big + "\t4\t4"]) + "\n")
    message = _refused_in_one_line(tiny_raw, tmp_path / "out")
    from raptor.data.ingest import QUOTE_CHARS

    assert message.startswith(f"{tiny_raw / 'valid.txt'}, line 2: relation 'xxx")
    assert f"'{'x' * QUOTE_CHARS}'... ({big:,} characters) is not an integer" in message
    # A line with the wrong number of fields, and a bad dictionary line, are cut the same way.
    (tiny_raw / "valid.txt").write_text("\n".join([lines[0], "y" * big]) + "\n")
    message = _refused_in_one_line(tiny_raw, tmp_path / "out")
    assert message.startswith(f"{tiny_raw / 'valid.txt'}, line 2: expected 4 or 5 tab-separated fields")
    assert message.endswith(f"... ({big:,} characters)")
    (tiny_raw / "valid.txt").write_text("\n".join(lines) + "\n")
    (tiny_raw / "relation2id.txt").write_text("A\t0\n" + "z" * big + "\n")
    message = _refused_in_one_line(tiny_raw, tmp_path / "out")
    assert message.startswith(f"{tiny_raw / 'relation2id.txt'}, line 2: expected 'name<TAB>id', got 'zzz")


def test_a_huge_bad_time_in_the_names_layout_is_quoted_short(tmp_path):
    raw = _write(tmp_path / "n", {"train.txt": "A\tr\tB\t2014-01-01\nB\tr\tC\t" + "9x" * 100_000 + "\n",
                                  "valid.txt": "C\tr\tA\t2014-01-03\n", "test.txt": "A\tr\tC\t2014-01-04\n"})
    message = _refused_in_one_line(raw, tmp_path / "out")
    assert message.startswith(f"{raw / 'train.txt'}, line 2: time '9x9x") and "... (200,000 characters)" in message


def test_the_ingest_command_prints_one_short_line(tiny_raw, tmp_path, capsys):
    from raptor.cli import main

    (tiny_raw / "test.txt").write_text("4\t1\t0\t5\n" + "1\t2\t4\t" + "7" * 5_000_000 + "x\n")
    params = tmp_path / "params.yaml"
    params.write_text("rl: {epochs: 1}\n")
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "out"), "--params", str(params)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < MESSAGE_LIMIT, err[:MESSAGE_LIMIT]
    assert err.startswith(f"raptor ingest: error: {tiny_raw / 'test.txt'}, line 2: time '777")
    assert "(5,000,001 characters)" in err and not (tmp_path / "out").exists()


def test_overflowing_integers_are_named_with_file_and_line(tiny_raw, tmp_path):
    lines = (tiny_raw / "valid.txt").read_text().splitlines()
    valid = tiny_raw / "valid.txt"
    # Beyond int64 (Arrow reads the column as floats); the empty line is skipped but counted.
    for bad in ("99999999999999999999999", "-99999999999999999999999"):
        valid.write_text(f"{lines[0]}\n\n3\t0\t4\t{bad}\n")
        assert _refused_in_one_line(tiny_raw, tmp_path / "out") == \
            f"{valid}, line 3: time '{bad}' does not fit in a 64-bit integer"
    valid.write_text(f"{lines[0]}\n\n99999999999999999999999\t0\t4\t4\n")
    assert _refused_in_one_line(tiny_raw, tmp_path / "out").startswith(f"{valid}, line 3: subject '9999")
    valid.write_text(f"{lines[0]}\n3\t0\t4\t{'9' * 5000}\n")  # more digits than Python's int() reads
    assert _refused_in_one_line(tiny_raw, tmp_path / "out").endswith(
        "... (5,000 characters) does not fit in a 64-bit integer")
    valid.write_text("\n".join(lines) + "\n")
    # Within int64, but too many steps for the int32 time column.
    test = tiny_raw / "test.txt"
    test.write_text("4\t1\t0\t5\n\n1\t2\t4\t9999999999\n")
    message = _refused_in_one_line(tiny_raw, tmp_path / "out")
    assert message.startswith(f"{test}, line 3: timestamp 9999999999 is step 9,999,999,998 after the earliest")
    assert "int32" in message
    # So far from the earliest timestamp that the difference overflows int64.
    (tiny_raw / "train.txt").write_text("0\t0\t1\t-9000000000000000000\n")
    test.write_text("4\t1\t0\t9000000000000000000\n")
    assert _refused_in_one_line(tiny_raw, tmp_path / "out").startswith(
        f"{test}, line 1: timestamp 9000000000000000000 is too far from the earliest timestamp")


def test_overflowing_integers_in_the_names_layout_and_dictionaries(tiny_raw, tmp_path):
    good = {"valid.txt": "C\tr\tA\t3\n", "test.txt": "A\tr\tC\t4\n"}
    raw = _write(tmp_path / "n", {"train.txt": "A\tr\tB\t1\n\nB\tr\tC\t99999999999999999999999\n", **good})
    assert _refused_in_one_line(raw, tmp_path / "out") == \
        f"{raw / 'train.txt'}, line 3: time '99999999999999999999999' does not fit in a 64-bit integer"
    raw = _write(tmp_path / "k", {"train.txt": f"A\tr\tB\t1\nB\tr\tC\t{'9' * 5000}\n", **good})
    assert _refused_in_one_line(raw, tmp_path / "out").startswith(f"{raw / 'train.txt'}, line 2: time '999")
    raw = _write(tmp_path / "m", {"train.txt": "A\tr\tB\t1\nB\tr\tC\t2\n", "valid.txt": "C\tr\tA\t3\n",
                                  "test.txt": "A\tr\tC\t9999999999\n"})
    assert _refused_in_one_line(raw, tmp_path / "out").startswith(
        f"{raw / 'test.txt'}, line 1: timestamp 9999999999 is step")
    entities = tiny_raw / "entity2id.txt"
    text = entities.read_text()
    for bad in ("10000000", "99999999999999999999999"):
        entities.write_text(text + f"Someone\t{bad}\n")
        assert _refused_in_one_line(tiny_raw, tmp_path / "out") == \
            f"{entities}, line 6: entity id '{bad}' is out of range: ids are 0..5 for the 6 lines of this file"


BOM = "\ufeff"


def test_a_byte_order_mark_does_not_end_up_in_names(tiny_raw, tmp_path):
    for name in ("entity2id.txt", "relation2id.txt", "train.txt", "valid.txt", "test.txt"):
        path = tiny_raw / name
        path.write_bytes(BOM.encode() + path.read_bytes())
    ingest(tiny_raw, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert ds.entity_names[0] == "Barack Obama" and ds.relation_names[0] == "Make statement"
    assert ds.splits["train"][0].tolist() == [0, 0, 1, 0]
    # The line-by-line diagnosis of a split with a BOM names the bad line, not line 1.
    lines = (tiny_raw / "valid.txt").read_text(encoding="utf-8-sig").splitlines()
    (tiny_raw / "valid.txt").write_text(BOM + lines[0] + "\n3\tzero\t4\t4\n")
    assert "line 2: relation 'zero' is not an integer" in _refused_in_one_line(tiny_raw, tmp_path / "bad")
    # Integer splits with a BOM and no dictionaries are still told apart from names.
    (tiny_raw / "valid.txt").write_text(BOM + "\n".join(lines) + "\n")
    (tiny_raw / "entity2id.txt").unlink()
    (tiny_raw / "relation2id.txt").unlink()
    assert "train.txt, line 1: integer ids ('0\\t0\\t1\\t1')" in _refused_in_one_line(tiny_raw, tmp_path / "bad")
    # The names layout: the first name has no BOM either.
    raw = _write(tmp_path / "named", {"train.txt": BOM + "Obama\tvisit\tMerkel\t1\n",
                                      "valid.txt": BOM + "Merkel\tvisit\tObama\t2\n",
                                      "test.txt": BOM + "Obama\tvisit\tMerkel\t3\n"})
    ingest(raw, tmp_path / "named_out")
    assert load_dataset(tmp_path / "named_out").entity_names == ["Merkel", "Obama"]


@pytest.mark.parametrize("content", ['{"dataset": "x",\n', "\xff\xfe not json", "[1, 2]"])
def test_load_dataset_names_an_invalid_meta_json(tiny_raw, tmp_path, content):
    ingest(tiny_raw, tmp_path / "out")
    meta = tmp_path / "out" / "meta.json"
    meta.write_bytes(content.encode("latin-1"))
    with pytest.raises(ValueError) as info:
        load_dataset(tmp_path / "out")
    message = str(info.value)
    assert message.startswith(f"{meta}: ") and "re-run `raptor ingest`" in message


@pytest.mark.parametrize("name", ["test.parquet", "train.parquet", "entities.parquet", "relations.parquet"])
def test_load_dataset_names_a_missing_file_of_the_dataset(tiny_raw, tmp_path, name):
    ingest(tiny_raw, tmp_path / "out")
    (tmp_path / "out" / name).unlink()
    with pytest.raises(FileNotFoundError) as info:
        load_dataset(tmp_path / "out")
    assert str(info.value) == (
        f"{tmp_path / 'out'}: missing {name}: not a complete ingested dataset (run `raptor ingest`)"
    )


def test_load_dataset_names_a_truncated_parquet_file(tiny_raw, tmp_path):
    ingest(tiny_raw, tmp_path / "out")
    part = tmp_path / "out" / "valid.parquet"
    part.write_bytes(part.read_bytes()[:20])
    with pytest.raises(ValueError) as info:
        load_dataset(tmp_path / "out")
    assert str(info.value).startswith(f"{part}: not a readable ingested Parquet file (")
    assert str(info.value).endswith("re-run `raptor ingest`")
