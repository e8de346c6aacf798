"""Every command of the CLI on arguments drawn by hypothesis (issue 35): whatever is given,
the command ends with a status (0, 1) or argparse's usage error (2), never a traceback of
a foreign exception. Values are drawn from what users mistype: negative and fractional
counts, NaN and infinity, empty strings, a file where a folder goes and the other way
round, paths that do not exist, patterns, tier and node names that are not there.
Commands run on tiny inputs (a tree of two small photos), so each example is quick."""
from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from gpudecode.cli import build_parser, main

COMMANDS = ["shard", "inspect", "precache", "verify", "plan", "bench make-data", "bench formats", "bench io",
            "bench train", "bench profile"]


@pytest.fixture(scope="module")
def places(tmp_path_factory, photos):
    d = tmp_path_factory.mktemp("clifuzz")
    tree = d / "tree"
    for k, cls in enumerate(("a", "b")):
        (tree / cls).mkdir(parents=True)
        Image.fromarray(np.ascontiguousarray(photos["coffee"][:24 + k, :32])).save(tree / cls / f"x{k}.jpg")
    (d / "file.txt").write_text("not a folder\n")
    (d / "bad.json").write_text('{"command": "formats", "img_per_s": {"jpg": {"gpudecode": {"median": 0}}}}')
    (d / "empty").mkdir()
    return {"tree": str(tree), "file": str(d / "file.txt"), "json": str(d / "bad.json"), "empty": str(d / "empty"),
            "missing": str(d / "missing"), "out": str(d / "out"), "pattern": str(d / "out" / "s-%06d.tar")}


def _options(command: str) -> tuple[list[argparse.Action], list[argparse.Action]]:
    parser = build_parser()
    sub = parser
    for word in command.split():
        choices = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices
        sub = choices[word]
    options = [a for a in sub._actions if a.option_strings and a.option_strings[0] != "-h"]
    positionals = [a for a in sub._actions if not a.option_strings]
    return options, positionals


VALUES = ["-5", "0", "1", "2", "2.5", "nan", "inf", "-inf", "", "x", "1e309", "3,0", "none", "auto", "cuda",
          "jpg:100:2", "jpg:nan:1", "nfs-hdd:devices=1.5", "nope:x=1", "gpus=nan", "cores=-1", "224x0", "1GB",
          "99999999999999999999", "center", "png,jpg", "local-nvme,nope"]


@st.composite
def argv(draw, places):
    command = draw(st.sampled_from(COMMANDS))
    options, positionals = _options(command)
    paths = list(places.values())
    args = command.split()
    for _ in positionals:  # mostly a real place (a tree, a pattern), sometimes not
        args.append(draw(st.sampled_from([places["tree"], places["tree"], places["pattern"], places["out"]]
                                         + paths + ["", "x"])))
    for _ in range(draw(st.integers(0, 4))):
        opt = draw(st.sampled_from(options))
        args.append(opt.option_strings[0])
        if opt.nargs != 0:  # (flags take no value)
            pool = list(opt.choices) if opt.choices and draw(st.booleans()) else VALUES + paths
            args.append(str(draw(st.sampled_from(pool))))
    if command == "bench make-data":
        args += ["--count", "2", "--quiet"]  # (argparse takes the last: quick whatever came before)
    if command == "plan":
        args += ["--gpus", draw(st.sampled_from(["1,8", "8,1,0", "2.5", "64"])), "--out",
                 draw(st.sampled_from(["", places["out"], places["file"] + "/x"]))]
        if draw(st.booleans()):
            args += ["--cost", draw(st.sampled_from(VALUES[15:18])), "--rate", draw(st.sampled_from(VALUES[:8]))]
    if command.startswith("bench") and command != "bench make-data":
        args += ["--out", places["out"]]
    if command == "precache":
        args += ["--quiet"]
    return args


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_no_command_ends_in_a_foreign_traceback(places, data, capsys, monkeypatch):
    monkeypatch.chdir(places["empty"])
    args = data.draw(argv(places))
    try:
        with warnings.catch_warnings():  # (warnings are what --keep-going and plan say: output, not failures)
            warnings.simplefilter("ignore")
            status = main(args)
    except SystemExit as e:  # argparse: a usage error names the option
        assert e.code in (0, 2), args
        return
    finally:
        capsys.readouterr()
    assert status in (0, 1), args


def test_the_issue_cases_are_one_line_errors(places, capsys, tmp_path):
    cases = [["bench", "make-data", places["file"], "--count", "2", "--quiet"],
             ["bench", "formats", places["tree"], "--crop", "-5"],
             ["plan", "--cost", "jpg:100:2", "--rate", "1000", "--node", "gpus=nan", "--out", ""],
             ["plan", "--cost", "jpg:100:2", "--rate", "1000", "--tier", "nope:x=1", "--out", ""],
             ["plan", "--from", places["json"], "--rate", "100", "--out", ""],
             ["plan", "--cost", "jpg:100:2", "--rate", "1000", "--gpus", "100000000", "--out", ""]]
    for args in cases:
        try:
            status = main(args)
        except SystemExit as e:
            status = e.code
        err = capsys.readouterr().err
        assert status in (1, 2) and "Traceback" not in err and "error" in err, (args, err)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only file system needs root")
def test_shard_onto_a_read_only_mount_is_a_one_line_error(places, tmp_path, capsys):
    import subprocess

    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("this machine does not let the test mount a tmpfs")
    try:
        assert main(["shard", places["tree"], str(mnt / "s-%06d.tar"), "--quiet"]) == 1
        assert "Read-only file system" in capsys.readouterr().err
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
