"""A calibrated profile records the machine it priced, and loading a CPU profile on another kind of
CPU warns (sim/machine_id.py)."""

from __future__ import annotations

import json
import logging

import pytest

import tokenmill.sim.calibrate as calibrate
import tokenmill.sim.machine_id as machine_id
from tokenmill.sim.machine_id import cpu_fingerprint, differences, gpu_fingerprint, warn_if_other_machine

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 hypervisor

processor\t: 1
vendor_id\t: GenuineIntel
model\t\t: 999
"""
EPYC = XEON.replace("GenuineIntel", "AuthenticAMD").replace("207", "17").replace(" avx512f avx512_bf16", "")


def test_fingerprint_reads_the_first_processor_and_the_kernels_flags():
    f = cpu_fingerprint(XEON)
    assert f == {"device": "cpu", "vendor": "GenuineIntel", "family": "6", "model": "207",
                 "cpu": "Intel(R) Xeon(R) Processor", "isa": ["avx2", "fma", "avx512f", "avx512_bf16"],
                 "cpus": f["cpus"]}
    assert f["cpus"] >= 1
    assert differences(f, cpu_fingerprint(XEON)) == []
    found = differences(f, {**cpu_fingerprint(EPYC), "cpus": f["cpus"] * 2})
    assert found == ["vendor 'GenuineIntel', here 'AuthenticAMD'", "model '207', here '17'",
                     "instruction sets avx512_bf16, avx512f there, not here",
                     f"{f['cpus']} CPUs there, {f['cpus'] * 2} here"]


def test_loading_a_profile_of_another_cpu_warns_once(tmp_path, monkeypatch, caplog):
    from tokenmill.sim.hardware import H100

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    monkeypatch.setattr(machine_id, "_warned", set())
    here = cpu_fingerprint()
    profile = {**H100.to_dict(), "name": "this-machine"}
    (tmp_path / "this-machine.json").write_text(json.dumps({**profile, "machine": here}))
    (tmp_path / "other.json").write_text(json.dumps({**profile, "machine": {**here, "model": "other"}}))
    (tmp_path / "gpu.json").write_text(json.dumps({**profile, "machine": gpu_fingerprint("NVIDIA H200")}))
    (tmp_path / "old.json").write_text(json.dumps(profile))  # written before profiles recorded a machine
    with caplog.at_level(logging.WARNING, logger="tokenmill.sim.machine_id"):
        for name in ("this-machine", "gpu", "old"):
            assert calibrate.load_profile(name).memory_bw == H100.memory_bw
        assert not caplog.records
        calibrate.load_profile("other")
        calibrate.load_profile("other")
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "the other profile was calibrated on another CPU (model 'other', here" in message
    assert "run `tokenmill sim calibrate` here" in message
    assert warn_if_other_machine("gpu", gpu_fingerprint("NVIDIA H200"), {**here, "model": "x"}) == []


@pytest.mark.parametrize("text", ["", "processor\t: 0\n"])
def test_fingerprint_of_an_unreadable_cpuinfo_still_names_a_cpu(text):
    f = cpu_fingerprint(text)
    assert f["device"] == "cpu" and f["cpu"] and f["isa"] == []
