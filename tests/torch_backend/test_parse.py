"""msprobe parse on real fixture tensors: pt, cn, pk, convert, the shell, and the ACL refusal."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS

from msprobe.cli.main import cli

RANK = REFERENCE_DUMPS / "pytorch" / "tensor_L1" / "step0" / "rank"
RELU_OUT = RANK / "dump_tensor_data" / "Functional.relu.0.forward.output.0.pt"
RELU_IN = RANK / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt"


def run(*args):
    return CliRunner().invoke(cli, ["parse", *map(str, args)], prog_name="msprobe")


def test_pt_prints_statistics_and_writes_text(tmp_path):
    target = tmp_path / "relu.pt"
    target.write_bytes(RELU_OUT.read_bytes())
    result = run("pt", "-n", target, "-s")
    array = torch.load(RELU_OUT, weights_only=True).numpy()
    assert result.exit_code == 0
    assert f"[Max: {array.max():.6g}]" in result.output and "[Shape: (4, 8, 6, 6)]" in result.output
    assert np.allclose(np.loadtxt(f"{target}.txt"), array.ravel())


def test_cn_reports_metrics_and_the_elements_over_tolerance():
    result = run("cn", "-m", RELU_OUT, "-g", RELU_IN, "-p", "3")
    a = torch.load(RELU_OUT, weights_only=True).double().numpy().ravel()
    b = torch.load(RELU_IN, weights_only=True).double().numpy().ravel()
    cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert result.exit_code == 0
    assert f"Cosine: {cosine}"[:14] in result.output
    assert (
        f"{int(((np.abs(a - b) > 0.001) & (np.abs(a - b) > 0.001 * np.abs(b))).sum())} elements exceed" in result.output
    )
    assert "Error Item Table" in result.output


def test_pk_shows_one_entry_with_the_reference_underscore_spelling():
    result = run("pk", "-f", RANK / "dump.json", "-n", "Functional_conv2d_0_forward")
    assert result.exit_code == 0 and "[Functional.conv2d.0.forward.output.0]" in result.output
    assert "Stack Info:" in result.output
    missing = run("pk", "-f", RANK / "dump.json", "-n", "Functional.gelu.0.forward")
    assert missing.exit_code == 2 and "has no entry" in missing.output


def test_convert_round_trip(tmp_path):
    assert run("convert", "-i", RELU_OUT, "-o", tmp_path / "a.npy").exit_code == 0
    assert run("convert", "-i", tmp_path / "a.npy", "-o", tmp_path / "b.pt").exit_code == 0
    assert torch.equal(torch.load(tmp_path / "b.pt", weights_only=True), torch.load(RELU_OUT, weights_only=True))


def test_acl_commands_are_refused_clearly():
    result = run("cad", "-m", "/some/dump")
    assert result.exit_code == 2 and "Ascend CANN" in result.output


def test_missing_file_is_one_line(tmp_path):
    result = run("pt", "-n", tmp_path / "nope.npy")
    assert (
        result.exit_code == 2
        and "nope.npy: tensor file not found" in result.output
        and "Traceback" not in result.output
    )


def test_interactive_shell():
    script = f"pt -n {RELU_IN}\ncn -m {RELU_IN} -g {RELU_IN}\nvc -m x -g y\nbogus\nexit\n"
    result = subprocess.run(
        [sys.executable, "-m", "msprobe.cli.main", "parse"], input=script, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0
    assert result.stdout.count("Parse >>> ") >= 5
    assert "[Shape: (4, 8, 6, 6)]" in result.stdout and "Cosine: 1.0" in result.stdout
    assert "Ascend CANN" in result.stdout and "Unknown command 'bogus'" in result.stdout


@pytest.mark.parametrize("suffix", [".npy"])
def test_npy_needs_no_framework(tmp_path, suffix):
    np.save(tmp_path / f"x{suffix}", np.array([1.0, 2.0]))
    assert "[Max: 2]" in run("pt", "-n", tmp_path / f"x{suffix}").output


def test_outputs_are_never_written_through_a_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "link.npy").symlink_to(victim)
    assert run("convert", "-i", RELU_OUT, "-o", tmp_path / "link.npy").exit_code == 0
    assert victim.read_text() == "keep me"  # the link was replaced by the new file, not written through
    assert not (tmp_path / "link.npy").is_symlink() and (tmp_path / "link.npy").stat().st_mode & 0o777 == 0o640
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked_folder").symlink_to(tmp_path / "elsewhere")
    result = run("convert", "-i", RELU_OUT, "-o", tmp_path / "linked_folder" / "x.npy")
    assert result.exit_code != 0 and "symbolic link" in result.output and not list((tmp_path / "elsewhere").iterdir())


def test_pt_names_bfloat16_and_shows_nan(tmp_path):
    torch.save(torch.tensor([1.0, float("nan")], dtype=torch.bfloat16), tmp_path / "bf.pt")
    result = run("pt", "-n", tmp_path / "bf.pt")
    assert result.exit_code == 0 and "[Dtype: bfloat16]" in result.output and "[Max: nan]" in result.output


def test_a_pickle_that_holds_more_than_tensors_is_refused_in_one_line(tmp_path):
    """A .pt whose pickle calls a function is never unpickled, and the refusal names the file in one line."""
    import pickle

    class Payload:
        def __reduce__(self):
            return (print, ("unpickled",))

    for name, write in (("plain.pt", lambda p: p.write_bytes(pickle.dumps(Payload()))),
                        ("saved.pt", lambda p: torch.save({"a": Payload()}, p))):  # fmt: skip
        path = tmp_path / name
        write(path)
        result = subprocess.run([sys.executable, "-m", "msprobe.cli.main", "parse", "pt", "-n", str(path)],
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 2 and "unpickled" not in result.stdout
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"Error: {path}: not a readable tensor file (it holds objects other than tensors")
