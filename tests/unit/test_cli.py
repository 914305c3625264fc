"""The command line without root: topo, calc, usage errors and exit codes."""

import json

from experiments.cli import EXIT_OK, EXIT_USAGE, main


def test_topo_show_json_has_the_contract_keys(capsys):
    assert main(["topo", "show", "fat_tree", "k=4", "--json"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert {"hosts", "switches", "links", "oversubscription", "bisection_gbps"} <= set(info)
    assert (info["hosts"], info["switches"], info["links"]) == (16, 20, 48)
    assert info["bisection_gbps"] == 800.0
    assert info["emulated_mbps_by_real_gbps"] == {"100": 10.0}


def test_topo_show_says_whether_the_fabric_fits(capsys):
    main(["topo", "show", "spine_leaf", "--json"])
    small = json.loads(capsys.readouterr().out)
    main(["topo", "show", "rail_optimized", "servers=32", "gpus_per_server=8", "--json"])
    big = json.loads(capsys.readouterr().out)
    assert small["fits"] is True and big["fits"] is False
    assert big["switching_demand_mbps"] > big["switch_capacity_mbps"]


def test_bad_parameter_is_a_usage_error(capsys):
    assert main(["topo", "show", "spine_leaf", "spines=0"]) == EXIT_USAGE
    assert "spines=0" in capsys.readouterr().err
    assert main(["topo", "show", "spine_leaf", "pods=3"]) == EXIT_USAGE
    assert "unknown parameter 'pods'" in capsys.readouterr().err
    assert main(["topo", "show", "spine_leaf", "spines"]) == EXIT_USAGE


def test_calc_kv_prints_the_llama_70b_numbers(capsys):
    assert main(["calc", "kv", "--model", "llama-3-70b", "--tokens", "8000"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "327,680" in out and "2,621,440,000" in out
    assert (
        main(["calc", "kv", "--model", "llama-3-70b", "--tokens", "8000", "--dtype", "int8"]) == 0
    )
    assert "1,310,720,000" in capsys.readouterr().out


def test_unknown_model_lists_presets(capsys):
    assert main(["calc", "kv", "--model", "gpt-9", "--tokens", "1"]) == EXIT_USAGE
    assert "llama-3-70b" in capsys.readouterr().err
