"""Task runner for the lightning-accel monorepo: `nox -l` lists the sessions.

Every session installs with pip into its own virtual environment, torch first and pinned (`torch==2.13.0` is a
local CPU wheel; any other version pulls several GB of CUDA packages), then the packages it needs.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import nox

sys.path.insert(0, str(Path(__file__).parent / "tools"))
# tools/ is not a package; the sessions' vendor-machine decisions and the shared seed live there, importable by the
# tests.
import ci_report
import shared_seed
import vendor_sdk

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False
nox.options.sessions = [
    "lint",
    "typing",
    "core_tests",
    # core_tests_lightning23 (the core suite on Lightning 2.3.3 and torch 2.13) is left out of the default run:
    # ipu_stack_tests runs the same suite on Lightning 2.3.3 (with torch 2.0.1), and CI must stay under 45 minutes.
    "ipu_stack_tests",
    "hpu_tests",
    "hpu_emulator_tests",
    # hpu_opinfo (every OpInfo, 8 minutes) is left out of the default run while a full run takes 82 minutes on this
    # project's 2-core machines (CI's limit is 90); hpu_emulator_tests keeps a seeded 120-OpInfo sample of it.
    "ipu_tests",
    "deepspeed_hpu_tests",
    "ray_tests",
    "integration_tests",
    "docs",
    "build",
]

# Each suite's slowest tests in the log: where a run's time goes (a PYTEST_ADDOPTS of your own wins).
os.environ.setdefault("PYTEST_ADDOPTS", "--durations=15")
# Every session's time and result, and every pytest run's JUnit report: `python3 tools/ci_report.py summary` (the end
# of .ci/run) says which session and which test failed; `markdown` writes benchmarks/results/ci.md.
REPORTS = Path(os.environ.get("LIGHTNING_ACCEL_CI_REPORTS", ci_report.REPORTS))
shutil.rmtree(REPORTS, ignore_errors=True)  # the record of this nox run only


def recorded(function: Callable[[nox.Session], None]) -> Callable[[nox.Session], None]:
    """Record the session's time and result in REPORTS, however it ends."""

    @functools.wraps(function)
    def run(session: nox.Session) -> None:
        start, ok = time.monotonic(), False
        try:
            function(session)
            ok = True
        finally:
            ci_report.record_session(REPORTS, session.name, time.monotonic() - start, ok)

    return run


def run_pytest(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    """pytest with ``args`` and the session's own arguments, writing a JUnit report for ci_report.

    With pytest workers (``-n``), each worker and the processes it starts use one OpenMP thread (unless
    ``OMP_NUM_THREADS`` is set): torch starts one per core in every process, and libgomp's threads spin at the end of
    each parallel region until all have arrived, so with more threads than cores a region waits for threads that are
    not running. Measured: the 8-IPU digits test took 62.6 s beside other work, 2.7 s with one thread.
    """
    report = ci_report.junit_path(REPORTS, session.name)
    if "-n" in args and "OMP_NUM_THREADS" not in os.environ:
        env = {"OMP_NUM_THREADS": "1", **(env or {})}
    session.run("pytest", *args, f"--junitxml={report}", *session.posargs, env=env)


ROOT = Path(__file__).parent
TORCH = "torch==2.13.0"
# The emulated HPU device's build and DeepSpeed's JIT-built CPU Adam (the DeepSpeed suite and the integration suite's
# selftest) go into one folder of the user's cache, with torch's release in the path (torch keys a build by Python
# version and source hash, not by its own release). The device's build is keyed by its sources, so it is built once per
# machine; CPU Adam's build commands name the session environment's paths, so each session that loads it has a build
# folder of its own (use_own_extension_builds). `rm -rf ~/.cache/lightning-accel` builds both afresh.
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lightning-accel"
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(_CACHE / "torch-extensions" / TORCH.replace("==", "-")))
# Inductor (the emulated hpu_backend's compiler) caches its compiled graphs and C++ kernels under the temporary folder,
# which nox sets inside each session's environment and deletes with it: every run compiled everything afresh. One
# cache folder for all sessions and runs, as for the builds above (Inductor keys entries by their source and settings,
# so a stale entry is never used).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_CACHE / "torchinductor" / TORCH.replace("==", "-")))
# Inductor keys each C++ kernel it compiles by its compile command, which names the include folders of the session
# environment's torch: with the environments in each clone (.nox), a fresh clone's run missed that cache and compiled
# all of them again (about 320 per run, minutes of CI on 2 cores). So the environments live at one path per machine,
# made afresh by each run as before; runs on one machine take turns (a lock in the folder). LIGHTNING_ACCEL_NOX_ENVDIR
# gives a run a folder and a lock of its own (nox's --envdir moves the environments, not the lock).
ENVDIR = Path(os.environ.get("LIGHTNING_ACCEL_NOX_ENVDIR") or _CACHE / "nox-envs")
nox.options.envdir = str(ENVDIR)


def _take_turns(folder: Path) -> IO[str]:
    """Hold ``folder``'s lock until this nox run ends (the kernel releases it, however the run ends)."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / ".lock", "a")  # held for the whole run: closed by the process's end
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(
            f"nox: another run is using the session environments in {folder}; waiting for it to end "
            "(LIGHTNING_ACCEL_NOX_ENVDIR=<another folder> gives this run its own).",
            file=sys.stderr,
            flush=True,
        )
        fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


_TURN = _take_turns(ENVDIR)
LIGHTNING = "lightning==2.6.6"
PACKAGES = {
    "core": "packages/core",
    "habana": "packages/habana",
    "habana-emulator": "packages/habana-emulator",
    "graphcore": "packages/graphcore",
    "poptorch-emulator": "packages/poptorch-emulator",
    "deepspeed-hpu": "packages/deepspeed-hpu",
}
TEST_PLUGIN = "packages/core/tests/testplugin"
# click: `fabric run` (Lightning's CLI) needs it and Lightning does not install it.
TEST_TOOLS = ["pytest>=8", "pytest-xdist", "psutil", "jsonargparse[signatures]>=4.27", "click"]
# The slow suites run on two pytest workers: each test's processes, ports and files are its own (free ports, tmp_path),
# so they share nothing but the machine. On vendor hardware the tests share the devices, so they run one at a time.
WORKERS = ("-n", "2")
MPI_TOOLS = ["openmpi", "mpi4py"]
PYTHON = "3.11"


def _interpreter(version: str) -> str:
    """An installed CPython ``version``: pyenv's when there is one (its shims answer only for the active versions)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"))
    return str(found[-1]) if found else version


# The stack an IPU owner installs next to the Poplar SDK: poptorch 3.3 and 3.4 (the last) pin torch 2.0.1, whose
# newest Lightning is 2.3.3, and the SDK's poptorch wheels are built for Python 3.8 (Ubuntu 20.04, cp38).
IPU_STACK_PYTHON = _interpreter("3.8")
IPU_STACK = ["torch==2.0.1", "lightning==2.3.3", "pytorch-lightning==2.3.3"]
# setuptools < 81: Lightning 2.3 imports pkg_resources. jsonargparse < 4.36: lightning-utilities 0.11 (the last for
# Python 3.8) reads the extras of later releases without their markers and reports LightningCLI's requirement unmet.
IPU_STACK_TOOLS = [
    "setuptools<81",
    "pytest>=8",
    "pytest-xdist",
    "psutil",
    "click",
    "jsonargparse[signatures]>=4.27,<4.36",
]


# The seeds live in the user's cache, as the builds above: made once per machine (and again after a week), not once per
# run. LIGHTNING_ACCEL_SEED_DIR moves them; removing the folder makes the next run install afresh.
SEEDS = Path(os.environ.get("LIGHTNING_ACCEL_SEED_DIR") or _CACHE / "nox-seeds")
# What every session on the emulator starts from (install_seeded).
SEEDED = (TORCH, LIGHTNING, *TEST_TOOLS)


def install_seeded(session: nox.Session, *requirements: str) -> None:
    """Install ``requirements`` (torch pinned first) as the other sessions do: from a seed shared by them all.

    The seed is made once per interpreter and requirement list (tools/shared_seed.py), under a lock that another run
    on the machine waits on; one left incomplete by an interrupted run is made again.
    """
    # Named by the session's interpreter itself (its version and installation), not by how nox was asked for it.
    interpreter = session.run("python", "-c", "import sys; print(sys.version.split()[0], sys.base_prefix)", silent=True)
    assert isinstance(interpreter, str)
    version, base = interpreter.split(maxsplit=1)
    seed = SEEDS / shared_seed.seed_name(version, (base.strip(), *requirements))
    seed_python = seed / "bin" / "python"
    with shared_seed.seed_lock(seed):
        if not shared_seed.is_fresh(seed):
            shutil.rmtree(seed, ignore_errors=True)
            session.run("python", "-m", "venv", str(seed))
            session.run(str(seed_python), "-m", "pip", "install", "--quiet", requirements[0], external=True)
            if requirements[1:]:
                session.run(str(seed_python), "-m", "pip", "install", "--quiet", *requirements[1:], external=True)
            shared_seed.mark_complete(seed)
        where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        seed_site = session.run(str(seed_python), "-c", where, external=True, silent=True)
        site = session.run("python", "-c", where, silent=True)
        assert isinstance(seed_site, str) and isinstance(site, str)
        bin_dir = Path(session.bin)
        linked = shared_seed.link_seed(Path(seed_site.strip()), seed_python.parent, Path(site.strip()), bin_dir)
    session.log(f"{linked} files linked from the shared seed {seed}")
    for stale in shared_seed.prune(SEEDS, keep=seed):
        session.log(f"removed the stale seed {stale}")


# DeepSpeed JIT-builds CPU Adam with ninja, which builds again when a source is newer than the build: installed afresh
# by each run, DeepSpeed's sources always were (about 30 s on 2 idle cores, in each session that loads it). From a seed
# they keep the seed's times, and with the environment at its one path (ENVDIR) and a build folder per session, the
# build commands are the same too, so a session builds once per machine. The sessions that load CPU Adam start from it.
DEEPSPEED = "deepspeed>=0.16.1,<0.20"  # lightning-accel-deepspeed-hpu's requirement
SEEDED_DEEPSPEED = (*SEEDED, DEEPSPEED)


def use_own_extension_builds(session: nox.Session) -> None:
    """JIT-built torch extensions (CPU Adam) in a folder of the session's own; the emulated device's build still shared.

    The sessions' environments have paths of their own, and a build's commands name them: in one shared folder, each
    session would find the other's build and build again.
    """
    shared = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    session.env["LIGHTNING_ACCEL_CACHE_DIR"] = os.environ.get("LIGHTNING_ACCEL_CACHE_DIR", str(shared))
    session.env["TORCH_EXTENSIONS_DIR"] = str(shared / "sessions" / session.name)


def install_base(
    session: nox.Session,
    *packages: str,
    editable: bool = True,
    also: tuple[str, ...] = (),
    seed: tuple[str, ...] = SEEDED,
) -> None:
    """torch, Lightning, the test tools, the core and ``packages``; with "habana" or "graphcore", the SDK emulator it
    runs on here (what the integration's ``emulator`` extra pulls, from this tree). ``also``: more pip arguments;
    ``seed``: the requirements of the seed the session starts from.

    One pip command for all of it: each pip start in an environment this size costs seconds (it reads every installed
    distribution), and the sessions' set-up was a fifth of CI's time.
    """
    install_seeded(session, *seed)
    for integration, emulator in (("habana", "habana-emulator"), ("graphcore", "poptorch-emulator")):
        if integration in packages and emulator not in packages:
            packages = (emulator, *packages)
    arguments: list[str] = []
    for name in ("core", *packages):
        arguments += ["-e", PACKAGES[name]] if editable else [PACKAGES[name]]
    session.install(*arguments, *also)


@nox.session(python=PYTHON)
@recorded
def core_tests(session: nox.Session) -> None:
    """Core: plugin protocol, discovery, auto-registration, selection, CLI (with a CPU-backed test plugin)."""
    install_base(session, also=(TEST_PLUGIN,))  # the plugin as a wheel, like a real vendor distribution
    run_pytest(session, "packages/core/tests", *WORKERS)


@nox.session(python=PYTHON)
@recorded
def core_tests_lightning23(session: nox.Session) -> None:
    """Core on Lightning 2.3.3, the oldest it supports (the newest Lightning on poptorch's torch 2.0.1).

    About 4 minutes on 2 cores. Lightning 2.3 imports ``pkg_resources`` (setuptools < 81) and triggers deprecation
    warnings of newer torch and setuptools inside its own code, so those are not errors in this session.
    """
    session.install(TORCH)
    session.install("lightning==2.3.3", "pytorch-lightning==2.3.3", "setuptools>=77,<81", *TEST_TOOLS)
    session.install("-e", PACKAGES["core"])
    session.install(TEST_PLUGIN)
    run_pytest(
        session, "packages/core/tests", *WORKERS, "-W", "ignore::DeprecationWarning", "-W", "ignore::FutureWarning"
    )


# On a Gaudi / IPU machine these sessions run on the SDK's own interpreter and torch (tools/vendor_sdk.py decides, once,
# when nox reads this file); elsewhere on the emulator.
HPU_PLAN = vendor_sdk.plan_session("hpu")
IPU_PLAN = vendor_sdk.plan_session("ipu")


def vendor_tests(
    session: nox.Session,
    plan: vendor_sdk.SessionPlan,
    package: str,
    extras: str = "",
    *,
    also: tuple[str, ...] = (),
    tools: list[str] | tuple[str, ...] = (),
) -> None:
    session.log(plan.reason)
    constraints = session.create_tmp() + "/constraints.txt"
    Path(constraints).write_text("\n".join(plan.constraints) + "\n")
    if plan.hardware:
        requirements = [plan.lightning or LIGHTNING, *TEST_TOOLS, "-e", PACKAGES["core"]]
    else:
        install_seeded(session, *SEEDED)
        requirements = ["-e", PACKAGES["core"]]
    for name in also:
        requirements += ["-e", PACKAGES[name]]
    requirements += ["-e", PACKAGES[package] + extras, *tools]
    for command in plan.install_commands(*requirements):
        session.install(*(arg.format(constraints=constraints) for arg in command))
    workers = () if plan.hardware else WORKERS
    for env in plan.runs:
        run_pytest(session, f"{PACKAGES[package]}/tests", *workers, env=env)


@nox.session(python=HPU_PLAN.python, venv_params=list(HPU_PLAN.venv_params))
@recorded
def hpu_tests(session: nox.Session) -> None:
    """Gaudi package: on real Gaudi when present (both PT_HPU_LAZY_MODE values), otherwise on the HPU emulator."""
    if not HPU_PLAN.hardware:
        # mpirun for the launcher test (a Gaudi cluster brings its own MPI): Open MPI's wheel and mpi4py, in a prefix of
        # their own that only that test's ranks see. Installed in the session, Lightning's MPIEnvironment.detect() would
        # start MPI in every Trainer of every test.
        prefix = str(Path(session.create_tmp()) / "mpi")
        session.install("--prefix", prefix, *MPI_TOOLS)
        session.env["LIGHTNING_ACCEL_TEST_MPI_PREFIX"] = prefix
    # INC, for the fp8 inference tests. The emulator (lightning-accel-habana[emulator], from this tree) off Gaudi only:
    # it needs torch 2.13, not the SDK's torch, and the suite imports it only in its emulator_only tests.
    emulator = () if HPU_PLAN.hardware else ("habana-emulator",)
    # transformers: GPT-2 and Llama from configs in code, for the compile tests (no torch pulled in)
    vendor_tests(session, HPU_PLAN, "habana", extras="[fp8-inference]", also=emulator, tools=REAL_MODELS)


# torch's operator database (torch.testing._internal) imports expecttest, which torch does not install.
OPINFO_TOOLS = ["expecttest"]
# Real models for hpu_backend (GPT-2 and Llama built from configs in code: nothing is downloaded).
REAL_MODELS = ["transformers>=4.40"]


@nox.session(python=PYTHON)
@recorded
def hpu_emulator_tests(session: nox.Session) -> None:
    """The Gaudi SDK emulator on its own (lightning-accel-habana-emulator), without the Lightning integration.

    The SDK's API table, its load effects, the "hpu" device (tensor protocol, torch.compile, a sample of torch's
    OpInfo database). Always on the emulator: it is what the tests test, on a Gaudi machine too.
    """
    # A sample of torch's operator database; transformers' models.
    install_base(session, "habana-emulator", also=(*OPINFO_TOOLS, *REAL_MODELS))
    env = {"LIGHTNING_ACCEL_EMULATE": "hpu", "HF_HUB_OFFLINE": "1"}
    run_pytest(session, f"{PACKAGES['habana-emulator']}/tests", *WORKERS, env=env)


@nox.session(python=PYTHON)
@recorded
def hpu_opinfo(session: nox.Session) -> None:
    """The emulated "hpu" against every OpInfo of torch's operator database; prints the pass rates at the end."""
    install_base(session, "habana-emulator", also=tuple(OPINFO_TOOLS))
    env = {"LIGHTNING_ACCEL_EMULATE": "hpu", "LIGHTNING_ACCEL_OPINFO": "all"}
    run_pytest(session, f"{PACKAGES['habana-emulator']}/tests/test_opinfo.py", *WORKERS, env=env)


@nox.session(python=PYTHON, default=False)
@recorded
def poptorch_yardstick(session: nox.Session) -> None:
    """poptorch's own test files on the poptorch emulator; per-file results go to benchmarks/results/.

    Outside CI: it reads poptorch's tests from a local git mirror (``-- --source PATH``; it exits 2 without one).
    The session's arguments go to benchmarks/poptorch_yardstick.py (default: dataloader_test.py).
    """
    # numpy: poptorch's tests import it (torch does not install it).
    install_base(session, "poptorch-emulator", also=("numpy",))
    session.run("python", "benchmarks/poptorch_yardstick.py", *session.posargs)


@nox.session(python=IPU_PLAN.python, venv_params=list(IPU_PLAN.venv_params))
@recorded
def ipu_tests(session: nox.Session) -> None:
    """Graphcore package: on real IPUs when present, else on the poptorch emulator, then the emulator's own tests."""
    # The emulator (lightning-accel-graphcore[emulator], from this tree) off IPU machines only.
    emulator = () if IPU_PLAN.hardware else ("poptorch-emulator",)
    vendor_tests(session, IPU_PLAN, "graphcore", also=emulator)
    if emulator:
        run_pytest(session, f"{PACKAGES['poptorch-emulator']}/tests")


@nox.session(python=IPU_STACK_PYTHON)
@recorded
def ipu_stack_tests(session: nox.Session) -> None:
    """Core and Graphcore on the IPU stack (Python 3.8, torch 2.0.1, Lightning 2.3.3), on the poptorch emulator.

    torch 2.0.1 comes from the package index with its CUDA wheels (about 2.5 GB). Lightning 2.3 and torch 2.0 warn
    about their own deprecated calls, which are not errors here (as in core_tests_lightning23).
    """
    install_seeded(session, *IPU_STACK, *IPU_STACK_TOOLS)  # torch pinned first
    session.install("-e", PACKAGES["core"], TEST_PLUGIN)
    warnings = ("-W", "ignore::DeprecationWarning", "-W", "ignore::FutureWarning")
    run_pytest(session, "packages/core/tests", *WORKERS, *warnings)
    session.install("-e", PACKAGES["poptorch-emulator"], "-e", PACKAGES["graphcore"])
    run_pytest(session, f"{PACKAGES['poptorch-emulator']}/tests", *warnings)
    # Two workers: the Graphcore tests share nothing between processes (each has its own emulated IPUs).
    run_pytest(session, "packages/graphcore/tests", "-n", "2", *warnings)


@nox.session(python=PYTHON)
@recorded
def deepspeed_hpu_tests(session: nox.Session) -> None:
    """DeepSpeed on Gaudi package."""
    # Intel Neural Compressor, for fp8 inference; transformers, for tensor-parallel inference. habana before
    # deepspeed-hpu, which requires it: pip 23 looks for a requirement on the index when the editable that provides it
    # comes later in the command, with extras.
    extras = ("-e", f"{PACKAGES['habana']}[fp8-inference]", "-e", "packages/deepspeed-hpu[tensor-parallel]")
    install_base(session, "habana-emulator", also=extras, seed=SEEDED_DEEPSPEED)
    use_own_extension_builds(session)
    run_pytest(session, "packages/deepspeed-hpu/tests", *WORKERS)


@nox.session(python=PYTHON)
@recorded
def ray_tests(session: nox.Session) -> None:
    """Lightning on HPUs under Ray Train (the habana[ray] extra), each test on a local Ray cluster of this machine."""
    # torch pinned in the same command: pip keeps it. habana[ray] before deepspeed-hpu, as in deepspeed_hpu_tests.
    ray = (TORCH, "-e", f"{PACKAGES['habana']}[ray]", "-e", PACKAGES["deepspeed-hpu"])
    install_base(session, "habana-emulator", also=ray, seed=SEEDED_DEEPSPEED)
    use_own_extension_builds(session)
    # Every test starts a Ray cluster whose two workers use both cores: one test at a time.
    run_pytest(session, "packages/habana/tests/on_ray", env={"LIGHTNING_ACCEL_REQUIRE_RAY": "1"})


@nox.session(python=PYTHON)
@recorded
def integration_tests(session: nox.Session) -> None:
    """All distributions installed together from wheels (not editable): entry points, CLI, examples."""
    install_base(
        session, "habana", "graphcore", "deepspeed-hpu", editable=False, also=(TEST_PLUGIN,), seed=SEEDED_DEEPSPEED
    )
    use_own_extension_builds(session)
    # Run from a neutral directory so that the installed wheels, not the source tree, are imported.
    with session.chdir(session.create_tmp()):
        run_pytest(session, str(ROOT / "tests"), "-p", "no:cacheprovider", *WORKERS)


@nox.session(python=PYTHON)
@recorded
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check on the whole repository."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
@recorded
def typing(session: nox.Session) -> None:
    """mypy on every package's sources."""
    install_base(session, "habana-emulator", "habana", "graphcore", "deepspeed-hpu", also=("mypy>=1.11", "pytest>=8"))
    for path in PACKAGES.values():
        session.run("mypy", f"{path}/src", env={"MYPYPATH": f"{path}/src"})


@nox.session(python=PYTHON)
@recorded
def docs(session: nox.Session) -> None:
    """Build the Sphinx documentation with warnings as errors."""
    install_base(session, "habana", "graphcore", "deepspeed-hpu", also=("sphinx>=7", "myst-parser>=3"))
    shutil.rmtree(ROOT / "docs" / "_build", ignore_errors=True)
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html")


@nox.session(python=PYTHON)
@recorded
def build(session: nox.Session) -> None:
    """Build the seven wheels and check their metadata; the core wheel must carry the autoload files."""
    session.install("build>=1", "twine>=5")
    out = ROOT / "dist"
    shutil.rmtree(out, ignore_errors=True)
    for path in (".", *PACKAGES.values()):
        session.run("python", "-m", "build", "--wheel", "--sdist", "--outdir", str(out), path)
    session.run("twine", "check", "--strict", *map(str, sorted(out.iterdir())))
    session.run("python", "tests/check_wheels.py", str(out))


@nox.session(python=PYTHON, default=False)
@recorded
def demo(session: nox.Session) -> None:
    """The main job: digits on the emulated HPU (1, 2, DeepSpeed ZeRO-3 bf16 on 2) and IPU; loss curves + summary."""
    install_base(session, "habana", "graphcore", "deepspeed-hpu", also=("matplotlib",))
    session.run("python", "examples/demo.py", "--output", "demo_output", *session.posargs)


@nox.session(python=PYTHON, default=False)
@recorded
def bench(session: nox.Session) -> None:
    """Benchmarks; results go to benchmarks/results/."""
    # From wheels: pip byte-compiles them, as a user's install would be (the start-up numbers depend on it).
    install_base(session, "habana", "graphcore", "deepspeed-hpu", editable=False, also=("matplotlib", *REAL_MODELS))
    os.makedirs(ROOT / "benchmarks" / "results", exist_ok=True)
    session.run("python", "benchmarks/bench_startup.py")
    session.run("python", "benchmarks/bench_hpu_overhead.py")
    session.run("python", "benchmarks/bench_hpu_device.py")
    session.run("python", "benchmarks/bench_hpu_native_device.py")
    session.run("python", "benchmarks/bench_hpu_autocast.py")
    session.run("python", "benchmarks/bench_hpu_regional_compile.py")
    session.run("python", "benchmarks/bench_ipu_device_iterations.py")
    session.run("python", "benchmarks/bench_ipu_dataloader.py")
    session.run("python", "benchmarks/bench_zero_memory.py")
    session.run("python", "benchmarks/bench_fsdp2_memory.py")
    session.run("python", "benchmarks/bench_transformers_recipes.py")
    session.run("python", "benchmarks/bench_fast_ddp.py")
    session.run("python", "benchmarks/bench_preflight.py")
