"""Synthetic generators: the scaled (GDELT-shaped) one."""

from __future__ import annotations

import numpy as np


def test_scaled_generator_has_the_spec_shape_and_ingests(tmp_path):
    from raptor.data.ingest import ingest
    from raptor.data.synthetic import ScaleSpec, generate_scaled, write_scaled_raw

    spec = ScaleSpec(num_entities=300, num_relations=20, num_timestamps=96, train=6000, valid=800, test=1000,
                     recurrence=0.5, time_step=15, seed=4)
    splits = generate_scaled(spec)
    assert 0.95 * 6000 <= len(splits["train"]) <= 6000 and 0.9 * 1000 <= len(splits["test"]) <= 1000
    all_q = np.concatenate(list(splits.values()))
    assert all_q[:, [0, 2]].max() < 300 and all_q[:, 1].max() < 20 and np.all(all_q[:, 0] != all_q[:, 2])
    assert splits["train"][:, 3].max() < splits["valid"][:, 3].min() <= splits["valid"][:, 3].max() < splits["test"][:, 3].min()
    triples = {tuple(r) for r in all_q[:, :3].tolist()}
    assert len(triples) < 0.8 * len(all_q)  # recurring facts: many (s, r, o) appear at several times
    deg = np.bincount(all_q[:, 0], minlength=300)
    assert deg.max() > 10 * np.median(deg)  # Zipf-skewed popularity
    np.testing.assert_array_equal(generate_scaled(spec)["test"], splits["test"])  # seeded
    write_scaled_raw(tmp_path / "raw", spec)
    res = ingest(tmp_path / "raw", tmp_path / "data")
    assert res.time_step == 15 and res.counts == {k: len(v) for k, v in splits.items()}
