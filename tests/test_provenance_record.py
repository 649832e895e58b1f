"""A provenance record holds the config file as the command read it: the file edited while a
long job runs (a grid's next settings) is not what the job ran, and hashed at the end it made
the record contradict itself (its `config` from the old file, its input hash of the new one)."""

import hashlib

import yaml

from esopt.provenance.record import Provenance


def test_the_config_file_is_hashed_as_read_not_as_left(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"rl": {"max_total_tokens": 2048}}))
    read = hashlib.sha256(path.read_bytes()).hexdigest()
    other = tmp_path / "other.txt"
    other.write_text("before")
    prov = Provenance("train-es", yaml.safe_load(path.read_text()), config_path=str(path), inputs=[str(path), str(other)])
    path.write_text(yaml.safe_dump({"rl": {"max_total_tokens": 5760}}))  # edited mid-run
    other.write_text("after")
    inputs = prov.record()["inputs"]
    assert inputs[str(path)] == read
    assert inputs[str(other)] == hashlib.sha256(b"after").hexdigest()  # other inputs: as the run left them


def test_a_record_without_a_config_file_still_hashes_its_inputs(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    inputs = Provenance("evaluate", {}, inputs=[str(model)]).record()["inputs"]
    assert list(inputs) == [str(model / "config.json")]
