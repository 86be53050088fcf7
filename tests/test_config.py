from pathlib import Path

import pytest

from raptor.config import ConfigError, Params, load_params, params_from_dict, result_params


def test_defaults_are_the_paper_values():
    p = Params()
    assert (p.model.entity_dim, p.model.relation_dim, p.model.time_dim, p.model.step_dim) == (128, 128, 48, 32)
    assert (p.env.max_path_length, p.env.max_actions) == (3, 150)
    assert p.labeling.max_in_edges == 200
    assert (p.pretrain.epochs, p.rl.epochs, p.rl.batch_size, p.pretrain.batch_size) == (40, 400, 512, 512)
    assert (p.rl.learning_rate, p.rl.gamma, p.rl.entropy_beta0, p.rl.entropy_decay) == (1e-3, 0.95, 0.01, 0.9)
    assert (p.eval.beam_size, p.eval.valid_every) == (100, 20)
    assert len(p.train.seeds) == 5


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"rl\.gama: unknown key"):
        params_from_dict({"rl": {"gama": 0.9}})
    with pytest.raises(ConfigError, match=r"^modle: unknown key"):
        params_from_dict({"modle": {}})


def test_wrong_type_is_named():
    with pytest.raises(ConfigError, match=r"rl\.batch_size: expected an integer, got str"):
        params_from_dict({"rl": {"batch_size": "512"}})
    with pytest.raises(ConfigError, match=r"env\.strict_history: expected true or false"):
        params_from_dict({"env": {"strict_history": 1}})
    with pytest.raises(ConfigError, match=r"eval\.score_rule: expected one of"):
        params_from_dict({"eval": {"score_rule": "mean"}})
    with pytest.raises(ConfigError, match=r"train\.seeds\[1\]: expected an integer"):
        params_from_dict({"train": {"seeds": [1, "b"]}})


def test_range_checks():
    with pytest.raises(ConfigError, match=r"rl\.gamma: must be in \(0, 1\]"):
        params_from_dict({"rl": {"gamma": 1.5}})
    with pytest.raises(ConfigError, match=r"model\.time_dim \(128\) must be smaller"):
        params_from_dict({"model": {"time_dim": 128}})
    with pytest.raises(ConfigError, match=r"train\.seeds: must be a non-empty list of distinct ints"):
        params_from_dict({"train": {"seeds": [1, 1]}})
    with pytest.raises(ConfigError, match=r"model\.lstm_hidden_dim: must be a positive integer or null"):
        params_from_dict({"model": {"lstm_hidden_dim": 0}})
    with pytest.raises(ConfigError, match=r"env\.max_actions: must be >= 2 with env\.cap_includes_stop"):
        params_from_dict({"env": {"max_actions": 1, "cap_includes_stop": True}})
    assert params_from_dict({"env": {"max_actions": 2, "cap_includes_stop": True}}).env.edge_cap == 1


def test_int_accepted_for_float_and_null_for_optional():
    p = params_from_dict({"rl": {"learning_rate": 1}, "labeling": {"max_in_edges": None}})
    assert p.rl.learning_rate == 1.0 and isinstance(p.rl.learning_rate, float)
    assert p.labeling.max_in_edges is None
    assert params_from_dict({}).model.lstm_hidden_dim is None  # the LSTM as wide as the action embedding
    assert params_from_dict({"model": {"lstm_hidden_dim": 64}}).model.lstm_hidden_dim == 64


def test_overrides_and_file_errors(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("rl:\n  epochs: 3\n")
    assert load_params(f, {"rl.epochs": 5}).rl.epochs == 5
    with pytest.raises(ConfigError, match=r"params file not found: .* \(run from the project's root folder, or "
                                          r"give --params FILE; a file holding `\{\}` means the paper's defaults\)"):
        load_params(tmp_path / "nope.yaml")
    f.write_text("rl: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(f)


def test_profiles_override_and_command_line_wins():
    raw = {"profile": "quick", "profiles": {"quick": {"rl.epochs": 7, "train.seeds": [0, 1]}}}
    p = params_from_dict(raw)
    assert p.profile == "quick" and p.rl.epochs == 7 and p.train.seeds == [0, 1]
    assert params_from_dict(raw, {"rl.epochs": 2}).rl.epochs == 2
    assert params_from_dict({"profiles": raw["profiles"]}).rl.epochs == 400  # default profile: paper


def test_profile_errors_are_named():
    with pytest.raises(ConfigError, match=r"profile: unknown profile 'fast' \(known: paper, quick\)"):
        params_from_dict({"profile": "fast", "profiles": {"quick": {}}})
    with pytest.raises(ConfigError, match=r"rl\.gama: unknown key"):
        params_from_dict({"profile": "quick", "profiles": {"quick": {"rl.gama": 1}}})


def test_duplicate_keys_are_refused_with_their_lines(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("rl:\n  epochs: 3\n  gamma: 0.9\n  epochs: 4\n")
    with pytest.raises(ConfigError, match=r"params.yaml: line 4: key 'epochs' is given twice \(first on line 2\)"):
        load_params(f)


def test_datasets_mapping_is_validated():
    p = params_from_dict({"datasets": {"A": {"raw_dir": "x", "time_step": 24}, "B-2": {"raw_dir": "y"}}})
    assert p.dataset("A")[1].time_step == 24 and list(p.datasets) == ["A", "B-2"]
    with pytest.raises(ConfigError, match="2 datasets are listed"):
        p.dataset()
    with pytest.raises(ConfigError, match="no dataset 'C'"):
        p.dataset("C")
    # a registered name not listed: its release's defaults, as `ICEWS18: {}` in datasets would give
    listed = params_from_dict({"datasets": {"ICEWS18": {}}}).dataset("ICEWS18")
    assert p.dataset("ICEWS18") == listed and listed[1].raw_dir.endswith("ICEWS18")
    with pytest.raises(ConfigError, match=r"datasets\.A\.raw_dri: unknown key"):
        params_from_dict({"datasets": {"A": {"raw_dri": "x"}}})
    with pytest.raises(ConfigError, match="datasets: must be a non-empty mapping of dataset names"):
        params_from_dict({"datasets": {"a/b": {"raw_dir": "x"}}})
    with pytest.raises(ConfigError, match=r"datasets\.A\.time_step: must be a positive integer"):
        params_from_dict({"datasets": {"A": {"raw_dir": "x", "time_step": 0}}})


def test_result_params_leave_out_what_the_schema_marks_as_no_effect():
    keys = result_params(Params())
    assert "rl.gamma" in keys and "labeling.max_in_edges" in keys and "eval.valid_every" in keys
    for k in ("train.num_threads", "train.parallel_runs", "train.seeds", "labeling.workers", "profile"):
        assert k not in keys
    assert not any(k.startswith(("ablation.", "datasets.")) for k in keys)


def test_dataset_layout_calendar_are_validated(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("datasets: {X: {raw_dir: x, layout: names, start_date: '2018-01-01T00:00', granularity: 15min}}\n")
    ds = load_params(p).datasets["X"]
    assert (ds.layout, ds.granularity) == ("names", "15min")
    for bad, match in [("layout: csv", r"datasets\.X\.layout: expected one of"),
                       ("granularity: week", r"datasets\.X\.granularity"),
                       ("start_date: 'March 1'", r"datasets\.X\.start_date: expected YYYY-MM-DD")]:
        p.write_text("datasets: {X: {raw_dir: x, %s}}\n" % bad)
        with pytest.raises(ConfigError, match=match):
            load_params(p)


# ---------------------------------------------------------------------------- messages (issue 41, item 4)


def _one_line_error(call) -> str:
    """The message of the ConfigError ``call()`` raises, checked to be one short line."""
    with pytest.raises(ConfigError) as err:
        call()
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    return message


@pytest.mark.parametrize("value, shown", [(".inf", "inf"), ("-.inf", "-inf"), (".nan", "nan"), (".NaN", "nan"),
                                          ("1" + "0" * 400, "an integer of 401 digits")])
def test_non_finite_numbers_are_refused_with_file_line_and_key(tmp_path, value, shown):
    f = tmp_path / "params.yaml"
    f.write_text(f"rl:\n  epochs: 3\n  learning_rate: {value}\n")
    message = _one_line_error(lambda: load_params(f))
    assert message == f"{f}, line 3: rl.learning_rate: expected a finite number, got {shown}"
    # Everywhere a float is accepted: a key without a range check, a list, a resolved JSON file.
    f.write_text(f"titer:\n  dirichlet_tol: {value}\n")
    assert _one_line_error(lambda: load_params(f)).startswith(f"{f}, line 2: titer.dirichlet_tol: expected a finite")
    with pytest.raises(ConfigError, match=r"rl\.gamma: expected a finite number, got nan"):
        params_from_dict({"rl": {"gamma": float("nan")}})


def test_resolved_params_refuse_non_finite_numbers(tmp_path):
    import json

    from raptor.config import load_resolved, params_to_dict

    raw = params_to_dict(Params())
    raw["titer"]["time_scale"] = float("inf")  # json writes Infinity, and reads it back
    f = tmp_path / "params.json"
    f.write_text(json.dumps(raw))
    assert _one_line_error(lambda: load_resolved(f)) == f"{f}: titer.time_scale: expected a finite number, got inf"


def test_valid_params_resolve_as_before(tmp_path):
    # Finite floats and ints for floats are kept exactly (run fingerprints hash params_to_dict).
    from raptor.config import params_to_dict

    p = params_from_dict({"rl": {"learning_rate": 1, "gamma": 0.5}, "titer": {"ipsi_tol": 1.0e-300}})
    d = params_to_dict(p)
    assert d["rl"]["learning_rate"] == 1.0 and type(d["rl"]["learning_rate"]) is float
    assert d["rl"]["gamma"] == 0.5 and d["titer"]["ipsi_tol"] == 1.0e-300


def _project(tmp_path, params_text, local_text=None):
    f = tmp_path / "params.yaml"
    f.write_text(params_text)
    local = tmp_path / "params.local.yaml"
    if local_text is not None:
        local.write_text(local_text)
    return f, local


def test_errors_in_the_local_file_name_the_local_file(tmp_path):
    f, local = _project(tmp_path, "rl:\n  epochs: 3\n", "# mine\nrl.gamma: 7\n")
    assert _one_line_error(lambda: load_params(f, local=local)) == \
        f"{local}, line 2: rl.gamma: must be in (0, 1], got 7.0"
    local.write_text("rl:\n  epochs: 3\n  gama: 0.5\n")
    assert _one_line_error(lambda: load_params(f, local=local)).startswith(f"{local}, line 3: rl.gama: unknown key")
    local.write_text("profile: nope\n")
    assert _one_line_error(lambda: load_params(f, local=local)).startswith(
        f"{local}, line 1: profile: unknown profile 'nope'")
    local.write_text("train:\n  seeds: [0, 1.5]\n")
    assert _one_line_error(lambda: load_params(f, local=local)).startswith(
        f"{local}, line 2: train.seeds[1]: expected an integer")
    # The command line is named as such, not as a file.
    local.unlink()
    assert _one_line_error(lambda: load_params(f, {"rl.epochs": -1}, local=local)) == \
        "command-line override: rl.epochs: must be >= 0, got -1"


def test_an_empty_mapping_in_the_local_file_is_an_error_not_ignored(tmp_path):
    """The audit's case: `rl: {gamma: {}}` or `datasets: {YAGO: {}}` in params.local.yaml were dropped
    without a word (flattening skips an empty mapping)."""
    f, local = _project(tmp_path, "rl:\n  epochs: 3\n", "rl:\n  gamma: {}\n")
    assert "rl.gamma is an empty mapping, which overrides nothing" in _one_line_error(lambda: load_params(f, local=local))
    local.write_text("datasets:\n  YAGO: {}\n")
    assert "datasets" in _one_line_error(lambda: load_params(f, local=local))  # shapes DVC's stages: params.yaml's
    local.write_text("rl: {}\nprofile: smoke\n")
    assert "rl is an empty mapping" in _one_line_error(lambda: load_params(f, local=local))


def test_errors_in_params_yaml_and_its_profiles_name_them(tmp_path):
    text = "rl:\n  gamma: 0.5\nprofiles:\n  q:\n    rl.epochs: 2\n    rl.gamma: 7\n"
    f, local = _project(tmp_path, text, "profile: q\n")  # the local file selects a profile that is wrong
    assert _one_line_error(lambda: load_params(f, local=local)) == \
        f"{f}, profiles.q, line 6: rl.gamma: must be in (0, 1], got 7.0"
    f.write_text("profile: q\n" + text)
    local.unlink()
    assert _one_line_error(lambda: load_params(f, local=local)) == \
        f"{f}, profiles.q, line 7: rl.gamma: must be in (0, 1], got 7.0"
    # A wrong value in params.yaml itself is params.yaml's even when a local file is there.
    f.write_text("rl:\n  epochs: 3\n  gamma: 1.5\n")
    local.write_text("rl.epochs: 4\n")
    assert _one_line_error(lambda: load_params(f, local=local)) == f"{f}, line 3: rl.gamma: must be in (0, 1], got 1.5"


def test_resolve_command_names_the_local_file(tmp_path, capsys):
    from raptor.pipeline import stages

    f, local = _project(tmp_path, "rl:\n  epochs: 3\n", "rl:\n  learning_rate: .inf\n")
    out = tmp_path / "params.json"
    assert stages.main(["resolve", "--params", str(f), "--local", str(local), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"raptor.pipeline.stages: error: {local}, line 2: rl.learning_rate: expected a finite number, got inf"
    assert not out.exists()  # nothing written


def test_a_params_file_not_utf8_or_a_directory_is_named(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_bytes(b"\xff\xferl:\n  epochs: 3\n")
    message = _one_line_error(lambda: load_params(f))
    assert message.startswith(f"{f}: not UTF-8 text (") and "save it as UTF-8" in message
    folder = tmp_path / "w"
    folder.mkdir()
    assert _one_line_error(lambda: load_params(folder)) == f"{folder}: a directory, not a YAML params file"
    # The local overrides file is read the same way.
    f.write_text("rl:\n  epochs: 3\n")
    assert _one_line_error(lambda: load_params(f, local=folder)) == f"{folder}: a directory, not a YAML params file"


@pytest.mark.parametrize("text", ["", "\n  \n", "# nothing here yet\n"])
def test_an_empty_params_file_is_refused_but_an_empty_local_file_is_not(tmp_path, text):
    f, local = _project(tmp_path, text)
    message = _one_line_error(lambda: load_params(f))
    assert message.startswith(f"{f}: empty params file")
    # params.local.yaml is optional and made empty by the setup scripts: an empty one means no overrides.
    f.write_text("rl:\n  epochs: 3\n")
    local.write_text(text)
    assert load_params(f, local=local).rl.epochs == 3


def test_resolved_params_given_a_yaml_file_say_what_it_expects(tmp_path):
    from raptor.config import load_resolved

    f = tmp_path / "params.yaml"
    f.write_text("rl:\n  epochs: 3\n")
    message = _one_line_error(lambda: load_resolved(f))
    assert message.startswith(f"{f}: not a resolved params file, the JSON the params stage writes (")
    assert "`raptor params --params params.yaml --out build/params.json`" in message
    f.write_bytes(b"\xff\xfe{}")
    assert _one_line_error(lambda: load_resolved(f)).startswith(f"{f}: not a resolved params file")


def test_resolved_params_take_overrides_without_applying_the_profile_again(tmp_path):
    from raptor.config import load_resolved
    from raptor.pipeline.stages import resolve_params

    src, local, out = tmp_path / "params.yaml", tmp_path / "params.local.yaml", tmp_path / "build/params.json"
    src.write_text("profile: quick\nprofiles:\n  quick:\n    rl.epochs: 15\n")
    local.write_text("rl:\n  epochs: 3\n")  # the local file wins over the profile
    resolve_params(src, local, out)
    assert load_resolved(out).rl.epochs == 3
    p = load_resolved(out, {"eval.rank_last_expansions": True, "eval.beam_size": 7})
    assert (p.rl.epochs, p.eval.beam_size, p.eval.rank_last_expansions) == (3, 7, True)
    message = _one_line_error(lambda: load_resolved(out, {"eval.beam_size": 0}))
    assert message.startswith(f"{out}: eval.beam_size"), message


def test_titer_inherited_choices_are_validated_and_default_to_todays_behaviour():
    """Issue 39: what TITer's code does and the paper does not state, one key each; the defaults keep
    this project's behaviour (no weight decay, no clipping, Xavier, decay per epoch, beam entities)."""
    p = params_from_dict({})
    assert (p.rl.weight_decay, p.rl.clip_gradient, p.rl.entropy_decay_per) == (0.0, 0.0, "epoch")
    assert p.model.embedding_init == "xavier" and p.eval.rank_last_expansions is False
    titer = params_from_dict({"rl": {"weight_decay": 1e-5, "clip_gradient": 10, "entropy_decay_per": "batch"},
                              "model": {"embedding_init": "normal"}, "eval": {"rank_last_expansions": True}})
    assert (titer.rl.weight_decay, titer.rl.clip_gradient, titer.rl.entropy_decay_per) == (1e-5, 10.0, "batch")
    assert titer.model.embedding_init == "normal" and titer.eval.rank_last_expansions is True
    for section, key, value, message in [
            ("rl", "weight_decay", -1e-5, r"rl\.weight_decay: must be >= 0"),
            ("rl", "clip_gradient", -1, r"rl\.clip_gradient: must be >= 0 \(0 = no clipping\)"),
            ("rl", "entropy_decay_per", "step", r"rl\.entropy_decay_per: expected one of \['epoch', 'batch'\]"),
            ("model", "embedding_init", "uniform", r"model\.embedding_init: expected one of \['xavier', 'normal'\]"),
            ("eval", "rank_last_expansions", "yes", r"eval\.rank_last_expansions: expected true or false")]:
        with pytest.raises(ConfigError, match=message):
            params_from_dict({section: {key: value}})
    flat = result_params(p)  # they change results: run fingerprints hold them
    for key in ("rl.weight_decay", "rl.clip_gradient", "rl.entropy_decay_per", "model.embedding_init",
                "eval.rank_last_expansions"):
        assert key in flat


def test_stacked_seeds_must_be_at_least_one():
    with pytest.raises(ConfigError, match=r"train\.stacked_seeds: must be >= 1"):
        params_from_dict({"train": {"stacked_seeds": 0}})
    assert params_from_dict({"train": {"stacked_seeds": 5}}).train.stacked_seeds == 5


def test_the_gpu_step_keys_are_checked_and_change_no_result():
    """train.cuda_graph, train.graph_scan_pad and train.deterministic: bad values named; none is part of a
    run's fingerprint (GPU seeds pool with CPU seeds)."""
    with pytest.raises(ConfigError, match=r"train\.cuda_graph: expected one of"):
        params_from_dict({"train": {"cuda_graph": "on"}})
    with pytest.raises(ConfigError, match=r"train\.graph_scan_pad: must be >= 0"):
        params_from_dict({"train": {"graph_scan_pad": -1}})
    with pytest.raises(ConfigError, match=r"train\.deterministic: expected true or false"):
        params_from_dict({"train": {"deterministic": "yes"}})
    p = params_from_dict({"train": {"cuda_graph": "off", "graph_scan_pad": 64, "deterministic": False}})
    assert (p.train.cuda_graph, p.train.graph_scan_pad, p.train.deterministic) == ("off", 64, False)
    assert result_params(p) == result_params(Params())


def test_a_bad_value_in_params_yaml_is_an_error_even_while_a_profile_overrides_it(tmp_path):
    """The audit's case: `rl.epochs: -3` was accepted while the selected profile set rl.epochs."""
    f, local = _project(tmp_path, "profile: q\nrl:\n  epochs: -3\nprofiles:\n  q:\n    rl.epochs: 2\n", None)
    assert _one_line_error(lambda: load_params(f, local=local)) == f"{f}, line 3: rl.epochs: must be >= 0, got -3"
    f.write_text("profile: q\nrl:\n  epochs: 3\nprofiles:\n  q:\n    rl.epochs: 2\n")
    assert load_params(f, local=local).rl.epochs == 2
