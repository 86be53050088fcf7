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
    with pytest.raises(ConfigError, match="params file not found"):
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
