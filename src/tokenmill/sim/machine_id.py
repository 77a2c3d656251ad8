"""Which machine a calibrated profile priced: ``tokenmill sim calibrate`` records it in the
profile, and loading a CPU profile on another kind of CPU warns once per process.

A profile fitted on one CPU prices another's steps by that first CPU's rates: between
sessions of this project the VM's CPU changed from an AVX2 EPYC to Xeons with and without
AVX512-BF16 and AMX, whose kernels take other paths, while the profile file stayed in
``~/.cache``. The fingerprint is what decides the kernels' speed and says nothing private: the
vendor, family, model and model name from /proc/cpuinfo, the instruction-set extensions our CPU
kernels and torch's dispatch on (``ISA_FLAGS``), and the CPUs this process may run on. A GPU
profile records the GPU's name; it is not checked on load (telling the GPU here would take
torch, which ``tokenmill sim`` does not import, and such a profile is usually read on another
host than the one it was measured on). Profiles written before the fingerprint existed load
without a check."""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

log = logging.getLogger(__name__)

ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve")
"""The /proc/cpuinfo flags (x86 ``flags``, Arm ``Features``) a fingerprint keeps."""
_CPUINFO_KEYS = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "model name": "cpu"}
_warned: set[str] = set()


def cpu_fingerprint(cpuinfo: str | None = None) -> dict:
    """This machine's CPU as a calibrated profile records it (module docstring); ``cpuinfo``: the
    text of /proc/cpuinfo (read when None; only its first processor's lines are used)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    flags: set[str] = set()
    for line in cpuinfo.split("\n\n")[0].splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key in _CPUINFO_KEYS:
            fields[_CPUINFO_KEYS[key]] = value
        elif key in ("flags", "Features"):
            flags = set(value.split())
    fields.setdefault("cpu", platform.processor() or "unknown CPU")
    return {"device": "cpu", **fields, "isa": [f for f in ISA_FLAGS if f in flags], "cpus": _cpus()}


def gpu_fingerprint(gpu_name: str) -> dict:
    return {"device": "cuda", "gpu": gpu_name}


def differences(recorded: dict, here: dict) -> list[str]:
    """What differs between a profile's recorded CPU and this one, in words (empty: the same kind)."""
    out = [f"{key} {recorded.get(key)!r}, here {here.get(key)!r}" for key in ("vendor", "family", "model", "cpu")
           if recorded.get(key) != here.get(key)]
    then, now = set(recorded.get("isa", ())), set(here.get("isa", ()))
    if then != now:
        gone, new = sorted(then - now), sorted(now - then)
        out.append("instruction sets " + "; ".join(
            part for part in (gone and f"{', '.join(gone)} there, not here", new and f"{', '.join(new)} here only")
            if part))
    if recorded.get("cpus") != here.get("cpus"):
        out.append(f"{recorded.get('cpus')} CPUs there, {here.get('cpus')} here")
    return out


def warn_if_other_machine(name: str, recorded: dict | None, here: dict | None = None) -> list[str]:
    """Log a warning (once per profile and process) when CPU profile ``name`` was calibrated on
    another kind of CPU than this one; returns the differences (empty when none, when nothing was
    recorded, or for a GPU profile)."""
    if not recorded or recorded.get("device") != "cpu":
        return []
    found = differences(recorded, here or cpu_fingerprint())
    if found and name not in _warned:
        _warned.add(name)
        log.warning("the %s profile was calibrated on another CPU (%s): it prices that machine's steps, not "
                    "this one's; run `tokenmill sim calibrate` here for figures of this machine",
                    name, "; ".join(found))
    return found


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
