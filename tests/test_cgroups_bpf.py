"""The device program assembler and decoder (pure), and one verifier error from the kernel."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.cgroups import bpf
from ocihook.plan import devrules
from ocihook.plan.devrules import DeviceRule
from tests.support.device_programs import Decoded, decode_device_filter

rules_st = st.lists(
    st.tuples(
        st.builds(
            DeviceRule,
            st.sampled_from("cb"),
            st.one_of(st.just(-1), st.integers(0, devrules.MAX_MAJOR)),
            st.one_of(st.just(-1), st.integers(0, devrules.MAX_MINOR)),
            st.sampled_from(["r", "w", "m", "rw", "rm", "wm", "rwm"]),
        ),
        st.booleans(),
    ),
    max_size=8,
)


@given(rules_st, st.booleans())
def test_decoder_reads_back_what_the_assembler_wrote(rules, default_allow):
    insns = bpf.device_filter(rules, default_allow)
    assert bpf.decode(bpf.encode(insns)) == insns
    assert decode_device_filter(insns) == Decoded(tuple(rules), default_allow, 0)


@given(rules_st, rules_st)
def test_prefix_then_runtime_program(ours, runtime):
    allow = [(r, True) for r, _ in ours]
    insns = bpf.allow_prefix([r for r, _ in ours]) + bpf.device_filter(runtime)
    assert decode_device_filter(insns) == Decoded(tuple(allow + runtime), False, 0)


def test_prefix_keeps_the_context_register():
    # The runtime's program that follows reads the context from R1 again.
    for code, dst, *_ in bpf.allow_prefix(
        [DeviceRule("c", 10, 237, "r"), DeviceRule("b", -1, -1, "rwm")]
    ):
        if code not in bpf._JUMPS and code != bpf.JMP_EXIT:
            assert dst != bpf.R1


def test_block_layout():
    assert bpf.rule_block(DeviceRule("c", 10, 237, "rw")) == [
        (bpf.JMP_JNE_K, 2, 0, 7, 2),  # type != char -> next block (insn 8)
        (bpf.ALU32_MOV_X, 0, 3, 0, 0),  # r0 = access
        (bpf.ALU32_AND_K, 0, 0, 0, 6),  # r0 &= READ|WRITE
        (bpf.JMP_JNE_X, 0, 3, 4, 0),  # asked for more -> next block
        (bpf.JMP_JNE_K, 4, 0, 3, 10),
        (bpf.JMP_JNE_K, 5, 0, 2, 237),
        (bpf.ALU32_MOV_K, 0, 0, 0, 1),
        (bpf.JMP_EXIT, 0, 0, 0, 0),
    ]


def test_decoder_understands_runc_blocks():
    # runc uses R1 as its scratch register for the access check.
    runc = bpf.prologue() + [
        (bpf.JMP_JNE_K, 2, 0, 6, 2),
        (bpf.ALU32_MOV_X, 1, 3, 0, 0),
        (bpf.ALU32_AND_K, 1, 0, 0, 6),
        (bpf.JMP_JNE_X, 1, 3, 3, 0),
        (bpf.JMP_JNE_K, 4, 0, 2, 1),
        (bpf.ALU32_MOV_K, 0, 0, 0, 1),
        (bpf.JMP_EXIT, 0, 0, 0, 0),
        (bpf.ALU32_MOV_K, 0, 0, 0, 0),
        (bpf.JMP_EXIT, 0, 0, 0, 0),
    ]
    assert decode_device_filter(runc) == Decoded(((DeviceRule("c", 1, -1, "rw"), True),), False, 0)


def test_decoder_stops_at_unknown_code():
    insns = bpf.allow_prefix([DeviceRule("c", 1, 3, "r")]) + [(bpf.JMP_CALL, 0, 0, 0, 15)] * 3
    assert decode_device_filter(insns) == Decoded(((DeviceRule("c", 1, 3, "r"), True),), None, 3)
    assert decode_device_filter([(bpf.JMP_EXIT, 0, 0, 0, 0)]).undecoded == 1


def test_reloadable_problem():
    ok = bpf.device_filter([])
    assert bpf.reloadable_problem(ok) is None
    assert bpf.reloadable_problem([]) == "the kernel returned no instructions"
    assert bpf.reloadable_problem([(0, 0, 0, 0, 0)] * 2) == (
        "instruction 0 is not valid (blinded or hidden by the kernel?)"
    )
    blinded = [(bpf.ALU32_MOV_K, 11, 0, 0, 5)] + ok
    assert "instruction 0 is not valid" in bpf.reloadable_problem(blinded)
    assert bpf.reloadable_problem(ok[:-1]) == "the last instruction is not exit or ja"


def test_rule_text_form():
    assert DeviceRule("b", 8, -1, "rwm").line() == "b 8:* rwm"
    assert DeviceRule("c", -1, 3, "r").line() == "c *:3 r"


@pytest.mark.root
def test_kernel_verifier_error_is_one_line():
    with pytest.raises(bpf.BpfError) as exc:
        bpf.prog_load([(bpf.ALU32_MOV_K, 0, 0, 0, 0)])  # no exit
    assert exc.value.strerror.startswith("BPF_PROG_LOAD: Invalid argument (verifier: ")
    assert "\n" not in exc.value.strerror
