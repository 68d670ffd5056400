import json

from tools.bench import machine, write_json


def test_json_reports_name_their_machine(tmp_path):
    write_json(tmp_path / "dict.json", {"ms": 1.5}, threads=2)
    write_json(tmp_path / "list.json", [{"ms": 1.5}], threads=2)
    as_dict, as_list = (json.loads((tmp_path / name).read_text()) for name in ("dict.json", "list.json"))
    assert as_dict == {"machine": machine(2), "ms": 1.5}
    assert as_list == {"machine": machine(2), "results": [{"ms": 1.5}]}
    assert set(machine(2)) == {"processor", "kernel_isa", "cores", "threads", "l3", "copy_gb_per_s", "malloc", "paddle"}
