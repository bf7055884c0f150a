"""What an installation gives a user: the license, the shipped configurations, the commands without their extras.

The last test builds the wheel and installs it alone (with numpy, its one dependency) in a fresh virtual environment.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import ace_hybrid
from ace_hybrid.cli import build_parser, find_config, main, shipped_names
from ace_hybrid.config import load_config, read_toml

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = read_toml(REPO / "pyproject.toml", "pyproject")
#: Subprocesses import the ace_hybrid under test, wherever it is (not an older one installed in the environment).
UNDER_TEST = {**os.environ, "PYTHONPATH": str(Path(ace_hybrid.__file__).parents[1])}
#: Every optional dependency a command imports: blocked, they stand for an installation without extras.
EXTRA_MODULES = ["torch", "grid2op", "lightsim2grid", "gymnasium", "tqdm", "matplotlib", "tensorboardX", "transformers",
                 "peft"]


def test_license_file_is_mit_and_in_the_metadata() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 ace_hybrid developers" in text
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]


def test_every_shipped_file_resolves_by_name() -> None:
    assert shipped_names("configs") == sorted(p.stem for p in (REPO / "configs").glob("*.toml"))
    assert shipped_names("experiments") == sorted(p.stem for p in (REPO / "experiments").glob("*.toml"))
    for name in shipped_names("configs"):
        assert find_config(name).name == f"{name}.toml"
        assert find_config(f"{name}.toml") == find_config(name)
        load_config(find_config(name))  # a valid configuration
    for name in shipped_names("experiments"):
        path = find_config(name, "experiments")
        config = read_toml(path, "experiment file")["config"]
        assert (path.parent / config).is_file(), f"{name}: config = {config!r} must resolve beside it once installed"


def test_unknown_names_list_the_shipped_ones() -> None:
    with pytest.raises(FileNotFoundError, match="no training configuration 'nope'.*l2rpn_case14_sandbox"):
        find_config("nope")
    with pytest.raises(FileNotFoundError, match="experiment file nowhere/make_run.toml does not exist"):
        find_config("nowhere/make_run.toml", "experiments")


def test_commands_take_names_and_the_repositorys_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    args = parser.parse_args(["train", "--config", "l2rpn_neurips_2020_track1"])
    assert args.config == find_config("l2rpn_neurips_2020_track1")
    assert parser.parse_args(["experiment", "--config", "make_run"]).config.name == "make_run.toml"
    monkeypatch.chdir(REPO)  # the README's commands, run from a checkout
    assert parser.parse_args(["train", "--config", "configs/l2rpn_neurips_2020_track1.toml"]).config.is_file()
    assert parser.parse_args(["experiment", "--config", "experiments/make_run.toml"]).config.is_file()


def test_unknown_config_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--config", "nope"])
    assert exit_info.value.code == 2
    assert "l2rpn_case14_sandbox" in capsys.readouterr().err


def _run_without_extras(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = (f"import sys\nsys.modules.update(dict.fromkeys({EXTRA_MODULES!r}))  # import of X halted: not installed\n"
            f"from ace_hybrid.cli import main\nsys.exit(main({argv!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120,
                          cwd=cwd, env=UNDER_TEST)


def test_help_needs_no_extra(tmp_path: Path) -> None:
    for argv in (["--help"], ["train", "--help"], ["experiment", "--help"]):
        out = _run_without_extras(argv, tmp_path)
        assert out.returncode == 0 and "usage: ace-hybrid" in out.stdout, out.stderr


@pytest.mark.parametrize(("argv", "extra"), [
    (["train", "--config", "l2rpn_case14_sandbox", "--run-dir", "run"], "train"),
    (["evaluate", "--env", "l2rpn_case14_sandbox", "--agent", "do-nothing", "--out", "eval"], "grid"),
    (["experiment", "--config", "make_run", "--out", "exp"], "train"),
])
def test_a_command_without_its_extra_names_it(argv: list[str], extra: str, tmp_path: Path) -> None:
    out = _run_without_extras(argv, tmp_path)
    assert out.returncode == 2, out.stderr
    assert f"pip install 'ace-hybrid[{extra}]'" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_report_without_results_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()


def test_config_reads_toml_with_tomli_below_python_3_11() -> None:
    """pyproject requires tomli exactly where the configuration imports it: run config/loading.py as Python 3.10 would
    see it."""
    assert "tomli>=2.0; python_version < '3.11'" in PYPROJECT["project"]["dependencies"]
    code = f"""
import importlib.util, sys, tomllib
sys.version_info = (3, 10, 13, "final", 0)
sys.modules["tomllib"] = None          # absent before 3.11
sys.modules["tomli"] = tomllib         # what pip installs there (same API)
spec = importlib.util.spec_from_file_location("config310", {str(REPO / "python/ace_hybrid/config/loading.py")!r})
config = importlib.util.module_from_spec(spec)
sys.modules["config310"] = config
spec.loader.exec_module(config)
assert config.tomllib is tomllib
print(config.load_config({str(REPO / "configs/l2rpn_case14_sandbox.toml")!r}).env.name)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "l2rpn_case14_sandbox", out.stderr


# ----------------------------------------------------------------------------- the wheel, installed alone


def _link_numpy(target: Path) -> None:
    """numpy (the one required dependency) for the fresh environment, linked from this one: no network needed."""
    spec = importlib.util.find_spec("numpy")
    assert spec is not None and spec.origin is not None
    site = Path(spec.origin).parents[1]
    target.mkdir()
    for name in ("numpy", "numpy.libs"):
        if (site / name).exists():
            (target / name).symlink_to(site / name)


@pytest.mark.slow
def test_the_wheel_alone_runs_the_cli_and_ships_configs_and_license(tmp_path: Path) -> None:
    pytest.importorskip("scikit_build_core")  # built with this environment's tools (cibuildwheel's tests lack them)
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w",
                            str(dist), str(REPO)], capture_output=True, text=True, check=False, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("ace_hybrid-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for kind in ("configs", "experiments"):
        shipped = sorted(Path(n).stem for n in names if n.startswith(f"ace_hybrid/data/{kind}/"))
        assert shipped == sorted(p.stem for p in (REPO / kind).glob("*.toml")), kind
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    assert 'Requires-Dist: tomli>=2.0; python_version < "3.11"' in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                              str(wheel)], capture_output=True, text=True, check=False, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    _link_numpy(tmp_path / "deps")
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "numpy_link.pth").write_text(str(tmp_path / "deps") + "\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    work = tmp_path / "work"  # not the repository: nothing may come from a checkout
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, check=False, timeout=120, cwd=work, env=clean)

    probe = run(str(python), "-c", "import importlib.util as u; print([m for m in ('torch', 'grid2op', 'gymnasium', "
                "'matplotlib') if u.find_spec(m)])")
    assert probe.stdout.strip() == "[]", "the fresh environment must hold no extra: " + probe.stdout + probe.stderr
    cli = str(env_dir / "bin" / "ace-hybrid")
    assert run(cli, "--help").returncode == 0
    out = run(cli, "train", "--config", "l2rpn_neurips_2020_track1", "--run-dir", "run")
    assert out.returncode == 2 and "pip install 'ace-hybrid[train]'" in out.stderr, out.stderr
    out = run(cli, "report", str(work))
    assert out.returncode == 2 and "no results.json" in out.stderr, out.stderr
    code = ("import ace_hybrid, sys\nfrom ace_hybrid.cli import find_config, shipped_names\n"
            "for kind in ('configs', 'experiments'):\n"
            "    for name in shipped_names(kind):\n"
            "        assert find_config(name, kind).is_relative_to(sys.prefix), find_config(name, kind)\n"
            "print(len(shipped_names('configs')), len(shipped_names('experiments')))\n")
    out = run(str(python), "-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(list((REPO / k).glob("*.toml")))) for k in ("configs", "experiments")]
