"""The comparison's modes: the command line accepts each, and each gateway gets its settings."""

from __future__ import annotations

import argparse

import pytest

from loadtests.compare import add_arguments
from loadtests.compare_options import compare_config
from loadtests.modes import GATEWAY_MODES, MODES, mode_gateway_config, uses_oracle
from loadtests.options import UsageError


def parse(*flags: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="mixed")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    add_arguments(p)
    return p.parse_args(list(flags))


def test_the_preempt_modes_are_accepted() -> None:
    cfg = compare_config(parse("--modes", "direct,short_first_preempt,oracle_preempt"))
    assert cfg.modes == ("direct", "short_first_preempt", "oracle_preempt")
    assert {"short_first_preempt", "oracle_preempt"} <= set(MODES)
    with pytest.raises(UsageError, match="--modes"):
        compare_config(parse("--modes", "fifo,preempt"))


def conf(mode: str) -> dict:
    return mode_gateway_config(mode, "redis://127.0.0.1:1/0", "p", ["http://127.0.0.1:2", "http://127.0.0.1:3"],
                               "sim-model", 8, 4000, {"long_share_max": 0.5, "preempt": False})


@pytest.mark.parametrize(("mode", "policy"), [("short_first_preempt", "short_first"), ("oracle_preempt", "oracle")])
def test_preempt_modes_preempt_and_their_backends_resume_like_vllm(mode: str, policy: str) -> None:
    c = conf(mode)
    assert c["policy"] == policy and c["preempt"] is True  # the mode's own setting wins over --gateway-set
    assert c["long_share_max"] == 0.5
    assert [b["resume"] for b in c["backends"]] == ["vllm", "vllm"]
    assert all(b["max_concurrency"] == 8 for b in c["backends"])


def test_other_modes_get_no_resume_setting() -> None:
    for mode in GATEWAY_MODES:
        if not mode.endswith("_preempt") and mode != "fifo_pausable":
            assert all("resume" not in b for b in conf(mode)["backends"]), mode
    high = conf("adaptive_high")
    assert [(b["max_concurrency"], b["adaptive"]) for b in high["backends"]] == [(128, True), (128, True)]


def test_the_short_lane_modes_turn_the_lane_on() -> None:
    assert conf("short_lane")["short_lane"] is True and conf("short_lane")["preempt"] is False
    assert conf("short_lane_preempt")["short_lane"] is True and conf("short_lane_preempt")["preempt"] is True
    assert "short_lane" not in conf("short_first")


def test_only_oracle_modes_are_sent_the_true_length() -> None:
    assert [m for m in MODES if uses_oracle(m)] == [
        "oracle", "oracle_reserved", "static_high_oracle", "adaptive_high_oracle", "oracle_preempt"]
    assert conf("oracle")["allow_oracle"] is True and conf("short_first")["allow_oracle"] is False


def test_the_fifo_twin_is_fifo_again_an_a_a_control() -> None:
    assert conf("fifo_twin") == conf("fifo")
    assert compare_config(parse("--modes", "fifo,fifo_twin")).modes == ("fifo", "fifo_twin")


def test_fifo_pausable_is_fifo_whose_streams_may_be_paused_but_never_are() -> None:
    c = conf("fifo_pausable")
    assert c["policy"] == "fifo" and c["preempt"] is True and c["pause_budget"] == 0.0
    assert [b["resume"] for b in c["backends"]] == ["vllm", "vllm"]
    assert {k: v for k, v in c.items() if k not in ("preempt", "pause_budget", "backends")} == {
        k: v for k, v in conf("fifo").items() if k not in ("preempt", "pause_budget", "backends")}


def test_an_arm_may_carry_gateway_settings_of_its_own() -> None:
    arm = "short_first_preempt@slack_per_token_s=0.005@max_slack_s=10"
    assert compare_config(parse("--modes", f"fifo,short_first_preempt,{arm}")).modes == (
        "fifo", "short_first_preempt", arm)
    plain, own = conf("short_first_preempt"), conf(arm)
    assert own["slack_per_token_s"] == 0.005 and own["max_slack_s"] == 10
    assert {k: v for k, v in own.items() if k not in ("slack_per_token_s", "max_slack_s")} == plain
    # the arm's own settings win over the mode's and over --gateway-set
    assert conf("short_first_preempt@preempt=false")["preempt"] is False
    assert conf("short_first@long_share_max=0.9")["long_share_max"] == 0.9
    assert uses_oracle("oracle@max_slack_s=5") and not uses_oracle("short_first@max_slack_s=5")


@pytest.mark.parametrize(("arm", "says"), [
    ("direct@max_slack_s=5", "only a gateway mode"),
    ("fifo@policy=oracle", "set by the comparison itself"),
    ("fifo@max_slack_s", "expected KEY=VALUE"),
    ("fifo@max_slack_s=[", "not valid YAML"),
    ("no_such_mode@max_slack_s=5", "only a gateway mode"),
])
def test_an_arm_with_malformed_settings_is_refused_saying_why(arm: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        compare_config(parse("--modes", f"fifo,{arm}"))
