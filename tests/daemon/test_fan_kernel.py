"""The ``kernel`` transport: the daemon's own use of /dev/ipmi0.

Talking to a BMC through it needs an IPMI device, which only the lab's nodes
have (qemu's KCS interface to the simulator): ``tests/lab/test_fan.py`` runs
the daemon with this transport, its default, on both nodes.  Here: the
configuration that picks it, the ioctl numbers it sends, and how a missing or
wrong device is told apart from a silent BMC, on this host's real kernel.
"""

from __future__ import annotations

import ctypes
import struct

import pytest
from fan_fixtures import raw_config
from junkyard_fan.config import ConfigError, parse_config
from junkyard_fan.ipmi import Bmc, BmcLocalError, BmcToolError, RawRequest
from junkyard_fan.ipmidev import (
    IPMICTL_RECEIVE_MSG_TRUNC,
    IPMICTL_SEND_COMMAND,
    KernelTransport,
)


def bmc_config(**bmc):
    raw = raw_config()
    raw["bmc"] = bmc
    return parse_config(raw, env={"BMC_PW": "secret"})


def test_in_band_needs_no_tool_and_lan_keeps_freeipmi():
    assert bmc_config(access="inband").bmc.tool == "kernel"
    assert bmc_config(access="lan", host="10.0.0.1", username="admin",
                      password_env="BMC_PW").bmc.tool == "freeipmi"
    assert bmc_config(access="inband", tool="freeipmi").bmc.tool == "freeipmi"
    assert isinstance(Bmc(bmc_config(access="inband").bmc, bmc_config().timings).transport,
                      KernelTransport)


def test_kernel_over_lan_is_refused_with_its_key():
    with pytest.raises(ConfigError) as exc:
        bmc_config(access="lan", tool="kernel", host="10.0.0.1", username="admin",
                   password_env="BMC_PW")
    assert any(p.startswith("bmc.tool: kernel is in-band only") for p in exc.value.problems)


@pytest.mark.skipif(struct.calcsize("P") != 8, reason="the numbers of a 64-bit kernel")
def test_ioctl_numbers_are_the_kernels():
    # <linux/ipmi.h> on x86_64 and arm64: _IOR('i', 13, struct ipmi_req) and
    # _IOWR('i', 11, struct ipmi_recv); a struct laid out wrongly changes its size,
    # and with it the number the kernel answers ENOTTY to.
    assert IPMICTL_SEND_COMMAND == 0x8028690D
    assert IPMICTL_RECEIVE_MSG_TRUNC == 0xC030690B
    assert ctypes.sizeof(ctypes.c_long) == 8


def test_a_missing_device_is_a_tool_problem_naming_it(tmp_path):
    cfg = bmc_config(access="inband", device=str(tmp_path / "ipmi7"))
    bmc = Bmc(cfg.bmc, cfg.timings, sleep=lambda _s: None)
    with pytest.raises(BmcToolError, match=r"ipmi7 does not exist .*ipmi_devintf"):
        bmc.discover()


def test_a_device_that_is_not_ipmi_is_a_local_error_not_a_silent_bmc(tmp_path):
    # /dev/null opens, and the kernel refuses the IPMI ioctl on it: that must
    # not read as "the BMC does not answer" (which would only hold the zones)
    cfg = bmc_config(access="inband", device="/dev/null")
    transport = KernelTransport(cfg.bmc, cfg.timings)
    with pytest.raises(BmcLocalError, match=r"/dev/null: send"):
        transport.raw([RawRequest(0x06, 0x01)])
    assert transport.fd is None, "the device is opened again on the next call"
    with pytest.raises(BmcLocalError, match=r"/dev/null: send"):
        transport.raw_one(RawRequest(0x06, 0x01))
